"""Keeping XLA:CPU (jaxlib 0.10) from running two large batched LAPACK calls of one program at once.

jaxlib 0.10's CPU LAPACK kernels (LU, triangular solves, SVD, eigh, …) split a large enough batch into pieces on
XLA's intra-op thread pool and block their own thread until the pieces are done. XLA runs independent operations of a
program at once on that pool, so two such kernels can each hold a pool thread while waiting for pieces that no free
thread is left to run: with the default pool of a 2-core machine, the process waits forever (benchmarks/README.md,
"The deadlock, reproduced on demand"). jaxlib 0.11 no longer splits them, but needs Python >= 3.12.

`after` orders two parts of a program: the arrays it returns are the ones given, but XLA can compute them only
once its ``deps`` are computed, so a LAPACK call on them cannot overlap a LAPACK call that produced the ``deps``.
(``lax.optimization_barrier`` does not do this on the CPU: XLA removes the barrier before it schedules the program.)
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp


def _numeric(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.number)


def after(tree, *deps):
    """``tree`` unchanged in value, made to depend on ``deps`` inside a compiled program.

    Every array leaf of ``tree`` gets ``0 · s`` added (converted to its dtype), where ``s`` sums one element of every
    array leaf of ``deps`` (their leaves may come from different parts of the program), made finite. XLA folds
    ``x + 0`` but not ``0 · s`` for a floating ``s`` (it is NaN for a NaN ``s``), so the addition stays in the program
    as a data dependency. Integer leaves (PRNG keys) work too: the zero is converted to their dtype. Differentiable:
    the derivative with respect to ``tree`` is the identity and with respect to ``deps`` zero. Outside ``jit`` it
    changes nothing and costs one small operation per leaf."""
    anchors = [jnp.ravel(x)[0].astype(jnp.float32) for x in jax.tree_util.tree_leaves(deps) if _numeric(x) and x.size]
    if not anchors:
        return tree
    zero = jax.lax.stop_gradient(0.0 * jnp.nan_to_num(sum(anchors)))
    return jax.tree_util.tree_map(lambda x: x + zero.astype(x.dtype) if _numeric(x) else x, tree)


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")


def _lapack_work(rest: str) -> float:
    """Batch size × matrix work (n³ for a factorisation, n² · right-hand sides for a triangular solve) of a LAPACK
    custom call's HLO text; 0 for anything else or an unbatched call."""
    target = re.search(r'custom_call_target="(lapack_\w+)"', rest)
    batch_dims = re.search(r'num_batch_dims="(\d+)"', rest)
    shape = re.search(r"[a-z]\d+\[([\d,]*)\]", rest)
    if not (target and batch_dims and shape) or int(batch_dims.group(1)) == 0:
        return 0.0
    dims = [int(x) for x in shape.group(1).split(",") if x]
    k = int(batch_dims.group(1))
    batch, m = math.prod(dims[:k]), dims[k:]
    if batch < 2 or len(m) < 2:
        return 0.0
    return float(batch * (m[0] ** 2 * m[1] if "trsm" in target.group(1) else math.prod(m) * min(m)))


def concurrent_lapack_calls(hlo_text: str, min_work: float = 0.0) -> list[tuple[str, str, str]]:
    """Pairs of batched LAPACK calls (or loops and calls that contain one) of at least ``min_work`` (see
    `_lapack_work`) that neither depends on the other in one computation of an optimised HLO module
    (``jax.jit(f).lower(...).compile().as_text()``): XLA:CPU may run such a pair at once, which deadlocks jaxlib 0.10
    when both split their batch over the pool. Returns (computation, instruction, instruction) triples."""
    computations, current = {}, None
    for line in hlo_text.splitlines():
        if not line.startswith(" ") and (m := _COMPUTATION.match(line)):
            current = computations.setdefault(m.group(1), {})
        elif line.startswith("}"):
            current = None
        elif current is not None and (m := _INSTRUCTION.match(line)):
            name, rest = m.groups()
            op = re.search(r"\s[a-z][\w\-]*\(", " " + rest)
            args = rest[op.end() - 2 :] if op else ""
            depth, end = 0, len(args)
            for i, ch in enumerate(args):  # the operand list: up to the parenthesis that closes it
                depth += (ch == "(") - (ch == ")")
                if depth == 0:
                    end = i
                    break
            called = re.findall(r"(?:condition|body|calls|to_apply)=%([\w.\-]+)", rest)
            called += [
                c
                for group in re.findall(r"branch_computations=\{([^}]*)\}", rest)
                for c in re.findall(r"%([\w.\-]+)", group)
            ]
            operands = re.findall(r"%([\w.\-]+)", args[:end])
            if control := re.search(r"control-predecessors=\{([^}]*)\}", rest):  # ordering edges, like operands
                operands += re.findall(r"%([\w.\-]+)", control.group(1))
            current[name] = (operands, called, _lapack_work(rest))
    threshold = max(min_work, 1.0)
    contains: dict[str, bool] = {}

    def heavy(instruction) -> bool:  # a large batched LAPACK call, or a loop or call holding one
        _, called, work = instruction
        return work >= threshold or any(holds_lapack(c) for c in called)

    def holds_lapack(computation: str) -> bool:
        if computation not in contains:
            contains[computation] = False  # while it is being looked at (HLO computations do not recurse)
            contains[computation] = any(map(heavy, computations.get(computation, {}).values()))
        return contains[computation]

    pairs = []
    for computation, instructions in computations.items():
        calls = [n for n, instruction in instructions.items() if heavy(instruction)]
        if len(calls) < 2:
            continue
        bit = {name: 1 << i for i, name in enumerate(instructions)}
        ancestors: dict[str, int] = {}  # a bit set over the computation's instructions, built without recursion
        for start in calls:
            stack = [start]
            while stack:
                name = stack[-1]
                pending = [o for o in instructions[name][0] if o in instructions and o not in ancestors]
                if pending:
                    stack += pending
                    continue
                stack.pop()
                ancestors[name] = 0
                for o in instructions[name][0]:
                    if o in instructions:
                        ancestors[name] |= ancestors[o] | bit[o]
        pairs += [
            (computation, a, b)
            for i, a in enumerate(calls)
            for b in calls[i + 1 :]
            if not (ancestors[b] & bit[a] or ancestors[a] & bit[b])
        ]
    return pairs
