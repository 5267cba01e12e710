r"""Multi-layer linear transformers (Ahn, Cheng, Daneshmand & Sra, eqs. 2–5; Gatmiry et al. eqs. 1–6).

$$
Z_{\ell+1} = Z_\ell + \frac1n \sum_h P_{\ell h} Z_\ell M \sigma(Z_\ell^\top Q_{\ell h} Z_\ell), \qquad
M = \operatorname{diag}(I_n, 0) \quad \text{(eqs. 2–4)}, \qquad
\hat y = -[Z_L]_{d+1,\, n+1} \quad \text{(eq. 5)}
$$

$\sigma \in \{$identity, ReLU, column softmax$\}$. ``Z_0`` is the embedding of eq. (1): columns $(x_i, y_i)$ and
$(x_\text{query}, 0)$. The mask $M$ keeps the query column from acting as a key/value.

**Sign convention of Gatmiry et al.** They write $Z_{t+1} = Z_t - \frac1n P Z M \sigma(Z^\top Q Z)$ (their eq. 3)
with the same prediction $-[Z_L]_{d+1,n+1}$ (their eq. 4; the sentence after their eq. 6 that calls
the output $y_q^{(L)}$ drops this minus sign). So their $(P, Q)$ is this module's $(-P, Q)$, for every $\sigma$;
`LinearTransformer.restricted` takes their $(A, u)$ of eq. (6) and does the conversion.

**Parametrizations.** A model holds one parameter pytree (``model.params``) whose
``weights()`` builds the stacked (P, Q) of shape (layers, heads, d+1, d+1):

- `FullWeights` — every entry of $P_{\ell h}, Q_{\ell h}$;
- `SingleLayerWeights` — $(b, A)$ of eq. (7): $P = [0; b^\top]$, $Q = [A\ 0]$;
- `PreconditionerWeights` — eq. (9): $P = \operatorname{diag}(0, 1)$, $Q = \operatorname{diag}(A_\ell, 0)$;
- `BlockWeights` — eq. (13): $P = \operatorname{diag}(B_\ell, 1)$, $Q = \operatorname{diag}(A_\ell, 0)$;
- `RestrictedWeights` — Gatmiry et al. eq. (6): $Q = \operatorname{diag}(A_\ell, 0)$, $P = [0\ 0; u_\ell^\top\ 1]$ (theirs).

``from_weights(P, Q)`` on each structured class recovers its parameters from full matrices and
raises ``ValueError`` when (P, Q) lies outside the parametrization.

**Depth and looping.** ``depth`` (an integer array leaf, so it can be swept under ``vmap``) is the
number of layers applied; ``max_depth`` (static) is the number compiled, and layers ≥ ``depth``
act as the identity. With ``looped=True`` one (P, Q) is shared by all layers (Gatmiry et al.
eq. 5) and ``depth`` is the loop count.

**Speed.** For $\sigma$ = identity a layer is $Z \mapsto (I + G/n) Z$ with $G = \sum_h P_h (Z M Z^\top) Q_h$, evaluated
with associativity in $O(n d^2)$ per layer (not $O(n^2 d)$); ``attention="direct"`` keeps the literal
form of eq. (3) as the reference. `predict_gram` evaluates a whole batch from its Gram
statistics (`GramBatch`) with a hand-written backward pass (``_gram_kernel``).
"""

from __future__ import annotations

import functools
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .. import _validate
from .._validate import is_concrete
from ..tasks.covariance import host_array
from ..tasks.linear_regression import Prompt, embed
from ._gram_kernel import _forward, gram_jacobian, gram_predict

ACTIVATIONS = ("identity", "relu", "softmax")
PARAMETRIZATIONS = ("full", "single_layer", "preconditioner", "block", "restricted")


def _sym(A):
    return 0.5 * (A + jnp.swapaxes(A, -1, -2))


# The weight builders below are jitted: called eagerly (building a model, a check outside jit) each would otherwise
# compile one XLA program per jnp operation and shape (gatmiry2024's quick run compiled 90 for them); under an outer
# jit they are inlined.
@functools.partial(jax.jit, static_argnames="dtype")
def _block_diag(top, corner, dtype):
    """(L, d, d) blocks → (L, 1, d+1, d+1) matrices diag(top_ℓ, corner)."""
    L, d, _ = top.shape
    out = jnp.zeros((L, 1, d + 1, d + 1), dtype).at[:, 0, :d, :d].set(top)
    return out.at[:, 0, d, d].set(corner)


@jax.jit
def _single_layer_weights(b, A):
    r"""Eq. (7)'s $P = [0; b^\top]$, $Q = [A\ 0]$, one layer and one head."""
    D = b.shape[0]
    P = jnp.zeros((1, 1, D, D), b.dtype).at[0, 0, -1].set(b)
    Q = jnp.zeros((1, 1, D, D), A.dtype).at[0, 0, :, : D - 1].set(A)
    return P, Q


@jax.jit
def _restricted_weights(A, u):
    """Gatmiry et al. eq. (6) in this module's signs: (−P_t, Q_t) = ([0 0; −u_tᵀ −1], diag(A_t, 0))."""
    L, d, _ = A.shape
    P = jnp.zeros((L, 1, d + 1, d + 1), A.dtype).at[:, 0, d, :d].set(-u).at[:, 0, d, d].set(-1.0)
    return P, _block_diag(A, 0.0, A.dtype)


def _as_layers(A, name: str, ndim_one: int) -> Array:
    """Accept one layer's array or a stack of layers; return the stack."""
    A = host_array(A) if isinstance(A, np.ndarray) else jnp.asarray(A)
    if A.ndim == ndim_one:
        A = A[None]
    if A.ndim != ndim_one + 1:
        raise ValueError(
            f"{name} must have {ndim_one} (one layer) or {ndim_one + 1} (layers first) axes, got shape {A.shape}."
        )
    return A


class Parametrization(eqx.Module):
    """A parameter pytree that builds the stacked layer weights (P, Q) of eq. (3)."""

    def weights(self) -> tuple[Float[Array, "L H D D"], Float[Array, "L H D D"]]:
        raise NotImplementedError

    def weight_shape(self) -> jax.ShapeDtypeStruct:
        """Shape and dtype of P (and Q) of `weights`, found by tracing it: nothing is computed."""
        return jax.eval_shape(self.weights)[0]

    @property
    def n_layers(self) -> int:
        return self.weight_shape().shape[0]

    @property
    def n_heads(self) -> int:
        return self.weight_shape().shape[1]

    @property
    def d(self) -> int:
        return self.weight_shape().shape[-1] - 1

    @classmethod
    def _check_expresses(cls, params, P, Q, atol):
        P2, Q2 = params.weights()
        P, Q = jnp.asarray(P, P2.dtype).reshape(P2.shape), jnp.asarray(Q, Q2.dtype).reshape(Q2.shape)
        err_p = float(jnp.max(jnp.abs(P2 - P)))
        err_q = float(jnp.max(jnp.abs(Q2 - Q)))
        if err_p > atol or err_q > atol:
            raise ValueError(
                f"these (P, Q) cannot be expressed by {cls.__name__}: the closest member differs by "
                f"{err_p:.2e} in P and {err_q:.2e} in Q (atol={atol:g}). Use FullWeights, or a "
                "parametrization whose zero blocks and constraints these matrices satisfy."
            )
        return params


class FullWeights(Parametrization):
    r"""Every entry of $P_{\ell h}, Q_{\ell h} \in \mathbb{R}^{(d+1)\times(d+1)}$ (eq. 3)."""

    P: Float[Array, "L H D D"]
    Q: Float[Array, "L H D D"]

    def __init__(self, P, Q):
        P, Q = jnp.asarray(P), jnp.asarray(Q)
        while P.ndim < 4:
            P = P[None]
        while Q.ndim < 4:
            Q = Q[None]
        if P.shape != Q.shape or P.ndim != 4 or P.shape[-1] != P.shape[-2] or P.shape[-1] < 2:
            raise ValueError(
                "FullWeights needs P and Q of the same shape (layers, heads, d+1, d+1) with d >= 1 "
                f"(leading axes optional); got P {P.shape}, Q {Q.shape}."
            )
        self.P, self.Q = P, Q

    def weights(self):
        return self.P, self.Q


class SingleLayerWeights(Parametrization):
    r"""Eq. (7): $P = [0; b^\top]$, $Q = [A\ 0]$ with $b \in \mathbb{R}^{d+1}$, $A \in \mathbb{R}^{(d+1)\times d}$. One layer,
    one head."""

    b: Float[Array, " D"]
    A: Float[Array, "D d"]

    def __init__(self, b, A):
        b, A = jnp.asarray(b), jnp.asarray(A)
        if A.ndim != 2 or A.shape[0] != A.shape[1] + 1 or b.shape != (A.shape[0],):
            raise ValueError(f"eq. (7) needs b of shape (d+1,) and A of shape (d+1, d); got {b.shape}, {A.shape}.")
        self.b, self.A = b, A

    def weights(self):
        return _single_layer_weights(self.b, self.A)

    @classmethod
    def from_weights(cls, P, Q, atol: float = 1e-12):
        P, Q = jnp.asarray(P), jnp.asarray(Q)
        D = P.shape[-1]
        if P.size != D * D or Q.size != D * D:
            raise ValueError(f"eq. (7) describes one layer with one head; got P of shape {P.shape}.")
        P, Q = P.reshape(D, D), Q.reshape(D, D)
        return cls._check_expresses(cls(P[-1], Q[:, :-1]), P, Q, atol)


class PreconditionerWeights(Parametrization):
    r"""Eq. (9): $P_\ell = \operatorname{diag}(0_{d\times d}, 1)$, $Q_\ell = \operatorname{diag}(A_\ell, 0)$. ``symmetric`` uses
    $(A_\ell + A_\ell^\top)/2$ as the paper requires; Lemma 2 then reads $w_{\ell+1} = w_\ell + A_\ell \nabla R(w_\ell)$ (with
    $A_\ell^\top$ if not symmetric)."""

    A: Float[Array, "L d d"]
    symmetric: bool = eqx.field(static=True)

    def __init__(self, A, symmetric: bool = True):
        A = _as_layers(A, "A", 2)
        if A.shape[-1] != A.shape[-2]:
            raise ValueError(f"eq. (9) needs square A_ℓ, got shape {A.shape}.")
        self.A, self.symmetric = A, bool(symmetric)

    def matrices(self):
        return _sym(self.A) if self.symmetric else self.A

    def weights(self):
        A = self.matrices()
        dtype = A.dtype
        P = _block_diag(jnp.zeros_like(A), 1.0, dtype)
        return P, _block_diag(A, 0.0, dtype)

    @classmethod
    def from_weights(cls, P, Q, symmetric: bool = True, atol: float = 1e-12):
        Q = jnp.asarray(Q).reshape(-1, *jnp.shape(Q)[-2:])
        return cls._check_expresses(cls(Q[:, :-1, :-1], symmetric), P, Q, atol)


class BlockWeights(Parametrization):
    """Eq. (13): P_ℓ = diag(B_ℓ, 1), Q_ℓ = diag(A_ℓ, 0), A_ℓ symmetric when ``symmetric``."""

    A: Float[Array, "L d d"]
    B: Float[Array, "L d d"]
    symmetric: bool = eqx.field(static=True)

    def __init__(self, A, B, symmetric: bool = True):
        A, B = _as_layers(A, "A", 2), _as_layers(B, "B", 2)
        if A.shape != B.shape or A.shape[-1] != A.shape[-2]:
            raise ValueError(f"eq. (13) needs A and B of the same shape (L, d, d); got {A.shape}, {B.shape}.")
        self.A, self.B, self.symmetric = A, B, bool(symmetric)

    def matrices(self):
        return _sym(self.A) if self.symmetric else self.A

    def weights(self):
        A = self.matrices()
        return _block_diag(self.B, 1.0, A.dtype), _block_diag(A, 0.0, A.dtype)

    @classmethod
    def from_weights(cls, P, Q, symmetric: bool = True, atol: float = 1e-12):
        P = jnp.asarray(P).reshape(-1, *jnp.shape(P)[-2:])
        Q = jnp.asarray(Q).reshape(-1, *jnp.shape(Q)[-2:])
        return cls._check_expresses(cls(Q[:, :-1, :-1], P[:, :-1, :-1], symmetric), P, Q, atol)


class RestrictedWeights(Parametrization):
    """Gatmiry et al. eq. (6), in *their* sign convention: Q_t = diag(A_t, 0), P_t = [0 0; u_tᵀ 1].

    Stored weights are this module's (−P_t, Q_t) (see the module docstring), so with u = 0 and
    σ = identity the output is w*ᵀ(I − Π_t (I − Σ A_t/n)) x_q, Σ = X Xᵀ."""

    A: Float[Array, "L d d"]
    u: Float[Array, "L d"]

    def __init__(self, A, u=None):
        A = _as_layers(A, "A", 2)
        u = host_array(np.zeros(A.shape[:-1], A.dtype)) if u is None else _as_layers(u, "u", 1)
        if A.shape[-1] != A.shape[-2] or u.shape != A.shape[:-1]:
            raise ValueError(f"eq. (6) needs A of shape (L, d, d) and u of shape (L, d); got {A.shape}, {u.shape}.")
        self.A, self.u = A, u

    def weights(self):
        return _restricted_weights(self.A, self.u)

    @classmethod
    def from_weights(cls, P, Q, atol: float = 1e-12):
        P = jnp.asarray(P).reshape(-1, *jnp.shape(P)[-2:])
        Q = jnp.asarray(Q).reshape(-1, *jnp.shape(Q)[-2:])
        return cls._check_expresses(cls(Q[:, :-1, :-1], -P[:, -1, :-1]), P, Q, atol)


class GramBatch(eqx.Module):
    r"""What a $\sigma$ = identity linear transformer needs of a batch of prompts, batch on the last axis:
    $C = \sum_{i\le n} z_i z_i^\top$ ($= Z M Z^\top$) of shape (d+1, d+1, B), the query column $z_q = (x_q, 0)$ of
    shape (d+1, B), the labels y_query (B,), and the context length n (an array leaf, so a sweep
    over n can reuse one compiled program)."""

    C: Float[Array, "D D B"]
    z_query: Float[Array, "D B"]
    y_query: Float[Array, " B"]
    n: Array

    @classmethod
    def from_prompts(cls, prompts: Prompt, n_context=None) -> "GramBatch":
        """Statistics of a batch of prompts (every leaf with a leading batch axis). With
        ``n_context`` (may be traced) only the first ``n_context`` examples of each prompt count."""
        if prompts.x.ndim != 3:
            raise ValueError(
                f"GramBatch.from_prompts needs a batch of prompts (x of shape (B, n, d)); got {prompts.x.shape}."
            )
        n_max = prompts.x.shape[1]
        Zc = jnp.concatenate([prompts.x, prompts.y[..., None]], axis=-1)  # (B, n, D)
        if n_context is None:
            n = jnp.asarray(n_max)
        else:
            n = jnp.asarray(n_context)
            if is_concrete(n) and not 1 <= int(n) <= n_max:
                raise ValueError(f"n_context must lie in [1, {n_max}] for these prompts, got {int(n)}.")
            Zc = Zc * (jnp.arange(n_max) < n)[None, :, None].astype(Zc.dtype)
        C = jnp.einsum("bni,bnj->ijb", Zc, Zc)
        zq = jnp.concatenate([prompts.x_query, jnp.zeros_like(prompts.y_query)[:, None]], axis=-1).T
        return cls(C, zq, prompts.y_query, n)

    @property
    def batch(self) -> int:
        return self.y_query.shape[-1]

    @property
    def d(self) -> int:
        return self.C.shape[0] - 1


def _attention_scores(S, activation):
    if activation == "identity":
        return S
    if activation == "relu":
        return jax.nn.relu(S)
    return jax.nn.softmax(S, axis=-2)  # eq. (2): softmax of each column


class LinearTransformer(eqx.Module):
    r"""L-layer (or looped) transformer of Ahn et al. eqs. (2)–(5) with attention activation σ: on the prompt matrix
    $Z_0$, layer ℓ adds $\frac1n P_\ell Z_\ell M \sigma(Z_\ell^\top Q_\ell Z_\ell)$, and the prediction is
    $-[Z_L]_{d+1, n+1}$ (the sign convention of Ahn et al.; Gatmiry et al.'s `restricted` is the same model).

    Build one with `full`, `single_layer`, `preconditioner`, `block`, `restricted` or `init`.

    Args:
        params: the layers' weights, a `Parametrization` (e.g. `FullWeights(P, Q)`, shapes (L, d+1, d+1)).
        activation: σ, ``"identity"`` (linear attention), ``"relu"`` or ``"softmax"``.
        looped: one set of weights applied ``depth`` times (Gatmiry et al.), instead of L layers.
        depth: the number of layers or loops applied (an array leaf: sweepable).
        max_depth: the largest ``depth`` a sweep asks of a looped model (its shape).

    Example:
        ```python
        import jax
        import jaxicl as icl
        from jaxicl.models import GramBatch, LinearTransformer

        key = jax.random.PRNGKey(0)
        task = icl.tasks.LinearRegression(5, 20, icl.tasks.FixedCovariance(jax.numpy.eye(5)))
        model = LinearTransformer.init(key, d=5, n_layers=3, parametrization="preconditioner")  # eq. (9)
        train = GramBatch.from_prompts(task.sample(key, 500))  # a fixed training set
        loss = icl.sample_loss(model, train)  # ½ mean (ŷ − y)²
        ```
    """

    params: Parametrization
    depth: Int[Array, ""]
    activation: str = eqx.field(static=True)
    looped: bool = eqx.field(static=True)
    max_depth: int = eqx.field(static=True)

    def __init__(
        self,
        params: Parametrization,
        activation: Literal["identity", "relu", "softmax"] = "identity",
        looped: bool = False,
        depth=None,
        max_depth: int | None = None,
    ):
        if not isinstance(params, Parametrization):
            raise TypeError(f"params must be a Parametrization (e.g. FullWeights(P, Q)), got {type(params).__name__}.")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}.")
        n_stored = params.n_layers
        if looped:
            if n_stored != 1:
                raise ValueError(
                    f"a looped transformer shares one (P, Q) across its loops; these parameters have {n_stored} layers."
                )
            if max_depth is None:
                if depth is None or not is_concrete(jnp.asarray(depth)):
                    raise ValueError(
                        "a looped transformer needs a concrete loop count `depth` or a static `max_depth`."
                    )
                max_depth = int(depth)
        else:
            if max_depth is not None and int(max_depth) != n_stored:
                raise ValueError(
                    f"max_depth={max_depth} but the parameters have {n_stored} layers (use depth= to switch layers off)."
                )
            max_depth = n_stored
        max_depth = int(max_depth)
        if max_depth < 1:
            raise ValueError(f"a linear transformer needs at least one layer, got max_depth={max_depth}.")
        depth = jnp.asarray(max_depth if depth is None else depth, dtype=jnp.int32)
        if is_concrete(depth) and depth.ndim == 0 and not 0 <= int(depth) <= max_depth:
            raise ValueError(f"depth must lie in [0, max_depth={max_depth}], got {int(depth)}.")
        if looped and is_concrete(depth) and depth.ndim == 0 and int(depth) < 1:
            raise ValueError(f"the loop count of a looped transformer must be >= 1, got {int(depth)}.")
        self.params, self.depth = params, depth
        self.activation, self.looped, self.max_depth = activation, bool(looped), max_depth

    # --- constructors ----------------------------------------------------------------------------
    @classmethod
    def full(cls, P, Q, **kw):
        """Full P_ℓh, Q_ℓh of shape (layers, heads, d+1, d+1) (leading axes optional)."""
        return cls(FullWeights(P, Q), **kw)

    @classmethod
    def single_layer(cls, b, A, **kw):
        """Eq. (7): one layer with P = [0; bᵀ], Q = [A 0]."""
        return cls(SingleLayerWeights(b, A), **kw)

    @classmethod
    def preconditioner(cls, A, symmetric: bool = True, **kw):
        """Eq. (9): layers that run preconditioned gradient descent (Lemma 2)."""
        return cls(PreconditionerWeights(A, symmetric), **kw)

    @classmethod
    def block(cls, A, B, symmetric: bool = True, **kw):
        """Eq. (13): P_ℓ = diag(B_ℓ, 1), Q_ℓ = diag(A_ℓ, 0)."""
        return cls(BlockWeights(A, B, symmetric), **kw)

    @classmethod
    def restricted(cls, A, u=None, **kw):
        """Gatmiry et al. eq. (6), their sign convention (see the module docstring)."""
        return cls(RestrictedWeights(A, u), **kw)

    @classmethod
    def init(
        cls,
        key: PRNGKeyArray,
        d: int,
        n_layers: int,
        parametrization: str = "full",
        *,
        heads: int = 1,
        scale: float = 0.1,
        dtype=None,
        **kw,
    ):
        """Every free parameter iid N(0, scale²) ("suitably scaled iid Gaussian", Ahn et al. §5.3, §6.1)."""
        d, heads = (
            _validate.integer("LinearTransformer.init: d", d),
            _validate.integer("LinearTransformer.init: heads", heads),
        )
        n_layers = _validate.integer("LinearTransformer.init: n_layers", n_layers)
        _validate.real("LinearTransformer.init: scale", scale, ge=0)
        if parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}.")
        if parametrization != "full" and heads != 1:
            raise ValueError(
                f"the {parametrization!r} parametrization has one head per layer; use 'full' for heads={heads}."
            )
        if parametrization == "single_layer" and n_layers != 1:
            raise ValueError(f"eq. (7) describes a single layer; got n_layers={n_layers}.")
        dtype = dtype or jnp.result_type(float)
        k1, k2 = jax.random.split(key)
        D, L = int(d) + 1, int(n_layers)

        def g(k, shape):
            return scale * jax.random.normal(k, shape, dtype)

        if parametrization == "full":
            return cls.full(g(k1, (L, heads, D, D)), g(k2, (L, heads, D, D)), **kw)
        if parametrization == "single_layer":
            return cls.single_layer(g(k1, (D,)), g(k2, (D, D - 1)), **kw)
        if parametrization == "preconditioner":
            return cls.preconditioner(g(k1, (L, D - 1, D - 1)), **kw)
        if parametrization == "block":
            return cls.block(g(k1, (L, D - 1, D - 1)), g(k2, (L, D - 1, D - 1)), **kw)
        return cls.restricted(g(k1, (L, D - 1, D - 1)), g(k2, (L, D - 1)), **kw)

    # --- structure -----------------------------------------------------------------------------
    @property
    def d(self) -> int:
        return self.params.d

    @property
    def n_heads(self) -> int:
        return self.params.n_heads

    def layer_weights(self) -> tuple[Float[Array, "L H D D"], Float[Array, "L H D D"]]:
        """(P, Q) for each of the ``max_depth`` layer applications (looped: the shared pair, repeated)."""
        P, Q = self.params.weights()
        if self.looped:
            shape = (self.max_depth,) + P.shape[1:]
            P, Q = jnp.broadcast_to(P, shape), jnp.broadcast_to(Q, shape)
        return P, Q

    def layer_mask(self) -> Float[Array, " L"]:
        """1.0 for the layers that are applied (index < depth), 0.0 for the rest."""
        dtype = self.params.weight_shape().dtype
        if is_concrete(self.depth):  # no XLA program for a mask known on the host
            return host_array(np.arange(self.max_depth) < np.asarray(self.depth), dtype)
        return (jnp.arange(self.max_depth) < self.depth).astype(dtype)

    # --- forward -------------------------------------------------------------------------------
    def _check_width(self, rows: int, what: str):
        if rows != self.d + 1:
            raise ValueError(
                f"LinearTransformer with d={self.d} expects {what} with d+1={self.d + 1} rows, got {rows}. "
                "The prompt's inputs must have the model's dimension d."
            )

    def _layer(self, Z, P, Q, active, attention):
        n = Z.shape[1] - 1
        if self.activation == "identity" and attention != "direct":
            C = Z[:, :n] @ Z[:, :n].T
            G = jnp.einsum("hik,kl,hlj->ij", P, C, Q)
            return Z + (active / n) * (G @ Z)
        S = jnp.einsum("ai,hab,bj->hij", Z, Q, Z)  # Zᵀ Q_h Z per head
        A = _attention_scores(S, self.activation)
        upd = jnp.einsum("hab,bi,hij->aj", P, Z[:, :n], A[:, :n, :])
        return Z + (active / n) * upd

    def all_layers(self, Z: Float[Array, "D n+1"], attention: str = "auto") -> Float[Array, "L+1 D n+1"]:
        """Z_0, Z_1, …, Z_L for one embedded prompt (eq. 4). ``attention="direct"`` evaluates
        eq. (3) literally (O(n² d)); the default uses associativity for σ = identity."""
        if Z.ndim != 2:
            raise ValueError(f"expected one embedded prompt of shape (d+1, n+1), got {Z.shape}.")
        self._check_width(Z.shape[0], "an embedding")
        if Z.shape[1] < 2:
            raise ValueError("a prompt needs n >= 1 in-context examples.")
        P, Q = self.layer_weights()

        def body(Z, inp):
            Z = self._layer(Z, *inp, attention)
            return Z, Z

        _, Zs = jax.lax.scan(body, Z, (P, Q, self.layer_mask()))
        return jnp.concatenate([Z[None], Zs], axis=0)

    def __call__(self, Z: Float[Array, "D n+1"], attention: str = "auto") -> Float[Array, "D n+1"]:
        """Z_L for one embedded prompt Z_0 (eq. 1)."""
        return self.all_layers(Z, attention)[-1]

    def predict(self, prompt: Prompt, attention: str = "auto") -> Float[Array, ""]:
        r"""$-[Z_L]_{d+1,\,n+1}$ (eq. 5) for one prompt."""
        if prompt.x.ndim != 2:
            raise ValueError(
                f"predict takes one prompt (x of shape (n, d)); got {prompt.x.shape}. Use jax.vmap for a batch."
            )
        self._check_width(prompt.x.shape[-1] + 1, "prompts")
        # one prompt: the associative layer (O(n d² + d³)); the batch kernel of predict_gram unrolls
        # (d+1)³ terms and was 8× slower than even the direct form under vmap at d = 10
        return -self(embed(prompt), attention)[-1, -1]

    def layer_predictions(self, prompt: Prompt, attention: str = "auto") -> Float[Array, " L+1"]:
        r"""$-[Z_\ell]_{d+1,\,n+1}$ after each layer $\ell = 0, \dots, L$ (Lemma 2)."""
        return -self.all_layers(embed(prompt), attention)[:, -1, -1]

    def predict_gram(self, batch: GramBatch, reverse_kernel: bool = True) -> Float[Array, " B"]:
        """Predictions for a whole batch from its Gram statistics (σ = identity only).

        ``reverse_kernel=True`` uses the hand-written backward pass (fast ``jax.grad``, no
        forward-mode); ``False`` uses plain JAX (both modes, slower reverse mode)."""
        args = self._gram_args(batch)
        if reverse_kernel:
            return gram_predict(*args)
        return _forward(*args)[0]

    def _gram_args(self, batch: GramBatch):
        if self.activation != "identity":
            raise ValueError(
                f"Gram-form evaluation needs σ = identity (associativity); this model has σ = {self.activation}."
            )
        self._check_width(batch.C.shape[0], "Gram statistics")
        P, Q = self.layer_weights()
        dtype = jnp.result_type(P.dtype, batch.C.dtype)
        n = jnp.asarray(batch.n).astype(dtype)
        return (
            P.astype(dtype),
            Q.astype(dtype),
            self.layer_mask().astype(dtype),
            batch.C.astype(dtype),
            batch.z_query.astype(dtype),
            n,
        )

    def prediction_jacobian(self, batch: GramBatch) -> tuple[Float[Array, " B"], Float[Array, "B p"]]:
        """Predictions and their Jacobian with respect to the model's parameters, flattened in the
        order of ``ravel_pytree(eqx.partition(model, eqx.is_inexact_array)[0])`` (σ = identity).

        Costs about one reverse sweep: per-prompt adjoints of every layer come out of a single
        sweep, and the parametrization's (linear) map to (P, Q) is applied by one GEMM."""
        pred, dP, dQ = gram_jacobian(*self._gram_args(batch))
        B = pred.shape[0]
        dynamic, static = eqx.partition(self, eqx.is_inexact_array)
        theta, unravel = ravel_pytree(dynamic)

        def weights_of(theta):
            P, Q = eqx.combine(unravel(theta), static).layer_weights()
            return jnp.concatenate([P.ravel(), Q.ravel()])

        M = jax.jacfwd(weights_of)(theta).astype(pred.dtype)  # (p_PQ, p_θ)
        J_PQ = jnp.concatenate([dP.reshape(-1, B), dQ.reshape(-1, B)])  # (p_PQ, B)
        return pred, J_PQ.T @ M
