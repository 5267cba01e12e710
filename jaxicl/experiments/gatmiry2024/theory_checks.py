"""Gatmiry et al. (2024): the theorems' checks, in float64 (Thms 2–8, Lemma 1), and step sizes learned by
differentiating through gradient descent, against Chebyshev's (Thm 2)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ... import dynamics, losses, tasks
from ...sweep import sweep
from ...theory import gatmiry as G
from ..report import Check, fmt, premise
from .config import LBFGS_FTOL, NAME, Config


# --- theory checks (float64) -------------------------------------------------------------------------
def _depth_law_checks(cfg: Config, need: dict) -> list[Check]:
    """The depth each construction needs for worst error ≤ ε against Thms 2 and 4's laws. The closed forms give
    the depth exactly: the least L with ((κ−1)/(κ+1))^L ≤ ε (GD), with T_L((κ+1)/(κ−1)) ≥ 1/ε (Chebyshev), i.e.
    ⌈x(κ)⌉ for x = log(1/ε)/log((κ+1)/(κ−1)) and arccosh(1/ε)/arccosh((κ+1)/(κ−1)), which grow like κ·log(1/ε)/2 and
    √κ·log(2/ε)/2. Asserted: the slope of log L against log κ (least squares over ``cfg.construct_kappas``) equals
    the slope of log x(κ), within the largest change that rounding x up to an integer can make to it
    (Σ_i |w_i|·log(1 + 1/x_i), w the least-squares weights): a tolerance from the settings, not from one run. With a
    single κ there is no slope: "not applicable"."""
    kappas = np.asarray(cfg.construct_kappas, float)
    z = (kappas + 1) / (kappas - 1)
    laws = (
        ("gd", 1.0, "κ·log(1/ε)", np.log(1 / cfg.eps) / np.log(z)),
        ("chebyshev", 0.5, "√κ·log(1/ε)", np.arccosh(1 / cfg.eps) / np.arccosh(z)),
    )
    logk = np.log(kappas)
    checks = []
    for name, expo, law, x in laws:
        depth = np.array([need[(name, k)] for k in cfg.construct_kappas], float)
        claim = f"depth for worst error ≤ {cfg.eps:g} grows like {law} ({name})"
        if len(set(kappas)) < 2:
            checks.append(
                Check(
                    claim,
                    f"slope of log L vs log κ = {expo}",
                    f"L = {fmt(depth, 5)}",
                    "—",
                    None,
                    applicable=False,
                    reason=f"one κ ({kappas[0]:g}): a slope needs two or more",
                )
            )
            continue
        w = (logk - logk.mean()) / np.sum((logk - logk.mean()) ** 2)
        slope, exact = float(w @ np.log(depth)), float(w @ np.log(x))
        tol = float(np.abs(w) @ np.log1p(1 / x))
        checks.append(
            Check(
                claim,
                f"slope {exact:.4f} (closed-form depths ⌈x(κ)⌉ = {fmt(np.ceil(x), 5)}; → {expo} as κ → ∞)",
                f"L = {fmt(depth, 5)}, slope {slope:.4f}",
                f"{tol:.1e} (rounding L up to an integer)",
                bool(abs(slope - exact) <= tol),
                kind="formulas",
            )
        )  # depths of the residual polynomials, not of the model
    return checks


def check_constructions(cfg: Config):
    """Worst-case errors of GD / Chebyshev through the model, Newton through its matrix iteration;
    depth needed for ε and its growth with κ. Returns (checks, dataset)."""
    Lmax = max(cfg.construct_depths)
    rows, errs = [], []
    for kappa in cfg.construct_kappas:
        for L in cfg.construct_depths:
            steps = np.zeros(Lmax)
            steps[:L] = G.chebyshev_steps(1.0, kappa, L)
            cheb = G.restricted_model(steps, 3, depth=L)
            gd = G.restricted_model([G.gd_step(1.0, kappa)], 3, looped=True, depth=L, max_depth=Lmax)
            sim = [G.worst_case_error(G.model_scalar_error(m), 1.0, kappa) for m in (gd, cheb)]
            sig = np.diag(np.linspace(1.0, kappa, 5))
            sim.append(G.newton_iteration_error(1.0, kappa, L, sig))
            pred = [G.gd_worst_error(kappa, L), G.chebyshev_worst_error(kappa, L), G.newton_worst_error(kappa, L)]
            rows.append((kappa, L, sim, pred))
            errs.append(max(abs(s / p - 1) for s, p in zip(sim, pred)))
    checks = [
        Check(
            "Thms 2, 4, 5: worst error over αI ≼ Σ ≼ βI of GD, Chebyshev (through the model) and Newton",
            "((κ−1)/(κ+1))^L, 1/T_L((κ+1)/(κ−1)), ((κ²−1)/(κ²+1))^{2^L}",
            f"max relative deviation {max(errs):.1e} over κ ∈ {list(cfg.construct_kappas)}, L ∈ {list(cfg.construct_depths)}",
            "≤ 1e-8",
            bool(max(errs) <= 1e-8),
        )
    ]
    need = {}
    for kappa in cfg.construct_kappas:  # bisection brackets: twice the asymptotic depths
        a = G.gd_step(1.0, kappa)
        need[("gd", kappa)] = G.depth_needed(
            lambda L, k=kappa, a=a: G.worst_case_error(lambda s: (1 - a * s) ** L, 1.0, k, grid=4001),
            cfg.eps,
            L_max=int(kappa * np.log(1 / cfg.eps)) + 10,
        )
        need[("chebyshev", kappa)] = G.depth_needed(
            lambda L, k=kappa: G.worst_case_error(
                lambda s: G.residual_polynomial(G.chebyshev_steps(1.0, k, L), s), 1.0, k, grid=4001
            ),
            cfg.eps,
            L_max=int(np.sqrt(kappa) * np.log(2 / cfg.eps)) + 10,
        )
    checks += _depth_law_checks(cfg, need)
    ds = xr.Dataset(
        {
            "simulated": (
                ("kappa", "depth", "method"),
                np.array([r[2] for r in rows]).reshape(len(cfg.construct_kappas), -1, 3),
            ),
            "formula": (
                ("kappa", "depth", "method"),
                np.array([r[3] for r in rows]).reshape(len(cfg.construct_kappas), -1, 3),
            ),
            "depth_needed": (
                ("kappa", "algorithm"),
                np.array([[need[(a, k)] for a in ("gd", "chebyshev")] for k in cfg.construct_kappas]),
            ),
        },
        coords={
            "kappa": list(cfg.construct_kappas),
            "depth": list(cfg.construct_depths),
            "method": ["gd", "chebyshev", "newton"],
            "algorithm": ["gd", "chebyshev"],
        },
        attrs={"eps": cfg.eps},
    )
    return checks, ds


def check_lemma1(cfg: Config, models: dict, key):
    """Lemma 1 / Thm 1: some γ ∈ [1, 36L²] gives relative error ≥ 1/4 on (γX, w*, γy, x_q)."""
    task = tasks.FixedGramRegression(cfg.d, cfg.n, np.eye(cfg.d))
    prompt = task.sample_one(key)
    checks, curves = [], {}
    for name, model in models.items():
        L = int(model.depth)
        gammas = np.geomspace(1.0, 36.0 * L**2, 4000)
        err = np.asarray(G.scaling_errors(model, prompt, jnp.asarray(gammas)))
        curves[name] = (gammas, err)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], (err >= 1 / 8).astype(int), [0]]))).reshape(-1, 2)
        longest = max((gammas[e - 1] - gammas[s] for s, e in edges), default=0.0)
        checks.append(
            Check(
                f"Lemma 1: a scaling γ ∈ [1, 36L²] with relative error ≥ 1/4 ({name}, L = {L})",
                "max_γ error ≥ 1/4",
                f"max {err.max():.3g} (at γ = {gammas[err.argmax()]:.3g}); error ≥ 1/8 on an interval of length {longest:.3g}",
                "—",
                bool(err.max() >= 0.25),
                kind="formulas",
            )
        )  # a lower bound for any weights
    return checks, curves


def check_thm3(cfg: Config, key):
    """Adaptive depth: stop at the first layer whose test statistic is ≤ ε; the error is then ≤ ε."""
    kmax = max(cfg.thm3_kappas)
    loops = int(np.ceil(kmax * np.log(1e3 * kmax / cfg.thm3_eps)))
    model = G.restricted_model([1.0 / kmax], cfg.d, looped=True, depth=loops, max_depth=loops)  # Thm 5's GD, step 1/β
    used, worst, ok = [], [], True
    adaptive = jax.jit(jax.vmap(lambda p: G.adaptive_depth(model, p, cfg.thm3_eps)))  # one program for every κ
    for i, kappa in enumerate(cfg.thm3_kappas):
        task = tasks.FixedGramRegression(cfg.d, cfg.n, tasks.RandomSpectrumCovariance(cfg.d, kmax / kappa, kmax))
        prompts = task.sample(jax.random.fold_in(key, i), cfg.thm3_instances)
        ell, err, _ = adaptive(prompts)
        ell, err = np.asarray(ell), np.asarray(err)
        ok &= bool(np.all(ell >= 0) and np.all(err <= cfg.thm3_eps))
        used.append(ell)
        worst.append(err.max())
    used = np.array(used)
    check = Check(
        f"Thm 3: stopping at the first layer with ‖y^(ℓ)‖·‖x_q‖_(XXᵀ)⁻¹ ≤ ε = {cfg.thm3_eps:g} (one looped GD "
        f"model, step 1/{kmax:g}; instances with spectrum in [{kmax:g}/κ, {kmax:g}])",
        "|TF_ℓ − y_q| ≤ ε",
        f"max error {max(worst):.2e}; mean layers used {fmt(used.mean(1), 3)} for κ = {list(cfg.thm3_kappas)}",
        "every instance",
        ok,
    )
    trend = Check(
        "Thm 3: layers used grow with the instance's κ",
        "increasing",
        fmt(used.mean(1), 3),
        "—",
        bool(np.all(np.diff(used.mean(1)) > 0)),
        **_needs_two(cfg.thm3_kappas, "thm3_kappas"),
    )
    ds = xr.Dataset(
        {"layers_used": (("kappa", "instance"), used)},
        coords={"kappa": list(cfg.thm3_kappas)},
        attrs={"eps": cfg.thm3_eps, "loops": loops},
    )
    return [check, trend], ds


def check_thm6_thm7(cfg: Config):
    """Thm 6 (multilayer minimiser blows up out of distribution) and Thm 7 (looped stays bounded)."""
    alpha, beta = 1.0, 100.0
    eps_mass, delta_p = 0.5, 0.5
    c = 8 * alpha  # the OOD covariance c·I, 8α ≤ c ≤ (1 − δ′)β
    r = _thm6_losses(cfg, alpha, beta, c, eps_mass, delta_p)
    checks = _thm6_checks(r, c, eps_mass) + _thm7_checks(cfg, alpha, beta)
    ds = xr.Dataset(
        {
            "train_loss": ("L", r[:, 1]),
            "multilayer_ood": ("L", r[:, 2]),
            "bound_proved": ("L", r[:, 3]),
            "bound_stated": ("L", r[:, 4]),
            "looped_ood": ("L", r[:, 5]),
        },
        coords={"L": r[:, 0].astype(int)},
        attrs={"alpha": alpha, "beta": beta, "ood_mass": eps_mass, "delta_prime": delta_p, "ood_scale": c},
    )
    return checks, ds


def _thm6_losses(cfg: Config, alpha: float, beta: float, c: float, eps_mass: float, delta_p: float) -> np.ndarray:
    """Per depth L of ``cfg.thm6_depths``: (L, the multilayer minimiser's training loss, its OOD loss with mass
    ``eps_mass`` on c·I, Thm 6's bound as proved, as stated, the looped minimiser's OOD loss)."""
    d = cfg.d
    # every loss of every depth in one program: layers padded with zeros to the largest depth (fixed_gram_depth_curves)
    depths = list(cfg.thm6_depths)
    L_max = max(depths)
    pad = lambda layers: np.concatenate([layers, np.zeros((L_max - len(layers), d, d))])  # noqa: E731
    A_batch, S_batch, parts = [], [], []
    for L in depths:
        B = G.thm6_training_covariances(alpha, beta, d, L)
        multi = np.asarray(G.thm6_minimizer(alpha, beta, d, L).params.A)  # its L layers A_t = B_t⁻¹
        A_loop = G.looped_minimizer_diagonal(np.stack([np.diag(b) for b in B]), np.full(L, 1 / L), L)
        pairs = [(multi, b) for b in B] + [(multi, c * np.eye(d)), (np.repeat(A_loop[None], L, 0), c * np.eye(d))]
        parts.append(len(pairs))
        A_batch += [pad(a) for a, _ in pairs]
        S_batch += [s for _, s in pairs]
    last = np.split(
        np.asarray(losses.fixed_gram_depth_curves(np.stack(A_batch), np.stack(S_batch)))[:, -1], np.cumsum(parts)[:-1]
    )
    rows = [
        (
            L,
            float(np.mean(v[:-2])),
            eps_mass * float(v[-2]),
            G.thm6_bound(eps_mass, delta_p, d, L),
            G.thm6_bound(eps_mass, delta_p, d, L, proved=False),
            eps_mass * float(v[-1]),
        )
        for L, v in zip(depths, last)
    ]
    return np.array(rows)


def _thm6_checks(r: np.ndarray, c: float, eps_mass: float) -> list[Check]:
    """Thm 6's zero training loss and OOD lower bound, and the looped minimiser below the multilayer one."""
    slope = np.polyfit(r[:, 0], np.log(r[:, 2]), 1)[0]
    return [
        Check(
            "Thm 6: A_t = B_t⁻¹ is a global minimiser (zero training loss)",
            "0",
            fmt(r[:, 1].max(), 3),
            "≤ 1e-10 (round-off; the loss of A = 0 is d)",
            bool(r[:, 1].max() <= 1e-10),
        ),
        Check(
            f"Thm 6: OOD loss (mass {eps_mass} on Σ = {c:g}I) ≥ εδ′²d·9^(L−1) as proved (statement: εδ′d·9^(L−1))",
            fmt(r[:, 3], 3),
            fmt(r[:, 2], 3) + f"; growth e^{slope:.2f} per layer (9 = e^{np.log(9):.2f})",
            f"every L (statement's bound {fmt(r[:, 4], 3)} holds too)",
            bool(np.all(r[:, 2] >= r[:, 3]) and np.all(r[:, 2] >= r[:, 4]) and slope >= np.log(9) - 1e-9),
        ),
        Check(
            "Thm 6 vs 7: the looped minimiser on the same training distribution stays below the multilayer one on "
            "the same OOD test, and its OOD loss does not grow with L",
            f"multilayer {fmt(r[:, 2], 3)}",
            "looped " + fmt(r[:, 5], 3),
            "looped < multilayer at every L > 1; looped non-increasing in L",
            bool(np.all(r[1:, 5] < r[1:, 2]) and np.all(np.diff(r[:, 5]) <= 1e-12 * r[:-1, 5])),
        ),
    ]


def _thm7_checks(cfg: Config, alpha: float, beta: float) -> list[Check]:
    """Thm 7: the looped minimiser's eq. (13) and its loss bound on the right-spread-out distribution."""
    d = cfg.d
    # Thm 7: A*⁻¹ ≽ ((1−δ)β/2)(1 − ln(d/ε)/L) I (eq. 13) and the OOD bound, ε = 1/L, δ = 0
    ok13, okb, vals = True, True, []
    for L in cfg.thm7_depths:
        B = G.thm6_training_covariances(alpha, beta, d, L)
        A = G.looped_minimizer_diagonal(np.stack([np.diag(b) for b in B]), np.full(L, 1 / L), L)
        eps = 1.0 / L
        lower = beta / 2 * (1 - np.log(d / eps) / L)
        inv_min = 1 / np.max(np.diag(A))
        top = (1 - np.log(d / eps) / L) * beta  # δ′ = ln(d/ε′)/L with ε′ = ε
        x, w = (np.asarray(v) for v in tasks.UniformScale(alpha, top).quadrature(64))
        ood = float(np.sum(w * np.sum((1 - np.outer(x, np.diag(A))) ** (2 * L), axis=1)))
        bound = d * (1 - min(2 * np.log(d / eps) / L, alpha / beta)) ** (2 * L)
        ok13 &= bool(inv_min >= lower)
        okb &= bool(ood <= bound)
        vals.append((L, inv_min, lower, ood, bound))
    v = np.array(vals)
    return [
        Check(
            "Thm 7 (eq. 13): looped minimiser A*⁻¹ ≽ (β/2)(1 − ln(dL)/L) I on the (1/L, 0) right-spread-out P",
            fmt(v[:, 2], 3),
            "λ_min(A*⁻¹) = " + fmt(v[:, 1], 3) + f" for L = {list(cfg.thm7_depths)}",
            "every L",
            ok13,
            kind="formulas",
        ),  # the minimiser's closed form against the theorem's bound
        Check(
            "Thm 7: its loss on Unif[α, (1 − δ′)β]·I, δ′ = ln(dL)/L",
            "≤ d(1 − (2ln(dL)/L ∧ α/β))^{2L} (App. B)",
            fmt(v[:, 3], 3) + " vs " + fmt(v[:, 4], 3),
            "every L",
            okb,
            kind="formulas",
        ),
    ]


def _monotone_from(vals, rtol: float = 1e-12) -> int:
    """Smallest L (1-based) from which ``vals`` is monotone (non-increasing or non-decreasing)."""
    for start in range(1, len(vals) + 1):
        diff = np.diff(vals[start - 1 :])
        tol = rtol * np.abs(vals[start - 1 : -1])
        if np.all(diff <= tol) or np.all(diff >= -tol):
            return start
    return len(vals)


def thm8_curves(cfg: Config, A_loop, scales):
    """Fixed-Gram loss at Σ = sI against the loop count for a looped A and, for App. F's unequal
    layers, against depth. Thm 8's proof diagonalises Σ^½AΣ^½, so its L_0 is for symmetric A: the
    check uses the symmetric part of the trained A; the raw (slightly non-symmetric) A is reported."""
    A_loop = np.asarray(A_loop, float)
    A_sym = (A_loop + A_loop.T) / 2
    L0s = [G.looped_monotone_from(A_sym, s * np.eye(cfg.d)) for s in scales]
    # loop counts past every L_0, so that the claim "monotone from L_0 on" is tested on at least 10 loops each
    T = max(cfg.thm8_loops, int(np.ceil(max(L0s))) + 10)
    depths = np.arange(1, T + 1)
    s_f = 4.0
    steps = G.nonmonotone_steps(s_f, T)
    # every curve in one program: the looped A repeated T times (symmetric part and raw, each s), App. F's T layers
    layers = [np.repeat(A[None], T, 0) for s in scales for A in (A_sym, A_loop)] + [
        steps[:, None, None] * np.eye(cfg.d)
    ]
    Sigmas = [s * np.eye(cfg.d) for s in scales for _ in range(2)] + [s_f * np.eye(cfg.d)]
    curves = np.asarray(losses.fixed_gram_depth_curves(np.stack(layers), np.stack(Sigmas)))
    multi_curve = curves[-1]
    sym_curves, raw_curves, ok, starts, raw_starts = [], [], True, [], []
    for i, L0 in enumerate(L0s):
        vals, raw = curves[2 * i], curves[2 * i + 1]
        start = _monotone_from(vals)
        ok &= start <= max(1, int(np.ceil(L0)))
        sym_curves.append(vals), raw_curves.append(raw), starts.append(start), raw_starts.append(_monotone_from(raw))
    diffs = np.sign(np.diff(multi_curve))
    checks = [
        Check(
            "Thm 8: looped loss monotone in the loop count from L_0 on (symmetric part of the trained looped A, Σ = sI)",
            f"L_0 = {fmt(np.array(L0s), 3)} for s = {list(scales)}",
            f"monotone from L = {starts} (raw trained A: from {raw_starts}) over {T} loops",
            "from ⌈L_0⌉ on, every s (≥ 10 loops past each L_0)",
            bool(ok),
            kind="formulas",
        ),  # any looped A
        Check(
            "Thm 8 / App. F: unequal layers (γ_t = 3, ½, 3, …) give a loss that is not monotone in depth",
            "up and down",
            f"signs of successive changes: {''.join('+' if x > 0 else '-' for x in diffs[:8])}…",
            "—",
            bool(np.any(diffs > 0) and np.any(diffs < 0)),
        ),
    ]
    ds = xr.Dataset(
        {
            "looped": (("s", "L"), np.array(sym_curves)),
            "looped_raw": (("s", "L"), np.array(raw_curves)),
            "multilayer_app_f": ("L", multi_curve),
            "L0": ("s", np.array(L0s)),
        },
        coords={"s": list(scales), "L": np.asarray(depths)},
        attrs={"app_f_scale": s_f},
    )
    return checks, ds


# --- learned step sizes (differentiating through gradient descent) -------------------------------------
def gd_relative_errors(etas, kappa, s_unit):
    """|w_k − w*| / |w* − w_0| after k = len(etas) steps of gradient descent with step sizes ``etas`` on the
    regression loss ½ s‖w − w*‖² (Σ = sI, the fixed-Gram setting), for every s = 1 + (κ − 1)·``s_unit`` in [1, κ].
    Each run is ``jaxicl.gradient_descent`` with the schedule ``k ↦ etas[k]``, so this is differentiable in the
    step sizes (and in κ). It equals |Π_t(1 − η_t s)|, the residual polynomial of Thm 2."""

    def run(s):
        loss = lambda w: 0.5 * s * jnp.sum((w - 1.0) ** 2)  # noqa: E731  w* = 1, w_0 = 0
        w, _ = dynamics.gradient_descent(
            loss, jnp.zeros(1, etas.dtype), lambda k: etas[k], etas.shape[0], check_finite=False
        )
        return jnp.abs(w[0] - 1.0)

    return jax.vmap(run)(1.0 + (kappa - 1.0) * s_unit)


def learn_step_sizes(kappa, cfg: Config):
    r"""Step sizes minimising the worst relative error over s ∈ [1, κ] after ``cfg.learned_steps`` GD steps, found by
    differentiating through the runs: L-BFGS on the smooth maximum $(\operatorname{mean}_s e(s)^p)^{1/p}$ over a uniform
    grid of s,
    with p raised through ``cfg.learned_powers`` (p → ∞ is the worst case), each for at most
    ``cfg.learned_iterations`` iterations (it stops once an iteration gains ≤ 1e-13 relative: 14–72 iterations at quick
    size). Starts from steps spread over [1/κ, 1] (equal steps are a symmetric point the gradient cannot leave).
    Traceable in κ."""
    k = cfg.learned_steps
    s_unit = jnp.linspace(0.0, 1.0, cfg.learned_grid)

    def smooth_worst(etas, p):
        log_e2 = jnp.log(gd_relative_errors(etas, kappa, s_unit) ** 2 + 1e-300)
        return (jax.scipy.special.logsumexp(p * log_e2 / 2) - jnp.log(s_unit.size)) / p

    def next_power(etas, p):  # one traced L-BFGS, scanned over the powers
        return dynamics.lbfgs(lambda e: smooth_worst(e, p), etas, cfg.learned_iterations, ftol=LBFGS_FTOL).params, None

    etas0 = jnp.linspace(1.0, 1.0 / kappa, k)
    etas, _ = jax.lax.scan(next_power, etas0, jnp.asarray(cfg.learned_powers, etas0.dtype))
    return jnp.sort(etas)


def learned_steps_sweep(cfg: Config) -> xr.Dataset:
    """Learned step sizes for every κ of ``cfg.learned_kappas`` as one ``jaxicl.sweep`` (one compiled program),
    against Chebyshev's (reciprocals of the Chebyshev nodes on [1, κ], sorted) and their worst-case errors."""
    ds = sweep(
        lambda kappa: {"learned": learn_step_sizes(kappa, cfg)},
        {"kappa": list(cfg.learned_kappas)},
        meta={"paper": NAME, "figure": "learned step sizes", "config": dataclasses.asdict(cfg)},
        output_dims={"learned": ("step",)},
    )
    kappas = np.asarray(cfg.learned_kappas)
    cheb = np.stack([np.sort(G.chebyshev_steps(1.0, k, cfg.learned_steps)) for k in kappas])
    worst = [
        G.worst_case_error(lambda s, e=e: G.residual_polynomial(e, s), 1.0, k)
        for e, k in zip(ds.learned.values, kappas)
    ]
    ds["chebyshev"] = (("kappa", "step"), cheb)
    ds["learned_worst_error"] = ("kappa", np.asarray(worst))
    ds["chebyshev_worst_error"] = ("kappa", G.chebyshev_worst_error(kappas, cfg.learned_steps))
    ds["gd_worst_error"] = ("kappa", G.gd_worst_error(kappas, cfg.learned_steps))
    return ds


def _learned_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    """The learned steps against Chebyshev's. Their worst-case error is asserted within what the objective allows:
    the smooth maximum (mean_s e(s)^p)^{1/p} over n grid points lies between n^{−1/p}·max e and max e, so steps that
    minimise it at the largest p have a worst error at most n^{1/p} times Chebyshev's (the minimax optimum): the
    tolerance is n^{1/p} − 1 for ``cfg.learned_grid`` and ``cfg.learned_powers``, not a constant."""
    step_dev = np.abs(ds.learned.values / ds.chebyshev.values - 1)
    err_dev = np.abs(ds.learned_worst_error.values / ds.chebyshev_worst_error.values - 1)
    err_tol = cfg.learned_grid ** (1 / max(cfg.learned_powers)) - 1
    return [
        Check(
            f"Learned step sizes (∂ of the error after k = {cfg.learned_steps} GD steps, through the runs) recover "
            "Chebyshev's a_t = 1/λ_t (Thm 2), κ = " + ", ".join(f"{k:g}" for k in ds.kappa.values),
            "reciprocal Chebyshev nodes on [1, κ]",
            f"max relative deviation {step_dev.max():.1e} (per κ: {fmt(step_dev.max(axis=1), 2)})",
            "≤ 1e-2",
            bool(step_dev.max() <= 1e-2),
        ),
        Check(
            "Their worst-case error over [1, κ] reaches 1/T_k((κ+1)/(κ−1))",
            fmt(ds.chebyshev_worst_error.values, 4),
            fmt(ds.learned_worst_error.values, 4) + f" (max relative excess {err_dev.max():.1e}; GD with the best "
            f"constant step: {fmt(ds.gd_worst_error.values, 3)})",
            f"≤ {err_tol:.1e} (n^(1/p) − 1: smooth maximum over n = {cfg.learned_grid} points, p = "
            f"{max(cfg.learned_powers):g})",
            bool(err_dev.max() <= err_tol),
        ),
    ]


def _needs_two(values, key: str) -> dict:
    """A trend across ``values`` (the setting ``key``) has no premise with fewer than two of them: the arguments that
    make such a claim "not applicable" (an empty comparison would pass whatever the numbers)."""
    n = len(set(np.asarray(values).tolist()))
    return premise(n >= 2, f"{key} has {n} value: a trend needs two or more")
