r"""One-layer multi-head softmax attention of Yang, Huang, Liang & Chi (§2, eqs. 5–8).

With the parametrisation (7a)–(7b) the attention map reduces to

$$
\hat y_k = \Big\langle y, \sum_h w_{h,k} \operatorname{softmax}(V^\top Q_h v_k) \Big\rangle = \langle y, \hat a_k\rangle,
\qquad k = 1, \dots, K \quad \text{(eq. 8)}
$$

where $V = (v_1 \dots v_N)$ are the prompt tokens, $Q_h \in \mathbb{R}^{d\times d}$ and $w_h \in \mathbb{R}^K$. The
prediction is linear in the labels: $\hat y = \hat A^\top y$ with $\hat A = (\hat a_1 \dots \hat a_K) \in
\mathbb{R}^{N\times K}$ (eq. 35), which is what the exact loss uses.

Heads can be padded: ``head_mask`` (a boolean leaf, never trained) switches heads off, so models
with different head counts share one shape and one compiled program (Fig. 4 as one sweep).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from .. import _validate
from ..tasks.template_regression import TemplatePrompt


class MultiHeadSoftmaxICL(eqx.Module):
    r"""Yang et al.'s one-layer multi-head softmax attention (eq. 8): H heads, head h with $Q_h \in \mathbb{R}^{d\times d}$
    and $w_h \in \mathbb{R}^K$, predicting all K labels, $\hat y_k = \langle y, \sum_h w_{h,k}\,
    \mathrm{softmax}(V^\top Q_h v_k)\rangle$.

    Args:
        Q: the heads' $Q_h$, shape (H, d, d).
        w: the heads' $w_h$, shape (H, K).
        head_mask: shape (H,), the active heads (default: all); padded heads let models with different H share one
            shape and one compiled program.

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.TemplateRegression.random(key, d=8, K=24, n_context=6, m=4, tau=0.1)
        model = icl.models.MultiHeadSoftmaxICL.init(jax.random.fold_in(key, 1), 12, 8, 24)  # H = 12
        loss = icl.population_loss(model, task)  # loss (9), exact
        assert model.Q.shape == (12, 8, 8) and model.w.shape == (12, 24)
        ```
    """

    Q: Float[Array, "H d d"]
    w: Float[Array, "H K"]
    head_mask: Bool[Array, " H"]

    def __init__(self, Q, w, head_mask=None):
        Q, w = jnp.asarray(Q), jnp.asarray(w)
        if Q.ndim != 3 or Q.shape[1] != Q.shape[2] or Q.shape[0] < 1:
            raise ValueError(f"Q must stack H >= 1 square (d, d) matrices, shape (H, d, d); got {Q.shape}.")
        if w.ndim != 2 or w.shape[0] != Q.shape[0]:
            raise ValueError(f"w must be (H, K) with H = {Q.shape[0]} (one w_h ∈ R^K per head, eq. 7a); got {w.shape}.")
        if head_mask is None:
            head_mask = jnp.ones(Q.shape[0], bool)
        head_mask = jnp.asarray(head_mask)
        if head_mask.shape != (Q.shape[0],) or head_mask.dtype != jnp.bool_:
            raise ValueError(
                f"head_mask must be a boolean (H,) = ({Q.shape[0]},) array, got {head_mask.dtype} {head_mask.shape}."
            )
        self.Q, self.w, self.head_mask = Q, w, head_mask

    @classmethod
    def init(
        cls, key: PRNGKeyArray, n_heads, d: int, K: int, beta: float = 1.0, max_heads: int | None = None, dtype=None
    ) -> "MultiHeadSoftmaxICL":
        """Prop. 1: Q_h(i, j) ~ N(0, β²) iid, w_h = 0.

        With ``max_heads`` the model has ``max_heads`` padded heads of which the first ``n_heads`` are active;
        ``n_heads`` may then be a traced integer (one program for every head count)."""
        H = (
            _validate.integer("MultiHeadSoftmaxICL.init: max_heads", max_heads)
            if max_heads is not None
            else _validate.integer("MultiHeadSoftmaxICL.init: n_heads", n_heads)
        )
        if max_heads is None or not isinstance(n_heads, jax.core.Tracer):
            if not 1 <= _validate.integer("MultiHeadSoftmaxICL.init: n_heads", n_heads) <= H:
                raise ValueError(f"need 1 <= n_heads <= max_heads, got n_heads={n_heads}, max_heads={H}.")
        d, K = _validate.integer("MultiHeadSoftmaxICL.init: d", d), _validate.integer("MultiHeadSoftmaxICL.init: K", K)
        _validate.real("MultiHeadSoftmaxICL.init: the initialisation scale β (Prop. 1)", beta, gt=0)
        dtype = dtype or jnp.result_type(float)
        Q = beta * jax.random.normal(key, (H, int(d), int(d)), dtype)
        return cls(Q, jnp.zeros((H, int(K)), dtype), jnp.arange(H) < n_heads)

    @property
    def n_heads(self) -> Array:
        return jnp.sum(self.head_mask)

    @property
    def d(self) -> int:
        return self.Q.shape[-1]

    @property
    def K(self) -> int:
        return self.w.shape[-1]

    @eqx.filter_jit  # eager callers (theory checks): one program, not one per operation
    def attention(self, tokens: Float[Array, "K d"], n_context: int) -> Float[Array, "H N K"]:
        """C_h = (s^h_1 … s^h_K), s^h_k = softmax(Vᵀ Q_h v_k) over the N prompt tokens (eqs. 13, 28)."""
        if tokens.shape != (self.K, self.d):
            raise ValueError(f"the model has K = {self.K}, d = {self.d}; the dictionary has shape {tokens.shape}.")
        logits = (tokens[:n_context] @ self.Q) @ tokens.T  # Vᵀ Q_h (v_1 … v_K), (H, N, K)
        return jax.nn.softmax(logits, axis=1)

    @eqx.filter_jit
    def prediction_matrix(self, tokens: Float[Array, "K d"], n_context: int) -> Float[Array, "N K"]:
        r"""$\hat A(\theta) = (\sum_h w_{h,1} s^h_1, \dots, \sum_h w_{h,K} s^h_K)$ (eq. 35); $\hat y = \hat A^\top y$."""
        w = jnp.where(self.head_mask[:, None], self.w, 0.0)
        return jnp.einsum("hnk,hk->nk", self.attention(tokens, n_context), w)

    def predict(self, prompt: TemplatePrompt) -> Float[Array, "*batch K"]:
        """ŷ_k = ⟨y, â_k⟩ for all K tokens (eq. 8); ``prompt.y`` may carry leading batch axes."""
        return prompt.y @ self.prediction_matrix(prompt.tokens, prompt.n_context)

    predict_batch = predict  # ``mc_loss`` protocol: the prediction is already batched over prompt.y

    def step_sizes(self, eta_Q, eta_w) -> "MultiHeadSoftmaxICL":
        """Per-parameter step sizes (η_Q, η_w) of eq. (10), as a pytree for ``gradient_descent(step=…)``
        and ``gradient_flow(rates=…)``."""
        dtype = self.Q.dtype
        return eqx.tree_at(lambda m: (m.Q, m.w), self, (jnp.asarray(eta_Q, dtype), jnp.asarray(eta_w, dtype)))
