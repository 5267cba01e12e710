r"""Token-sequence prompts for softmax transformers, and the tasks of the AlgoFormer paper (§3, §5.1).

A `SequencePrompt` is what a transformer reads and what its loss scores: ``tokens`` (T, w),
``targets`` (T, d_out) and a 0/1 ``mask`` (T,) of the scored positions. Encodings:

- `garg_encoding` (Garg et al.): x_1, y_1, x_2, y_2, … as separate tokens, y zero-padded to the
  width of x; the prediction of y_i is read at the position of x_i, so one pass gives the prediction at
  every prefix length i = 1…N (causal attention sees x_1, y_1, …, x_i).
- `stacked_encoding` (the linear papers): one token (x_i, y_i) per example, then query tokens (x, 0)
  whose predictions are read.
- `template_encoding` (Yang et al.'s template task): tokens (v_k, y_k), then (v_k, 0), all K scored.
- `next_token_encoding` (AR(q), CoT): tokens $s_1, \dots, s_T$, target of position $j$ is $s_{j+1}$.

Tasks (each draws prompts with ``prompts(key, batch)`` and keeps the clean targets for validation):

- `RepresentationRegression`: y = A Φ*(x) + ε (§3.1, §5.1); with ``phi=None`` noisy linear
  regression, with any covariance prior for x (Zhang et al.'s random diagonal covariance, Fig. 1).
- `ARRepresentation`: $x_{t+1} = A \Phi^*([x_{t+1-q}, \dots, x_t]) + \varepsilon_t$ (§3.2).
- `CoTMLP`: chains x, s¹ = σ(W¹x), …, s^L (§3.3, Li et al. 2023), W^ℓ drawn per prompt.

Φ* is a fixed `LeakyReluMLP` drawn once from a seed.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate, baselines
from .._validate import is_concrete
from .covariance import CovariancePrior, FixedCovariance
from .template_regression import TemplatePrompt


class SequencePrompt(eqx.Module):
    """``tokens`` (T, w), ``targets`` (T, d_out) (noisy labels, trained on), ``clean`` (T, d_out) (noise-free
    targets, validated on) and ``mask`` (T,) of scored positions. A batch has a leading axis on every leaf."""

    tokens: Float[Array, "T w"]
    targets: Float[Array, "T d_out"]
    clean: Float[Array, "T d_out"]
    mask: Float[Array, " T"]


def garg_encoding(xs: Float[Array, "N d"], ys: Float[Array, "N m"], ys_clean=None) -> SequencePrompt:
    """x_1, (y_1, 0), x_2, (y_2, 0), …: 2N tokens of width max(d, m); predictions at the x positions."""
    N, d = xs.shape
    m = ys.shape[1]
    w = max(d, m)
    pad = lambda a: jnp.pad(a, ((0, 0), (0, w - a.shape[1])))  # noqa: E731
    tokens = jnp.stack([pad(xs), pad(ys)], axis=1).reshape(2 * N, w)
    at_x = lambda a: jnp.stack([a, jnp.zeros_like(a)], axis=1).reshape(2 * N, m)  # noqa: E731
    mask = jnp.tile(jnp.array([1.0, 0.0], xs.dtype), N)
    return SequencePrompt(tokens, at_x(ys), at_x(ys if ys_clean is None else ys_clean), mask)


def stacked_encoding(xs: Float[Array, "N d"], ys: Float[Array, "N m"], n_context: int, ys_clean=None) -> SequencePrompt:
    """Tokens (x_i, y_i) for i ≤ n_context, then queries (x_i, 0) whose predictions are scored (eq. (2)/(4)
    of Yang et al.; the column-stacked prompt of the linear papers with the columns as tokens)."""
    N = xs.shape[0]
    if not 1 <= n_context < N:
        raise ValueError(
            f"need 1 <= n_context < number of examples ({N}) so that at least one query remains; "
            f"got n_context={n_context}."
        )
    query = jnp.arange(N) >= n_context
    tokens = jnp.concatenate([xs, jnp.where(query[:, None], 0.0, ys)], axis=1)
    return SequencePrompt(tokens, ys, ys if ys_clean is None else ys_clean, query.astype(xs.dtype))


def template_encoding(prompt: TemplatePrompt, clean=None) -> SequencePrompt:
    """Yang et al.'s prompt (eqs. 2–4) as a token sequence: token k is (v_k, y_k) for k ≤ N and (v_k, 0) for
    k > N; all K positions are scored against y_k, as the loss (9) averages over all K. ``clean`` (same shape
    as ``prompt.y_query``): the validation target, e.g. ŷ⋆ = Aᵀy of Thm 2 (default: the labels). Works on one
    prompt or a batch (labels with a leading axis; the dictionary is shared)."""
    y_all = prompt.y_query
    K, N = prompt.tokens.shape[0], prompt.n_context
    shown = jnp.where(jnp.arange(K) < N, y_all, 0.0)
    v = jnp.broadcast_to(prompt.tokens.astype(y_all.dtype), (*y_all.shape, prompt.tokens.shape[1]))
    clean = y_all if clean is None else clean
    return SequencePrompt(
        jnp.concatenate([v, shown[..., None]], -1), y_all[..., None], clean[..., None], jnp.ones_like(y_all)
    )


def next_token_encoding(seq: Float[Array, "S d"], mask: Float[Array, " S"], clean=None) -> SequencePrompt:
    r"""Tokens $s_1, \dots, s_{S-1}$; position $j$ predicts $s_{j+1}$ where ``mask[j+1]`` is set."""
    clean = seq if clean is None else clean
    return SequencePrompt(seq[:-1], seq[1:], clean[1:], mask[1:])


class LeakyReluMLP(eqx.Module):
    r"""Fixed representation Φ*: an MLP with leaky-ReLU activations between layers (none after the last).

    Weights $W_\ell \sim N(0, g^2/\text{fan-in})$ with $g = \sqrt{2/(1 + a^2)}$ ($a$ the slope), the
    variance-preserving (He) scale, so features keep unit scale through the layers *in expectation over the draw*.
    One draw of a narrow MLP can be far from it: for widths [9, 16, 16, 3], $E_z\|\Phi^*(z)\|^2$ over
    $z \sim N(0, I)$ ranged over 2.2–15 in eight draws.

    Args:
        key: the draw of the weights.
        sizes: the layer widths (input, hidden…, output).
        slope: the leaky ReLU's slope $a$.
        dtype: the weights' dtype (default: JAX's default float).
        normalize: rescale the last layer by one scalar so that the mean of $\|\Phi^*(z)\|^2$ over
            `NORMALIZE_SAMPLES` fixed draws $z \sim N(0, I)$ (from ``key``) is the output width: the draw then sets
            Φ*'s shape but not its output scale (a task's signal-to-noise ratio, e.g. `ARRepresentation`'s).
    """

    NORMALIZE_SAMPLES = 4096

    weights: tuple
    slope: float = eqx.field(static=True)

    def __init__(self, key: PRNGKeyArray, sizes, slope: float = 0.1, dtype=None, normalize: bool = False):
        sizes = [_validate.integer(f"LeakyReluMLP: sizes[{i}]", s) for i, s in enumerate(sizes)]
        _validate.real("LeakyReluMLP: slope", slope)
        if len(sizes) < 2:
            raise ValueError(f"sizes are the layer widths (input, hidden…, output), all >= 1; got {sizes}.")
        dtype = dtype or jnp.result_type(float)
        gain = math.sqrt(2 / (1 + slope**2))
        keys = jax.random.split(key, len(sizes) - 1)
        self.weights = tuple(
            gain / math.sqrt(a) * jax.random.normal(k, (a, b), dtype) for k, a, b in zip(keys, sizes[:-1], sizes[1:])
        )
        self.slope = float(slope)
        if normalize:
            z = jax.random.normal(jax.random.fold_in(key, len(sizes)), (self.NORMALIZE_SAMPLES, sizes[0]), dtype)
            scale = jnp.sqrt(sizes[-1] / jnp.mean(jnp.sum(self(z) ** 2, -1)))
            self.weights = (*self.weights[:-1], self.weights[-1] * scale)

    @property
    def d_in(self) -> int:
        return self.weights[0].shape[0]

    @property
    def d_out(self) -> int:
        return self.weights[-1].shape[1]

    def __call__(self, x: Float[Array, "... d_in"]) -> Float[Array, "... d_out"]:
        for i, W in enumerate(self.weights):
            x = x @ W
            if i < len(self.weights) - 1:
                x = jax.nn.leaky_relu(x, self.slope)
        return x


def _positive_int(name, value, low=1):
    return _validate.integer(name, value, low=low)


def _noise(noise_std):
    return float(_validate.real("noise_std", noise_std, ge=0))


class _SequenceTask(eqx.Module):
    def prompt(self, key: PRNGKeyArray, d_active=None, n_active=None) -> SequencePrompt:
        raise NotImplementedError

    def prompts(self, key: PRNGKeyArray, batch: int, d_active=None, n_active=None) -> SequencePrompt:
        """``batch`` iid prompts. ``d_active`` / ``n_active`` (curriculum, Garg et al.): only the first
        ``d_active`` input coordinates are non-zero and only the first ``n_active`` examples are scored."""
        return jax.vmap(lambda k: self.prompt(k, d_active, n_active))(jax.random.split(key, batch))


def _active(xs, d_active):
    return xs if d_active is None else jnp.where(jnp.arange(xs.shape[-1]) < d_active, xs, 0.0)


class RepresentationRegression(_SequenceTask):
    r"""Regression with a representation (AlgoFormer §3.1, §5.1): $y_i = A\,\Phi^*(x_i) + \varepsilon_i$ with
    $x_i \sim N(0, \Lambda)$, $A \sim N(0, I/k) \in \mathbb{R}^{m \times k}$ drawn per prompt and
    $\varepsilon_i \sim N(0, \sigma^2 I_m)$; $\Phi^*$ is fixed across prompts. ``phi=None`` is noisy linear
    regression ($k = d$, $A \sim N(0, I)$, as in Garg et al. and Zhang et al.'s Fig. 1).

    Args:
        d: input dimension $d$.
        n_context: examples per prompt $N$.
        phi: the representation $\Phi^*: \mathbb{R}^d \to \mathbb{R}^k$ (a `LeakyReluMLP`), or None.
        noise_std: $\sigma$, an array leaf (``vmap`` over tasks of several σ, as Fig. 5's ensemble does).
        covariance: a `CovariancePrior` for $\Lambda$ (identity by default; Zhang et al.'s
            ``RandomDiagonalCovariance`` for Fig. 1).
        d_out: the labels' dimension $m$.
        encoding: ``"garg"`` (tokens $x_1, (y_1, 0), x_2, \dots$: a prediction after every prefix, 2N tokens) or
            ``"stacked"`` (tokens $(x_i, y_i)$, the last example the query, N tokens).

    ``prompts(key, batch)`` returns a `SequencePrompt` with a leading batch axis: ``tokens`` (batch, T, w),
    ``targets`` and ``clean`` (batch, T, m), ``mask`` (batch, T) of the scored positions.

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        phi = icl.tasks.LeakyReluMLP(key, [4, 16, 16, 4])  # Φ*: R⁴ → R⁴, drawn once
        task = icl.tasks.RepresentationRegression(4, 8, phi, noise_std=0.1)
        p = task.prompts(key, 32)
        assert p.tokens.shape == (32, 16, 4) and p.targets.shape == (32, 16, 1)
        assert p.mask[0].tolist() == [1.0, 0.0] * 8  # scored at the x tokens
        ```
    """

    d: int = eqx.field(static=True)
    n_context: int = eqx.field(static=True)
    d_out: int = eqx.field(static=True)
    encoding: str = eqx.field(static=True)
    noise_std: Float[Array, ""]
    phi: LeakyReluMLP | None
    covariance: CovariancePrior

    def __init__(
        self,
        d: int,
        n_context: int,
        phi: LeakyReluMLP | None = None,
        noise_std=0.0,
        covariance: CovariancePrior | None = None,
        d_out: int = 1,
        encoding: str = "garg",
    ):
        self.d = _positive_int("d", d)
        self.n_context = _positive_int("n_context", n_context)
        self.d_out = _positive_int("d_out", d_out)
        if encoding not in ("garg", "stacked"):
            raise ValueError(f"encoding must be 'garg' or 'stacked', got {encoding!r}.")
        if encoding == "stacked" and self.n_context < 2:
            raise ValueError("the stacked encoding needs n_context >= 2 (context examples and one query).")
        self.encoding = encoding
        noise_std = jnp.asarray(noise_std, float)  # an array leaf: vmap over σ (one ensemble for AlgoFormer Fig. 5)
        self.noise_std = noise_std if not is_concrete(noise_std) else jnp.asarray(_noise(noise_std), float)
        if phi is not None and phi.d_in != self.d:
            raise ValueError(f"phi reads {phi.d_in}-dimensional inputs but the task has d = {self.d}.")
        self.phi = phi
        covariance = FixedCovariance(jnp.eye(self.d)) if covariance is None else covariance
        if covariance.d != self.d:
            raise ValueError(f"covariance is {covariance.d}-dimensional but the task has d = {self.d}.")
        self.covariance = covariance

    def with_context(self, n_context: int) -> "RepresentationRegression":
        return RepresentationRegression(
            self.d, n_context, self.phi, self.noise_std, self.covariance, self.d_out, self.encoding
        )

    def with_covariance(self, covariance: CovariancePrior) -> "RepresentationRegression":
        return RepresentationRegression(
            self.d, self.n_context, self.phi, self.noise_std, covariance, self.d_out, self.encoding
        )

    def sample_xy(self, key: PRNGKeyArray, d_active=None):
        """(xs (N, d), ys (N, m), clean ys, A) of one prompt."""
        k_lam, k_a, k_x, k_e = jax.random.split(key, 4)
        dtype = jnp.result_type(float)
        lam = self.covariance.sample(k_lam)
        xs = _active(jax.random.normal(k_x, (self.n_context, self.d), dtype) @ jnp.linalg.cholesky(lam).T, d_active)
        feats = xs if self.phi is None else self.phi(xs)
        k = feats.shape[1]
        A = jax.random.normal(k_a, (self.d_out, k), dtype) / (1.0 if self.phi is None else math.sqrt(k))
        clean = feats @ A.T
        ys = clean + self.noise_std * jax.random.normal(k_e, clean.shape, dtype)
        return xs, ys, clean, A

    def prompt(self, key, d_active=None, n_active=None) -> SequencePrompt:
        xs, ys, clean, _ = self.sample_xy(key, d_active)
        if self.encoding == "stacked":
            return stacked_encoding(xs, ys, self.n_context - 1, clean)
        p = garg_encoding(xs, ys, clean)
        if n_active is not None:
            p = eqx.tree_at(lambda p: p.mask, p, p.mask * (jnp.arange(2 * self.n_context) < 2 * n_active))
        return p


class ARRepresentation(_SequenceTask):
    r"""An autoregressive process with a representation (AlgoFormer §3.2):
    $x_{t+1} = A\,\Phi^*([x_{t+1-q}, \dots, x_t]) + \varepsilon_t$, $\varepsilon_t \sim N(0, \sigma^2 I)$, with
    $\Phi^*: \mathbb{R}^{qd} \to \mathbb{R}^k$ fixed and $A$ drawn per prompt.

    $A \sim N(0, \rho^2/(qk)\, I)$ with $\rho$ = ``gain`` < 1 keeps the series stationary in scale (the paper's
    $A \sim N(0, I)$ with a unit-scale $\Phi^*$ grows geometrically). $x_1 \dots x_q \sim N(0, I)$, and windows
    before the series starts are zero-padded. The tokens are $x_1 \dots x_{N-1}$ and position $t$ predicts
    $x_{t+1}$; the first $q - 1$ positions, which predict the starting states $x_2 \dots x_q$, are not scored.

    Args:
        d: the series' dimension $d$.
        q: the order $q$ (the window $\Phi^*$ reads).
        n_context: the series' length $N$ (at least $q + 2$).
        phi: $\Phi^*$, a `LeakyReluMLP` reading $q d$ inputs.
        noise_std: $\sigma$.
        gain: $\rho$.

    Example:
        ```python
        import jax
        import jaxicl as icl

        key = jax.random.PRNGKey(0)
        task = icl.tasks.ARRepresentation(3, 3, 16, icl.tasks.LeakyReluMLP(key, [9, 16, 16, 3]))
        p = task.prompts(key, 8)
        assert p.tokens.shape == (8, 15, 3) and p.mask[0, :3].tolist() == [0.0, 0.0, 1.0]
        ```
    """

    d: int = eqx.field(static=True)
    q: int = eqx.field(static=True)
    n_context: int = eqx.field(static=True)
    noise_std: float = eqx.field(static=True)
    gain: float = eqx.field(static=True)
    phi: LeakyReluMLP

    def __init__(self, d: int, q: int, n_context: int, phi: LeakyReluMLP, noise_std=1.0, gain: float = 0.5):
        self.d, self.q = _positive_int("d", d), _positive_int("q", q)
        self.n_context = _positive_int("n_context", n_context, self.q + 2)
        if phi.d_in != self.q * self.d:
            raise ValueError(
                f"phi must read the window [x_(t+1-q), …, x_t] of width q·d = {self.q * self.d}; it reads {phi.d_in}."
            )
        self.phi, self.noise_std, self.gain = phi, _noise(noise_std), float(_validate.real("gain", gain))

    @property
    def d_out(self) -> int:
        return self.d

    def sample_series(self, key: PRNGKeyArray, d_active=None):
        """(series (N, d), clean one-step means (N, d))."""
        k_a, k_0, k_e = jax.random.split(key, 3)
        dtype = jnp.result_type(float)
        k = self.phi.d_out
        A = self.gain / math.sqrt(k * self.q) * jax.random.normal(k_a, (self.d, k), dtype)
        x0 = _active(jax.random.normal(k_0, (self.q, self.d), dtype), d_active)
        eps = _active(self.noise_std * jax.random.normal(k_e, (self.n_context - self.q, self.d), dtype), d_active)

        def step(window, e):
            mean = _active(A @ self.phi(window.reshape(-1)), d_active)
            x = mean + e
            return jnp.concatenate([window[1:], x[None]]), (x, mean)

        _, (xs, means) = jax.lax.scan(step, x0, eps)
        return jnp.concatenate([x0, xs]), jnp.concatenate([x0, means])

    def bayes_predictions(self, prompt: SequencePrompt) -> Float[Array, "T d"]:
        r"""The best prediction of each clean next step from the steps before it, for an estimator that knows
        $\Phi^*$ and the prior of $A$: the posterior mean of $A$ given the earlier scored transitions
        $x_{t+1} = A\,\Phi^*(x_{t+1-q}, \dots, x_t) + \sigma\varepsilon_t$, i.e. ridge regression of the steps on
        their features with $\lambda = \sigma^2 k q / \rho^2$ (`jaxicl.baselines.ridge`; $A$'s entries have
        variance $\rho^2/(kq)$). Zero where no transition precedes; zero at unscored positions. A reference
        for what a trained model can reach on this task: its error ÷ the zero estimator's is the smallest expected
        at each position. ``prompt``: one prompt of this task (tokens (T, d)); returns (T, d)."""
        T, q = prompt.tokens.shape[0], self.q
        idx = jnp.clip(jnp.arange(T)[:, None] + jnp.arange(1 - q, 1)[None, :], 0, T - 1)  # window ending at j
        feats = jax.vmap(lambda w: self.phi(w.reshape(-1)))(prompt.tokens[idx])
        lam = self.noise_std**2 * self.phi.d_out * q / self.gain**2
        scored = slice(q - 1, T)  # the positions the mask scores: j ≥ q − 1
        pred = baselines.ridge(feats[scored], prompt.targets[scored], lam)
        return jnp.zeros_like(prompt.targets).at[scored].set(pred) * prompt.mask[:, None]

    def prompt(self, key, d_active=None, n_active=None) -> SequencePrompt:
        series, clean = self.sample_series(key, d_active)
        idx = jnp.arange(self.n_context)
        mask = (idx >= self.q).astype(series.dtype)
        if n_active is not None:
            mask = mask * (idx < n_active)
        return next_token_encoding(series, mask, clean)


class CoTMLP(_SequenceTask):
    r"""Chain-of-thought with MLPs (AlgoFormer §3.3, §5.1; Li et al. 2023): per prompt draw
    $W^1 \dots W^L \sim N(0, 2/(d(1 + a^2)))$ (He scale, $a$ the leaky ReLU's slope); each example is the chain
    $x, s^1 = \sigma(W^1 x), \dots, s^L = \sigma(W^L s^{L-1})$ with $x \sim N(0, I_d)$. The prompt concatenates
    $N$ chains; every position predicts the next state of its chain (the position of $s^L$, followed by a fresh
    $x$, is not scored).

    Args:
        d: the states' dimension $d$.
        depth: the chain's length $L$.
        n_context: the chains per prompt $N$.
        slope: the leaky ReLU's slope $a$.

    Example:
        ```python
        import jax
        import jaxicl as icl

        task = icl.tasks.CoTMLP(4, 3, 5)  # 5 chains x, s¹, s², s³ in R⁴: 20 states, the last not an input
        p = task.prompts(jax.random.PRNGKey(0), 8)
        assert p.tokens.shape == (8, 19, 4) and p.mask[0, :4].tolist() == [1.0, 1.0, 1.0, 0.0]
        ```
    """

    d: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    n_context: int = eqx.field(static=True)
    slope: float = eqx.field(static=True)

    def __init__(self, d: int, depth: int, n_context: int, slope: float = 0.1):
        self.d, self.depth = _positive_int("d", d), _positive_int("depth", depth)
        self.n_context, self.slope = _positive_int("n_context", n_context), float(_validate.real("slope", slope))

    @property
    def d_out(self) -> int:
        return self.d

    def prompt(self, key, d_active=None, n_active=None) -> SequencePrompt:
        k_w, k_x = jax.random.split(key)
        dtype = jnp.result_type(float)
        scale = math.sqrt(2 / (self.d * (1 + self.slope**2)))
        Ws = scale * jax.random.normal(k_w, (self.depth, self.d, self.d), dtype)
        x = _active(jax.random.normal(k_x, (self.n_context, self.d), dtype), d_active)

        def layer(s, W):
            s = jax.nn.leaky_relu(s @ W.T, self.slope)
            return s, s

        _, states = jax.lax.scan(layer, x, Ws)  # (L, N, d)
        chains = jnp.concatenate([x[None], states]).transpose(1, 0, 2)  # (N, L+1, d)
        seq = chains.reshape(-1, self.d)
        pos = np.arange(seq.shape[0])
        mask = jnp.asarray(pos % (self.depth + 1) != 0, dtype)  # target s^ℓ (ℓ >= 1) is scored, a fresh x is not
        if n_active is not None:
            mask = mask * (jnp.asarray(pos) < n_active * (self.depth + 1))
        return next_token_encoding(seq, mask)
