"""Checks of the arguments of public constructors and functions, where the input enters: each names the argument,
the value and what is allowed. Integers are never truncated, tolerances are positive, scales finite. A traced value
(inside ``jit`` or ``vmap``) is not checked here: it has no value yet, and what it does is the documented
behaviour of the function that receives it."""

from __future__ import annotations

import numbers

import jax
import numpy as np


def is_concrete(x) -> bool:
    """Whether ``x`` has a value now (not a tracer of ``jit``/``vmap``/``grad``): checks on values run only then."""
    return not isinstance(x, jax.core.Tracer)


def integer(name: str, value, low: int | None = 1, high: int | None = None) -> int:
    """``value`` as a Python int: an integer (``int``, a numpy integer, or an integral float such as ``2.0``) with
    ``low <= value <= high``. ``2.7`` is an error, not 2; ``True`` is not an integer here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or isinstance(value, jax.core.Tracer):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return integer(name, value.item(), low, high)
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__}).")
    if not float(value).is_integer():
        raise ValueError(f"{name} must be an integer, got {value!r} (integers are not rounded).")
    value = int(value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}.")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}.")
    return value


def real(
    name: str,
    value,
    *,
    gt: float | None = None,
    ge: float | None = None,
    finite: bool = True,
    scalar: bool = True,
    why: str = "",
):
    """``value`` unchanged, after checking that it is one (``scalar``), or every entry of a non-empty array of it is
    a, finite (``finite``) real number ``> gt`` / ``>= ge`` (``why``, e.g. " (a condition number)", follows the bound
    in the error). Traced values pass unchecked (see the module's docstring)."""
    if isinstance(value, jax.core.Tracer):
        return value
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).") from None
    shown = value if arr.ndim == 0 else f"{arr.tolist()}"
    if (scalar and arr.ndim != 0) or arr.size == 0:
        raise TypeError(
            f"{name} must be a real number{'' if scalar else ' or a non-empty array of them'}, got {shown}."
        )
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {shown}.")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} must be a number, got {shown}.")
    if gt is not None and not np.all(arr > gt):
        raise ValueError(f"{name} must be > {gt:g}{why}, got {shown}.")
    if ge is not None and not np.all(arr >= ge):
        raise ValueError(f"{name} must be >= {ge:g}{why}, got {shown}.")
    return value
