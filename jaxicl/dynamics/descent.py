"""Discrete-time training: gradient descent on a loss, and optax training on fresh Monte-Carlo batches.

Both run as one ``lax.scan`` (no Python loop over steps) and return loss curves; a non-finite loss
raises ``FloatingPointError`` naming the first bad step (outside ``jit``).
"""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree


def check_finite_curve(losses, what: str = "loss"):
    """Raise ``FloatingPointError`` naming the first step whose ``what`` is not finite."""
    if isinstance(losses, jax.core.Tracer):
        return eqx.error_if(losses, ~jnp.all(jnp.isfinite(losses)), f"non-finite {what} during training")
    arr = np.asarray(losses)
    bad = ~np.isfinite(arr)
    if bad.any():
        flat = bad.reshape(bad.shape[0], -1).any(axis=1) if arr.ndim > 1 else bad
        step = int(np.argmax(flat))
        raise FloatingPointError(
            f"training diverged: {what} is {arr.reshape(arr.shape[0], -1)[step].ravel()[:4]} at step "
            f"{step}. Reduce the step size / learning rate or the initialization scale."
        )
    return losses


def gradient_descent(
    loss_fn: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    step: float,
    n_steps: int,
    *,
    record_every: int = 1,
) -> tuple[PyTree, Float[Array, " n"]]:
    """θ_{k+1} = θ_k − step · ∇L(θ_k), ``n_steps`` times.

    Returns ``(final_params, losses)`` with ``losses[j] = L(θ_{j·record_every})``.
    """
    if n_steps < 1 or record_every < 1 or n_steps % record_every:
        raise ValueError("n_steps must be a positive multiple of record_every.")
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)

    def loss_of(y):
        return loss_fn(eqx.combine(y, static))

    vg = jax.value_and_grad(loss_of)

    def one(y, _):
        loss, g = vg(y)
        return jax.tree_util.tree_map(lambda a, b: a - step * b, y, g), loss

    def block(y, _):
        y, losses = jax.lax.scan(one, y, None, length=record_every)
        return y, losses[0]

    dynamic, losses = jax.lax.scan(block, dynamic, None, length=n_steps // record_every)
    losses = check_finite_curve(losses)  # under jit/vmap: an eqx.error_if on the returned curve
    return eqx.combine(dynamic, static), losses


def optax_train(
    batch_loss_fn: Callable[[PyTree, PRNGKeyArray], Float[Array, ""]],
    params: PyTree,
    optimizer: optax.GradientTransformation,
    n_steps: int,
    key: PRNGKeyArray,
) -> tuple[PyTree, Float[Array, " n"]]:
    """Train with an optax optimizer; ``batch_loss_fn(params, key)`` draws a fresh batch per step.

    Example (fresh prompts every step)::

        loss = lambda m, k: icl.mc_loss(m, task, key=k, batch=256)
        model, curve = icl.optax_train(loss, model, optax.adam(1e-2), 2000, key)
    """
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)
    vg = jax.value_and_grad(lambda y, k: batch_loss_fn(eqx.combine(y, static), k))

    def one(carry, k):
        y, state = carry
        loss, g = vg(y, k)
        updates, state = optimizer.update(g, state, y)
        return (optax.apply_updates(y, updates), state), loss

    (dynamic, _), losses = jax.lax.scan(one, (dynamic, optimizer.init(dynamic)), jax.random.split(key, n_steps))
    losses = check_finite_curve(losses)  # under jit/vmap: an eqx.error_if on the returned curve
    return eqx.combine(dynamic, static), losses
