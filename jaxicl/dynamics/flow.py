r"""Gradient flow $\dot\theta = -\nabla L(\theta)$ (Zhang et al. eq. 3.9) integrated by diffrax.

One trajectory per call; ``jax.vmap`` lifts it over initial parameters or task leaves, and the
whole solve is differentiable (e.g. $dL(\theta(t_1))/d\sigma$ or $dL(\theta(t_1))/d\Lambda$) through diffrax's adjoint
(``adjoint="recursive"``: recursive checkpointing, exact derivative of the discretised solve;
``"backsolve"``: the continuous adjoint ODE solved backwards, O(1) memory). The time at which the loss
first reaches a level (``stop_at_loss``) is found by a root finder and is differentiable too; a boolean
stop (``stop_when``, ``steady_state_tol``) is not, and differentiating through one is an error.

The flow runs as one adaptive solve per interval between save times, in a ``lax.scan``: each saved state is the end
of a solve, to the solver's tolerance, and the program holds no host callback, so JAX's persistent compilation cache
keeps it (diffrax's ``SaveAt(ts=...)`` checks its times with host callbacks, which the cache refuses).
"""

from __future__ import annotations

from typing import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .. import _validate
from .descent import per_leaf

ADJOINTS = {
    "recursive": diffrax.RecursiveCheckpointAdjoint,  # default: reverse mode through the solver's own steps
    "backsolve": diffrax.BacksolveAdjoint,  # continuous adjoint ODE: memory independent of the steps; no events
    "forward": diffrax.ForwardMode,  # forward mode (jax.jvp / jacfwd): few inputs, many outputs
    "direct": diffrax.DirectAdjoint,  # forward and reverse mode, more memory
}

SOLVERS = {
    "tsit5": diffrax.Tsit5,  # explicit, default
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,  # implicit (stiff problems)
}


class FlowSolution(eqx.Module):
    """Trajectory of a gradient flow. Leaves of ``models`` are stacked on a leading time axis.

    Attributes:
        ts: save times (the requested grid; entries after an early stop repeat the final state).
        models: parameters at ``ts`` (same pytree type as the initial parameters).
        losses: L(θ(t)) at ``ts``.
        grad_norms: ‖∇L(θ(t))‖ at ``ts``.
        final: parameters at the end of the solve (``t1`` or the steady-state event).
        t_final: time at which the solve stopped.
        num_steps: accepted solver steps; ``num_grad_evals``: vector-field evaluations (steps × fresh
            Runge–Kutta stages, and each solve's start: its first-step estimate and an FSAL solver's first stage;
            a lower bound for implicit solvers, whose Newton iterations add more).
        stopped_by_event: True when ``steady_state_tol`` or ``stop_when`` ended the solve.
        diverged: True when the flow diverged (non-finite or exploding loss, parameters or gradient).
        solver_failed: True when the solver stopped before t1 for another reason (``result`` says which).
        result: diffrax's result code.

    ``gradient_flow`` raises on the last three unless called with ``check=False``; `check_flow` raises later.
    """

    ts: Float[Array, " T"]
    models: PyTree
    losses: Float[Array, " T"]
    grad_norms: Float[Array, " T"]
    final: PyTree
    t_final: Float[Array, ""]
    num_steps: Array
    num_grad_evals: Array
    stopped_by_event: Array
    diverged: Array
    solver_failed: Array
    result: diffrax.RESULTS


def log_time_grid(t1: float, n: int = 100, t_min_ratio: float = 1e-6) -> np.ndarray:
    """0 followed by n − 1 log-spaced times in [t1·t_min_ratio, t1]."""
    grid = np.concatenate([[0.0], np.logspace(np.log10(t1 * t_min_ratio), np.log10(t1), n - 1)])
    grid[-1] = t1  # logspace can overshoot t1 by round-off
    return np.minimum(grid, t1)


def _tree_norm(tree) -> Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.sum(leaf**2) for leaf in leaves))


def gradient_flow(
    loss_fn: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    t1: float,
    *,
    ts=None,
    n_save: int = 100,
    solver: str | diffrax.AbstractSolver = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int = 200_000,
    steady_state_tol: float | None = None,
    stop_when: Callable[[PyTree], Array] | None = None,
    divergence_threshold: float = 1e8,
    progress: bool = False,
    adjoint: str | diffrax.AbstractAdjoint = "recursive",
    rates=None,
    stop_at_loss: float | None = None,
    check: bool = True,
) -> FlowSolution:
    r"""Integrate $d\theta/dt = -\nabla_\theta\, \mathrm{loss\_fn}(\theta)$ from ``params`` on $[0, t_1]$ with an adaptive solver.

    Args:
        loss_fn: scalar loss of the parameter pytree (e.g. ``lambda m: population_loss(m, task)``).
        params: initial parameters (any pytree, e.g. an ``eqx.Module``); only inexact-array leaves
            are integrated, everything else is held fixed.
        t1: final time (a Python float: it fixes the solver's horizon).
        ts: the times to save, increasing in [0, t1] (default: 0 and ``n_save − 1`` log-spaced times up to t1); each
            ends a solve. Traced save times (to differentiate the state at a time) are checked inside the program.
        n_save: the number of saved times when ``ts`` is not given.
        solver: ``"tsit5"`` (explicit, default), ``"dopri5"``, ``"dopri8"``, ``"kvaerno5"``
            (implicit, for stiff flows) or any diffrax solver.
        rtol, atol: tolerances of the PID step-size controller.
        dt0: the first step of each solve (default: diffrax's estimate).
        max_steps: the most solver steps between two save times.
        steady_state_tol: stop early when ‖∇L‖ falls below this value (a diffrax ``Event``).
        stop_when: stop early when ``stop_when(params)`` is True (e.g. a distance to a target).
        divergence_threshold: stop and raise when ‖θ‖ exceeds it or the state becomes non-finite.
        progress: show a tqdm progress bar over [0, t1], advanced at each save time.
        rates: dθ/dt = −rates ⊙ ∇L: a pytree with the structure of ``params`` holding one rate per
            leaf (e.g. ``model.step_sizes(1, η_w/η_Q)``: the time scaling of GD with two step sizes,
            Yang et al. eq. 10, with t = η_Q · iterations). Default 1.
        adjoint: how the solve is differentiated: ``"recursive"`` (default; reverse mode through the solver's
            steps, recursive checkpointing), ``"backsolve"`` (reverse mode by the continuous adjoint ODE, memory
            independent of the number of steps; it takes no events, so no ``stop_when``, ``steady_state_tol`` or
            ``stop_at_loss``, and divergence is checked at the end only), ``"forward"`` (``jax.jvp`` / ``jacfwd``),
            ``"direct"`` (both modes) or any diffrax adjoint.
        stop_at_loss: stop when the loss first reaches this level: ``t_final`` is then the time to reach it,
            located by a Newton root find on L(θ(t)) − level, and differentiable (a smooth time-to-ε).

        check: raise if the flow diverges or the solver fails (default). Under ``jit`` that is an ``eqx.error_if``,
            whose message cannot say when or where: a jitted or vmapped caller passes ``False`` and calls
            `check_flow` on the result, which raises on the host naming the time, the quantity and the flow of a
            batch. (Traced save times, ``dt0`` and ``progress`` each put a host callback in the program, which
            JAX's persistent compilation cache then does not keep.)

    Returns:
        `FlowSolution`: the saved times ``ts``, the parameters at each (``models``: every leaf stacked on a leading
        time axis), the losses and gradient norms there, the final state and its time. Raises
        ``FloatingPointError`` naming the time and the quantity if the flow diverges (outside ``jit``; inside ``jit``
        an ``eqx.error_if`` runtime error).

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)))
        model = icl.models.LinearSelfAttention.balanced_init(d=3, sigma=0.1, key=jax.random.PRNGKey(0))
        sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), model, t1=100.0, n_save=20)
        assert sol.losses.shape == (20,) and sol.models.W_kq.shape == (20, 4, 4)
        ```
    """
    _check_arguments(t1, rtol, atol, ts, n_save, max_steps, divergence_threshold, dt0)
    adjoint = _named(adjoint, ADJOINTS, "adjoint", "a diffrax adjoint")
    solver = _named(solver, SOLVERS, "solver", "a diffrax solver")
    backsolve = isinstance(adjoint, diffrax.BacksolveAdjoint)
    if backsolve and (steady_state_tol is not None or stop_when is not None or stop_at_loss is not None):
        raise ValueError(
            "adjoint='backsolve' takes no events: drop steady_state_tol / stop_when / stop_at_loss, or use "
            "adjoint='recursive'."
        )
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)

    def loss_of(y):
        return loss_fn(eqx.combine(y, static))

    rate = per_leaf(1.0 if rates is None else rates, params)
    if ts is None:
        ts = log_time_grid(t1, n_save)
    traced_ts = isinstance(ts, jax.core.Tracer)
    if not traced_ts:  # a traced ts is checked inside the program
        _check_save_times(np.asarray(ts), float(t1))
    dtype = _integrable_dtype(dynamic)
    ts = jnp.asarray(ts).astype(dtype)

    # everything the vector field depends on travels as diffrax's `args` (closed-over arrays made explicit), which
    # every adjoint can differentiate (BacksolveAdjoint cannot see through a closure). The solve and everything
    # computed from its solution are one compiled program, `solve`, whose arrays are its arguments, not constants:
    # computed op by op, the losses, norms and flags of a solution would be many small XLA programs per flow.
    field_args = (eqx.filter_closure_convert(loss_of, dynamic), rate)
    event = (
        None
        if backsolve
        else _stop_event(divergence_threshold, steady_state_tol, stop_when, static, stop_at_loss, dtype)
    )

    def solve(dynamic, ts, field_args, dt0):
        if traced_ts:  # (a host callback: such a program is not kept by the persistent compilation cache)
            ts = eqx.error_if(ts, jnp.any(ts[1:] < ts[:-1]) | (ts[0] < 0) | (ts[-1] > t1), _BAD_TS)
        segment = _segment_solver(solver, adjoint, rtol, atol, dt0, max_steps, event, field_args)
        saved, final, t_final, result, steps = _integrate_between_saves(
            segment, dynamic, ts, float(t1), progress, backsolve
        )
        if steady_state_tol is not None or stop_when is not None:
            what = "steady_state_tol" if stop_when is None else "stop_when"
            saved, final, t_final = _after_boolean_stop((saved, final, t_final), what)
        return _flow_solution(ts, saved, final, t_final, result, steps, field_args[0], static, divergence_threshold)

    out = eqx.filter_jit(solve)(dynamic, ts, field_args, dt0)
    return check_flow(out) if check else out


def _check_arguments(t1, rtol, atol, ts, n_save, max_steps, divergence_threshold, dt0) -> None:
    """`gradient_flow`'s scalar arguments, checked on the host before anything is traced."""
    if (
        isinstance(t1, (jax.core.Tracer, bool, str))
        or not isinstance(t1, (int, float, np.number, np.ndarray, jax.Array))
        or np.ndim(t1) != 0
        or not t1 > 0
        or not np.isfinite(t1)
    ):
        raise ValueError(
            f"gradient_flow needs a finite Python float t1 > 0 (it fixes the solver's horizon; "
            f"differentiate the state at a time inside it through `ts`, or a stop_at_loss time), got {t1}."
        )
    _validate.real("gradient_flow: rtol", rtol, gt=0)  # a tolerance <= 0 makes diffrax accept every step
    _validate.real("gradient_flow: atol", atol, gt=0)
    if ts is None:
        _validate.integer("gradient_flow: n_save", n_save, low=2)
    _validate.integer("gradient_flow: max_steps", max_steps)
    _validate.real("gradient_flow: divergence_threshold", divergence_threshold, gt=0, finite=False)
    if dt0 is not None and not isinstance(dt0, jax.core.Tracer) and not dt0 > 0:
        raise ValueError(f"dt0 must be positive (the flow runs forward from t = 0), got {dt0}.")


def _named(choice, options: dict, what: str, instead: str):
    """``options[choice]()`` for a name, ``choice`` itself otherwise (a diffrax solver or adjoint)."""
    if not isinstance(choice, str):
        return choice
    if choice not in options:
        raise ValueError(f"unknown {what} {choice!r}; choose one of {sorted(options)} or pass {instead}.")
    return options[choice]()


def _integrable_dtype(dynamic):
    """The dtype of the integrated leaves; half precision is refused (an adaptive solve's error estimates underflow)."""
    low = sorted({str(x.dtype) for x in jax.tree_util.tree_leaves(dynamic) if jnp.finfo(x.dtype).bits < 32})
    if low:
        raise TypeError(
            f"gradient_flow: the model has {', '.join(low)} parameters; an adaptive ODE solve needs float32 "
            "or float64 (its error estimates and step-size control underflow in half precision): cast the "
            "model, e.g. jaxicl.dynamics.cast_floating(model, jnp.float32)."
        )
    return jax.tree_util.tree_leaves(dynamic)[0].dtype


def _stop_event(divergence_threshold, steady_state_tol, stop_when, static, stop_at_loss, dtype) -> diffrax.Event:
    """The event that ends a flow: divergence, and the optional steady state, ``stop_when`` and loss level (the last
    located by a Newton root find on L(θ(t)) − level, so that its time is differentiable)."""

    def cond_fn(t, y, args, **kwargs):
        norm = _tree_norm(y)
        stop = ~jnp.isfinite(norm) | (norm > divergence_threshold)
        if steady_state_tol is not None:
            stop = stop | (_tree_norm(jax.grad(args[0])(y)) < steady_state_tol)
        if stop_when is not None:
            stop = stop | stop_when(eqx.combine(y, static))
        return stop

    if stop_at_loss is None:
        return diffrax.Event(cond_fn)
    import optimistix as optx

    level = jnp.asarray(stop_at_loss, dtype=dtype)
    return diffrax.Event(
        (cond_fn, lambda t, y, args, **kw: args[0](y) - level),
        root_finder=optx.Newton(
            rtol=1e-10 if level.dtype == jnp.float64 else 1e-5,
            atol=1e-12 if level.dtype == jnp.float64 else 1e-6,
        ),
    )


_BAD_TS = "ts must be an increasing grid inside [0, t1]"


def _segment_solver(solver, adjoint, rtol, atol, dt0, max_steps, event, field_args):
    """``segment(y, t_start, t_end) -> (y(t_end) or the state where an event stopped it, that time, diffrax's result,
    accepted steps, gradient evaluations)``: one adaptive diffrax solve of the flow, saving its end only. Its first
    step is ``dt0``, else diffrax's estimate (a given ``dt0`` brings diffrax's runtime check of its sign, a host
    callback: the program is then not kept by the persistent compilation cache)."""

    def vector_field(t, y, args):
        loss_cc, r = args
        return jax.tree_util.tree_map(lambda ri, g: -ri * g, r, jax.grad(loss_cc)(y))

    per_step, per_start = _evaluations(solver, dt0)

    def segment(y, t_start, t_end):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            solver,
            t0=t_start,
            t1=t_end,
            dt0=dt0,
            y0=y,
            args=field_args,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            event=event,
            max_steps=max_steps,
            adjoint=adjoint,
            throw=False,
        )
        end = jax.tree_util.tree_map(lambda leaf: leaf[0], sol.ys)
        accepted = sol.stats["num_accepted_steps"]
        evals = sol.stats["num_steps"] * per_step + jnp.where(t_end > t_start, per_start, 0)
        return end, sol.ts[0], sol.result, jnp.asarray(accepted, jnp.int32), jnp.asarray(evals, jnp.int32)

    return segment


def _integrate_between_saves(segment, y0, ts, t1: float, progress: bool, backsolve: bool):
    """The flow from 0 through every save time to ``t1``, one `segment` solve per interval in a ``lax.scan``: (the
    states at ``ts``, the final state, its time, diffrax's result, (accepted steps, gradient evaluations)). A solve
    that stops (an event, a failure) ends the flow: the later save times hold its final state.

    Diffrax's own ``SaveAt(ts=...)`` would interpolate the states at ``ts`` inside one solve, but it checks the
    times with host callbacks, which keep JAX's persistent compilation cache from storing the program; here every
    save time is the end of a solve, computed (not interpolated) to the solver's tolerance. (With ``backsolve`` the
    time one solve reached enters the next as a constant: that adjoint takes no derivative in its times, and without
    events the time reached is the save time itself.)"""
    ends = jnp.concatenate([ts, jnp.asarray([t1], ts.dtype)])
    bar = _progress_bar(t1) if progress else None
    zero = jnp.zeros((), jnp.int32)

    def step(carry, t_end):
        y, t, stopped, result, accepted, evals = carry
        start = jax.lax.stop_gradient(t) if backsolve else t
        # once stopped, the solves are empty: one from a non-finite state would shrink its steps up to max_steps, for
        # every member of a vmapped batch
        y1, t_stop, res, n_acc, n_evals = segment(y, start, jnp.where(stopped, start, jnp.maximum(t_end, start)))
        y1 = jax.tree_util.tree_map(lambda new, old: jnp.where(stopped, old, new), y1, y)
        t_stop = jnp.where(stopped, t, t_stop)
        res = diffrax.RESULTS.where(stopped, result, res)
        if bar is not None:
            jax.debug.callback(bar, t_stop)
        carry = (y1, t_stop, stopped | (res != diffrax.RESULTS.successful), res, accepted + n_acc, evals + n_evals)
        return carry, y1

    init = (y0, jnp.zeros((), ts.dtype), jnp.asarray(False), diffrax.RESULTS.successful, zero, zero)
    (final, t_final, _, result, accepted, evals), states = jax.lax.scan(step, init, ends)
    saved = jax.tree_util.tree_map(lambda leaf: leaf[:-1], states)
    return saved, final, t_final, result, (accepted, evals)


def _progress_bar(t1: float):
    """A tqdm bar over [0, t1], advanced from inside the program to the time each solve reached."""
    from tqdm.auto import tqdm

    bar = tqdm(total=float(t1), desc="gradient flow", unit=" time", bar_format="{l_bar}{bar}| t = {n:.4g}/{total:.4g}")

    def advance(t):
        t = float(np.max(np.asarray(t)))
        bar.update(max(t - bar.n, 0.0))
        if t >= bar.total:
            bar.close()

    return advance


def _flow_solution(ts, saved, final, t_final, result, steps, loss_cc, static, divergence_threshold) -> "FlowSolution":
    """The `FlowSolution` of a solve: losses and gradient norms at the saved states, and the flags that tell a
    divergence (non-finite or exploding state, or a blow-up that stalls the solver) from a solver failure."""
    grad_cc = jax.grad(loss_cc)
    losses = jax.vmap(loss_cc)(saved)
    grad_norms = jax.vmap(lambda y: _tree_norm(grad_cc(y)))(saved)
    final_norm = _tree_norm(final)
    final_loss = loss_cc(final)
    bad_state = ~jnp.isfinite(final_norm) | (final_norm > divergence_threshold) | ~jnp.isfinite(final_loss)
    event_hit = result == diffrax.RESULTS.event_occurred
    failed = (result != diffrax.RESULTS.successful) & ~event_hit
    # a solver that stalls while the gradient explodes is a finite-time blow-up, not stiffness
    blow_up = failed & (grad_norms[-1] > 1e3 * (grad_norms[0] + 1.0))
    bad_state = bad_state | blow_up
    accepted, evals = steps
    return FlowSolution(
        ts=ts,
        models=eqx.combine(saved, static),
        losses=losses,
        grad_norms=grad_norms,
        final=eqx.combine(final, static),
        t_final=t_final,
        num_steps=accepted,
        num_grad_evals=evals,
        stopped_by_event=event_hit & ~bad_state,
        diverged=bad_state,
        solver_failed=failed & ~bad_state,
        result=result,
    )


def _check_save_times(ts: np.ndarray, t1: float) -> None:
    if ts.ndim != 1 or ts.size == 0 or np.any(np.diff(ts) < 0) or ts[0] < 0 or ts[-1] > t1:
        raise ValueError(f"ts must be a non-empty increasing 1-D grid inside [0, t1 = {t1}], got {ts}.")


def _after_boolean_stop(tree, what: str):
    """``tree`` (saved states, final state, stop time) unchanged, and not differentiable: the stop time of a boolean
    event is the end of a solver step, so its derivative is lost, and a derivative of anything after it would
    silently miss d(stop time)/dθ. Differentiating through it raises ``ValueError`` (at trace time)."""

    @jax.custom_jvp
    def identity(x):
        return x

    @identity.defjvp
    def _jvp(primals, tangents):
        raise ValueError(
            f"gradient_flow({what}=...) stops at a boolean event, whose time is not differentiable: a derivative "
            f"through it would miss d(stop time)/dθ. Differentiate a fixed horizon (no {what}), or stop at a loss "
            "level with stop_at_loss=ε, whose time is found by a root finder and is differentiable."
        )

    return jax.tree_util.tree_map(lambda x: identity(x) if eqx.is_inexact_array(x) else x, tree)


def _evaluations(solver, dt0) -> tuple[int, int]:
    """Vector-field evaluations (per step, at the start of a solve) of a Runge–Kutta solver: a step evaluates its
    fresh stages (an FSAL solver's first stage is the previous step's last); a solve starts with diffrax's first-step
    estimate (two evaluations) unless ``dt0`` is given, and an FSAL solver's first stage."""
    tableau = getattr(solver, "tableau", None)
    fsal = tableau is not None and tableau.fsal
    per_step = 1 if tableau is None else tableau.num_stages - fsal
    return per_step, (2 if dt0 is None else 0) + fsal


def _first_nonfinite_save(sol: FlowSolution):
    """(time, "the loss is …" or "the gradient norm is …", " in flow (i,)" for a batch) at the first saved time
    whose loss or gradient norm is not finite, the earliest over every flow of a batch; None when all are finite."""
    losses, grads = np.asarray(sol.losses, float), np.asarray(sol.grad_norms, float)
    bad = ~np.isfinite(losses) | ~np.isfinite(grads)
    if not bad.any():
        return None
    ts = np.broadcast_to(np.asarray(sol.ts, float), bad.shape)
    t_bad = np.where(bad, ts, np.inf)
    at = np.unravel_index(np.argmin(t_bad), bad.shape)
    what = f"the loss is {losses[at]:g}" if not np.isfinite(losses[at]) else f"the gradient norm is {grads[at]:g}"
    return float(ts[at]), what, "" if bad.ndim == 1 else f" in flow {tuple(int(i) for i in at[:-1])}"


def check_flow(sol: FlowSolution) -> FlowSolution:
    """``sol`` unchanged if its flow (every flow, for a batch) neither diverged nor failed; else raise
    ``FloatingPointError`` (divergence) or ``RuntimeError`` (solver failure) naming the time and the quantity.
    On traced values (under ``jit``, ``vmap`` or ``grad``) an ``eqx.error_if`` runtime error instead."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(sol)):  # under jit, vmap or grad
        sol = eqx.error_if(
            sol,
            sol.diverged,
            "gradient flow diverged (non-finite or exploding loss, parameters or "
            "gradient); call gradient_flow outside jit to get the time and the quantity.",
        )
        return eqx.error_if(
            sol,
            sol.solver_failed,
            "gradient flow stopped before t1 (solver failure: a stiff flow, "
            "or a NaN in the gradient); call gradient_flow outside jit to tell which, or try "
            "solver='kvaerno5' or a larger max_steps.",
        )
    t = float(np.max(np.asarray(sol.t_final)))
    diverged, failed = bool(np.any(np.asarray(sol.diverged))), bool(np.any(np.asarray(sol.solver_failed)))
    if not (diverged or failed):
        return sol
    final_grad = np.asarray(sol.grad_norms, float)[..., -1]  # the saves after a stop hold the final state
    if failed and not diverged and not np.all(np.isfinite(final_grad)):
        raise FloatingPointError(
            f"gradient flow stopped at t = {t:.6g} before t1: the gradient there is not finite (norm {final_grad}), "
            "so the solver could not step past it (not stiffness). Check the loss for NaN in its derivative (e.g. "
            "jnp.where over a branch that is NaN, a sqrt or log at 0)."
        )
    first_bad = _first_nonfinite_save(sol)
    if first_bad is not None:
        t_bad, what, where = first_bad
        stuck = "" if diverged else " (the solver could not step past it)"
        raise FloatingPointError(
            f"gradient flow hit a non-finite value{where}: {what} at the saved time t = {t_bad:.6g}, the first saved "
            f"time at which it appears{stuck}. Check the loss for NaN (a log or a division at these parameters), or "
            "reduce the initialization scale or the time horizon."
        )
    if diverged:
        # the save times after the stop hold the final state, so the last saved loss is the final one
        loss = np.asarray(sol.losses)[..., -1]
        batch = np.ndim(sol.t_final)  # leading axes of a vmapped batch of flows
        leaves = jax.tree_util.tree_leaves(eqx.filter(sol.final, eqx.is_inexact_array))
        norm = np.sqrt(sum(np.sum(np.asarray(x, float) ** 2, axis=tuple(range(batch, np.ndim(x)))) for x in leaves))
        if not np.all(np.isfinite(norm)):
            what = f"‖θ‖ = {norm}"
        else:
            what = (
                f"‖∇L‖ grew from {np.asarray(sol.grad_norms)[..., 0]} to {np.asarray(sol.grad_norms)[..., -1]}, "
                f"‖θ‖ = {norm}, loss = {loss}"
            )
        raise FloatingPointError(
            f"gradient flow diverged at t = {t:.6g}: {what}. Reduce the initialization scale or the time "
            "horizon; the loss has no finite minimizer along this trajectory."
        )
    if failed:
        raise RuntimeError(
            f"gradient flow stopped at t = {t:.6g} before t1 (diffrax: {sol.result}). For stiff flows use "
            "solver='kvaerno5', or raise max_steps / loosen rtol."
        )
    return sol
