"""Collectives of one trace and its per-step communication/computation split (SPEC §4.3).

One trace = one rank. Its collectives are, in start order:

- GPU traces: every communication kernel (NCCL/RCCL, or launched under a collective host
  op); op name, process group and bytes from the ``record_param_comms`` args on its
  launching host op's ancestors, else the innermost collective range name
  (``nccl:all_to_all``, ``c10d::allreduce_``), else the kernel name
  (``ncclDevKernel_AllGather_*`` -> all_gather; ``SendRecv`` under all_to_all -> all_to_all).
- CPU traces: the ``gloo:*`` ranges (each spans the wait for the peers and the transfer);
  without them the outermost collective host ops.

Per step, with C the union of computation (non-communication kernels; in a CPU trace host
ops minus each thread's time inside collectives) and M the union of the collectives (in a
CPU trace every host collective op or range, as the overview's Communication): computation = |C \\ M|, communication =
|M \\ C|, overlap = |C ∩ M|, other = step - |C ∪ M| (integer ns, they sum to the step).

Example: step ``[0, 10)``, kernel ``[0, 4)``, NCCL kernel ``[2, 6)`` -> computation 2,
overlap 2, communication 2, other 4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..taxonomy import (
    COLLECTIVE_KERNEL_OP,
    COLLECTIVE_OP_NAME,
    COLLECTIVE_OPS,
    DTYPE_BYTES,
    HOST_COLLECTIVE_RANGE,
    Kind,
)
from .breakdown import name_mask
from .intervals import covered, difference, union

#: Process group of collectives whose trace names none.
DEFAULT_GROUP = "default"


def canonical_op(text: str | None) -> str | None:
    """The view's op name of a range, kernel or ``Collective name``; None if not a collective.

    Example: ``canonical_op("c10d::_allgather_base_") == "all_gather"``,
    ``canonical_op("nccl:all_to_all") == "all_to_all"``,
    ``canonical_op("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL") == "reduce_scatter"``.
    """
    if not text:
        return None
    m = COLLECTIVE_KERNEL_OP.match(text)
    if m:
        word = m.group(1)
    else:
        word = re.sub(r"^(nccl|rccl|gloo|c10d|ProcessGroup\w*)\s*(::|:|\.)", "", text)
    key = re.sub(r"[^a-z]", "", word.lower())
    return COLLECTIVE_OPS.get(key)


def element_bytes(nelems: int, dtype: str | None) -> int:
    """``nelems`` x the size of ``dtype`` (``Float``, ``c10::BFloat16``...); -1 if unknown."""
    if nelems < 0 or not dtype:
        return -1
    size = DTYPE_BYTES.get(dtype.lower().rsplit("::", 1)[-1])
    return nelems * size if size else -1


@dataclass
class Collectives:
    """One rank's collectives in start order (ns relative to the trace origin)."""

    ops: list[str]          # distinct op names
    groups: list[str]       # distinct process groups
    op: np.ndarray          # int32 index into ops
    group: np.ndarray       # int32 index into groups
    start: np.ndarray       # int64 ns
    dur: np.ndarray         # int64 ns
    bytes: np.ndarray       # int64; -1 unknown

    def __len__(self) -> int:
        return len(self.start)


def _ancestors(tree, pos: int):
    """Tree positions from ``pos`` up to the root."""
    while pos >= 0:
        yield pos
        pos = int(tree.parent[pos])


def _describe(trace, tree, chain: list[int], fallback: str | None) -> tuple[str, str, int]:
    """``(op, group, bytes)`` of a collective from the host positions ``chain`` (innermost
    first): ``record_param_comms`` args first, then range names, then ``fallback``."""
    op = group = None
    nbytes = -1
    range_op = None
    for p in chain:
        row = int(tree.rows[p])
        c = int(trace.comm[row])
        if c >= 0:
            name, n_in, n_out, dtype, pg = trace.comms[c]
            op = op or canonical_op(name)
            group = group or pg
            if nbytes < 0:
                nbytes = element_bytes(max(n_in, n_out), dtype)
        if range_op is None:
            range_op = canonical_op(trace.strings[int(trace.name[row])])
    kernel_op = canonical_op(fallback)
    if kernel_op == "send_recv" and range_op == "all_to_all":
        kernel_op = range_op
    op = op or range_op or kernel_op or "unknown"
    return op, group or DEFAULT_GROUP, nbytes


def _intern(values: list[str]) -> tuple[list[str], np.ndarray]:
    table: dict[str, int] = {}
    idx = np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int32)
    return list(table), idx


def _collect(trace, tree, rows: np.ndarray, chains: list[list[int]],
             fallbacks: list[str | None]) -> Collectives:
    described = [_describe(trace, tree, c, f) for c, f in zip(chains, fallbacks)]
    ops, op = _intern([d[0] for d in described])
    groups, group = _intern([d[1] for d in described])
    return Collectives(ops=ops, groups=groups, op=op, group=group,
                       start=trace.start[rows].astype(np.int64),
                       dur=trace.dur[rows].astype(np.int64),
                       bytes=np.array([d[2] for d in described], dtype=np.int64))


def device_collectives(a) -> Collectives:
    """The communication kernels of an analysed GPU trace (``a``: an Analysis)."""
    trace, tree = a.trace, a.tree
    rows = np.flatnonzero(a.comm_kernel)
    rows = rows[np.argsort(trace.start[rows], kind="stable")]
    owners = a.links.launching_op(rows)
    chains = []
    for owner in owners.tolist():
        pos = int(tree.pos_of_row[owner]) if owner >= 0 else -1
        chains.append(list(_ancestors(tree, pos)))
    fallbacks = [trace.strings[int(n)] for n in trace.name[rows]]
    return _collect(trace, tree, rows, chains, fallbacks)


def host_collective_rows(trace, tree) -> np.ndarray:
    """Rows of a CPU trace's collectives: ``gloo:*`` ranges, else the outermost collective
    host ops (start order)."""
    host = np.isin(trace.kind, np.array([Kind.HOST_OP, Kind.USER_RANGE], np.uint8))
    rows = np.flatnonzero(host & name_mask(trace, HOST_COLLECTIVE_RANGE))
    if not len(rows):
        coll = host & name_mask(trace, COLLECTIVE_OP_NAME)
        flag = coll[tree.rows]
        anc = tree.within(flag)
        inside = np.where(tree.parent >= 0, anc[np.maximum(tree.parent, 0)], False)
        rows = tree.rows[flag & ~inside]
    return rows[np.argsort(trace.start[rows], kind="stable")]


def cpu_collectives(a) -> Collectives:
    """The host collectives of an analysed CPU trace."""
    trace, tree = a.trace, a.tree
    rows = host_collective_rows(trace, tree)
    chains = [list(_ancestors(tree, int(tree.pos_of_row[r]))) for r in rows.tolist()]
    return _collect(trace, tree, rows, chains, [None] * len(rows))


def collectives_of(a) -> Collectives:
    """The rank's collectives: device side when it has communication kernels, else host."""
    return device_collectives(a) if a.comm_kernel.any() else cpu_collectives(a)


@dataclass
class CommSplit:
    """Per step (ns): the four parts of SPEC §4.3; they sum to ``end - start``."""

    computation: np.ndarray
    communication: np.ndarray
    overlap: np.ndarray
    other: np.ndarray


def _cpu_computation_and_communication(trace) -> tuple[tuple, tuple]:
    """CPU trace: the unions of computation and communication (SPEC §4.3 with host work).

    Communication: every host collective op or range (``c10d::*``, ``gloo:*``, ... the
    §2.2 Communication of the overview) on any thread. Computation: host ops that are not
    collectives, minus, on their own thread, the time that thread spends inside a
    collective: a main thread blocked in ``c10d::allreduce_`` under ``AccumulateGrad`` waits,
    it does not compute. So overlap is an op running on one thread while another thread
    communicates (DDP's bucketed all-reduce during backward). User ranges and python frames
    are not computation: they annotate work and span waits (``## backward ##`` covers the
    gloo all-reduces it waits for).
    """
    kind = trace.kind
    coll = ((kind == Kind.HOST_OP) | (kind == Kind.USER_RANGE)) \
        & name_mask(trace, COLLECTIVE_OP_NAME)
    work = (kind == Kind.HOST_OP) & ~coll
    start, end = trace.start, trace.end()
    wrows, crows = np.flatnonzero(work), np.flatnonzero(coll)
    wth, cth = trace.thread[wrows], trace.thread[crows]
    parts_s, parts_e = [], []
    for t in np.unique(wth).tolist():
        w, c = wrows[wth == t], crows[cth == t]  # rows of the thread, in row order
        ws, we = union(start[w], end[w])
        ms, me = union(start[c], end[c])
        ds, de = difference(ws, we, ms, me)
        parts_s.append(ds)
        parts_e.append(de)
    comp = union(np.concatenate(parts_s or [np.zeros(0, np.int64)]),
                 np.concatenate(parts_e or [np.zeros(0, np.int64)]))
    return comp, union(start[coll], end[coll])


def comm_split(a, coll: Collectives) -> CommSplit:
    """Computation / communication / overlap / other per step of ``a`` (an Analysis)."""
    trace, steps = a.trace, a.steps
    if a.comm_kernel.any():
        comp = (trace.kind == Kind.KERNEL) & ~a.comm_kernel
        cs, ce = union(trace.start[comp], trace.end()[comp])
        ms, me = union(coll.start, coll.start + coll.dur)
    else:
        (cs, ce), (ms, me) = _cpu_computation_and_communication(trace)
    bs, be = union(np.concatenate((cs, ms)), np.concatenate((ce, me)))
    lo, hi = steps.start, steps.end
    c, m, both = covered(cs, ce, lo, hi), covered(ms, me, lo, hi), covered(bs, be, lo, hi)
    return CommSplit(computation=both - m, communication=both - c, overlap=c + m - both,
                     other=(hi - lo) - both)
