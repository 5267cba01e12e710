"""Sensitivities of training outcomes: derivatives, through whole training runs, of what a run ends with (its
final loss, the time it takes to reach a loss level) with respect to what set it up (the initialisation scale
σ, the covariance Λ or its spectrum, the context length N where a closed form makes it continuous, step sizes
and rates).

The runs are jaxicl's own, all differentiable: `jaxicl.gradient_flow` (diffrax adjoints:
``adjoint="recursive"`` or ``"backsolve"``; ``"direct"`` for forward mode; ``stop_at_loss=ε`` for a
differentiable time-to-ε), `jaxicl.gradient_descent` (a ``lax.scan``; ``checkpoints=C`` keeps reverse-mode
memory flat in the number of steps; step-size schedules ``step=lambda k: etas[k]``) and
`jaxicl.optax_train` (``checkpoints=C`` recomputes each step's activations). What cannot be differentiated
says so: a boolean stop (``stop_when``, ``steady_state_tol``), the host-side loop `jaxicl.train`, an
integer step count, an integer-valued argument here.

    def final_loss(sigma, Lam):
        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(Lam))
        m0 = icl.models.LinearSelfAttention.balanced_init(3, sigma, key)
        return icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 50.0).losses[-1]

    icl.sensitivity(final_loss, {"sigma": 0.3, "Lam": Lam})          # {"sigma": dL/dσ, "Lam": dL/dΛ}
    icl.finite_difference(final_loss, {"sigma": 0.3, "Lam": Lam})    # the same by central differences
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from . import _validate

__all__ = ["sensitivity", "finite_difference"]


def _real_arguments(at: Mapping) -> dict:
    """Every value as a floating array; an integer or boolean one is an error that names it."""
    out = {}
    for name, value in at.items():
        dtype = np.result_type(value) if not hasattr(value, "dtype") else value.dtype
        if isinstance(value, bool) or not np.issubdtype(dtype, np.floating):
            kind = "boolean" if isinstance(value, bool) or np.issubdtype(dtype, np.bool_) else "integer"
            raise TypeError(
                f"cannot differentiate with respect to {name!r} = {value!r}: it is {kind}-valued "
                f"({np.dtype(dtype).name}). A "
                f"derivative needs a real argument: pass "
                f"{name}={float(np.asarray(value)) if np.ndim(value) == 0 else 'an array of floats'}"
                " where the outcome treats it as continuous (e.g. a context length N entering a closed form), or "
                "vary a real parameter instead."
            )
        out[name] = jnp.asarray(value)
    return out


def sensitivity(outcome: Callable[..., jax.Array], at: Mapping, *, mode: str = "reverse") -> dict:
    """Derivatives of the scalar ``outcome(**at)`` with respect to each argument named in ``at``, as a dict of
    arrays shaped like the arguments.

    ``mode="reverse"`` (``jax.grad``, one backward pass for any number of inputs) or ``"forward"``
    (``jax.jacfwd``, one pass per input scalar: cheaper for a handful of inputs; a gradient flow inside
    needs ``adjoint="forward"``, a gradient-descent run the default ``checkpoints=None``). Compiled with
    ``jax.jit``: ``outcome`` must be traceable in the arguments (Python-side decisions on them are errors)."""
    if mode not in ("reverse", "forward"):
        raise ValueError(f"mode must be 'reverse' or 'forward', got {mode!r}.")
    args = _real_arguments(at)

    def f(kwargs):
        value = outcome(**kwargs)
        if jnp.ndim(value) != 0:
            raise ValueError(f"the outcome must be a scalar, got shape {jnp.shape(value)}.")
        return value

    return jax.jit((jax.grad if mode == "reverse" else jax.jacfwd)(f))(args)


def finite_difference(outcome: Callable[..., jax.Array], at: Mapping, *, eps: float = 1e-6) -> dict:
    """Central differences (f(x + h e_i) − f(x − h e_i)) / 2h of ``outcome(**at)`` for every scalar entry of every
    argument, h = ``eps``·|x_i| (``eps`` where x_i = 0): the check of `sensitivity` (use float64)."""
    _validate.real("finite_difference: eps", eps, gt=0)
    args = _real_arguments(at)
    f = jax.jit(lambda kwargs: outcome(**kwargs))  # one compilation for every evaluation
    out = {}
    for name, value in args.items():
        flat = np.asarray(value, dtype=float).ravel()
        grad = np.zeros_like(flat)
        for i in range(flat.size):
            h = eps * (abs(flat[i]) or 1.0)
            vals = []
            for sign in (1.0, -1.0):
                x = flat.copy()
                x[i] += sign * h
                vals.append(float(f({**args, name: jnp.asarray(x.reshape(np.shape(value)), value.dtype)})))
            grad[i] = (vals[0] - vals[1]) / (2 * h)
        out[name] = grad.reshape(np.shape(value))
    return out
