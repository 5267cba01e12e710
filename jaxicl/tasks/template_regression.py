"""In-context regression with representations (Yang, Huang, Liang & Chi, §2, eq. 1).

A fixed dictionary V = {v_1, …, v_K} ⊂ R^d of distinct unit-norm tokens and a fixed representation
f: R^d → R^m. Each prompt draws coefficients λ (iid entries, Assumption 1) and labels

    y_k = λᵀ(f(v_k) + ε_k),     ε_k ~ N(0, τ I_m) iid,   k = 1, …, K;

it shows the first N tokens with their labels (eq. 2) and the model predicts all K labels.

Given λ, the noise terms ε_kᵀλ are iid N(0, τ‖λ‖²), so sampling draws one Gaussian per label
instead of an m-vector (the same distribution, K·m times fewer draws).
"""

from __future__ import annotations

from typing import Callable, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._validate import is_concrete

COEFFICIENTS = ("gaussian", "rademacher")


class TemplatePrompt(eqx.Module):
    """One prompt, or a batch when ``y`` and ``y_query`` have a leading batch axis.

    ``tokens`` (the whole dictionary, K × d) is shared by every prompt of a task and never batched;
    ``y`` holds the N prompt labels and ``y_query`` the labels of all K tokens (the targets; its
    first N entries equal ``y``).
    """

    tokens: Float[Array, "K d"]
    y: Float[Array, "*batch N"]
    y_query: Float[Array, "*batch K"]

    @property
    def n_context(self) -> int:
        return self.y.shape[-1]


def random_dictionary(key: PRNGKeyArray, K: int, d: int, dtype=None) -> Float[Array, "K d"]:
    """K tokens v_k = g_k/‖g_k‖, g_k ~ N(0, I_d) (the paper's experiments, §4)."""
    g = jax.random.normal(key, (int(K), int(d)), dtype or jnp.result_type(float))
    return g / jnp.linalg.norm(g, axis=1, keepdims=True)


def check_dictionary(tokens, n_context: int) -> None:
    """Raise ``ValueError`` unless the K tokens are unit-norm and distinct and the N prompt tokens satisfy
    Assumption 3 (some coordinate takes N pairwise different values on them). Concrete arrays only."""
    if not is_concrete(tokens):
        return
    v = np.asarray(tokens, dtype=float)
    if v.ndim != 2 or v.shape[0] < 2 or v.shape[1] < 1:
        raise ValueError(f"tokens must be a (K, d) array with K >= 2, got shape {v.shape}.")
    if not np.all(np.isfinite(v)):
        raise ValueError("tokens have non-finite entries.")
    norms = np.linalg.norm(v, axis=1)
    if np.max(np.abs(norms - 1)) > 1e-5:
        k = int(np.argmax(np.abs(norms - 1)))
        raise ValueError(
            f"tokens must have unit norm (‖v_k‖ = 1, §2); ‖v_{k}‖ = {norms[k]:.6g}. "
            "Normalise them: tokens / norm(tokens, axis=1, keepdims=True)."
        )
    K, N = v.shape[0], int(n_context)
    if not 1 <= N < K:
        raise ValueError(f"the prompt must show 1 <= N < K tokens (N ≪ K in the paper); got N={N}, K={K}.")
    _, first, counts = np.unique(v, axis=0, return_index=True, return_counts=True)
    if counts.max() > 1:
        row = v[first[np.argmax(counts)]]
        same = np.flatnonzero((v == row).all(axis=1)).tolist()
        raise ValueError(f"tokens must be distinct (§2, Assumption 3): tokens {same} are equal.")
    prompt = v[:N]
    distinct = [np.unique(prompt[:, c]).size == N for c in range(v.shape[1])]
    if not any(distinct):
        raise ValueError(
            "Assumption 3 fails: no coordinate of the N prompt tokens takes N pairwise different values "
            "(it is what makes B_k^(0) full rank at initialisation, Prop. 1). Perturb the tokens."
        )


class TemplateRegression(eqx.Module):
    """Prompt distribution of Yang et al. eq. (1).

    Args:
        tokens: the dictionary V, a (K, d) array of distinct unit-norm rows.
        features: f(v_k) as a (K, m) array, or a function f: R^d → R^m applied to every token
            (e.g. an MLP; it must return an m-vector).
        n_context: N, the number of labelled tokens shown in a prompt (1 ≤ N < K).
        tau: noise variance τ ≥ 0 (an array leaf: sweepable, differentiable).
        coef_mean, coef_std: λ_i = coef_mean + coef_std·ξ_i with ξ_i iid zero-mean unit-variance
            (Assumption 1 is coef_mean = 0, coef_std = 1; the out-of-domain test of §4 is 1 and 2).
        coefficients: law of ξ_i, ``"gaussian"`` (default) or ``"rademacher"`` (±1). Every exact loss
            depends on λ only through E[λλᵀ], so both give the same population loss.

    ``TemplateRegression.random(key, d=, K=, n_context=, m=, tau=)`` draws the paper's setting: random
    Gaussian unit tokens and standard Gaussian f(v_k).

    Example:
        ```python
        import jax
        import jaxicl as icl

        task = icl.tasks.TemplateRegression.random(jax.random.PRNGKey(0), d=8, K=24, n_context=6, m=4, tau=0.1)
        prompts = task.sample(jax.random.PRNGKey(1), 32)  # 32 prompts, each N = 6 labels of the K = 24 tokens
        out_of_domain = task.with_coefficients(1, 2)  # λ_i = 1 + 2ξ_i (§4)
        ```
    """

    tokens: Float[Array, "K d"]
    features: Float[Array, "K m"]
    n_context: int = eqx.field(static=True)
    tau: Float[Array, ""]
    coef_mean: Float[Array, ""]
    coef_std: Float[Array, ""]
    coefficients: str = eqx.field(static=True)

    def __init__(
        self,
        tokens,
        features: Array | Callable[[Array], Array],
        n_context: int,
        tau=0.0,
        coef_mean=0.0,
        coef_std=1.0,
        coefficients: Literal["gaussian", "rademacher"] = "gaussian",
    ):
        tokens = jnp.asarray(tokens)
        check_dictionary(tokens, n_context)
        K = tokens.shape[0]
        if callable(features):
            fn = features
            try:
                features = jax.vmap(fn)(tokens)
            except Exception as err:  # noqa: BLE001 - re-raised with context
                raise ValueError(
                    f"the representation f failed on a (d,) token of d = {tokens.shape[1]}: {err}"
                ) from err
            if features.ndim != 2:
                raise ValueError(
                    f"the representation f must map a (d,) token to an (m,) vector; it returned shape "
                    f"{features.shape[1:]} per token."
                )
        features = jnp.asarray(features)
        if features.ndim != 2 or features.shape[0] != K or features.shape[1] < 1:
            raise ValueError(
                f"features must be f(v_k) for the K = {K} tokens, shape (K, m) = ({K}, m), got {features.shape}."
            )
        if is_concrete(features) and not np.all(np.isfinite(np.asarray(features))):
            raise ValueError("features f(v_k) have non-finite entries.")
        if coefficients not in COEFFICIENTS:
            raise ValueError(f"coefficients must be one of {COEFFICIENTS}, got {coefficients!r}.")
        dtype = jnp.result_type(float)
        tau, coef_mean, coef_std = (jnp.asarray(a, dtype) for a in (tau, coef_mean, coef_std))
        if is_concrete(tau) and not float(tau) >= 0:
            raise ValueError(f"the noise level τ must be >= 0, got {float(tau)}.")
        if is_concrete(coef_std) and not float(coef_std) >= 0:
            raise ValueError(f"coef_std must be >= 0, got {float(coef_std)}.")
        self.tokens, self.features, self.n_context = tokens, features, int(n_context)
        self.tau, self.coef_mean, self.coef_std, self.coefficients = tau, coef_mean, coef_std, coefficients

    @classmethod
    def random(cls, key: PRNGKeyArray, *, d: int, K: int, n_context: int, m: int, tau=0.0, features=None, **kwargs):
        """The paper's synthetic setting (§4): v_k uniform on the sphere, f(v_k) ~ N(0, I_m) iid (or
        ``features``, a function of the token)."""
        if int(m) < 1 or int(d) < 1:
            raise ValueError(f"TemplateRegression.random needs d, m >= 1, got d={d}, m={m}.")
        k_tok, k_feat = jax.random.split(key)
        tokens = random_dictionary(k_tok, K, d)
        if features is None:
            features = jax.random.normal(k_feat, (int(K), int(m)), tokens.dtype)
        return cls(tokens, features, n_context, tau, **kwargs)

    # --- shapes and moments -----------------------------------------------------------------------
    @property
    def K(self) -> int:
        return self.tokens.shape[0]

    @property
    def d(self) -> int:
        return self.tokens.shape[1]

    @property
    def m(self) -> int:
        return self.features.shape[1]

    @property
    def Z(self) -> Float[Array, "m N"]:
        """Z = (f(v_1) … f(v_N)), eq. (12)."""
        return self.features[: self.n_context].T

    @property
    def Z_hat(self) -> Float[Array, "m K"]:
        """Ẑ = (f(v_1) … f(v_K)) = (Z, Z^Q), eqs. (19), (34)."""
        return self.features.T

    @eqx.filter_jit
    def coef_second_moment(self) -> Float[Array, "m m"]:
        """E[λλᵀ] = σ² I + μ² 11ᵀ (I under Assumption 1)."""
        m, dtype = self.m, self.features.dtype
        return self.coef_std**2 * jnp.eye(m, dtype=dtype) + self.coef_mean**2 * jnp.ones((m, m), dtype)

    def with_coefficients(self, mean=0.0, std=1.0, coefficients=None) -> "TemplateRegression":
        """The same dictionary and representation with another law of λ (e.g. ``mean=1, std=2`` for the
        out-of-domain test set of §4, λ ~ N(1_m, 4I))."""
        return TemplateRegression(
            self.tokens, self.features, self.n_context, self.tau, mean, std, coefficients or self.coefficients
        )

    # --- sampling ---------------------------------------------------------------------------------
    def sample_coefficients(self, key: PRNGKeyArray, batch: int) -> Float[Array, "batch m"]:
        shape, dtype = (int(batch), self.m), self.features.dtype
        if self.coefficients == "gaussian":
            xi = jax.random.normal(key, shape, dtype)
        else:
            xi = jax.random.rademacher(key, shape, dtype)
        return self.coef_mean + self.coef_std * xi

    @eqx.filter_jit  # one program per task structure and batch, not one per operation when called eagerly
    def sample_with_coefficients(self, key: PRNGKeyArray, batch: int) -> tuple[TemplatePrompt, Float[Array, "batch m"]]:
        """``batch`` prompts (labels batched, tokens shared) and the λ that generated them."""
        k_lam, k_eps = jax.random.split(key)
        lam = self.sample_coefficients(k_lam, batch)
        noise = jax.random.normal(k_eps, (int(batch), self.K), lam.dtype)
        # ε_kᵀλ | λ ~ N(0, τ‖λ‖²), iid over k
        y_all = lam @ self.features.T + jnp.sqrt(self.tau) * jnp.linalg.norm(lam, axis=1, keepdims=True) * noise
        return TemplatePrompt(self.tokens, y_all[:, : self.n_context], y_all), lam

    def sample(self, key: PRNGKeyArray, batch: int) -> TemplatePrompt:
        return self.sample_with_coefficients(key, batch)[0]
