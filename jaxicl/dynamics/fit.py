"""Deterministic optimizers for a fixed training set (Ahn et al. §5.3, §6.1 use L-BFGS).

Each runs as one ``lax.scan`` over iterations, records the loss (and optionally any function of
the parameters) at every iteration, and can be ``vmap``ped over seeds:

- `lbfgs` — optax's L-BFGS with its zoom line search;
- `levenberg_marquardt` — Gauss–Newton with Marquardt's damping on per-prompt residuals
  (½‖r‖² = loss), the Jacobian by forward mode;
- `optax_fit` — any optax optimizer (e.g. Adam) on the full training set.
"""

from __future__ import annotations

from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PyTree

from .descent import check_finite_curve


class FitResult(eqx.Module):
    """``params`` after the last iteration; ``losses[k]`` and ``records[k]`` before iteration k+1
    (so index 0 is the initialization)."""

    params: PyTree
    losses: Float[Array, " n"]
    records: Any


def _split(params):
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)
    return dynamic, static


def _record(record, params):
    return None if record is None else record(params)


def _finish(dynamic, static, losses, records):
    if not isinstance(losses, jax.core.Tracer):
        check_finite_curve(losses)
    return FitResult(eqx.combine(dynamic, static), losses, records)


def optax_fit(
    loss_fn: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    optimizer: optax.GradientTransformation,
    n_steps: int,
    *,
    record: Callable[[PyTree], Any] | None = None,
    linesearch: bool = False,
    ftol: float | None = None,
) -> FitResult:
    """``n_steps`` of an optax optimizer on a deterministic loss (a fixed training set).

    ``linesearch=True`` for optimizers with a line search (``optax.lbfgs``): they reuse the value
    and gradient stored in their state.

    ``ftol``: stop early, once an iteration lowers the loss by at most ``ftol · max(|loss|, 1)`` (the
    relative-reduction test of scipy's L-BFGS-B); ``n_steps`` is then an upper bound. The parameters stay
    where they stopped, so ``losses`` and ``records`` past that point repeat their value there. Under ``vmap``
    the loop runs until every member has stopped (those that have are held fixed)."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}.")
    dynamic, static = _split(params)

    def f(y):
        return loss_fn(eqx.combine(y, static))

    if linesearch:
        vg = optax.value_and_grad_from_state(f)
    else:
        plain = jax.value_and_grad(f)

        def vg(y, state):
            return plain(y)

    def step(carry, _):
        y, state = carry
        value, grad = vg(y, state=state)
        updates, state = optimizer.update(grad, state, y, value=value, grad=grad, value_fn=f)
        rec = _record(record, eqx.combine(y, static))
        return (optax.apply_updates(y, updates), state), (value, rec)

    init = (dynamic, optimizer.init(dynamic))
    if ftol is None:
        (dynamic, _), (losses, records) = jax.lax.scan(step, init, None, length=n_steps)
    else:
        dynamic, losses, records = _scan_until_stalled(
            step, init, n_steps, ftol, lambda y: (f(y), _record(record, eqx.combine(y, static)))
        )
    return _finish(dynamic, static, losses, records)


def _scan_until_stalled(step, init, n_steps, ftol, evaluate):
    """``lax.scan(step, init, length=n_steps)`` as a ``while_loop`` that stops after the first iteration lowering
    the loss by at most ``ftol · max(|loss|, 1)``; the outputs of the iterations not run are ``evaluate(params)``
    at the parameters where it stopped (which no further iteration would move)."""
    out_shape = jax.eval_shape(lambda c: step(c, None)[1], init)
    buffers = jax.tree.map(lambda s: jnp.zeros((n_steps, *s.shape), s.dtype), out_shape)
    loss_dtype = out_shape[0].dtype

    def body(c):
        k, carry, outs, previous, _ = c
        carry, out = step(carry, None)
        outs = jax.tree.map(lambda b, o: b.at[k].set(o), outs, out)
        value = out[0]
        stalled = (previous - value) <= ftol * jnp.maximum(jnp.abs(value), 1.0)
        return k + 1, carry, outs, value, stalled

    def cond(c):
        k, _, _, _, stalled = c
        return (k < n_steps) & ~stalled

    start = (jnp.asarray(0), init, buffers, jnp.asarray(jnp.inf, loss_dtype), jnp.asarray(False))
    k, (params, _), outs, _, _ = jax.lax.while_loop(cond, body, start)
    final = evaluate(params)
    ran = jnp.arange(n_steps) < k
    outs = jax.tree.map(lambda b, v: jnp.where(ran.reshape((-1,) + (1,) * (b.ndim - 1)), b, v), outs, final)
    return params, outs[0], outs[1]


def lbfgs(
    loss_fn: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    n_steps: int,
    *,
    memory_size: int = 10,
    record: Callable[[PyTree], Any] | None = None,
    ftol: float | None = None,
) -> FitResult:
    """L-BFGS (optax, zoom line search) for ``n_steps`` iterations, or fewer with ``ftol`` (see `optax_fit`)."""
    return optax_fit(
        loss_fn, params, optax.lbfgs(memory_size=memory_size), n_steps, record=record, linesearch=True, ftol=ftol
    )


def levenberg_marquardt(
    residual_fn: Callable[[PyTree], Float[Array, " m"]],
    params: PyTree,
    n_steps: int,
    *,
    damping: float = 1e-3,
    jacobian_fn: Callable[[PyTree], tuple[Array, Array]] | None = None,
    record: Callable[[PyTree], Any] | None = None,
) -> FitResult:
    """Levenberg–Marquardt on the least-squares loss ½‖r(θ)‖².

    Step δ solves (JᵀJ + λ diag(JᵀJ) + λ·1e-12·I) δ = −Jᵀr; a step that lowers the loss is taken
    and λ ← λ/3, otherwise λ ← 4λ. ``jacobian_fn(params) -> (r, J)`` supplies residuals and their
    Jacobian with respect to ``ravel_pytree`` of the inexact leaves (e.g.
    ``jaxicl.losses.sample_residuals_and_jacobian``); without it J comes from ``jax.jacfwd``."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}.")
    dynamic, static = _split(params)
    theta0, unravel = ravel_pytree(dynamic)

    def r(theta):
        return residual_fn(eqx.combine(unravel(theta), static))

    if jacobian_fn is None:
        jac = jax.jacfwd(r)
    else:

        def jac(theta):
            return jacobian_fn(eqx.combine(unravel(theta), static))[1]

    def step(carry, _):
        theta, res, J, lam = carry
        loss = 0.5 * jnp.sum(res**2)
        rec = _record(record, eqx.combine(unravel(theta), static))
        H = J.T @ J
        g = J.T @ res
        eye = jnp.eye(H.shape[0], dtype=H.dtype)
        delta = -jnp.linalg.solve(H + lam * (jnp.diag(jnp.diag(H)) + 1e-12 * jnp.trace(H) * eye), g)
        res_new = r(theta + delta)
        loss_new = 0.5 * jnp.sum(res_new**2)
        ok = jnp.isfinite(loss_new) & (loss_new < loss)
        theta = jnp.where(ok, theta + delta, theta)
        res = jnp.where(ok, res_new, res)
        J = jac(theta)
        lam = jnp.where(ok, lam / 3, lam * 4)
        return (theta, res, J, lam), (loss, rec)

    init = (theta0, r(theta0), jac(theta0), jnp.asarray(damping, theta0.dtype))
    (theta, _, _, _), (losses, records) = jax.lax.scan(step, init, None, length=n_steps)
    return _finish(unravel(theta), static, losses, records)
