"""A reproduction's settings changed by --set / --config (jaxicl.experiments.settings): checked before any work,
round-tripped through `jaxicl config`, recorded, followed by the theory, and refused by a checkpoint they would make
wrong."""

import dataclasses
import importlib

import jax
import numpy as np
import pytest

from jaxicl import cli
from jaxicl.experiments import _modules, available, settings
from jaxicl.experiments import gatmiry2024 as G
from jaxicl.experiments.settings import SettingsError


def test_an_override_changes_the_numbers_as_the_theory_says():
    """Gatmiry Thm 4 at κ = 64 (not a paper setting): the Chebyshev construction's worst-case error is 1/T_L((κ+1)/(κ−1)),
    computed here from the closed form, and grows with κ."""
    cfg = settings.apply(G.Config.quick(), {"construct_kappas": [16, 64], "construct_depths": [2, 4]})
    assert cfg.construct_kappas == (16.0, 64.0) and cfg.construct_depths == (2, 4)
    with jax.enable_x64(True):
        checks, ds = G.check_constructions(cfg)
    cheb = ds["simulated"].sel({"method": "chebyshev"})  # (sel(method=...) is the lookup method)
    for kappa in (16.0, 64.0):
        for L in (2, 4):
            closed = 1 / np.cosh(L * np.arccosh((kappa + 1) / (kappa - 1)))
            assert float(cheb.sel(kappa=kappa, depth=L)) == pytest.approx(closed, rel=1e-8)
    assert float(cheb.sel(kappa=64.0, depth=4)) > float(cheb.sel(kappa=16.0, depth=4))
    assert checks[0].passed


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"kapas": [2.0]}, r"unknown setting 'kapas'\. Did you mean 'kappas'\? Allowed: d, n, kappas"),
        ({"d": 2.5}, r"^d must be an integer, got 2\.5"),
        ({"d": 0}, r"^d must be >= 1, got 0"),
        ({"seed": -1}, r"^seed must be >= 0"),
        ({"lr": float("nan")}, r"^lr must be finite"),
        ({"lr": -1e-3}, r"^lr must be >= 0"),
        ({"kappas": [0.5, 2.0]}, r"kappas\[0\] must be >= 1 \(a condition number\)"),
        ({"kappas": []}, r"kappas must not be empty"),
        ({"kappas": 4.0}, r"kappas must be a list"),
        ({"depths": [1, 2.5]}, r"depths\[1\] must be an integer"),
        ({"steps": True}, r"steps must be an integer, got True"),
        ({"steps": "many"}, r"steps must be an integer"),
    ],
)
def test_every_kind_of_bad_override_is_an_error_naming_it(overrides, match):
    with pytest.raises(SettingsError, match=match):
        settings.apply(G.Config.quick(), overrides)


def test_bad_overrides_on_the_command_line_stop_before_any_work(tmp_path, capsys, monkeypatch):
    import jaxicl.experiments as E

    monkeypatch.setattr(E, "reproduce", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "tabled.toml").write_text("[zhang2023.gpt2]\nsteps = 10\n")  # the paper's name as a table
    for argv, message in [
        (["gatmiry2024", "--set", "kapas=[2,16]"], "unknown setting 'kapas'. Did you mean 'kappas'?"),
        (["gatmiry2024", "--set", "kappas"], "--set takes KEY=VALUE"),
        (["gatmiry2024", "--set", "kappas=[2, 16"], "--set kappas: '[2, 16' is not a TOML value"),
        (["--set", "d=3"], "--set and --config change one paper's settings: name that paper"),
        (["zhang2023", "--set", "gpt2.stepz=10"], "unknown setting 'gpt2.stepz'. Did you mean 'gpt2.steps'?"),
        (
            ["zhang2023", "--set", "zhang2023.d=4"],
            "unknown setting 'zhang2023.d': a paper's settings are named without",
        ),
        (["zhang2023", "--config", str(tmp_path / "tabled.toml")], "unknown setting 'zhang2023.gpt2.steps': a paper's"),
        (["gatmiry2024", "--config", str(tmp_path / "none.toml")], f"settings file {tmp_path / 'none.toml'} does not"),
        (["zhang2023", "--set", "gpt2.steps=10", "--skip-transformers"], "gpt2.steps: gpt2 is off in this run"),
        (["yang2024", "--set", "transformer.lr=0.1", "--skip-transformers"], "transformer.lr: transformer is off"),
        (["algoformer", "--set", "lr=0.1", "--skip-transformers"], "settings given for algoformer, which this run"),
        (["gatmiry2024", "--set", "fig2_windows=[1.5]"], "settings that contradict each other: fig2_windows [1.5]"),
        (["gatmiry2024", "--set", "clip=-1"], "clip must be >= 0, got -1"),
        (
            ["zhang2023", "--set", "gpt2.steps=10"],
            "changed settings that this run never reads: gpt2.steps (Fig. 1's models train only with `fig1` on",
        ),
        (
            ["algoformer", "--set", "fig5_steps=10"],
            "changed settings that this run never reads: fig5_steps (the part 'fig5' is not in `parts`)",
        ),
        (
            ["algoformer", "--set", "eval_loops=30"],
            "changed settings that this run never reads: eval_loops (Fig. 3's models train only with `fig3` on",
        ),
        (
            ["algoformer", "--set", 'parts=["ar"]', "--set", "cot_N=4"],
            "changed settings that this run never reads: cot_N (the part 'cot' is not in",
        ),
    ]:
        assert cli.main(["reproduce", *argv, "--no-cache", "--out", str(tmp_path / "o")]) == 2
        assert f"jaxicl: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("name", available())
@pytest.mark.parametrize("size", settings.SIZE_NAMES)
def test_jaxicl_config_round_trips_through_config(name, size, tmp_path, capsys, monkeypatch):
    """`jaxicl config NAME` prints every setting as TOML; read back with --config's reader and applied, it gives
    the size's settings exactly (on a machine with the memory the size needs: --full's models are refused on a
    small one)."""
    monkeypatch.setattr(importlib.import_module("jaxicl.sweep"), "host_memory_bytes", lambda: 2**40)
    module = _modules([name])[name]
    assert cli.main(["config", name, f"--{size}"]) == 0
    path = tmp_path / "settings.toml"
    path.write_text(capsys.readouterr().out)
    values = settings.read_file(path)
    assert settings.apply(module.SIZES[size], values) == module.SIZES[size]
    assert set(values) == {k for k, v in settings.flat(module.SIZES[size]).items() if v is not None}


def test_jaxicl_config_says_what_each_setting_means(capsys):
    """Meanings come from the module's SETTINGS_DOCS or the Config class's own comments, under its group's heading."""
    assert cli.main(["config", "gatmiry2024", "--quick"]) == 0
    text = capsys.readouterr().out
    assert "kappas = [2.0, 4.0, 8.0]  # Fig. 1: condition-number ranges κ" in text
    assert "steps = 400  # Adam steps per training run" in text and "full: 2000" in text
    assert cli.main(["config", "yang2024"]) == 0
    text = capsys.readouterr().out
    assert "# Fig. 3: the gap against N, m = 100, τ = 0.01\nfig3_m = 100" in text
    assert "beta = 1.0  # Q_h ~ N(0, β²)" in text and "\n[transformer]\n" in text
    assert (  # a heading of two lines, both kept
        "# Fig. 4: a sweep over H (padded to the next power of two, masked), the same step sizes for every H, in Thm 1's"
        "\n# regime: η_Q = 1/L is below 1e-19" in text
    )
    assert cli.main(["config", "nope"]) == 2


def test_jaxicl_config_prints_each_comment_of_the_settings_whole(capsys):
    """A comment over a setting in its Config class's source, of any number of lines, is printed by `jaxicl config`
    from its first line on: none starts mid-sentence (as six did, four of them the AlgoFormer's, when only a
    comment's last line was kept)."""
    import inspect

    firsts, starts = set(), []
    for name in available():
        cfg = _modules([name])[name].SIZES["quick"]
        nested = [getattr(cfg, f.name) for f in dataclasses.fields(cfg)]
        for c in {type(cfg), *(type(v) for v in nested if dataclasses.is_dataclass(v))}:
            lines = [line.strip() for line in inspect.getsource(c).splitlines()]
            firsts |= {b.lstrip("# ") for a, b in zip(lines, lines[1:]) if b.startswith("#") and not a.startswith("#")}
        assert cli.main(["config", name]) == 0
        out = capsys.readouterr().out.splitlines()[3:]  # below the title, the size line and a blank line
        starts += [b[2:] for a, b in zip(["", *out], out) if b.startswith("# ") and not a.startswith("#")]
    assert len(starts) >= 9 and all(s in firsts for s in starts), [s for s in starts if s not in firsts]


def test_set_wins_over_config_and_values_parse_as_toml(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("kappas = [2.0, 16.0]\nsteps = 10\n")
    args = cli.build_parser().parse_args(
        ["reproduce", "gatmiry2024", "--config", str(path), "--set", "steps=20", "--set", "fig2_ks=[2,5]"]
    )
    assert cli._overrides(args, ["gatmiry2024"]) == {
        "gatmiry2024": {"kappas": [2.0, 16.0], "steps": 20, "fig2_ks": [2, 5]}
    }
    assert settings.parse_assignment("compute_dtype=bfloat16") == ("compute_dtype", "bfloat16")
    assert settings.parse_assignment('gpt2.compute_dtype="bfloat16"') == ("gpt2.compute_dtype", "bfloat16")


def test_changed_settings_are_recorded_in_the_report_and_the_data_files(tmp_path):
    """A run at changed settings says so above its checks, and its netCDF files hold every effective setting."""
    import json

    import xarray as xr

    from jaxicl.experiments import PaperResult
    from jaxicl.experiments import _run_with_settings as run_with
    from jaxicl.experiments.report import render_markdown, save_dataset

    cfg = settings.apply(G.Config.quick(), {"kappas": [2.0, 64.0]})

    def fake_run(config=None):
        save_dataset(xr.Dataset({"x": ("k", np.arange(2.0))}), tmp_path / "fig.nc")
        return PaperResult("gatmiry2024", "t", "quick", [], [], ["fig.nc"])

    res = run_with(G, "quick", cfg, fake_run)
    assert res.settings == {"kappas": ((2.0, 64.0), (2.0, 4.0, 8.0))}
    assert "**Settings changed** from `quick`: `kappas = (2.0, 64.0)` (quick: (2.0, 4.0, 8.0))" in render_markdown(
        [res]
    )
    attrs = xr.open_dataset(tmp_path / "fig.nc", engine="h5netcdf").attrs
    assert json.loads(attrs["jaxicl_settings"])["kappas"] == [2.0, 64.0]
    assert run_with(G, "quick", None, fake_run).settings == {}  # the paper's settings: nothing to say


def test_a_changed_setting_refuses_a_resume_naming_it(tmp_path):
    """An AlgoFormer model trained under one learning rate, resumed under another: the checkpoint's config differs
    in ``lr`` and the error says so (a resume that would continue another run's trajectory). A change to Fig. 5's or
    Fig. 3's own settings leaves the other figures' checkpoints resumable, and only those."""
    from jaxicl.dynamics.train import CheckpointError
    from jaxicl.experiments import algoformer as A

    cfg = dataclasses.replace(A.Config.quick(), steps=2, chunk=2, d_model=8, n_heads=2, batch=4)
    task = A.fig2_tasks(cfg, jax.random.PRNGKey(0))["regression"]
    model = A.build_model("standard", cfg, task, jax.random.PRNGKey(1))

    def loss(m, k, s):
        from jaxicl import losses

        return losses.sequence_loss(m, task.prompts(k, cfg.batch))

    ckpt = tmp_path / "m.ckpt"
    A._fit(model, loss, cfg, jax.random.PRNGKey(2), ckpt, "m", False)
    changed = settings.apply(cfg, {"lr": 1e-2})
    with pytest.raises(
        CheckpointError,
        match=r"another configuration \(config differ: lr: checkpoint '0.001' vs run "
        r"'0.01'\)",
    ):
        A._fit(model, loss, changed, jax.random.PRNGKey(2), ckpt, "m", False)
    A._fit(model, loss, cfg, jax.random.PRNGKey(2), ckpt, "m", False)  # the same settings: resumed, no error
    # Fig. 5's own settings are not read by the other figures' models (resumed) but are by Fig. 5's (refused)
    fig5_changed = settings.apply(cfg, {"fig5_steps": 7, "sigmas": [0.5], "iterations": 9})
    A._fit(model, loss, fig5_changed, jax.random.PRNGKey(2), ckpt, "m", False)
    A._fit(model, loss, cfg, jax.random.PRNGKey(2), tmp_path / "fig5.ckpt", "m", False, figure=5)
    with pytest.raises(CheckpointError, match=r"fig5_steps: checkpoint '2500' vs run '7'"):
        A._fit(model, loss, fig5_changed, jax.random.PRNGKey(2), tmp_path / "fig5.ckpt", "m", False, figure=5)
    # and so for Fig. 3's own steps: Figs. 2 and 5's models resume, Fig. 3's are refused
    fig3_changed = settings.apply(cfg, {"fig3_steps": 7})
    A._fit(model, loss, fig3_changed, jax.random.PRNGKey(2), ckpt, "m", False)
    A._fit(model, loss, fig3_changed, jax.random.PRNGKey(2), tmp_path / "fig5.ckpt", "m", False, figure=5)
    A._fit(model, loss, cfg, jax.random.PRNGKey(2), tmp_path / "fig3.ckpt", "m", False, figure=3)
    with pytest.raises(CheckpointError, match=r"fig3_steps: checkpoint '0' vs run '7'"):
        A._fit(model, loss, fig3_changed, jax.random.PRNGKey(2), tmp_path / "fig3.ckpt", "m", False, figure=3)


def test_jobs_children_get_the_same_settings(tmp_path):
    """A --jobs run's processes get the paper's overrides as --set flags, which parse back to the same values."""
    import jaxicl.experiments as E

    overrides = {"lr": 0.01, "loops": [8, 6], "fig3_loops": [[8, 6], [4, 3]], "compute_dtype": "bfloat16"}
    cmd = E._child_command(
        "algoformer", "quick", tmp_path, False, None, True, tmp_path / "r.pkl", part="ar", overrides=overrides
    )
    args = cli.build_parser().parse_args(cmd[cmd.index("reproduce") :])
    assert cli._overrides(args, ["algoformer"]) == {"algoformer": overrides}
    cfg = settings.apply(E._modules(["algoformer"])["algoformer"].SIZES["quick"], overrides)
    assert cfg.fig3_loops == ((8, 6), (4, 3)) and cfg.compute_dtype == "bfloat16"


def test_a_claim_whose_premise_fails_is_not_applicable_never_passed_or_failed():
    """At settings outside a theorem's premise (Zhang Thm 4.1 needs σ²‖Γ‖_op√d < 2) its claims are "not applicable:
    reason", whatever the numbers, never asserted; the headline counts them only when there are any."""
    from jaxicl.experiments.report import Check, headline, paper_claim

    why = "σ = 2 violates Thm 4.1's σ²‖Γ‖√d < 2 (9.3)"
    for holds in (True, False):
        c = paper_claim("flow → W^KQ_* (4.1)", "0", "1e-3", "rel 1e-6", holds, applies=False, reason=why)
        assert (c.verdict, c.asserted, c.status) == ("not applicable", False, f"not applicable: {why}")
    ok = Check("a", "1", "1", "exact", True)
    assert headline([ok]) == "1 pass, 0 fail, 0 pass (not asserted), 0 not reproduced, 0 reported"
    assert headline([ok, c]) == "1 pass, 0 fail, 0 pass (not asserted), 0 not reproduced, 1 not applicable, 0 reported"
    with pytest.raises(ValueError, match="not applicable: give the reason"):
        Check("b", "1", "2", "exact", False, applicable=False)


@pytest.mark.parametrize(
    "paper, overrides, match",
    [
        ("ahn2023", {"d": 4}, r"scales has 5 entries but d = 4"),
        ("gatmiry2024", {"fig2_windows": [0.5, 1.0]}, r"fig2_windows \[1\.0\] reach s ≤ 0"),
        ("yang2024", {"N": 200}, r"N = 200 is not below K = 200"),
        ("yang2024", {"fig3_Ns": [50, 250]}, r"fig3_Ns has N = \[250\] not below K = 200"),
        (
            "yang2024",
            {"transformer.d_model": 36},
            r"transformer\.d_model = 36 is not divisible by the head count\(s\) \[8\]",
        ),
        ("zhang2023", {"gpt2.n_heads": 3}, r"gpt2\.d_model = 32 is not divisible by gpt2\.n_heads = 3"),
        ("algoformer", {"loops": [3, 5]}, r"loops: \[3, 5\] is not a \(T, ΔT\) with 0 ≤ ΔT ≤ T"),
        ("algoformer", {"fig3_loops": [[50, 10]]}, r"eval_loops = 40 is below a trained T of fig3_loops"),
        (
            "algoformer",
            {"parts": ["fig4"]},
            r"parts \['fig4'\]: each at most once, of \['regression', 'ar', 'cot', 'fig5'\]",
        ),
    ],
)
def test_settings_that_contradict_each_other_are_refused_with_the_reason(paper, overrides, match):
    """Each field valid alone, the combination not: refused when the Config is made (``--set``, ``--config`` and
    ``dataclasses.replace`` alike), before any work."""
    module = _modules([paper])[paper]
    with pytest.raises(SettingsError, match="settings that contradict each other: " + match):
        settings.apply(module.Config.quick(), overrides)
    flat = {
        k: tuple(map(tuple, v))
        if isinstance(v, list) and v and isinstance(v[0], list)
        else tuple(v)
        if isinstance(v, list)
        else v
        for k, v in overrides.items()
        if "." not in k
    }
    if flat:
        with pytest.raises(SettingsError, match=match):
            dataclasses.replace(module.Config.quick(), **flat)


@pytest.mark.parametrize(
    "paper, overrides, match",
    [
        ("gatmiry2024", {"eps": 1.0}, r"eps = 1 is outside \(0, 1\)"),
        ("gatmiry2024", {"eps": 0.0}, r"eps = 0 is outside \(0, 1\)"),
        ("gatmiry2024", {"thm3_eps": 0.0}, "thm3_eps = 0 is outside"),
        ("gatmiry2024", {"steps": 5}, "below curve_windows"),
        ("gatmiry2024", {"depths": [1, 2]}, "fg_depths reach 4"),
        ("gatmiry2024", {"steps": 10**12}, "must be <= 2147483647"),
        ("yang2024", {"record_every": 1000}, "is not a multiple of record_every"),
        ("algoformer", {"ar_q": 20}, "ar_N = 16 is below ar_q"),
        ("algoformer", {"compute_dtype": "banana"}, "must be one of bfloat16, float32"),
        ("algoformer", {"fig2_test_prompts": 1}, "Fig. 2 has 1 test prompt: its comparisons need at least 2"),
        ("zhang2023", {"gpt2.compute_dtype": "int8"}, "must be one of bfloat16, float32"),
        ("zhang2023", {"d": 100_000}, r"prompts \(float64\) alone take .* GiB, more than half"),  # was exit 134
        ("zhang2023", {"gpt2.d_model": 2**20, "gpt2.n_heads": 1}, "Fig. 1's GPT-2: parameters"),
        ("algoformer", {"batch": 2**30}, "activations kept for the backward pass"),
    ],
)
def test_settings_outside_a_papers_domain_are_refused_before_any_work(paper, overrides, match):
    """Settings that passed the check and then broke the run (a ZeroDivisionError after 21 s, an OverflowError, a
    KeyError, a NaN curve, two asserted rows failing at ε = 1) are refused when the settings are made."""
    from jaxicl.experiments import _modules

    with pytest.raises(SettingsError, match=match):
        settings.apply(_modules([paper])[paper].SIZES["quick"], overrides)


@pytest.mark.parametrize("paper", ["zhang2023", "ahn2023", "gatmiry2024", "yang2024", "algoformer"])
def test_the_memory_check_passes_the_quick_size_and_grows_with_the_sizes(paper):
    """The largest arrays of a paper's quick run fit in any machine that runs the test suite (a quarter of a GiB),
    and its --full run's are larger: the estimate follows the settings it is computed from."""
    from jaxicl.experiments import _modules

    module = _modules([paper])[paper]

    def largest(cfg):
        return max(
            n
            for c in (cfg, *(getattr(cfg, f.name) for f in dataclasses.fields(cfg)))
            if isinstance(c, settings.Consistent)
            for n in c.largest_arrays().values()
        )

    settings.check_memory(module.SIZES["quick"])
    assert largest(module.SIZES["quick"]) < 2**28 < largest(module.SIZES["full"])


@pytest.mark.parametrize("name", available())
def test_every_paper_has_the_three_sizes_and_trains_at_least_as_long_from_one_to_the_next(name):
    """quick ≤ trained ≤ full in every training length and seed count: a claim asserted from --trained is asserted
    at --full too."""
    module = _modules([name])[name]
    assert tuple(module.SIZES) == settings.SIZE_NAMES
    flat = {size: settings.flat(module.SIZES[size]) for size in settings.SIZE_NAMES}
    longer = [k for k, v in flat["quick"].items() if k.rsplit(".", 1)[-1] in ("steps", "seeds") and v is not None]
    for key in longer:
        q, t, f = (flat[size][key] for size in settings.SIZE_NAMES)
        assert q <= t <= f, (key, q, t, f)


@pytest.mark.parametrize("name", available())
def test_the_settings_a_run_never_reads_are_its_own_and_every_size_past_quick_reads_them_all(name):
    """`Config.unread` names settings of the paper (a field, or a nested config's name), and only where a figure is
    switched off: --trained and --full run every figure, so they read every setting; quick leaves Fig. 1 of Zhang et
    al. and the AlgoFormer's Figs. 3 and 5 to --trained, so a change to their settings there is refused."""
    module = _modules([name])[name]
    for size in settings.SIZE_NAMES:
        cfg = module.SIZES[size]
        fields = {k.split(".")[0] for k in settings.flat(cfg)} | set(settings.flat(cfg))
        assert set(cfg.unread()) <= fields, (size, set(cfg.unread()) - fields)
        assert size == "quick" or not cfg.unread(), (size, cfg.unread())
    quick = set(module.SIZES["quick"].unread())
    expected = {"zhang2023": {"gpt2"}, "algoformer": {"sigmas", "fig3_steps", "eval_loops", "fig5_steps"}}
    assert expected.get(name, set()) <= quick and bool(quick) == (name in expected), quick
    # switching the figure on makes them read, and the change is then kept (`jaxicl reproduce --set fig1=true ...`)
    on = {
        "zhang2023": {"fig1": True, "gpt2.steps": 10},
        "algoformer": {"fig3": True, "parts": ["regression", "ar", "cot", "fig5"]},
    }
    if name in on:
        changed = settings.apply(module.SIZES["quick"], on[name])
        assert not changed.unread()
        settings.refuse_unread(changed, module.SIZES["quick"])
