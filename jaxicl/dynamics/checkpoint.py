"""Training checkpoints: one file per run, written atomically, refused when another run wrote it.

A checkpoint is a JSON header line (a magic string, the step, the PRNG key, the evaluations so far, the run's
`fingerprint` and its measured seconds per step), the loss history (``.npy``), then the parameters and optimizer state
(Equinox serialisation). `load_checkpoint` resumes only a checkpoint of the same configuration, shapes and key, and
raises `CheckpointError` naming the file and what differs otherwise; `jaxicl.dynamics.train` reads and writes them
between its compiled chunks.
"""

from __future__ import annotations

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._io import atomic_output

_MAGIC = "jaxicl-checkpoint-v1"


def fingerprint(params, opt_state, config) -> dict:
    """What a checkpoint must match to be resumed: the run's ``config`` (the settings that shape its trajectory: a
    checkpoint may hold more, which the run does not read, `load_checkpoint`), and the structure, shapes and dtypes of
    its parameters and optimizer state."""
    leaves = jax.tree_util.tree_leaves((params, opt_state))
    return {
        "config": config or {},
        "structure": str(jax.tree_util.tree_structure((params, opt_state))),
        "leaves": [[list(np.shape(x)), str(np.asarray(x).dtype)] for x in leaves],
    }


def _key_record(key) -> dict | list:
    """A PRNG key as JSON: a raw ``uint32`` key as its list; a typed key (``jax.random.key``) as its data and impl."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return {"impl": str(jax.random.key_impl(key)), "data": np.asarray(jax.random.key_data(key)).tolist()}
    return np.asarray(key).tolist()


def _key_from_record(record):
    if isinstance(record, dict):
        return jax.random.wrap_key_data(np.asarray(record["data"], dtype=np.uint32), impl=record["impl"])
    return jnp.asarray(np.asarray(record, dtype=np.uint32))


def save_checkpoint(
    path, params, opt_state, step: int, key, losses, evals, fingerprint, seconds_per_step: float | None = None
) -> None:
    """One file, written atomically: a JSON header line (step, key, evaluations, the configuration's fingerprint and
    the measured seconds per step), the loss history (``.npy``), then the parameters and optimizer state (Equinox
    serialisation)."""
    header = {
        "magic": _MAGIC,
        "step": int(step),
        "key": _key_record(key),
        "evals": evals,
        "fingerprint": fingerprint,
        "seconds_per_step": seconds_per_step,
    }
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write((json.dumps(header) + "\n").encode())
        np.save(f, np.asarray(losses))
        eqx.tree_serialise_leaves(f, (params, opt_state))


class CheckpointError(ValueError):
    """A training checkpoint that cannot be resumed from: unreadable, truncated, or written by another run."""


def load_checkpoint(path, params, opt_state, fingerprint, key=None):
    """(params, opt_state, step, key, losses, evals); `CheckpointError` naming the file if it was written by
    another configuration (or, with ``key``, from another PRNG key: another seed), or is unreadable or truncated (its
    loss history must hold ``step`` losses and its parameters the run's shapes). Never used silently.
    `checkpoint_header` reads the rest of the header (e.g. ``seconds_per_step``)."""

    def refuse(why: str):
        raise CheckpointError(
            f"checkpoint {path} {why}. Delete it to train this run from the start, or use another checkpoint path."
        )

    try:
        with open(path, "rb") as f:
            try:
                header = json.loads(f.readline())
            except ValueError:
                header = {}
            if not isinstance(header, dict) or header.get("magic") != _MAGIC:
                refuse("is not a jaxicl training checkpoint (or its header is damaged)")
            theirs = header["fingerprint"]
            # the run's settings must all match; a setting the checkpoint has and the run does not name is one this
            # run's training does not read (a figure's own settings, in another figure's model)
            mine = fingerprint["config"]
            configs = {k: (theirs["config"].get(k), mine[k]) for k in mine if theirs["config"].get(k) != mine[k]}
            others = [k for k in fingerprint if k != "config" and theirs.get(k) != fingerprint[k]]
            if configs or others:
                diff = "; ".join(f"{k}: checkpoint {a!r} vs run {b!r}" for k, (a, b) in sorted(configs.items()))
                what = ["config"] * bool(configs) + others
                refuse(f"was written by another configuration ({', '.join(what)} differ{': ' + diff if diff else ''})")
            if key is not None and header["key"] != _key_record(key):
                refuse("was written by a run with another PRNG key (another seed)")
            losses = np.load(f, allow_pickle=False)
            params, opt_state = eqx.tree_deserialise_leaves(f, (params, opt_state))
            if f.read(1):
                refuse("has data after its parameters (not one checkpoint)")
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, RuntimeError) as e:  # truncated, garbage
        refuse(f"is unreadable or truncated ({type(e).__name__}: {e})")
    step = header["step"]
    if not isinstance(step, int) or step < 0 or len(losses) != step:
        refuse(f"is inconsistent: step {step!r} with a loss history of {len(losses)} steps")
    try:
        key = _key_from_record(header["key"])
    except (ValueError, TypeError, KeyError) as e:
        refuse(f"holds no PRNG key this run can use ({type(e).__name__}: {e})")
    return params, opt_state, step, key, losses, header["evals"]


def continue_checkpoint(src, dst, config: dict, may_differ: tuple) -> None:
    """Start the run whose checkpoint is ``dst`` (its fingerprint's ``config``) where the run of ``src`` ended: ``src``
    is the checkpoint of the same trajectory's first steps, written by a shorter run whose settings differ from
    ``config`` only in ``may_differ`` (its step count, its name). ``dst`` becomes a copy of ``src`` under ``config``,
    so `jaxicl.dynamics.train` resumes it (the data stream of step s depends on the key and s alone: bit for bit the
    run trained from the start). Refused (`CheckpointError`) where another setting differs; ``dst`` must not exist."""
    with open(src, "rb") as f:
        header, rest = json.loads(f.readline()), f.read()
    if header.get("magic") != _MAGIC:
        raise CheckpointError(f"checkpoint {src} is not a jaxicl training checkpoint (or its header is damaged).")
    theirs = header["fingerprint"]["config"]
    differ = sorted(k for k in {*theirs, *config} - set(may_differ) if theirs.get(k) != config.get(k))
    if differ:
        raise CheckpointError(
            f"checkpoint {src} cannot start the run of {dst}: it trained another trajectory ({', '.join(differ)} differ)."
        )
    if Path(dst).exists():
        raise CheckpointError(f"checkpoint {dst} exists: resume it, or delete it to start again from {src}.")
    header["fingerprint"] = {**header["fingerprint"], "config": config}
    with atomic_output(dst) as tmp, open(tmp, "wb") as f:
        f.write((json.dumps(header) + "\n").encode())
        f.write(rest)


def checkpoint_header(path) -> dict:
    """The JSON header of a training checkpoint (step, key, evals, fingerprint, seconds_per_step)."""
    with open(path, "rb") as f:
        return json.loads(f.readline())
