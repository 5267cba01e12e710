"""Property-based checks of the input validation (hypothesis): random invalid values, fed to the sweep config and to
the public constructors and functions, each give a ``ValueError``/``TypeError`` that names the key or argument, before
any work: never a hang, a crash or numbers."""

import math

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxicl as icl
from jaxicl.sweep_config import DEFAULTS, RANGES, SCHEMA, ConfigError, load_config

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NOT_NUMBERS = st.one_of(st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(), max_size=2))


def invalid_integers(low: int):
    """Anything that is not an integer >= ``low``: smaller integers, non-integral or non-finite floats, non-numbers."""
    return st.one_of(
        st.integers(max_value=low - 1),
        st.integers(max_value=low - 1).map(float),
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not float(x).is_integer()),
        NOT_NUMBERS,
    )


def invalid_reals(gt: float | None = None, ge: float | None = None):
    """Anything that is not a finite real number > ``gt`` / >= ``ge``."""
    bad = [st.just(math.nan), st.just(math.inf), st.just(-math.inf), NOT_NUMBERS]
    if gt is not None:
        bad.append(st.floats(max_value=gt, allow_nan=False, allow_infinity=False))
    if ge is not None:
        bad.append(st.floats(max_value=ge, exclude_max=True, allow_nan=False, allow_infinity=False))
    return st.one_of(*bad)


def _invalid(rule: tuple):
    kind, kwargs = rule
    return invalid_integers(kwargs["low"]) if kind == "integer" else invalid_reals(**kwargs)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').encode("unicode_escape").decode() + '"'
    return repr(value)


@st.composite
def configs_with_one_invalid_value(draw):
    """(TOML text, the key that holds an invalid value): a valid config with one key's value, or one grid entry,
    replaced by an invalid one."""
    key = draw(st.sampled_from(sorted(RANGES)))
    section, name = key.split(".")
    value = draw(_invalid(RANGES[key]))
    if value is None:  # TOML has no null: a missing value is the default, which is valid
        value = "none"
    body = {s: {k: v for k, v in DEFAULTS[s].items() if k in SCHEMA[s]} for s in SCHEMA}
    body["grid"] = {"seed": [0]}
    body["outputs"] = {}
    if section == "grid":
        body["grid"][name] = [*([2.0] if name == "kappa" else [3]), value]
    else:
        body[section][name] = value
    text = "\n".join(
        f"[{s}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in fields.items()) for s, fields in body.items()
    )
    return text, key


@SETTINGS
@given(case=configs_with_one_invalid_value())
def test_sweep_config_with_an_invalid_value_is_an_error_naming_its_key(tmp_path_factory, case):
    text, key = case
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert key in str(e.value) or "is not valid TOML" in str(e.value), (text, str(e.value))


# (call with the invalid value, argument name in the message, the argument's rule)
KEY = jax.random.PRNGKey(0)
TASK = icl.tasks.LinearRegression(2, 4)
MODEL = icl.models.LinearSelfAttention.balanced_init(2, 0.1, KEY)
CALLS = {
    "LinearRegression: d": (lambda v: icl.tasks.LinearRegression(v, 4), ("integer", {"low": 1})),
    "LinearRegression: n_context": (lambda v: icl.tasks.LinearRegression(2, v), ("integer", {"low": 1})),
    "LinearRegression: noise_std": (lambda v: icl.tasks.LinearRegression(2, 4, noise_std=v), ("real", {"ge": 0.0})),
    "balanced_init: d": (lambda v: icl.models.LinearSelfAttention.balanced_init(v, 0.1, KEY), ("integer", {"low": 1})),
    "balanced_init: sigma": (lambda v: icl.models.LinearSelfAttention.balanced_init(2, v, KEY), ("real", {"gt": 0.0})),
    "random_init: scale": (lambda v: icl.models.LinearSelfAttention.random_init(2, v, KEY), ("real", {"ge": 0.0})),
    "LinearTransformer.init: n_layers": (
        lambda v: icl.models.LinearTransformer.init(KEY, 2, v),
        ("integer", {"low": 1}),
    ),
    "LinearTransformer.init: scale": (
        lambda v: icl.models.LinearTransformer.init(KEY, 2, 1, scale=v),
        ("real", {"ge": 0.0}),
    ),
    "MultiHeadSoftmaxICL.init: d": (
        lambda v: icl.models.MultiHeadSoftmaxICL.init(KEY, 2, v, 3),
        ("integer", {"low": 1}),
    ),
    "β": (lambda v: icl.models.MultiHeadSoftmaxICL.init(KEY, 2, 2, 3, beta=v), ("real", {"gt": 0.0})),
    "n_context": (lambda v: icl.tasks.RepresentationRegression(2, v), ("integer", {"low": 1})),
    "t1": (
        lambda v: icl.gradient_flow(lambda p: jnp.sum(p**2), jnp.ones(2), v),
        ("real", {"gt": 0.0}),
    ),  # "gradient_flow needs a finite Python float t1 > 0 …"
    "gradient_flow: rtol": (
        lambda v: icl.gradient_flow(lambda p: jnp.sum(p**2), jnp.ones(2), 1.0, rtol=v),
        ("real", {"gt": 0.0}),
    ),
    "gradient_flow: n_save": (
        lambda v: icl.gradient_flow(lambda p: jnp.sum(p**2), jnp.ones(2), 1.0, n_save=v),
        ("integer", {"low": 2}),
    ),
    "gradient_descent: step": (
        lambda v: icl.gradient_descent(lambda p: jnp.sum(p**2), jnp.ones(2), v, 3),
        ("real", {"ge": 0.0}),
    ),
    "gradient_descent: n_steps": (
        lambda v: icl.gradient_descent(lambda p: jnp.sum(p**2), jnp.ones(2), 0.1, v),
        ("integer", {"low": 1}),
    ),
    "mc_loss: batch": (lambda v: icl.mc_loss(MODEL, TASK, KEY, batch=v), ("integer", {"low": 1})),
    "mc_loss: chunk_size": (lambda v: icl.mc_loss(MODEL, TASK, KEY, batch=10, chunk_size=v), ("integer", {"low": 1})),
    "finite_difference: eps": (
        lambda v: icl.finite_difference(lambda x: x**2, {"x": 1.0}, eps=v),
        ("real", {"gt": 0.0}),
    ),
    "sweep: chunk_size": (lambda v: icl.sweep(lambda x: x, {"x": [1.0]}, chunk_size=v), ("integer", {"low": 1})),
    "grid axis 'x'": (lambda v: icl.sweep(lambda x: x, {"x": [1.0, v]}), ("real", {})),
}


@st.composite
def calls_with_one_invalid_argument(draw):
    name = draw(st.sampled_from(sorted(CALLS)))
    call, rule = CALLS[name]
    value = draw(_invalid(rule))
    if name == "grid axis 'x'" and isinstance(value, list):  # a list entry makes the axis ragged: also an error
        value = value or [1]
    if name == "sweep: chunk_size" and value is None:  # None is the default (chosen by the sweep)
        value = "auto"
    if name == "gradient_descent: step" and (value is None or isinstance(value, list)):
        value = "x"  # None and lists are pytrees of steps (no leaves / one per leaf), not a step size
    return name, call, value


@SETTINGS
@given(case=calls_with_one_invalid_argument())
def test_public_functions_refuse_invalid_arguments_naming_them(case):
    name, call, value = case
    with pytest.raises((ValueError, TypeError)) as e:
        call(value)
    assert name in str(e.value), (name, value, str(e.value))


PAPERS = ("zhang2023", "ahn2023", "gatmiry2024", "yang2024", "algoformer")


def _invalid_setting(key: str, like):
    """Values outside the domain every setting of ``like``'s type has (`jaxicl.experiments.settings`): a boolean
    given anything else; an integer below its least value, non-integral, non-finite, past 2³¹ − 1 or not a number; a
    real negative, non-finite or not a number (below 1 for a κ); a list empty, not a list, or with one bad entry; a
    text setting with a fixed set of values given another."""
    from jaxicl.experiments.settings import CHOICES, MAX_INT, ZERO_ALLOWED

    name = key.split(".")[-1]
    if isinstance(like, bool):
        return st.one_of(st.integers(), st.text(max_size=5), st.lists(st.booleans(), max_size=2))
    if isinstance(like, int):
        return st.one_of(invalid_integers(0 if name in ZERO_ALLOWED else 1), st.integers(min_value=MAX_INT + 1))
    if isinstance(like, float):
        return invalid_reals(ge=1.0 if "kappa" in name else 0.0)
    if isinstance(like, tuple):
        entry = like[0] if like else 0.0
        bad = _invalid_setting(key, entry)
        good = st.just(list(entry) if isinstance(entry, tuple) else entry)
        return st.one_of(st.just([]), bad.filter(lambda v: not isinstance(v, list)), st.tuples(good, bad).map(list))
    return st.text(max_size=8).filter(lambda v: v not in CHOICES.get(name, ()))


@st.composite
def paper_settings_with_one_invalid_value(draw):
    """(paper, key, value): one of a paper's quick settings given a value outside its domain."""
    from jaxicl.experiments import _modules
    from jaxicl.experiments.settings import CHOICES, flat

    paper = draw(st.sampled_from(PAPERS))
    fields = {
        k: v
        for k, v in flat(_modules([paper])[paper].SIZES["quick"]).items()
        if v is not None or k.split(".")[-1] in CHOICES
    }  # text settings without choices take any text
    key = draw(st.sampled_from(sorted(fields)))
    value = draw(_invalid_setting(key, fields[key]))
    return paper, key, "none" if value is None else value  # TOML has no null


@SETTINGS
@given(case=paper_settings_with_one_invalid_value())
def test_a_setting_outside_its_papers_domain_is_refused_at_once_naming_it(case, tmp_path_factory, monkeypatch, capsys):
    """``jaxicl reproduce PAPER --set KEY=VALUE`` with a value outside the setting's domain exits 2 with one message
    naming the setting and no traceback, before any work: a reproduction started fails the test (so the refusal takes
    the settings check's milliseconds, whatever the value)."""
    import jaxicl.experiments as E
    from jaxicl import cli

    paper, key, value = case

    def started(*args, **kwargs):
        raise AssertionError(f"{paper} started with {key} = {value!r}")

    monkeypatch.setattr(E, "reproduce", started)
    out = tmp_path_factory.mktemp("out")
    rc = cli.main(["reproduce", paper, "--set", f"{key}={_toml(value)}", "--out", str(out), "--no-cache"])
    err = capsys.readouterr().err
    assert rc == 2, (key, value, err)
    assert key.split("[")[0] in err and "Traceback" not in err and err.count("\n") == 1, err
