"""Lane assignment: which lane and row each duration event is drawn on (issue 6).

- **Host lanes** (``host:<pid>:<tid>``), one per thread: the row is the nesting depth by
  containment. Events are sorted by (start asc, end desc, file order); a child lies within
  its parent. A partial overlap (fractional timestamps) attaches to the deepest ancestor
  containing its start and is clipped to that ancestor's end (``vis_end``), as SPEC §2.4.1.
  A zero-length event sits one row below every non-empty event that is open at its start.
- **Device lanes** (``device:<device>:<stream>``), one per stream: kernels, memcpys,
  memsets and device-side ranges; overlapping events are packed into rows (the lowest row
  that is free at the event's start; a range enclosing kernels takes the upper row).
  Sync events (``cuda_sync``) get their own lane per device, ``device:<device>:sync``.

Every row is a sequence of non-overlapping half-open intervals ``[start, vis_end)``, so its
starts and ends are both sorted: the level-of-detail index and window queries rely on it.

Example: host events ``A [0,10) B [2,5) C [5,9) D [6,7)`` on one thread get rows
``0 1 1 2``; kernels ``[0,4) [2,6) [5,8)`` on one stream get rows ``0 1 0``.

Everything is vectorised (sort + cumsum + searchsorted) and iterative: a 100,000-deep
nesting is one more sort, not a recursion. Only clusters of host events holding a partial
overlap, and clusters of overlapping events on a stream, go through a Python loop (a stack
walk, a heap), over those events only.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..taxonomy import DEVICE_KINDS, Kind


@dataclass
class Lane:
    """One timeline lane; its rows are global rows ``row0 .. row0 + rows - 1``."""

    id: str
    name: str
    kind: str  # "host" | "device"
    rows: int
    row0: int


@dataclass
class Layout:
    """Where each event is drawn. Arrays are indexed by event id (row of the trace)."""

    lanes: list[Lane]
    #: event -> index into ``lanes``
    lane: np.ndarray
    #: event -> row inside its lane (host: nesting depth; device: packing row)
    row: np.ndarray
    #: event -> drawn end in ns (the end, clipped for partial overlaps on host threads)
    vis_end: np.ndarray
    #: host events clipped because they partially overlapped an enclosing event
    clipped: int


def _sort_key(value) -> tuple:
    """Ints and numeric strings sort numerically, before other strings (pids/tids may be
    either: ``"1890023232"`` after ``509646592``; ``"Traces"`` last)."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _shift(*arrays: np.ndarray) -> int:
    """Bits needed for a time, so that ``group << shift | time`` sorts by (group, time)."""
    hi = max((int(a.max()) for a in arrays if len(a)), default=0)
    return max(hi, 1).bit_length() + 1


def _composite(group: np.ndarray, t: np.ndarray, shift: int) -> np.ndarray:
    return (group.astype(np.int64) << shift) | t


def assign_lanes(trace: Trace) -> Layout:
    """Lay out every duration event of ``trace`` on a lane and a row."""
    n = len(trace)
    kind = trace.kind
    start = trace.start
    end = start + trace.dur
    lane = np.full(n, -1, dtype=np.int32)
    row = np.zeros(n, dtype=np.int32)
    vis_end = end.copy()
    lanes: list[Lane] = []

    is_device = np.isin(kind, np.array(DEVICE_KINDS, dtype=np.uint8))
    is_sync = kind == Kind.SYNC
    host_rows = np.flatnonzero(~is_device)
    dev_rows = np.flatnonzero(is_device & ~is_sync)
    sync_rows = np.flatnonzero(is_sync)

    clipped = 0
    # --- host threads -------------------------------------------------------------------
    if len(host_rows):
        tids = np.unique(trace.thread[host_rows])
        tids = sorted(tids.tolist(), key=lambda t: (_sort_key(trace.threads[t][0]),
                                                    _sort_key(trace.threads[t][1])))
        dense = np.full(len(trace.threads), -1, dtype=np.int64)
        dense[np.array(tids, dtype=np.int64)] = np.arange(len(tids))
        group = dense[trace.thread[host_rows]]
        depth, vend, clipped = nest(group, start[host_rows], end[host_rows])
        row[host_rows] = depth
        vis_end[host_rows] = vend
        nrows = np.zeros(len(tids), dtype=np.int64)
        np.maximum.at(nrows, group, depth.astype(np.int64) + 1)
        for g, t in enumerate(tids):
            pid, tid = trace.threads[t]
            name = f"Thread {tid} (pid {pid})" if isinstance(pid, int) else f"{pid} / {tid}"
            lanes.append(Lane(f"host:{pid}:{tid}", name, "host", int(nrows[g]), 0))
        lane[host_rows] = group
    # --- device streams, then sync lanes ------------------------------------------------------
    for rows, sync in ((dev_rows, False), (sync_rows, True)):
        if not len(rows):
            continue
        dev = trace.device[rows].astype(np.int64)
        stream = np.zeros(len(rows), dtype=np.int64) if sync else trace.stream[rows]
        pairs, group = _pairs(dev, stream)
        packed = pack(group, start[rows], end[rows])
        row[rows] = packed
        nrows = np.zeros(pairs.shape[1], dtype=np.int64)
        np.maximum.at(nrows, group, packed.astype(np.int64) + 1)
        base = len(lanes)
        for g in range(pairs.shape[1]):
            d, s = int(pairs[0, g]), int(pairs[1, g])
            if sync:
                lanes.append(Lane(f"device:{d}:sync", f"GPU {d} sync", "device", int(nrows[g]), 0))
            else:
                lanes.append(Lane(f"device:{d}:{s}", f"GPU {d} stream {s}", "device",
                                  int(nrows[g]), 0))
        lane[rows] = base + group
    row0 = 0
    for ln in lanes:
        ln.row0 = row0
        row0 += ln.rows
    return Layout(lanes=lanes, lane=lane, row=row, vis_end=vis_end, clipped=clipped)


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``(a, b)`` pairs (shape 2 x k) and each element's pair index."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    uk, group = np.unique(ia.reshape(-1).astype(np.int64) * len(ub) + ib.reshape(-1),
                          return_inverse=True)
    return np.stack([ua[uk // len(ub)], ub[uk % len(ub)]]), group.reshape(-1)


# --- host nesting ---------------------------------------------------------------------------


def nest(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Nesting depth by containment within each group (thread).

    Inputs are parallel arrays in file order (file order breaks ties). Returns
    ``(depth, vis_end, clipped)``: int32 depth, the end clipped to the enclosing event for
    partial overlaps, and how many events were clipped.

    Fast path, exact when no two events of a group partially overlap: sorted by (group,
    start asc, end desc), the depth of a non-empty event is its rank in its group minus the
    number of the group's non-empty events that ended at or before its start. The result is
    then verified (each event inside its parent, no overlap within a row). Where that fails,
    only the *cluster* concerned (a maximal run of transitively overlapping events, e.g. one
    step) is redone by the sequential stack walk of :func:`_nest_stack`.
    """
    m = len(start)
    depth = np.zeros(m, dtype=np.int32)
    vis_end = end.copy()
    if not m:
        return depth, vis_end, 0
    shift = _shift(start, end)
    if ((int(group.max()) + 1) << shift) >= 2**62:
        redo = [np.arange(m)]  # times too large to combine with the group: no fast path
    else:
        redo = _nest_fast(group, start, end, shift, depth)
    clipped = 0
    for idx in redo:
        d, v, c = _nest_stack(start[idx], end[idx])
        depth[idx] = d
        vis_end[idx] = v
        clipped += c
    return depth, vis_end, clipped


def _nest_fast(group, start, end, shift, depth) -> list[np.ndarray]:
    """Fill ``depth`` assuming proper nesting; return the event sets (clusters) where that
    was wrong, to be redone one by one."""
    empty = end == start
    full = np.flatnonzero(~empty)
    zero = np.flatnonzero(empty)
    kz = _composite(group[zero], start[zero], shift)
    zo = np.argsort(kz, kind="stable")
    zero, kz = zero[zo], kz[zo]
    if not len(full):
        return []
    g, s, e = group[full], start[full], end[full]
    order = _order(g, s, e, shift)
    g, s, e = g[order], s[order], e[order]
    full = full[order]
    ks = _composite(g, s, shift)
    ke = _composite(g, e, shift)
    k = len(order)
    first = np.searchsorted(g, np.arange(int(group.max()) + 1))  # group offsets
    ke_sorted = np.sort(ke)
    d = np.arange(k) - first[g] - (np.searchsorted(ke_sorted, ks, side="right") - first[g])
    depth[full] = d
    if len(zero):
        # one row below every non-empty event open at the instant ([s, e) contains it)
        depth[zero] = (np.searchsorted(ks, kz, side="right")
                       - np.searchsorted(ke_sorted, kz, side="right"))
    # verify in (depth, position) order, where every lookup below is monotone:
    # (1) each event inside its parent (the last event one level up before it);
    # (2) no overlap between neighbours of a row
    by_depth = np.argsort(d.astype(np.uint16) if d.max() < 2**16 else d, kind="stable")
    dd = d[by_depth].astype(np.int64)
    pos_key = dd * (k + 1) + by_depth
    child = np.flatnonzero(dd > 0)
    c = by_depth[child]
    p = np.searchsorted(pos_key, pos_key[child] - (k + 1)) - 1
    pc = np.maximum(p, 0)
    parent = by_depth[pc]
    wrong = (p < 0) | (dd[pc] != dd[child] - 1) | (g[parent] != g[c]) \
        | (e[parent] < e[c]) | (e[parent] <= s[c])
    a, b = by_depth[:-1], by_depth[1:]
    overlap = (dd[:-1] == dd[1:]) & (g[a] == g[b]) & (e[a] > s[b])
    bad = np.concatenate([c[wrong], b[overlap], np.flatnonzero(d < 0)])
    if not len(bad):
        return []
    # clusters: a new one starts where nothing before it (in its group) is still open
    run = np.maximum.accumulate(ke)
    new = np.r_[True, ks[1:] >= run[:-1]]
    heads = np.flatnonzero(new)
    cid = np.cumsum(new) - 1
    out = []
    for cl in np.unique(cid[bad]).tolist():
        lo = int(heads[cl])
        hi = int(heads[cl + 1]) if cl + 1 < len(heads) else k
        # with the zero-length events inside the cluster's span [start, max end)
        z0, z1 = np.searchsorted(kz, [ks[lo], run[hi - 1]], side="left")
        out.append(np.concatenate([full[lo:hi], zero[z0:z1]]))
    return out


def _order(g: np.ndarray, s: np.ndarray, e: np.ndarray, shift: int) -> np.ndarray:
    """Permutation sorting by (group, start asc, end desc, position): two stable sorts."""
    o = np.argsort(-e, kind="stable")
    return o[np.argsort(_composite(g[o], s[o], shift), kind="stable")]


def _nest_stack(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sequential nesting of one group with clipping of partial overlaps (iterative)."""
    order = np.lexsort((-end, start))
    depth = np.zeros(len(start), dtype=np.int32)
    vis_end = end.copy()
    stack: list[int] = []  # clipped ends of the open events, outermost first
    clipped = 0
    for i, s, e in zip(order.tolist(), start[order].tolist(), end[order].tolist()):
        while stack and stack[-1] <= s:
            stack.pop()
        if stack and e > stack[-1]:
            e = stack[-1]
            clipped += 1
        depth[i] = len(stack)
        vis_end[i] = e
        stack.append(e)
    return depth, vis_end, clipped


# --- device packing -------------------------------------------------------------------------


def pack(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Row of each event so that events of a group (stream) overlapping in time never share
    a row: the lowest row free at the event's start, in (start asc, end desc, file order).

    Non-overlapping events (the common case on a stream) all get row 0 without a loop; only
    clusters of mutually overlapping events are packed one event at a time.
    """
    m = len(start)
    out = np.zeros(m, dtype=np.int32)
    if not m:
        return out
    shift = _shift(start, end)
    order = _order(group, start, end, shift)
    ks = _composite(group[order], start[order], shift)
    ke = _composite(group[order], end[order], shift)
    run = np.maximum.accumulate(ke)
    new = np.ones(m, dtype=bool)
    new[1:] = ks[1:] >= run[:-1]  # starts a new cluster: nothing before it is still open
    first = np.flatnonzero(new)
    size = np.diff(np.append(first, m))
    for f, c in zip(first[size > 1].tolist(), size[size > 1].tolist()):
        idx = order[f:f + c]
        out[idx] = _pack_cluster(start[idx].tolist(), end[idx].tolist())
    return out


def _pack_cluster(starts: list[int], ends: list[int]) -> list[int]:
    busy: list[tuple[int, int]] = []  # (end, row) of rows in use
    free: list[int] = []
    rows = []
    top = 0
    for s, e in zip(starts, ends):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            r = heapq.heappop(free)
        else:
            r, top = top, top + 1
        rows.append(r)
        heapq.heappush(busy, (max(e, s), r))
    return rows
