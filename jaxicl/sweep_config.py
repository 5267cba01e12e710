"""``jaxicl sweep CONFIG.toml``: a sweep described in a file.

Example (every key shown; ``[grid]`` axes override the scalar of the same name)::

    [task]                 # in-context linear regression, Λ with geometric spectrum 1 … κ
    d = 5
    kappa = 4.0
    n_context = 20

    [model]                # one-layer LSA, balanced init (Zhang et al. Assumption 3.3)
    sigma = "auto"         # or a number; "auto": σ²‖Γ‖√d = 1

    [dynamics]             # gradient flow (diffrax Tsit5)
    t1 = 5000.0
    rtol = 1e-8
    atol = 1e-10
    n_save = 40

    [grid]                 # any of: kappa, n_context, seed
    kappa = [1.0, 4.0, 16.0]
    n_context = [5, 10, 20]
    seed = [0, 1]

    [outputs]
    dir = "sweep-out"      # dataset.nc, plot.png and resumable chunks/
    chunk_size = 16
"""

from __future__ import annotations

from pathlib import Path

SCHEMA = {
    "task": {"d": int, "kappa": float, "n_context": int},
    "model": {"sigma": (float, str)},
    "dynamics": {"t1": float, "rtol": float, "atol": float, "n_save": int},
    "grid": {"kappa": list, "n_context": list, "seed": list},
    "outputs": {"dir": str, "chunk_size": int},
}
DEFAULTS = {
    "task": {"d": 5, "kappa": 4.0, "n_context": 20},
    "model": {"sigma": "auto"},
    "dynamics": {"t1": 5000.0, "rtol": 1e-8, "atol": 1e-10, "n_save": 40},
    "grid": {},
    "outputs": {"dir": "sweep-out", "chunk_size": 64},
}


class ConfigError(ValueError):
    """A sweep config that cannot run: the message names the section and key, the value and what is allowed."""


# What each value may be, beyond its type: (checker, keyword arguments), with the checkers of jaxicl._validate.
RANGES = {
    "task.d": ("integer", {"low": 1}),
    "task.kappa": ("real", {"ge": 1.0}),  # a condition number
    "task.n_context": ("integer", {"low": 1}),
    "model.sigma": ("real", {"gt": 0.0}),
    "dynamics.t1": ("real", {"gt": 0.0}),
    "dynamics.rtol": ("real", {"gt": 0.0}),
    "dynamics.atol": ("real", {"gt": 0.0}),
    "dynamics.n_save": ("integer", {"low": 2}),
    "grid.kappa": ("real", {"ge": 1.0}),
    "grid.n_context": ("integer", {"low": 1}),
    "grid.seed": ("integer", {"low": 0}),
    "outputs.chunk_size": ("integer", {"low": 1}),
}


def _check_range(where: str, value, rule: str):
    """``value`` checked by ``RANGES[rule]``; a ConfigError naming ``where`` if it is out of range."""
    from . import _validate

    kind, kwargs = RANGES[rule]
    try:
        return getattr(_validate, kind)(where, value, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def _check_type(where: str, value, typ):
    types = typ if isinstance(typ, tuple) else (typ,)
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise ConfigError(f"{where} must be {names}, got {type(value).__name__} {value!r}.")
    return value


def load_config(path) -> dict:
    """Parse and validate a sweep TOML file; errors name the offending key."""
    from ._io import read_toml

    try:
        raw = read_toml(path, "config file")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    cfg = {}
    for section, value in raw.items():
        if section not in SCHEMA:
            raise ConfigError(f"unknown section [{section}]; allowed: {', '.join(SCHEMA)}.")
        if not isinstance(value, dict):
            raise ConfigError(f"[{section}] must be a table.")
    for section, fields in SCHEMA.items():
        given = raw.get(section, {})
        cfg[section] = dict(DEFAULTS[section])
        for key, value in given.items():
            if key not in fields:
                raise ConfigError(f"unknown key {section}.{key}; allowed: {', '.join(fields)}.")
            cfg[section][key] = _check_type(f"{section}.{key}", value, fields[key])
    if not cfg["grid"]:
        raise ConfigError("[grid] needs at least one axis (kappa, n_context or seed).")
    for axis, values in cfg["grid"].items():
        if not values:
            raise ConfigError(f"grid.{axis} is empty.")
        want = int if axis in ("n_context", "seed") else float
        cfg["grid"][axis] = [_check_type(f"grid.{axis}[{i}]", v, want) for i, v in enumerate(values)]
    sigma = cfg["model"]["sigma"]
    if isinstance(sigma, str) and sigma != "auto":
        raise ConfigError(f'model.sigma must be a number or "auto", got {sigma!r}.')
    for section, fields in cfg.items():
        for key, value in fields.items():
            where = f"{section}.{key}"
            if where in RANGES and not (where == "model.sigma" and value == "auto"):
                if section == "grid":
                    for i, v in enumerate(value):
                        _check_range(f"{where}[{i}]", v, where)
                else:
                    _check_range(where, value, where)
    out = Path(cfg["outputs"]["dir"])
    if out.exists() and not out.is_dir():
        raise ConfigError(f"outputs.dir = {str(out)!r} is a file, not a directory.")
    return cfg


def as_stage(cfg: dict) -> tuple[dict, dict, str]:
    """A validated config as the stage sweep ``lsa:flow`` takes it (`jaxicl.experiments.stage_sweep`): (its grid,
    its other settings as overrides of ``jaxicl.experiments.lsa_sweep.Config``, the output directory). A setting the
    grid sweeps is not among the overrides (the dataset's ``settings`` would show one value for every point)."""
    sigma = cfg["model"]["sigma"]
    overrides = {
        **cfg["task"],
        **cfg["dynamics"],
        "sigma": 0.0 if sigma == "auto" else sigma,
        "chunk_size": cfg["outputs"]["chunk_size"],
    }
    return dict(cfg["grid"]), {k: v for k, v in overrides.items() if k not in cfg["grid"]}, cfg["outputs"]["dir"]
