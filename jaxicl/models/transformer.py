r"""GPT-2-style softmax transformers for in-context learning: standard, looped and AlgoFormer.

A prompt is a token sequence (T, w) (see `jaxicl.tasks.sequence` for the encodings of Garg et al.
and of the linear papers); every model maps it to one prediction per position, (T, d_out), and the
loss reads the positions the encoding marks.

- `StandardTransformer`: read-in + learned positions, L decoder blocks, final LayerNorm, read-out
  (the GPT-2 model of Garg et al. and of Zhang et al.'s Fig. 1).
- `LoopedTransformer`: one block stack applied b times with the input injected at every loop,
  $h_t = \mathrm{TF}(h_{t-1} + e)$, $h_0 = 0$ (Yang et al. 2024, the AlgoFormer paper's "vanilla looped transformer").
- `AlgoFormer`: TF_post(TF_loop(⋯ TF_loop(TF_pre(e)) ⋯)) with T loops (AlgoFormer, eq. 2); each
  sub-transformer has its own depth and number of heads.

The loop count of both looped models is a runtime value (``n_loops`` may be traced: evaluation at many
more loops than trained reuses one compiled program). Training uses `outputs_per_loop`, which
returns the read-out after each of the first ``max_loops`` loops, for the loop-averaged loss (eq. 6).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .. import _validate
from ..runtime import placement
from ..runtime.xla_options import switch_from_env


def _layer_norm(h, scale, bias, eps=1e-5):
    """LayerNorm with its statistics in float32 whatever the compute dtype (bf16 means and variances lose the
    small differences a residual stream carries); the result is in ``h``'s dtype."""
    x = h.astype(jnp.promote_types(h.dtype, jnp.float32))
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
    return ((x - mu) * jax.lax.rsqrt(var + eps)).astype(h.dtype) * scale + bias


# Which kernel computes softmax attention: "auto" uses cuDNN's fused (flash) attention on an NVIDIA GPU when the
# compute dtype is bf16/fp16 and the head width suits it (a multiple of 8, at most 128), XLA's otherwise; "xla"
# always uses XLA's. Read when a model is traced (benchmarks compare the two by setting it).
ATTENTION_IMPLEMENTATION = "auto"


# Unroll the scans over layers and over loops: None means where the model is traced to run on an accelerator
# (`placement.current_platform`: `--device cpu` on a GPU machine compiles as on the CPU). On a GPU the rolled loops
# cost a launch-bound step 1.6× (the paper-size AlgoFormer: 22.8 → 14.5 ms/step in bf16, H100); on the CPU unrolling
# gains nothing and lengthens compilation. $JAXICL_UNROLL sets it for a whole run, the `--jobs` processes included
# (a quick run's short trainings may not repay an unrolled program's compilation on a GPU: benchmarks/README.md).
UNROLL = switch_from_env("JAXICL_UNROLL")


def _unroll() -> bool:
    return placement.current_platform() != "cpu" if UNROLL is None else bool(UNROLL)


# Rematerialise inside each block for the backward pass: None means on the CPU only. The backward pass then keeps
# four activations per block (`SAVED_ACTIVATIONS`) and recomputes the LayerNorms, the attention probabilities
# and the GELU from them, instead of stacking some twenty intermediates per layer in the scan (XLA:CPU's stacking
# copies were a fifth of a quick training step). One core, quick sizes (benchmarks/README.md): GPT-2 of Zhang et al.
# 64 → 47 ms/step, Yang et al.'s H = 8 115 → 96 ms, the AlgoFormer 45 → 38 ms. The gradients are the same up to
# float rounding. Untried on a GPU, where the default leaves it off. $JAXICL_REMAT sets it as $JAXICL_UNROLL does.
REMAT = switch_from_env("JAXICL_REMAT")
SAVED_ACTIVATIONS = ("qkv", "attention", "residual_mid", "mlp_in")


def _remat() -> bool:
    return placement.current_platform() == "cpu" if REMAT is None else bool(REMAT)


def _fused_attention_ok(q) -> bool:
    c = q.shape[-1]
    return (
        ATTENTION_IMPLEMENTATION == "auto"
        and placement.current_platform() == "gpu"
        and q.dtype in (jnp.bfloat16, jnp.float16)
        and c % 8 == 0
        and c <= 128
    )


def causal_attention(
    q: Float[Array, "T H c"], k: Float[Array, "T H c"], v: Float[Array, "T H c"]
) -> Float[Array, "T H c"]:
    """softmax(q kᵀ/√c + causal mask) v for each head, the logits and softmax in float32 or wider whatever the
    compute dtype (float64 stays float64): cuDNN's fused (flash) attention through ``jax.nn.dot_product_attention`` where
    `ATTENTION_IMPLEMENTATION` allows it, else two einsums around an exp, normalised last (on the CPU this is
    faster than ``dot_product_attention``'s XLA path, which builds its mask differently)."""
    if _fused_attention_ok(q):
        try:
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
        except Exception:  # no cuDNN, or a shape/version it does not take: the einsums compute the same
            pass
    T = q.shape[0]
    logits = jnp.einsum("thc,shc->hts", q, k, preferred_element_type=jnp.promote_types(q.dtype, jnp.float32))
    logits = logits / math.sqrt(q.shape[-1])
    logits = jnp.where(jnp.tril(jnp.ones((T, T), bool)), logits, jnp.finfo(logits.dtype).min)
    # the softmax's normalisation after the product with v: (e v) / Σ_s e with e = exp(logits − max), the same
    # numbers; the max cancels in the ratio, so its gradient is zero. XLA:CPU fused the normalised softmax into
    # the product and ran that fusion several times slower than the two apart (Yang et al.'s H = 8 step: one
    # fusion was 30 % of it; benchmarks/README.md).
    e = jnp.exp(logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True)))
    out = jnp.einsum("hts,shc->thc", e.astype(v.dtype), v, preferred_element_type=e.dtype)
    return (out / jnp.sum(e, axis=-1).T[:, :, None]).astype(v.dtype)


def _layer_norm_params(d_model: int, dtype):
    """(scale, bias) = (1, 0), stacked as a (2, D) leaf."""
    return jnp.stack([jnp.ones(d_model, dtype), jnp.zeros(d_model, dtype)])


class Block(eqx.Module):
    """Pre-LayerNorm decoder block: h + Attn(LN(h)), then h + MLP(LN(h)), with causal multi-head softmax
    attention and a GELU MLP (GPT-2). Operates on one sequence (T, D)."""

    ln1: Float[Array, "2 D"]
    w_qkv: Float[Array, "D 3D"]
    b_qkv: Float[Array, " 3D"]
    w_out: Float[Array, "D D"]
    b_out: Float[Array, " D"]
    ln2: Float[Array, "2 D"]
    w_ff1: Float[Array, "D F"]
    b_ff1: Float[Array, " F"]
    w_ff2: Float[Array, "F D"]
    b_ff2: Float[Array, " D"]
    n_heads: int = eqx.field(static=True)

    def __init__(
        self, key: PRNGKeyArray, d_model: int, n_heads: int, d_ff: int, residual_scale: float = 1.0, dtype=None
    ):
        if d_model % n_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by n_heads = {n_heads}.")
        dtype = dtype or jnp.result_type(float)
        k1, k2, k3, k4 = jax.random.split(key, 4)
        std = 0.02  # GPT-2 initialisation; residual projections scaled by 1/sqrt(2 L)
        self.ln1 = self.ln2 = _layer_norm_params(d_model, dtype)
        self.w_qkv = std * jax.random.normal(k1, (d_model, 3 * d_model), dtype)
        self.b_qkv = jnp.zeros(3 * d_model, dtype)
        self.w_out = std * residual_scale * jax.random.normal(k2, (d_model, d_model), dtype)
        self.b_out = jnp.zeros(d_model, dtype)
        self.w_ff1 = std * jax.random.normal(k3, (d_model, d_ff), dtype)
        self.b_ff1 = jnp.zeros(d_ff, dtype)
        self.w_ff2 = std * residual_scale * jax.random.normal(k4, (d_ff, d_model), dtype)
        self.b_ff2 = jnp.zeros(d_model, dtype)
        self.n_heads = int(n_heads)

    def __call__(self, h: Float[Array, "T D"]) -> Float[Array, "T D"]:
        T, D = h.shape
        H = self.n_heads
        x = _layer_norm(h, *self.ln1)
        qkv = checkpoint_name(x @ self.w_qkv + self.b_qkv, "qkv")  # names: what the backward pass keeps (REMAT)
        q, k, v = (a.reshape(T, H, D // H) for a in jnp.split(qkv, 3, axis=-1))
        a = checkpoint_name(causal_attention(q, k, v).reshape(T, D), "attention")
        h = checkpoint_name(h + a @ self.w_out + self.b_out, "residual_mid")
        x = _layer_norm(h, *self.ln2)
        return h + jax.nn.gelu(checkpoint_name(x @ self.w_ff1 + self.b_ff1, "mlp_in")) @ self.w_ff2 + self.b_ff2


@eqx.filter_jit  # one program per configuration; eager, the vmap compiled each initialiser operation on its own
def _stacked_blocks(keys, d_model: int, n_heads: int, d_ff: int, residual_scale: float, dtype) -> Block:
    """len(keys) blocks initialised together, their parameters stacked on a leading axis."""
    return eqx.filter_vmap(lambda k: Block(k, d_model, n_heads, d_ff, residual_scale, dtype))(keys)


class BlockStack(eqx.Module):
    """L blocks with their parameters stacked on a leading axis, applied with ``lax.scan`` (one compiled
    block whatever the depth)."""

    blocks: Block

    def __init__(
        self,
        key: PRNGKeyArray,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        residual_scale: float = 1.0,
        dtype=None,
    ):
        n_layers, d_model = _validate.integer("n_layers", n_layers), _validate.integer("d_model", d_model)
        n_heads, d_ff = _validate.integer("n_heads", n_heads), _validate.integer("d_ff", d_ff)
        _validate.real("residual_scale", residual_scale)
        self.blocks = _stacked_blocks(
            jax.random.split(key, int(n_layers)), int(d_model), int(n_heads), int(d_ff), float(residual_scale), dtype
        )

    @property
    def n_layers(self) -> int:
        return self.blocks.b_out.shape[0]

    @property
    def n_heads(self) -> int:
        return self.blocks.n_heads

    def __call__(self, h: Float[Array, "T D"]) -> Float[Array, "T D"]:
        params, static = eqx.partition(self.blocks, eqx.is_array)
        block = lambda h, p: (eqx.combine(p, static)(h), None)  # noqa: E731
        if _remat():
            block = jax.checkpoint(
                block, policy=jax.checkpoint_policies.save_only_these_names(*SAVED_ACTIVATIONS), prevent_cse=False
            )  # prevent_cse: not needed under scan
        h, _ = jax.lax.scan(block, h, params, unroll=_unroll())
        return h


class ReadInOut(eqx.Module):
    """Read-in (linear map of tokens + learned positional embeddings) and read-out (final LayerNorm and a
    linear map to the prediction), as in Garg et al.'s GPT-2 wrapper."""

    w_in: Float[Array, "w D"]
    b_in: Float[Array, " D"]
    positions: Float[Array, "max_len D"]
    ln_f: Float[Array, "2 D"]
    w_out: Float[Array, "D d_out"]
    b_out: Float[Array, " d_out"]

    def __init__(self, key: PRNGKeyArray, d_in: int, d_out: int, d_model: int, max_len: int, dtype=None):
        d_in, d_out = _validate.integer("d_in", d_in), _validate.integer("d_out", d_out)
        d_model, max_len = _validate.integer("d_model", d_model), _validate.integer("max_len", max_len)
        dtype = dtype or jnp.result_type(float)
        k1, k2, k3 = jax.random.split(key, 3)
        self.w_in = jax.random.normal(k1, (d_in, d_model), dtype) / math.sqrt(d_in)
        self.b_in = jnp.zeros(d_model, dtype)
        self.positions = 0.02 * jax.random.normal(k2, (max_len, d_model), dtype)
        self.ln_f = _layer_norm_params(d_model, dtype)
        self.w_out = jax.random.normal(k3, (d_model, d_out), dtype) / math.sqrt(d_model)
        self.b_out = jnp.zeros(d_out, dtype)

    @property
    def max_len(self) -> int:
        return self.positions.shape[0]

    def read_in(self, tokens: Float[Array, "T w"]) -> Float[Array, "T D"]:
        if tokens.ndim != 2 or tokens.shape[1] != self.w_in.shape[0]:
            raise ValueError(
                f"the model reads tokens of width {self.w_in.shape[0]} as a (T, width) array; got shape "
                f"{tokens.shape} (batch prompts with jax.vmap)."
            )
        if tokens.shape[0] > self.max_len:
            raise ValueError(
                f"a prompt of {tokens.shape[0]} tokens is longer than the positional table "
                f"(max_len = {self.max_len}); build the model with a larger max_len."
            )
        tokens = tokens.astype(self.w_in.dtype)  # mixed precision: compute in the parameters' dtype
        return tokens @ self.w_in + self.b_in + self.positions[: tokens.shape[0]]

    def read_out(self, h: Float[Array, "T D"]) -> Float[Array, "T d_out"]:
        return _layer_norm(h, *self.ln_f) @ self.w_out + self.b_out


def _check_loops(n_loops):
    """Loop counts must be >= 1: an error now when concrete, ``eqx.error_if`` at run time when traced."""
    if isinstance(n_loops, jax.core.Tracer):
        return eqx.error_if(n_loops, n_loops < 1, "the loop count must be >= 1")
    if int(n_loops) < 1:
        raise ValueError(f"the loop count must be >= 1, got {n_loops}.")
    return n_loops


class _Transformer(eqx.Module):
    """Common constructor arguments: ``d_in`` (token width), ``d_out`` (prediction width), ``max_len``
    (positional table), ``d_model``, ``d_ff`` (default 4 d_model)."""

    io: ReadInOut

    @property
    def max_len(self) -> int:
        return self.io.max_len

    @property
    def d_in(self) -> int:
        return self.io.w_in.shape[0]

    @property
    def d_out(self) -> int:
        return self.io.w_out.shape[1]


class StandardTransformer(_Transformer):
    r"""A GPT-2 decoder of ``n_layers`` pre-LayerNorm blocks: $\mathrm{read\_out}(\mathrm{TF}(\mathrm{read\_in}(e)))$,
    with learned positions and causal softmax attention (Garg et al.; Zhang et al.'s Fig. 1; the AlgoFormer paper's
    standard transformer).

    Args:
        key: PRNG key of the initialisation.
        d_in: the tokens' dimension $w$.
        d_out: the predictions' dimension.
        n_layers: the number of blocks $L$.
        d_model: the width.
        n_heads: the attention heads of every block (``d_model`` must be divisible by it).
        d_ff: the MLP's width (default 4·d_model).
        max_len: the longest sequence (learned positions).
        dtype: the parameters' dtype (default float32).

    Calling it on tokens of shape (T, w) returns one prediction per position, (T, d_out); `jaxicl.losses` reads the
    positions a task's encoding marks (``sequence_loss``, ``position_errors``).

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.RepresentationRegression(d=4, n_context=8, phi=None)
        model = icl.models.StandardTransformer(key, 4, 1, n_layers=2, d_model=32, n_heads=4, max_len=16)
        prompts = task.prompts(key, 32)  # Garg et al.'s encoding: (x, y) pairs as tokens
        assert model(prompts.tokens[0]).shape == (16, 1)
        loss = icl.losses.sequence_loss(model, prompts)  # mean squared error at the scored positions
        ```
    """

    layers: BlockStack

    def __init__(
        self,
        key: PRNGKeyArray,
        d_in: int,
        d_out: int,
        *,
        n_layers: int = 12,
        d_model: int = 256,
        n_heads: int = 8,
        d_ff: int | None = None,
        max_len: int = 101,
        dtype=None,
    ):
        k1, k2 = jax.random.split(key)
        self.io = ReadInOut(k1, d_in, d_out, d_model, max_len, dtype)
        self.layers = BlockStack(
            k2, n_layers, d_model, n_heads, d_ff or 4 * d_model, 1 / math.sqrt(2 * n_layers), dtype
        )

    def __call__(self, tokens: Float[Array, "T w"]) -> Float[Array, "T d_out"]:
        return self.io.read_out(self.layers(self.io.read_in(tokens)))


class _Looped(_Transformer):
    def _init_state(self, e):
        raise NotImplementedError

    def _loop(self, h, e):
        raise NotImplementedError

    def _output(self, h):
        raise NotImplementedError

    def __call__(self, tokens: Float[Array, "T w"], n_loops: int | Int[Array, ""]) -> Float[Array, "T d_out"]:
        """Prediction after ``n_loops`` >= 1 loops (a Python int or a traced integer; any count, including far
        more than trained). Forward only: use `outputs_per_loop` to differentiate."""
        n_loops = _check_loops(n_loops)
        e = self.io.read_in(tokens)
        h = jax.lax.fori_loop(0, n_loops, lambda _, h: self._loop(h, e), self._init_state(e))
        return self._output(h)

    def outputs_per_loop(
        self, tokens: Float[Array, "T w"], max_loops: int, first_loop: int = 1
    ) -> Float[Array, "loops T d_out"]:
        """Predictions after ``first_loop``, …, ``max_loops`` loops (static counts; differentiable), for eq. (6):
        row i is the output after ``first_loop + i`` loops. The loops run in a ``lax.scan`` that keeps only the
        hidden states; the output map (AlgoFormer's TF_post and the read-out) then runs once on all of them,
        ``vmap``ped (wider matrix products and half the work inside the scan: 1.3× on the quick AlgoFormer's
        training step, CPU), and not at all for loop counts before ``first_loop``, which eq. (6) weighs 0."""
        max_loops, first_loop = int(max_loops), int(first_loop)
        if max_loops < 1:
            raise ValueError(f"the loop count must be >= 1, got {max_loops}.")
        if not 1 <= first_loop <= max_loops:
            raise ValueError(f"first_loop must be in 1…max_loops = {max_loops}, got {first_loop}.")
        e = self.io.read_in(tokens)

        def step(h, _):
            h = self._loop(h, e)
            return h, h

        hidden = jax.lax.scan(step, self._init_state(e), None, length=max_loops, unroll=_unroll())[1]
        return jax.vmap(self._output)(hidden[first_loop - 1 :])


class LoopedTransformer(_Looped):
    r"""One block stack applied $b$ times with the input injected at every loop: $h_t = \mathrm{TF}(h_{t-1} + e)$,
    $h_0 = 0$, output $\mathrm{read\_out}(h_b)$ (Yang et al. 2024; the AlgoFormer paper's vanilla looped
    transformer). The loop count is a call argument, a Python int or a traced integer: one compiled program reads
    the model at any number of loops.

    Args:
        key: PRNG key of the initialisation.
        d_in: the tokens' dimension.
        d_out: the predictions' dimension.
        n_layers: the blocks of the looped stack.
        d_model: the width.
        n_heads: the attention heads of every block.
        d_ff: the MLP's width (default 4·d_model).
        max_len: the longest sequence (learned positions).
        dtype: the parameters' dtype (default float32).

    ``model(tokens, n_loops)`` maps tokens (T, w) to predictions (T, d_out) after ``n_loops`` loops;
    ``model.outputs_per_loop(tokens, max_loops)`` returns those after each of the first ``max_loops`` loops,
    (max_loops, T, d_out), for the loop-averaged loss (the AlgoFormer paper's eq. 6).

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.RepresentationRegression(d=4, n_context=8, phi=None)
        looped = icl.models.LoopedTransformer(key, 4, 1, n_layers=1, d_model=32, n_heads=4, max_len=16)
        tokens = task.prompts(key, 1).tokens[0]
        assert looped(tokens, 12).shape == (16, 1)  # any loop count, including more than trained
        assert looped.outputs_per_loop(tokens, 5).shape == (5, 16, 1)
        loss = icl.losses.sequence_loss(looped, task.prompts(key, 32), loops=(8, 6))  # loops 2…8, eq. (6)
        ```
    """

    loop: BlockStack

    def __init__(
        self,
        key: PRNGKeyArray,
        d_in: int,
        d_out: int,
        *,
        n_layers: int = 1,
        d_model: int = 256,
        n_heads: int = 8,
        d_ff: int | None = None,
        max_len: int = 101,
        dtype=None,
    ):
        k1, k2 = jax.random.split(key)
        self.io = ReadInOut(k1, d_in, d_out, d_model, max_len, dtype)
        self.loop = BlockStack(k2, n_layers, d_model, n_heads, d_ff or 4 * d_model, dtype=dtype)

    def _init_state(self, e):
        return jnp.zeros_like(e)

    def _loop(self, h, e):
        return self.loop(h + e)

    def _output(self, h):
        return self.io.read_out(h)


class AlgoFormer(_Looped):
    """TF_post(TF_loop^T(TF_pre(e))) (AlgoFormer, eq. 2): a pre-transformer, a looped transformer applied T times
    (T a runtime value: ``model(tokens, n_loops)``) and a post-transformer, each a stack of GPT-2 blocks.

    Args:
        key: PRNG key of the initialisation.
        d_in: the tokens' dimension.
        d_out: the predictions' dimension.
        layers: the number of blocks of (pre, loop, post).
        heads: the attention heads of (pre, loop, post).
        d_model: the width.
        d_ff: the MLP's width (default 4·d_model).
        max_len: the longest sequence (learned positions).
        dtype: the parameters' dtype (default float32).

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.RepresentationRegression(d=4, n_context=8, phi=None, noise_std=0.1)
        algo = icl.models.AlgoFormer(key, 4, 1, layers=(1, 1, 1), heads=(4, 4, 4), d_model=32, max_len=16)
        loss = icl.losses.sequence_loss(algo, task.prompts(key, 32), loops=(6, 4))  # eq. (6), (T, ΔT) = (6, 4)
        ```
    """

    pre: BlockStack
    loop: BlockStack
    post: BlockStack

    def __init__(
        self,
        key: PRNGKeyArray,
        d_in: int,
        d_out: int,
        *,
        layers=(1, 1, 1),
        heads=(8, 8, 8),
        d_model: int = 256,
        d_ff: int | None = None,
        max_len: int = 101,
        dtype=None,
    ):
        if len(layers) != 3 or len(heads) != 3:
            raise ValueError(f"layers and heads are (pre, loop, post) triples; got layers={layers}, heads={heads}.")
        k1, *ks = jax.random.split(key, 4)
        self.io = ReadInOut(k1, d_in, d_out, d_model, max_len, dtype)
        self.pre, self.loop, self.post = (
            BlockStack(k, n, d_model, h, d_ff or 4 * d_model, dtype=dtype) for k, n, h in zip(ks, layers, heads)
        )

    def _init_state(self, e):
        return self.pre(e)

    def _loop(self, h, e):
        return self.loop(h)

    def _output(self, h):
        return self.io.read_out(self.post(h))


def n_params(model) -> int:
    """Number of trainable scalars."""
    return sum(x.size for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array)))
