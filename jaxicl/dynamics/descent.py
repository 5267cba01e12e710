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

from .. import _validate

_DIVERGED_HINT = "Reduce the step size / learning rate or the initialization scale."
# a loss beyond float32's range has diverged, in any precision: float64 would carry a diverging run on to 1e300
# with finite numbers, where float32 overflows to inf; both are caught at the same point
_LARGEST = float(np.finfo(np.float32).max)


def _bounded(losses):
    """Entries of ``losses`` that are finite and within float32's range (numpy or traced)."""
    xp = jnp if isinstance(losses, jax.core.Tracer) else np
    return xp.isfinite(losses) & (xp.abs(losses) <= _LARGEST)


def check_finite_curve(losses, what: str = "loss", first_step: int = 0, every: int = 1):
    """Raise ``FloatingPointError`` naming the first step whose ``what`` is not finite, or beyond float32's range
    (a diverging float64 run stays finite far longer than a float32 one; both are caught at the same point):
    ``losses[i]`` is step ``first_step + every · i`` (``every`` is the recording interval).

    Under ``jit`` this is an ``eqx.error_if``, a host callback: JAX never writes a program holding one to the
    persistent compilation cache. Programs meant to be cached (the reproductions' sweeps) return
    `first_nonfinite_step` instead and check it on the host."""
    if isinstance(losses, jax.core.Tracer):
        return eqx.error_if(losses, ~jnp.all(_bounded(losses)), f"non-finite {what} during training")
    arr = np.asarray(losses)
    bad = ~_bounded(arr)
    if bad.any():
        flat = bad.reshape(bad.shape[0], -1).any(axis=1) if arr.ndim > 1 else bad
        step = int(np.argmax(flat))
        raise FloatingPointError(
            f"training diverged: {what} is {arr.reshape(arr.shape[0], -1)[step].ravel()[:4]} at step "
            f"{first_step + every * step}. {_DIVERGED_HINT}"
        )
    return losses


def first_nonfinite_step(losses, first_step: int = 0) -> Array:
    """``first_step`` + the index of the first entry of ``losses`` (along its leading axis) that is not finite, or
    −1 when all are. Traceable and free of host callbacks: a jitted or swept program returns it, and the host
    raises naming the step (`raise_if_diverged` for a sweep's outputs)."""
    bad = ~_bounded(jnp.asarray(losses)).reshape(losses.shape[0], -1).all(axis=1)
    return jnp.where(bad.any(), first_step + jnp.argmax(bad), -1)


def first_flagged_point(flags):
    """``(index, "dim=value, …", count)`` for the first true entry of a boolean ``xarray.DataArray`` over a sweep's
    grid (``count``: how many are true), or ``None``: the host side of the checks a swept program returns as flags."""
    bad = np.argwhere(np.asarray(flags))
    if not len(bad):
        return None
    at = tuple(bad[0])
    point = ", ".join(
        f"{d}={flags[d].values[i].item()!r}" if d in flags.coords else f"{d}={i}" for d, i in zip(flags.dims, at)
    )
    return at, point, len(bad)


def raise_if_diverged(steps, what: str = "training loss") -> None:
    """Raise ``FloatingPointError`` naming the grid point and the step, if any entry of ``steps`` (an
    ``xarray.DataArray`` of `first_nonfinite_step` over a sweep's grid) is not −1: the host-side half of a
    divergence check that keeps the swept program free of host callbacks, so the persistent cache can hold it."""
    found = first_flagged_point(steps >= 0)
    if found is not None:
        at, point, n_bad = found
        raise FloatingPointError(
            f"training diverged: {what} is not finite from step {int(np.asarray(steps)[at])} on "
            f"at {point} ({n_bad} of {steps.size} grid points diverged). {_DIVERGED_HINT}"
        )


def per_leaf(value, params: PyTree) -> PyTree:
    """``value`` for every trainable (inexact-array) leaf of ``params``, ``None`` elsewhere: the value
    itself when it is a pytree with the structure of ``params`` (one value per leaf), else broadcast."""
    if jax.tree_util.tree_structure(value) == jax.tree_util.tree_structure(params):
        return eqx.filter(value, jax.tree_util.tree_map(eqx.is_inexact_array, params))
    return jax.tree_util.tree_map(lambda _: value, eqx.filter(params, eqx.is_inexact_array))


def _scan(body, init, xs, length: int, checkpoints):
    """``lax.scan(body, init, xs, length)``, or with ``checkpoints`` an online-checkpointed scan
    (``equinox.internal.scan``): reverse mode then stores ``checkpoints`` copies of the carry instead of one per
    step, so its memory does not grow with ``length`` (the forward pass is recomputed, O(log length) times)."""
    if checkpoints is None:
        return jax.lax.scan(body, init, xs, length=length)
    import equinox.internal as eqxi

    if int(checkpoints) < 1:
        raise ValueError(f"checkpoints must be a positive number of stored carries, got {checkpoints}.")
    return eqxi.scan(body, init, xs, length=length, kind="checkpointed", checkpoints=min(int(checkpoints), length))


def _check_differentiable_counts(**counts) -> None:
    """Step counts fix the shape of the computation: a traced one (e.g. inside ``jax.grad``) cannot."""
    for name, value in counts.items():
        if isinstance(value, jax.core.Tracer):
            raise TypeError(
                f"{name} is a traced value; it must be a Python int (it fixes the number of steps), so it "
                f"cannot be differentiated or vmapped. Vary a step size or a rate continuously instead."
            )


def gradient_descent(
    loss_fn: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    step,
    n_steps: int,
    *,
    record_every: int = 1,
    has_aux: bool = False,
    check_finite: bool = True,
    checkpoints: int | None = None,
) -> tuple[PyTree, Float[Array, " n"]]:
    r"""$\theta_{k+1} = \theta_k - \eta \odot \nabla L(\theta_k)$ (the step sizes $\eta$: ``step``), ``n_steps`` times.

    Differentiable in everything the loss and the steps depend on (initialisation, task, step sizes):
    ``jax.grad`` of a function of the result differentiates through the whole run.

    Args:
        step: a step size, or a pytree with the structure of ``params`` holding one step size per leaf
            (e.g. η_Q and η_w of Yang et al. eq. 10: ``model.step_sizes(eta_Q, eta_w)``), or a function
            ``step(k)`` of the (traced) step index returning either (a schedule, e.g. ``lambda k: etas[k]``).
        record_every: record the loss every this many steps.
        has_aux: ``loss_fn`` returns ``(loss, aux)``; the recorded ``aux`` (any pytree, e.g. test losses)
            is returned stacked along a leading axis next to the losses.
        check_finite: raise on a non-finite loss (default). ``False`` returns the curve as it is, for runs
            whose divergence is a result to report (its first non-finite entry marks the step).
        checkpoints: reverse-mode memory. ``None`` (default): a ``lax.scan`` that keeps every step's parameters for
            the backward pass (and supports forward mode, ``jax.jvp``/``jacfwd``). An int C: an online-checkpointed
            scan keeping C of them, so the memory of ``jax.grad`` through the run stays flat as ``n_steps`` grows
            (reverse mode only).

    Returns ``(final_params, losses)`` with ``losses[j] = L(θ_{j·record_every})``, or
    ``(final_params, (losses, aux))`` with ``has_aux``.
    """
    _check_differentiable_counts(n_steps=n_steps, record_every=record_every)
    n_steps = _validate.integer("gradient_descent: n_steps", n_steps)
    record_every = _validate.integer("gradient_descent: record_every", record_every)
    if n_steps % record_every:
        raise ValueError(f"gradient_descent: n_steps = {n_steps} must be a multiple of record_every = {record_every}.")
    if not (callable(step) and not isinstance(step, eqx.Module)):
        for leaf in jax.tree_util.tree_leaves(step):  # concrete step sizes: finite and >= 0 (traced: unchecked)
            _validate.real("gradient_descent: step", leaf, ge=0, scalar=False)
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)
    schedule = callable(step) and not isinstance(step, eqx.Module)  # a model of per-leaf steps is callable too
    steps_at = (lambda k: per_leaf(step(k), params)) if schedule else (lambda k, s=per_leaf(step, params): s)

    def loss_of(y):
        return loss_fn(eqx.combine(y, static))

    vg = jax.value_and_grad(loss_of, has_aux=has_aux)

    def one(carry, _):
        k, y = carry
        out, g = vg(y)
        return (k + 1, jax.tree_util.tree_map(lambda a, s, b: a - s * b, y, steps_at(k), g)), out

    def block(carry, _):  # checkpointed inside a record block too, so reverse-mode memory is flat in n_steps
        carry, outs = _scan(one, carry, None, record_every, checkpoints)
        return carry, jax.tree_util.tree_map(lambda o: o[0], outs)

    (_, dynamic), outs = _scan(block, (jnp.asarray(0), dynamic), None, n_steps // record_every, checkpoints)
    if check_finite:  # under jit/vmap: an eqx.error_if on the returned curve
        losses = check_finite_curve(outs[0] if has_aux else outs, every=record_every)
        outs = (losses, outs[1]) if has_aux else losses
    return eqx.combine(dynamic, static), outs


def optax_train(
    batch_loss_fn: Callable[[PyTree, PRNGKeyArray], Float[Array, ""]],
    params: PyTree,
    optimizer: optax.GradientTransformation,
    n_steps: int,
    key: PRNGKeyArray,
    *,
    checkpoints: int | None = None,
    check_finite: bool = True,
) -> tuple[PyTree, Float[Array, " n"]]:
    """Train with an optax optimizer; ``batch_loss_fn(params, key)`` draws a fresh batch per step.

    Differentiable end to end (e.g. in the initialisation or the learning rate, with an optimizer built from it
    inside the differentiated function; for Adam pass ``eps_root > 0``, as √v has an infinite derivative where a
    gradient is exactly zero). ``checkpoints``: as in `gradient_descent` — an int stores that
    many (parameters, optimizer state) carries for the backward pass, and each step's activations are
    recomputed (``jax.checkpoint``), so memory does not grow with ``n_steps``. ``check_finite``: as in
    `gradient_descent` (``False`` inside programs meant for the persistent cache: check
    `first_nonfinite_step` of the curve on the host instead).

    Example (fresh prompts every step)::

        loss = lambda m, k: icl.mc_loss(m, task, key=k, batch=256)
        model, curve = icl.optax_train(loss, model, optax.adam(1e-2), 2000, key)
    """
    _check_differentiable_counts(n_steps=n_steps)
    n_steps = _validate.integer("optax_train: n_steps", n_steps)
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)
    vg = jax.value_and_grad(lambda y, k: batch_loss_fn(eqx.combine(y, static), k))
    if checkpoints is not None:
        vg = jax.checkpoint(vg)

    def one(carry, k):
        y, state = carry
        loss, g = vg(y, k)
        updates, state = optimizer.update(g, state, y)
        return (optax.apply_updates(y, updates), state), loss

    (dynamic, _), losses = _scan(
        one, (dynamic, optimizer.init(dynamic)), jax.random.split(key, n_steps), n_steps, checkpoints
    )
    if check_finite:  # under jit/vmap: an eqx.error_if on the returned curve
        losses = check_finite_curve(losses)
    return eqx.combine(dynamic, static), losses
