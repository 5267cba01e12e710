"""Where a computation runs, on a machine with an accelerator: one rule, in one place.

Two kinds of work:

- **latency**-bound: sequential work on small states, where each step is a few tiny kernels and a host round trip —
  adaptive ODE solves of small flows, closed forms, theorem checks, small fits. The host CPU backend (which every JAX
  install has) runs it faster than an accelerator.
- **throughput**-bound: many independent points or large batches — sweeps, Monte Carlo over large batches,
  transformer training, big linear algebra. The accelerator runs it.

A reproduction runs under ``on("latency")``; the library's throughput-bound entry points (`jaxicl.train`,
`jaxicl.sweep`, `jaxicl.mc_loss` over at least `LARGE_BATCH` prompts) enter ``on("throughput")``
when called from the host. Arrays created under one are uncommitted, so each computation runs where its kind says and
its inputs follow it.

The **mode** overrides the rule: ``"auto"`` (the rule), ``"cpu"`` (everything on the host) or ``"gpu"`` (everything
on the accelerator): ``jaxicl reproduce --device``, `use` in the API, or ``$JAXICL_DEVICE``. Where JAX's
default backend is the CPU, ``auto`` and ``cpu`` change nothing: a CPU-only machine runs as if this module did not
exist.

    with jaxicl.runtime.placement.use("cpu"):
        jaxicl.experiments.reproduce(["zhang2023"])
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os

import jax

KINDS = ("latency", "throughput")
MODES = ("auto", "cpu", "gpu")
LARGE_BATCH = 65_536  # prompts: a Monte-Carlo estimate this large is throughput-bound
ENV = "JAXICL_DEVICE"

_mode: str | None = None  # set by use(); None: $JAXICL_DEVICE, else "auto"
_placed: list[str] = []  # the platform of every on() block entered, in order (see mark())
_active: list[str] = []  # the platforms of the on() blocks in force, innermost last


def _check_mode(mode: str, where: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{where} must be one of {', '.join(MODES)}, got {mode!r}.")
    return mode


def mode() -> str:
    """The placement mode in force: `use`'s, else ``$JAXICL_DEVICE``'s, else ``"auto"``."""
    if _mode is not None:
        return _mode
    return _check_mode(os.environ.get(ENV, "").strip() or "auto", f"${ENV}")


@contextlib.contextmanager
def use(new_mode: str):
    """Within the block, place work by ``new_mode`` (``"auto"``, ``"cpu"`` or ``"gpu"``)."""
    global _mode
    _check_mode(new_mode, "the device mode")
    if new_mode == "gpu":
        accelerator()  # a clear error now, on a machine without one
    before, _mode = _mode, new_mode
    try:
        yield
    finally:
        _mode = before


def accelerator() -> jax.Device:
    """The first accelerator of JAX's default backend; a ``RuntimeError`` naming the devices present if there is
    none."""
    devices = jax.devices()
    if devices[0].platform == "cpu":
        present = ", ".join(sorted({f"{d.platform} ({d.device_kind})" for d in devices}))
        raise RuntimeError(
            f"--device gpu: this machine has no accelerator that JAX can use; devices present: {present}. "
            "Use --device cpu or auto."
        )
    return devices[0]


def has_accelerator() -> bool:
    """Whether JAX's default backend is an accelerator (GPU or TPU) rather than the host CPU."""
    return jax.devices()[0].platform != "cpu"


def device_for(kind: str) -> jax.Device | None:
    """The device ``kind`` work runs on under the current mode; None on a machine without an accelerator under
    ``auto`` or ``cpu`` (JAX's default device, the CPU: nothing changes). Explicit otherwise, so that an inner
    ``on("throughput")`` returns to the accelerator from an outer ``on("latency")``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    m = mode()
    if m == "gpu":
        return accelerator()
    if not has_accelerator():
        return None
    if m == "cpu" or kind == "latency":
        return jax.devices("cpu")[0]
    return accelerator()  # throughput under auto


def devices_for(kind: str) -> list[jax.Device]:
    """Every device ``kind`` work may be spread over (a sweep's mesh): the accelerators, or the host's CPU devices."""
    device = device_for(kind)
    if device is None:
        return jax.devices()
    return jax.devices("cpu") if device.platform == "cpu" else jax.devices()


def platform_for(kind: str) -> str:
    """``"cpu"``, ``"gpu"``, …: where ``kind`` work runs."""
    device = device_for(kind)
    return (device or jax.devices()[0]).platform


def current_platform() -> str:
    """The platform that a computation traced here, on uncommitted arrays, runs on: the innermost `on` block's, else
    JAX's default backend's. Code that compiles differently per platform (the transformers' scans and
    rematerialisation) asks this, so that ``--device cpu`` on a GPU machine compiles as a CPU-only machine does."""
    return _active[-1] if _active else jax.devices()[0].platform


@contextlib.contextmanager
def on(kind: str):
    """Within the block, computations on uncommitted arrays run where ``kind`` work belongs (`device_for`).
    Inside a trace (``jit``, ``vmap``, ``grad``) placement is the caller's: call it from the host."""
    device = device_for(kind)
    platform = (device or jax.devices()[0]).platform
    _placed.append(platform)
    _active.append(platform)
    try:
        if device is None:
            yield
        else:
            with jax.default_device(device):
                yield
    finally:
        _active.pop()


def placed(kind: str, when=None):
    """Decorator: the function runs under ``on(kind)`` when called from the host (no traced argument) and, with
    ``when``, when ``when(arguments)`` is true (``arguments``: name -> value, defaults included)."""

    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs)))
            if not traced and when is not None:
                try:
                    bound = signature.bind(*args, **kwargs)
                except TypeError:  # the function's own error
                    return fn(*args, **kwargs)
                bound.apply_defaults()
                traced = not when(bound.arguments)
            if traced:
                return fn(*args, **kwargs)
            with on(kind):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def mark() -> int:
    """A point in the record of placements, for `platforms_since`."""
    return len(_placed)


def platforms_since(start: int) -> str:
    """The platforms work was placed on since ``mark()`` returned ``start`` (``"cpu"``, ``"gpu"``, ``"cpu+gpu"``),
    the block in force included; the default backend's where nothing was placed."""
    used = set(_placed[start:]) | set(_active[-1:])
    return "+".join(sorted(used)) or jax.devices()[0].platform


@contextlib.contextmanager
def command_line(device: str):
    """``jaxicl reproduce --device MODE`` for the command's duration, entered before any backend starts: ``cpu`` keeps
    JAX off the accelerator altogether (no accelerator memory is taken), ``gpu`` requires one (a ``RuntimeError``
    naming the devices present), ``auto`` places by the rule."""
    _check_mode(device, "--device")
    if device == "cpu" and not _backends_started():
        jax.config.update("jax_platforms", "cpu")
    with use(device):
        yield


def _backends_started() -> bool:
    from jax._src import xla_bridge  # no public API says this; where the name is gone, assume they have

    return getattr(xla_bridge, "backends_are_initialized", lambda: True)()
