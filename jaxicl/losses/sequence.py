"""Losses of softmax transformers on token-sequence prompts (Monte Carlo over a batch of prompts).

The squared error ‖TF(P^i) − y_i‖² at every scored position i (every prefix length with the encoding of
Garg et al.), averaged over positions and prompts; for looped models also over the loop counts
t = T_0, …, T with T_0 = max(T − ΔT, 0) (AlgoFormer eq. 6). Eq. (6) normalises by T − T_0 but sums
T − T_0 + 1 terms; here the terms are averaged, and t = 0 (no loop at all) is skipped.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..tasks.sequence import SequencePrompt


def is_looped(model) -> bool:
    return hasattr(model, "outputs_per_loop")


def first_weighted_loop(T: int, delta_T: int) -> int:
    """The first loop count eq. (6) weighs: max(T − ΔT, 1) (t = 0, no loop at all, is skipped)."""
    T, delta_T = int(T), int(delta_T)
    if T < 1 or delta_T < 0:
        raise ValueError(f"need T >= 1 loops and ΔT >= 0 (eq. 6), got T={T}, ΔT={delta_T}.")
    return max(T - delta_T, 1)


def loop_weights(T: int, delta_T: int) -> Float[Array, " T"]:
    """Weights of loop counts t = 1…T in eq. (6): 1/(number of terms) for T_0 <= t <= T, 0 before."""
    on = jnp.arange(1, int(T) + 1) >= first_weighted_loop(T, delta_T)
    return on / jnp.sum(on)


def _sq_err(pred, prompt: SequencePrompt, target: str):
    y = getattr(prompt, target)
    return jnp.sum((pred.astype(y.dtype) - y) ** 2, axis=-1)


def _masked_mean(err, mask):
    return jnp.sum(err * mask) / jnp.maximum(jnp.sum(mask), 1)


def sequence_loss(model, prompts: SequencePrompt, loops=None, target: str = "targets") -> Float[Array, ""]:
    r"""The training loss of a softmax transformer on a batch of prompts: the mean over the batch of the masked mean
    squared error $\lVert \hat y_j - y_j \rVert^2$ over the scored positions $j$; for a looped model, averaged over
    the loop counts $t = \max(T - \Delta T, 1) \dots T$ (the AlgoFormer paper's eq. 6, with a mean over its terms).

    Args:
        model: a `StandardTransformer`, `LoopedTransformer` or `AlgoFormer`.
        prompts: a `SequencePrompt` with a leading batch axis (a task's ``prompts(key, batch)``).
        loops: ``(T, ΔT)`` for a looped model, or directly the weights of loop counts $1 \dots T_{max}$ (an array,
            e.g. ``loop_weights`` padded with zeros: runs with different (T, ΔT) then share one program); None for a
            standard transformer (anything else is refused).
        target: ``"targets"`` (the noisy labels, trained on) or ``"clean"`` (the noise-free ones).

    Returns:
        A scalar: the loss, differentiable in the model's parameters.

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.RepresentationRegression(4, 8, noise_std=0.1)
        algo = icl.models.AlgoFormer(key, 4, 1, heads=(4, 4, 4), d_model=32, max_len=16)
        loss, grads = jax.value_and_grad(icl.losses.sequence_loss)(algo, task.prompts(key, 32), (6, 4))
        ```
    """
    if is_looped(model) != (loops is not None):
        raise ValueError(
            "pass loops=(T, ΔT) for a looped model / AlgoFormer and loops=None for a standard "
            f"transformer (got a {type(model).__name__} with loops={loops})."
        )

    def one(p):
        if loops is None:
            return _masked_mean(_sq_err(model(p.tokens), p, target), p.mask)
        if isinstance(loops, tuple):  # the loop counts before T_0 weigh 0: their outputs are not computed
            weights, first = loop_weights(*loops), first_weighted_loop(*loops)
        else:
            weights, first = jnp.asarray(loops), 1
        outs = model.outputs_per_loop(p.tokens, weights.shape[0], first)  # (loops first…T, tokens, d_out)
        per_loop = jax.vmap(lambda o: _masked_mean(_sq_err(o, p, target), p.mask))(outs)
        return per_loop @ weights[first - 1 :].astype(per_loop.dtype)

    return jnp.mean(jax.vmap(one)(prompts))


def position_errors(model, prompts: SequencePrompt, n_loops=None, target: str = "clean") -> Float[Array, "batch T"]:
    """Squared error at every position of every prompt (zero where the mask is off); ``n_loops`` for looped
    models (any count, traced or not). Validation compares against the clean targets by default."""
    if is_looped(model) and n_loops is None:
        raise ValueError(f"a {type(model).__name__} needs n_loops for evaluation.")
    predict = (lambda t: model(t, n_loops)) if is_looped(model) else model
    return jax.vmap(lambda p: _sq_err(predict(p.tokens), p, target) * p.mask)(prompts)


def position_errors_per_loop(
    model, prompts: SequencePrompt, max_loops: int, target: str = "clean"
) -> Float[Array, "batch loops T"]:
    """`position_errors` after each loop count 1…``max_loops`` of a looped model, from one pass: row t − 1
    is ``position_errors(model, prompts, t)``. The loops run once (``outputs_per_loop``), so an error-vs-loops
    curve (AlgoFormer Figs. 3 and 5) costs ``max_loops`` loops, not 1 + 2 + … + ``max_loops``."""
    if not is_looped(model):
        raise ValueError(f"position_errors_per_loop needs a looped model / AlgoFormer, got a {type(model).__name__}.")

    def one(p):
        outs = model.outputs_per_loop(p.tokens, int(max_loops))  # (loops, tokens, d_out)
        return jax.vmap(lambda o: _sq_err(o, p, target) * p.mask)(outs)

    return jax.vmap(one)(prompts)


def prefix_curve(model, prompts: SequencePrompt, n_loops=None, target: str = "clean") -> Float[Array, " N"]:
    """Mean squared error at each scored position (in order), averaged over the batch: with the encoding of
    Garg et al. the error as a function of the number of in-context examples (AlgoFormer Fig. 2). The
    scored positions are read from the (concrete) mask of the first prompt; the errors run under jit."""
    err = eqx.filter_jit(position_errors)(model, prompts, n_loops, target)
    scored = np.flatnonzero(np.asarray(prompts.mask[0]) > 0)
    return jnp.mean(err[:, scored], axis=0)
