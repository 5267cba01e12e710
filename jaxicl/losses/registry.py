"""Population losses: exact closed forms registered per (model type, task type), and Monte Carlo.

    L(θ) = ½ E_P (ŷ(P; θ) − y_query)²        (Zhang et al. eq. 3.8, Ahn et al. eq. 5)

``population_loss`` dispatches on the *types* of the model and the task (walking both MROs), so a
later module adds a closed form with ``@register_population_loss(MyModel, MyTask)`` without
editing this file. ``mc_loss`` works for any model with ``predict(prompt)`` (or ``predict_batch(prompts)``) and any task
with ``sample(key, batch)``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate
from ..runtime import placement

_REGISTRY: dict[tuple[type, type], Callable] = {}


class NoClosedFormError(NotImplementedError):
    """Raised when no exact population loss exists for a (model, task) pair."""


def register_population_loss(model_type: type, task_type: type):
    """Decorator: register ``fn(model, task) -> scalar`` as the exact loss for these types."""

    def decorator(fn):
        _REGISTRY[(model_type, task_type)] = fn
        return fn

    return decorator


def _lookup(model, task):
    for mt in type(model).__mro__:
        for tt in type(task).__mro__:
            fn = _REGISTRY.get((mt, tt))
            if fn is not None:
                return fn
    return None


def no_closed_form(model, task, why: str = "") -> NoClosedFormError:
    reason = f" ({why})" if why else ""
    return NoClosedFormError(
        f"No exact population loss for {type(model).__name__} on {type(task).__name__}{reason}. "
        "Use jaxicl.mc_loss(model, task, key=key, batch=100_000) for an unbiased Monte-Carlo "
        "estimate, or register a closed form with jaxicl.losses.register_population_loss."
    )


def has_population_loss(model, task) -> bool:
    """Whether a closed-form population loss is registered for this (model type, task type) pair. Where none is,
    `population_loss` raises ``NoClosedFormError`` (use `mc_loss`); a registered one may still refuse a
    model it does not describe (e.g. a deeper one), with the same error."""
    return _lookup(model, task) is not None


def population_loss(model, task) -> Float[Array, ""]:
    r"""Exact population loss $L = \tfrac12\mathbb{E}(\hat y - y_q)^2$ of ``model`` on ``task``'s prompts, from the
    closed form registered for the pair of their types (`register_population_loss`).

    Args:
        model: an equinox module, e.g. `LinearSelfAttention` (Zhang et al. eq. 3.3; every parameter value, not only
            the invariant manifold), a `LinearTransformer` with fixed Gram matrices, `MultiHeadSoftmaxICL`.
        task: its prompt distribution, e.g. `LinearRegression` with a fixed or random covariance, label noise too.

    Returns:
        A scalar array: the exact loss, differentiable in every parameter of the model and in the task's array
        leaves, Λ and the noise level among them.

    Raises:
        NoClosedFormError: no closed form for the pair (its message points to `mc_loss`).

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)))
        model = icl.models.LinearSelfAttention.random_init(3, 0.3, jax.random.PRNGKey(0))
        loss = icl.population_loss(model, task)
        grads = jax.grad(icl.population_loss)(model, task)  # same pytree as model
        ```
    """
    fn = _lookup(model, task)
    if fn is None:
        raise no_closed_form(model, task)
    return fn(model, task)


def _large_batch(arguments) -> bool:
    batch = arguments["batch"]
    return isinstance(batch, int) and batch >= placement.LARGE_BATCH


@placement.placed("throughput", when=_large_batch)  # a large Monte-Carlo batch fills an accelerator
def mc_loss(
    model,
    task,
    key: PRNGKeyArray,
    batch: int = 100_000,
    chunk_size: int = 8192,
    return_stderr: bool = False,
):
    r"""Unbiased Monte-Carlo estimate of $\tfrac12\mathbb{E}(\hat y - y_q)^2$ from ``batch`` fresh prompts: any model
    with a ``predict(prompt)``, on any task with a ``sample(key, batch)``.

    A model may define ``predict_batch(prompts)`` (else ``vmap(predict)`` is used); when a prompt has
    several targets (Yang et al.: all K labels) the per-prompt error is their mean, ½(1/K)Σ_k(ŷ_k − y_k)².

    Args:
        model: the model.
        task: the prompt distribution.
        key: PRNG key; chunk i of prompts is drawn from ``fold_in(key, i)``.
        batch: number of prompts.
        chunk_size: prompts drawn at a time inside a ``lax.scan``: memory stays bounded for any ``batch`` (at most
            2³¹ − 1 chunks).
        return_stderr: also return the estimate's standard error.

    Returns:
        The mean squared error's half as a scalar array, or ``(mean, standard_error)`` with ``return_stderr``.

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)))
        model = icl.models.LinearSelfAttention.random_init(3, 0.3, jax.random.PRNGKey(0))
        mean, se = icl.mc_loss(model, task, jax.random.PRNGKey(1), batch=20_000, return_stderr=True)
        assert abs(mean - icl.population_loss(model, task)) < 4 * se
        ```
    """
    batch = _validate.integer("mc_loss: batch", batch)
    chunk = min(_validate.integer("mc_loss: chunk_size", chunk_size), batch)
    n_chunks = math.ceil(batch / chunk)
    if n_chunks > 2**31 - 1:
        raise ValueError(
            f"mc_loss: batch = {batch:,} is {n_chunks:,} chunks of chunk_size = {chunk:,}, more than "
            "2^31 − 1: raise chunk_size, or average several estimates."
        )
    last = batch - (n_chunks - 1) * chunk  # prompts of the last chunk

    predict = getattr(model, "predict_batch", None) or jax.vmap(model.predict)

    def half_sq_errors(k):
        prompts = task.sample(k, chunk)
        err = (predict(prompts) - prompts.y_query) ** 2
        return 0.5 * err.reshape(chunk, -1).mean(axis=1)  # several targets per prompt: their mean

    def body(carry, _):
        s, s2, i = carry
        e = half_sq_errors(jax.random.fold_in(key, i))
        e = jnp.where((i < n_chunks - 1) | (jnp.arange(chunk) < last), e, 0.0)
        return (s + e.sum(), s2 + (e**2).sum(), i + 1), None

    dtype = jnp.result_type(float)
    (s, s2, _), _ = jax.lax.scan(
        body, (jnp.zeros((), dtype), jnp.zeros((), dtype), jnp.zeros((), jnp.int32)), None, length=n_chunks
    )
    mean = s / batch
    if not return_stderr:
        return mean
    var = jnp.maximum(s2 / batch - mean**2, 0.0) * batch / max(batch - 1, 1)
    return mean, jnp.sqrt(var / batch)
