"""Long training runs: optax (AdamW by default) on fresh prompts every step, compiled in chunks of steps
with ``lax.scan``, with a progress bar, periodic evaluation and atomic, resumable checkpoints.

Step s draws its randomness from ``fold_in(key, s)``, so the trajectory does not depend on the chunking:
a run interrupted after a checkpoint and started again with the same arguments resumes from it and
follows exactly the loss curve of an uninterrupted run (same backend).

Example::

    loss = lambda m, key, step: icl.losses.sequence_loss(m, task.prompts(key, 64))
    res = icl.dynamics.train(loss, model, 20_000, key, checkpoint="runs/std.ckpt")
    res.model, res.losses, res.evals
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Int, PRNGKeyArray, PyTree

from .. import _validate
from ..runtime import placement, xla_options
from ..runtime import planning as _planning
from ..runtime.profiling import StageTimer
from . import checkpoint as _checkpoint
from .checkpoint import CheckpointError, checkpoint_header, load_checkpoint, save_checkpoint
from .descent import check_finite_curve


class Curriculum(eqx.Module):
    """Curriculum on the input dimension and the number of examples (Garg et al. §3): both start small and
    grow by ``*_inc`` every ``every`` steps up to the task's full size. ``at(step)`` gives the
    ``(d_active, n_active)`` a task's ``prompts`` takes (traceable in ``step``)."""

    d_start: int = eqx.field(static=True)
    d_end: int = eqx.field(static=True)
    d_inc: int = eqx.field(static=True)
    n_start: int = eqx.field(static=True)
    n_end: int = eqx.field(static=True)
    n_inc: int = eqx.field(static=True)
    every: int = eqx.field(static=True)

    def __init__(self, d=(5, 20, 1), n=(11, 41, 2), every: int = 2000):
        for name, (start, end, inc) in (("d", d), ("n", n)):
            if not 1 <= start <= end or inc < 0:
                raise ValueError(
                    f"curriculum {name} = (start, end, increment) needs 1 <= start <= end and "
                    f"increment >= 0; got {(start, end, inc)}."
                )
        if int(every) < 1:
            raise ValueError(f"every must be >= 1 step, got {every}.")
        (self.d_start, self.d_end, self.d_inc), (self.n_start, self.n_end, self.n_inc) = map(int, d), map(int, n)
        self.every = int(every)

    def at(self, step: Int[Array, ""]) -> tuple[Int[Array, ""], Int[Array, ""]]:
        k = step // self.every
        return (
            jnp.minimum(self.d_start + k * self.d_inc, self.d_end),
            jnp.minimum(self.n_start + k * self.n_inc, self.n_end),
        )


@dataclasses.dataclass
class TrainResult:
    """``losses`` (steps done, …): the training loss of every step (a vector per step when the loss function
    returns one loss per ensemble member); ``evals``: name -> array over ``eval_steps``;
    ``steps_per_second``: over the chunks run by this call, their compilation excluded (a resumed run that ran
    no chunk reports the rate its checkpoint stored; nan if none is known).
    ``step`` < ``n_steps`` when a ``deadline`` stopped the run (``complete`` is False): the checkpoint holds
    it, and the same call again resumes. A run that a ``time_limit`` stopped is complete (``time_limited``)."""

    model: PyTree
    opt_state: PyTree
    losses: np.ndarray
    eval_steps: np.ndarray
    evals: dict
    steps_per_second: float
    resumed_from: int
    step: int = 0
    n_steps: int = 0
    time_limited: bool = False

    @property
    def complete(self) -> bool:
        return self.step >= self.n_steps or self.time_limited

    def status(self) -> str:
        """ "complete" or "partial, step s of S" (for reports)."""
        return "complete" if self.complete else f"partial, step {self.step:,} of {self.n_steps:,}"


def cast_floating(tree: PyTree, dtype) -> PyTree:
    """Every floating array leaf cast to ``dtype`` (mixed precision: bf16 compute on f32 master weights)."""
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, tree)


def steps_from(start: int, n: int) -> Array:
    """The step numbers start … start + n − 1 of a chunk, made on the host: ``jnp.arange(start, start + n)`` compiles
    a program for every start."""
    return jax.device_put(np.arange(start, start + n, dtype=np.int32))


# How `train(ensemble=True)` runs its members: True batches them into one step (``vmap``: a GPU runs K small models in
# about the time of one), False runs them one after another inside the same compiled chunk (``lax.map`` over the
# members, each running the one-model chunk), None means batched where training runs on an accelerator. On the CPU a
# batched step costs more per member than one model's step, and members in turn about the same (one core, quick sizes:
# Zhang et al.'s GPT-2, six members, 1.36× against 1.04×; the AlgoFormer, three members, 1.13× against 0.97×;
# benchmarks/README.md). The members' results agree to float rounding either way. $JAXICL_BATCH_MEMBERS sets it for a
# whole run, the `--jobs` processes included.
BATCH_MEMBERS = xla_options.switch_from_env("JAXICL_BATCH_MEMBERS")


def _batch_members() -> bool:
    """Whether an ensemble's members are batched into one step: `BATCH_MEMBERS`, else whether the chunk is traced to
    run on an accelerator (`placement.current_platform`, as the transformers' own compile choices: ``--device cpu``
    on a GPU machine trains on the CPU)."""
    return placement.current_platform() != "cpu" if BATCH_MEMBERS is None else bool(BATCH_MEMBERS)


def chunk_runner(
    loss_fn,
    static: PyTree,
    optimizer: optax.GradientTransformation,
    compute_dtype=None,
    ensemble: bool = False,
    member_data: PyTree = None,
):
    """The compiled body of `train`: ``run(params, opt_state, key, steps) -> ((params, opt_state),
    losses)`` takes one optimizer step per entry of ``steps`` (an array of step numbers) in a ``lax.scan``,
    step s on a fresh batch from ``fold_in(key, s)``. ``params`` and ``static`` are ``eqx.partition``'s halves.
    With ``ensemble``, params, optimizer state and key have a leading member axis and the step (loss, gradient and
    optimizer update) is ``vmap``-ped over it, or the members run their chunks one after another (`BATCH_MEMBERS`):
    member i is exactly a one-model run with key ``key[i]``, and with ``member_data`` (leading member axis) its loss is
    ``loss_fn(model, key, step, member_data[i])``. Compiled with `jaxicl.runtime.xla_options.TRAINING_COMPILER_OPTIONS`."""

    def loss_of(p, k, s, data):
        m = eqx.combine(p, static)
        m = m if compute_dtype is None else cast_floating(m, compute_dtype)
        loss = loss_fn(m, k, s) if data is None else loss_fn(m, k, s, data)
        return jnp.sum(loss.astype(jnp.float32)), loss.astype(jnp.float32)

    def update(p, state, k, s, data):
        (_, loss), g = jax.value_and_grad(loss_of, has_aux=True)(p, jax.random.fold_in(k, s), s, data)
        updates, state = optimizer.update(g, state, p)
        return optax.apply_updates(p, updates), state, loss

    batched = ensemble and _batch_members()
    step = jax.vmap(update, in_axes=(0, 0, 0, None, None if member_data is None else 0)) if batched else update

    def scan(p, state, k, steps, data):
        def one(carry, s):
            p, state, loss = step(*carry, k, s, data)
            return (p, state), loss

        return jax.lax.scan(one, (p, state), steps)

    @functools.partial(jax.jit, compiler_options=xla_options.TRAINING_COMPILER_OPTIONS)
    def run(p, state, k, steps):
        if not ensemble or batched:
            return scan(p, state, k, steps, member_data)
        carry, losses = jax.lax.map(lambda m: scan(*m[:3], steps, m[3]), (p, state, k, member_data))
        return carry, jnp.moveaxis(losses, 0, 1)  # (steps, members, …) as the batched step returns them

    return run


def stack_members(models: list[PyTree]) -> PyTree:
    """One pytree whose array leaves stack ``models`` (all of one structure and shape) on a new leading axis: the
    ensemble `train` takes with ``ensemble=True``. `member` takes one back out."""
    if not models:
        raise ValueError("stack_members: no models to stack.")
    arrays = [eqx.filter(m, eqx.is_array) for m in models]
    structure = jax.tree_util.tree_structure(arrays[0])
    for i, a in enumerate(arrays[1:], 1):
        if jax.tree_util.tree_structure(a) != structure or any(
            np.shape(x) != np.shape(y)
            for x, y in zip(jax.tree_util.tree_leaves(arrays[0]), jax.tree_util.tree_leaves(a))
        ):
            raise ValueError(
                f"stack_members: model {i} differs in structure or shape from model 0; an ensemble needs "
                "models of one shape (train the others separately)."
            )
    return eqx.combine(_stack(arrays), eqx.filter(models[0], eqx.is_array, inverse=True))


@eqx.filter_jit  # one program, not one per leaf
def _stack(arrays: list) -> PyTree:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *arrays)


@eqx.filter_jit
def _take(arrays: PyTree, i) -> PyTree:
    return jax.tree_util.tree_map(lambda x: x[i], arrays)


def member(ensemble: PyTree, i: int) -> PyTree:
    """Member ``i`` of an ensemble (array leaves stacked on axis 0), e.g. of ``train(..., ensemble=True).model``.
    One compiled program for every member (not one per leaf and member, as eager indexing would compile)."""
    arrays, static = eqx.partition(ensemble, eqx.is_array)
    return eqx.combine(_take(arrays, jnp.asarray(i)), static)


def ensemble_size_that_fits(
    loss_fn,
    model: PyTree,
    *,
    optimizer: optax.GradientTransformation | None = None,
    chunk: int = 2,
    compute_dtype=None,
    memory_budget: int | None = None,
    max_members: int = 1024,
) -> tuple[int, int]:
    """The largest K ≤ ``max_members`` for which `train`'s chunk program of K copies of ``model`` (one model,
    not a stack) fits in ``memory_budget`` bytes (default ``jaxicl.sweep.device_memory_budget()``: 75 % of the
    device's memory), from one compilation: the program of an ensemble of one, whose memory (``memory_analysis``)
    is all per member (parameters, optimizer state, keys, activations), so K members need about K times it (XLA may
    lay out the K-member program a few percent differently; the default budget leaves a quarter of the device
    free). Nothing is run. Returns (K, bytes of one member); K = 1 when the backend reports no memory. A model that does
    not fit even once is a ``MemoryError``.

    Example: ``K, _ = ensemble_size_that_fits(loss, model, compute_dtype=jnp.bfloat16)``, then
    ``train(loss, stack_members([model] * K), ..., ensemble=True)``."""
    from ..sweep import device_memory_budget, program_bytes

    optimizer = optimizer or optax.adamw(1e-4)
    budget = device_memory_budget() if memory_budget is None else _validate.integer("memory_budget", memory_budget)
    max_members = _validate.integer("max_members", max_members)
    params, static = eqx.partition(stack_members([model]), eqx.is_inexact_array)
    run = chunk_runner(loss_fn, static, optimizer, compute_dtype, ensemble=True)
    state = jax.eval_shape(jax.vmap(optimizer.init), params)
    keys = jax.ShapeDtypeStruct((1, 2), jnp.uint32)
    one = program_bytes(run.lower(params, state, keys, jax.ShapeDtypeStruct((int(chunk),), jnp.int32)).compile())
    if one == 0:
        return 1, 0
    if one > budget:
        raise MemoryError(
            f"one model's training chunk needs {one / 2**30:.2f} GiB, more than the budget of "
            f"{budget / 2**30:.2f} GiB: reduce the batch or the model."
        )
    return int(min(max_members, budget // one)), one


def _looks_stacked(params: PyTree) -> bool:
    """Whether every floating-point leaf has a leading axis of one size > 1, as `stack_members` makes them."""
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(params)}
    return len(sizes) == 1 and None not in sizes and sizes.pop() > 1


def _ensemble_size(params: PyTree, static: PyTree, key, member_data: PyTree = None) -> int:
    """Members of an ensemble ``train``: the common leading axis of the trainable leaves and of ``key``."""
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(params)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            "train(ensemble=True) needs every floating-point leaf of the model stacked on a leading member "
            f"axis of one size (jaxicl.dynamics.stack_members); got leading sizes {sorted(map(str, sizes))}."
        )
    (k,) = sizes
    if any(eqx.is_array(x) for x in jax.tree_util.tree_leaves(static)):
        raise ValueError(
            "train(ensemble=True): the model has integer or boolean arrays; only floating-point leaves "
            "are trained and vmapped, so such arrays cannot differ between members. Make them static."
        )
    if np.shape(key)[:1] != (k,) or np.ndim(key) != 2:
        raise ValueError(
            f"train(ensemble=True) needs one PRNG key per member, an array of shape ({k}, 2) "
            f"(jax.random.split(key, {k})); got shape {np.shape(key)}."
        )
    data_sizes = {np.shape(x)[:1] for x in jax.tree_util.tree_leaves(eqx.filter(member_data, eqx.is_array))}
    if data_sizes - {(k,)}:
        raise ValueError(
            f"train: every array of member_data needs a leading member axis of size {k}; got leading "
            f"sizes {sorted(s[0] if s else None for s in data_sizes)}."
        )
    return k


def step_seconds(
    loss_fn,
    model: PyTree,
    *,
    optimizer: optax.GradientTransformation | None = None,
    chunk: int = 20,
    repeats: int = 3,
    compute_dtype=None,
    key: PRNGKeyArray | None = None,
    ensemble: bool = False,
) -> float:
    """Seconds per training step of `train` on this loss and model (with ``ensemble``, one step of every member
    together): the median over ``repeats`` runs of a compiled chunk of ``chunk`` steps, after a first run that
    compiles it. The model is not updated."""
    if int(chunk) < 1 or int(repeats) < 1:
        raise ValueError(f"need chunk >= 1 and repeats >= 1, got {chunk}, {repeats}.")
    optimizer = optimizer or optax.adamw(1e-4)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    run = chunk_runner(loss_fn, static, optimizer, compute_dtype, ensemble)
    state = (jax.vmap(optimizer.init) if ensemble else optimizer.init)(params)
    if key is None:
        key = jax.random.PRNGKey(0)
        if ensemble:
            key = jax.random.split(key, jax.tree_util.tree_leaves(params)[0].shape[0])
    if ensemble:
        _ensemble_size(params, static, key)
    fold_in = jax.vmap(jax.random.fold_in, (0, None)) if ensemble else jax.random.fold_in
    steps = jnp.arange(int(chunk))
    jax.block_until_ready(run(params, state, key, steps))
    times = []
    for i in range(int(repeats)):
        t0 = time.perf_counter()
        jax.block_until_ready(run(params, state, fold_in(key, i + 1), steps))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / int(chunk)


@placement.placed("throughput")  # a training loop fills an accelerator (jaxicl.runtime.placement)
def train(
    loss_fn: Callable[[PyTree, PRNGKeyArray, Int[Array, ""]], Array],
    model: PyTree,
    n_steps: int,
    key: PRNGKeyArray,
    *,
    optimizer: optax.GradientTransformation | None = None,
    chunk_size: int = 500,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    eval_fn: Callable[[PyTree], dict] | None = None,
    eval_every: int | None = None,
    compute_dtype=None,
    config: dict | None = None,
    progress: bool = True,
    deadline: float | None = None,
    time_limit: float | None = None,
    label: str | None = None,
    ensemble: bool = False,
    member_data: PyTree = None,
) -> TrainResult:
    """Train ``model`` for ``n_steps`` steps on ``loss_fn(model, key, step)`` (a fresh batch per step).

    Args:
        loss_fn: returns a scalar loss, or a vector (one loss per member of a ``vmap``-ped ensemble; their
            sum is differentiated, so members train independently under an elementwise optimizer like Adam).
        optimizer: default ``optax.adamw(1e-4)``; pass any optax transformation (a schedule as its lr).
        chunk_size: steps per compiled ``lax.scan``; the progress bar, evaluation and checkpoints happen
            between chunks (``eval_every`` and ``checkpoint_every`` are multiples of it).
        checkpoint: file to resume from if it exists and to write every ``checkpoint_every`` steps (default:
            every chunk) and at the end. A checkpoint of another configuration (model structure, shapes,
            optimizer state or ``config``) is refused with an error.
        eval_fn: ``eval_fn(model) -> {name: scalar}`` at step 0 and every ``eval_every`` steps.
        compute_dtype: e.g. ``jnp.bfloat16``: the forward and backward passes run in this dtype, the
            master weights and optimizer state stay in their own (float32) dtype.
        config: JSON-able description of the run, stored in and checked against the checkpoint.
        deadline: a ``time.time()`` at which to stop: the chunk in progress finishes (every call trains at least
            one chunk, so slices always progress), a checkpoint is written and the result has ``complete`` False;
            calling again with the same arguments resumes (training in slices of wall-clock time follows the
            uninterrupted trajectory exactly).
        time_limit: seconds of training, counted as ``steps_per_second`` counts them (compilation excluded): the run
            stops after the chunk at which steps done × seconds per step reach it, and is complete
            (``time_limited``). Runs compared at equal training time, as Yang et al.'s Fig. 5, train no further. A
            resumed run counts its checkpoint's steps at the step time stored there until it has measured its own.
        label: name of the run in progress messages.
        ensemble: train K models of one shape as one compiled program: batched into one step on accelerators (a
            GPU runs K small models in about the time of one), one after another in each chunk on the CPU
            (`BATCH_MEMBERS`). ``model`` is their stack (`stack_members`), ``loss_fn`` the loss of *one* model and
            ``key`` K keys (``jax.random.split(key, K)``). Each member has its own data stream
            (``fold_in(key[i], step)``) and its own optimizer state, whatever the optimizer (its update is per member
            too, so even a global-norm clip stays per member): member i follows the one-model run with ``key[i]`` to
            float rounding. The losses have a member axis; `member` takes one model out of the result.
        member_data: with ``ensemble``, what distinguishes the members' problems (e.g. their tasks, stacked with
            ``eqx.filter_vmap``; leading member axis): member i's loss is ``loss_fn(model, key, step, member_data[i])``.

    With ``progress``, the seconds per step and the estimated time to finish are printed before training when the
    checkpoint has them (a resumed slice), else after the first chunk (its compilation excluded). ``train`` runs on
    the host between compiled chunks (progress,
    checkpoints), so it cannot be differentiated: use `jaxicl.optax_train` inside ``jax.grad``.

    A non-finite loss raises ``FloatingPointError`` naming the step; the last checkpoint is left intact.

    Returns:
        `TrainResult`: the trained ``model``, its optimizer state, the loss of every step, the evaluations and the
        steps they were taken at, the measured steps per second, and where it started and stopped (a ``deadline``
        or ``time_limit`` may stop it early: ``complete`` says whether it reached ``n_steps``).

    Example:
        ```python
        import jax, jax.numpy as jnp
        import optax
        import jaxicl as icl

        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)))
        model = icl.models.LinearSelfAttention.random_init(3, 0.1, jax.random.PRNGKey(0))
        def loss(m, key, step):  # a fresh batch of prompts every step
            prompts = task.sample(key, 64)
            return 0.5 * jnp.mean((jax.vmap(m.predict)(prompts) - prompts.y_query) ** 2)

        res = icl.train(loss, model, 200, jax.random.PRNGKey(1), optimizer=optax.adam(1e-2),
                        chunk_size=100, progress=False)
        assert res.losses.shape == (200,) and res.losses[-20:].mean() < res.losses[:20].mean()
        ```
    """
    _refuse_tracers(model, "train")
    n_steps, chunk_size, checkpoint_every, eval_every = _checked_schedule(
        n_steps, chunk_size, checkpoint_every, eval_every, time_limit
    )
    optimizer = optimizer or optax.adamw(1e-4)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state, fingerprint = _initial_state(params, static, optimizer, key, ensemble, member_data, config)
    params, opt_state, step, key, losses, evals, stored_seconds = _resume(
        checkpoint, params, opt_state, fingerprint, key, n_steps
    )
    resumed_from = step

    run_chunk = chunk_runner(loss_fn, static, optimizer, compute_dtype, ensemble, member_data)
    if _planning.active() is not None:
        return _plan_run(run_chunk, params, opt_state, static, key, step, n_steps, losses, ensemble, label, eval_fn)

    def evaluate(s):
        if eval_fn is not None and str(s) not in evals and (s in (0, n_steps) or (eval_every and s % eval_every == 0)):
            evals[str(s)] = {k: np.asarray(v).tolist() for k, v in eval_fn(eqx.combine(params, static)).items()}

    def seconds_per_step():  # this call's measurement, else the one stored by the run it resumes
        return timed_seconds / timed_steps if timed_steps else stored_seconds

    def save(s):
        if checkpoint is not None:
            save_checkpoint(
                checkpoint, params, opt_state, s, key, np.asarray(losses), evals, fingerprint, seconds_per_step()
            )

    from tqdm.auto import tqdm

    if progress and stored_seconds and step < n_steps:  # a resumed slice knows its step time before it starts
        _say(label, stored_seconds, "measured by the previous slice", n_steps - step)
    bar = tqdm(total=n_steps, initial=step, disable=not progress, unit="step", dynamic_ncols=True)
    evaluate(step)
    timed_steps, timed_seconds, first = 0, 0.0, True

    def out_of_time():
        return time_limit is not None and (seconds_per_step() or 0.0) * step >= time_limit

    def past_deadline():
        return deadline is not None and time.time() >= deadline

    while step < n_steps and (first or not past_deadline()) and not out_of_time():  # ≥ 1 chunk per call
        n = min(chunk_size, n_steps - step)
        new_params, new_state, chunk_losses, chunk = _timed_chunk(
            run_chunk, params, opt_state, key, step, n, hint=first and not ensemble
        )
        if first and progress:
            _say(
                label, chunk.run / n, f"first chunk, compilation of {chunk.compile:.1f} s excluded", n_steps - step - n
            )
        check_finite_curve(chunk_losses, "training loss", first_step=step)
        params, opt_state = new_params, new_state
        losses.extend(chunk_losses)
        step += n
        timed_steps, timed_seconds = timed_steps + n, timed_seconds + chunk.run  # compilation excluded
        first = False
        bar.update(n)
        bar.set_postfix(loss=f"{float(np.mean(chunk_losses)):.4g}", steps_per_s=f"{n / chunk.wall:.1f}")
        evaluate(step)
        if step % checkpoint_every == 0 or step == n_steps or past_deadline() or out_of_time():
            save(step)
    bar.close()
    eval_steps, eval_arrays = _eval_arrays(evals)
    time_limited = step < n_steps and out_of_time()
    if step < n_steps and progress:
        stop = f"time limit of {time_limit:.3g} s reached" if time_limited else "deadline reached"
        resume = "" if time_limited else f" of {n_steps:,}; checkpointed, run again to resume"
        print(f"[train] {label or 'run'}: {stop} at step {step:,}{resume}", flush=True)
    sps = seconds_per_step()
    model, losses, rate = eqx.combine(params, static), np.asarray(losses), 1 / sps if sps else float("nan")
    return TrainResult(
        model, opt_state, losses, eval_steps, eval_arrays, rate, resumed_from, step, n_steps, time_limited
    )


def _initial_state(params, static, optimizer, key, ensemble: bool, member_data, config):
    """(the optimizer's initial state, the run's checkpoint fingerprint); an ensemble's members and keys checked."""
    if ensemble:
        _ensemble_size(params, static, key, member_data)
    elif member_data is not None:
        raise ValueError("train: member_data is for ensembles (ensemble=True).")
    init = jax.vmap(optimizer.init) if ensemble else optimizer.init
    opt_state = eqx.filter_jit(init)(params)  # one program, not one per parameter shape
    return opt_state, _checkpoint.fingerprint(params, opt_state, config)


def _timed_chunk(run_chunk, params, opt_state, key, step: int, n: int, hint: bool):
    """One compiled chunk of ``n`` steps from ``step``: (parameters, optimizer state, losses as numpy, its
    `StageTimer` lap, compilation apart from the run). ``hint``: a failing loss on what looks like a stack of models
    says to pass ``ensemble=True``."""
    lap = StageTimer()
    try:
        (new_params, new_state), chunk_losses = run_chunk(params, opt_state, key, steps_from(step, n))
    except (ValueError, TypeError) as e:
        if hint and _looks_stacked(params):
            raise ValueError(
                f"train: the loss failed on the model ({e}). Every floating-point leaf of the model has "
                "one leading axis of the same size: if it is a stack of models (stack_members), pass "
                "ensemble=True with one key per member."
            ) from e
        raise
    chunk_losses = np.asarray(chunk_losses)  # waits for the chunk
    return new_params, new_state, chunk_losses, lap.lap("chunk")


def _say(label, seconds_per_step: float, measured: str, left: int) -> None:
    """The step time and the estimated time to finish, before training or after its first chunk."""
    print(
        f"[train] {label or 'run'}: {1e3 * seconds_per_step:.3g} ms/step ({measured}); "
        f"{left:,} steps to go ≈ {left * seconds_per_step / 60:.3g} min",
        flush=True,
    )


def _checked_schedule(n_steps, chunk_size, checkpoint_every, eval_every, time_limit):
    """`train`'s step counts checked: (n_steps, chunk_size, checkpoint_every, eval_every), the intervals multiples
    of the chunk (a checkpoint or an evaluation falls between two compiled chunks)."""
    n_steps = _validate.integer("train: n_steps", n_steps, low=0)
    chunk_size = _validate.integer("train: chunk_size", chunk_size)
    if time_limit is not None:
        _validate.real("train: time_limit (seconds)", time_limit, gt=0)
    checkpoint_every = (
        chunk_size if checkpoint_every is None else _validate.integer("train: checkpoint_every", checkpoint_every)
    )
    eval_every = eval_every and _validate.integer("train: eval_every", eval_every)
    for name, every in (("checkpoint_every", checkpoint_every), ("eval_every", eval_every)):
        if every and every % chunk_size:
            raise ValueError(f"{name} = {every} must be a multiple of chunk_size = {chunk_size}.")
    return n_steps, chunk_size, checkpoint_every, eval_every


def _resume(checkpoint, params, opt_state, fingerprint, key, n_steps):
    """The state `train` starts from: ``checkpoint``'s where it exists (`load_checkpoint`, which refuses one of
    other settings or another key), else step 0. Returns (params, opt_state, step, key, losses, evals, the step time
    the checkpoint's run measured or None)."""
    if checkpoint is None or not Path(checkpoint).exists():
        return params, opt_state, 0, key, [], {}, None
    params, opt_state, step, key, old, evals = load_checkpoint(checkpoint, params, opt_state, fingerprint, key)
    if step > n_steps:
        raise CheckpointError(
            f"checkpoint {checkpoint} is at step {step}, beyond n_steps = {n_steps}: it belongs to "
            "a longer run. Delete it, or use another checkpoint path."
        )
    stored_seconds = checkpoint_header(checkpoint).get("seconds_per_step")
    return params, opt_state, step, key, list(old), evals, stored_seconds


def _eval_arrays(evals: dict) -> tuple[np.ndarray, dict]:
    """The evaluations recorded by step (``{"step": {name: value}}``) as (steps, {name: values over the steps})."""
    eval_steps = np.array(sorted(int(s) for s in evals))
    names = sorted({k for v in evals.values() for k in v})
    return eval_steps, {k: np.array([evals[str(s)][k] for s in eval_steps]) for k in names}


def _plan_run(
    run_chunk,
    params,
    opt_state,
    static,
    key,
    step: int,
    n_steps: int,
    losses: list,
    ensemble: bool,
    label: str | None,
    eval_fn=None,
) -> TrainResult:
    """`train` under `planning`: two chunks of the planned length (the second timed), recorded."""
    planned, steps = _planning.active()
    n = max(1, min(steps, (n_steps - step) // 2))
    times, done = [], step
    for _ in range(2 if n_steps - step >= 2 else 1 if n_steps > step else 0):
        t0 = time.perf_counter()
        (params, opt_state), chunk_losses = run_chunk(params, opt_state, key, steps_from(done, n))
        chunk_losses = np.asarray(chunk_losses)  # waits for the chunk
        times.append(time.perf_counter() - t0)
        check_finite_curve(chunk_losses, "training loss", first_step=done)
        losses.extend(chunk_losses)
        done += n
    members = int(np.shape(key)[0]) if ensemble else 1
    seconds = times[-1] / n if times else float("nan")
    platform = (
        jax.tree_util.tree_leaves(params)[0].devices().pop().platform if jax.tree_util.tree_leaves(params) else "?"
    )
    planned.append(_planning.PlannedRun(label or "run", members, n_steps, n_steps - step, seconds, platform))
    model = eqx.combine(params, static)
    evals = {} if eval_fn is None else {k: np.asarray([np.asarray(v)]) for k, v in eval_fn(model).items()}
    return TrainResult(
        model,
        opt_state,
        np.asarray(losses),
        np.array([done] if evals else [], int),
        evals,
        1 / seconds if times else float("nan"),
        step,
        done,
        n_steps,
        False,
    )


def _refuse_tracers(tree, where: str) -> None:
    """A clear error instead of a failed host conversion when ``where`` is called inside jax.grad / jit / vmap."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree)):
        raise TypeError(
            f"{where}() runs on the host in chunks (progress, evaluation, checkpoints) and cannot be "
            "traced: its model arrived as a tracer (inside jax.grad, jit or vmap). Differentiate through "
            "jaxicl.optax_train or jaxicl.gradient_descent instead."
        )
