"""Lane assignment: which lane and row each duration event is drawn on (issue 6).

- **Host lanes** (``host:<pid>:<tid>``), one per thread: the row is the nesting depth of
  the analysis' host nesting (:mod:`stepscope.analysis.tree`, SPEC §2.4.1; reused, not
  redone): sorted by (start asc, end desc, host event before runtime call, file order), a
  child lies within its parent. A partial overlap (fractional timestamps) attaches to the
  deepest ancestor containing its start and is clipped to that ancestor's end
  (``vis_end``). A zero-length event sits one row below every non-empty event open at its
  start.
- **Device lanes** (``device:<device>:<stream>``), one per stream: kernels, memcpys,
  memsets and device-side ranges; overlapping events are packed into rows (the lowest row
  that is free at the event's start; a range enclosing kernels takes the upper row).
  Sync events (``cuda_sync``) get their own lane per device, ``device:<device>:sync``.

Every row is a sequence of non-overlapping half-open intervals ``[start, vis_end)``, so its
starts and ends are both sorted: the level-of-detail index and window queries rely on it.

Example: host events ``A [0,10) B [2,5) C [5,9) D [6,7)`` on one thread get rows
``0 1 1 2``; kernels ``[0,4) [2,6) [5,8)`` on one stream get rows ``0 1 0``.

Everything is vectorised (sort + cumsum + searchsorted) and iterative: a 100,000-deep
nesting is one more sort, not a recursion. Only clusters of overlapping events on a stream
go through a Python loop (a heap), over those events only.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..analysis.tree import HostTree, build_tree
from ..model import Trace
from ..processes import later, second_thread
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


def assign_lanes(trace: Trace, tree: HostTree | None = None) -> Layout:
    """Lay out every duration event of ``trace`` on a lane and a row; ``tree``: the
    analysis' host nesting of ``trace`` (built here when not given)."""
    n = len(trace)
    kind = trace.kind
    start = trace.start
    end = start + trace.dur
    lane = np.full(n, -1, dtype=np.int32)
    row = np.zeros(n, dtype=np.int32)
    lanes: list[Lane] = []

    device_kind = np.zeros(256, dtype=bool)  # kind (uint8) -> is a device kind
    device_kind[np.array(DEVICE_KINDS, dtype=np.int64)] = True
    is_device = device_kind[kind]
    is_sync = kind == Kind.SYNC
    host_rows = np.flatnonzero(~is_device)
    dev_rows = np.flatnonzero(is_device & ~is_sync)
    sync_rows = np.flatnonzero(is_sync)
    del is_device, is_sync

    clipped = 0
    with second_thread(n) as pool:
        # the device and sync lanes are laid out beside the host ones, in a second thread for
        # big traces (numpy runs without the GIL; on copies of their rows' times)
        streams = [(rows, later(pool, _stream_lanes, trace, rows, sync, start[rows], end[rows]))
                   for rows, sync in ((dev_rows, False), (sync_rows, True)) if len(rows)]
        # --- host threads -------------------------------------------------------------------
        if len(host_rows):
            thread = trace.thread[host_rows]
            present = np.zeros(len(trace.threads), dtype=bool)
            present[thread] = True
            tids = sorted(np.flatnonzero(present).tolist(), key=lambda t: (
                _sort_key(trace.threads[t][0]), _sort_key(trace.threads[t][1])))
            dense = np.full(len(trace.threads), -1, dtype=np.int32)
            dense[np.array(tids, dtype=np.int64)] = np.arange(len(tids))
            group = dense[thread]
            depth, vend = host_depths(trace, host_rows, tree, thread)
            del thread
            clipped = int((vend < end[host_rows]).sum())
            row[host_rows] = depth
            end[host_rows] = vend  # from here on, ``end`` is the drawn end
            del vend
            nrows = np.zeros(len(tids), dtype=np.int64)
            np.maximum.at(nrows, group, depth.astype(np.int64) + 1)
            for g, t in enumerate(tids):
                pid, tid = trace.threads[t]
                name = f"Thread {tid} (pid {pid})" if isinstance(pid, int) else f"{pid} / {tid}"
                lanes.append(Lane(f"host:{pid}:{tid}", name, "host", int(nrows[g]), 0))
            lane[host_rows] = group
        # --- device streams, then sync lanes ----------------------------------------------------
        for rows, laid_out in streams:
            packed, group, more = laid_out.result()
            row[rows] = packed
            lane[rows] = len(lanes) + group
            lanes += more
    row0 = 0
    for ln in lanes:
        ln.row0 = row0
        row0 += ln.rows
    return Layout(lanes=lanes, lane=lane, row=row, vis_end=end, clipped=clipped)


def _stream_lanes(trace: Trace, rows: np.ndarray, sync: bool, start: np.ndarray,
                  end: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Lane]]:
    """The device events ``rows`` (``start``, ``end``: theirs, ns) on one lane per device
    and stream (``sync``: per device): ``(row in its lane, lane index among these, lanes)``."""
    dev = trace.device[rows].astype(np.int64)
    stream = np.zeros(len(rows), dtype=np.int64) if sync else trace.stream[rows]
    pairs, group = _pairs(dev, stream)
    packed = pack(group, start, end)
    nrows = np.zeros(pairs.shape[1], dtype=np.int64)
    np.maximum.at(nrows, group, packed.astype(np.int64) + 1)
    lanes = []
    for g in range(pairs.shape[1]):
        d, s = int(pairs[0, g]), int(pairs[1, g])
        if sync:
            lanes.append(Lane(f"device:{d}:sync", f"GPU {d} sync", "device", int(nrows[g]), 0))
        else:
            lanes.append(Lane(f"device:{d}:{s}", f"GPU {d} stream {s}", "device",
                              int(nrows[g]), 0))
    return packed, group, lanes


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``(a, b)`` pairs (shape 2 x k) and each element's pair index."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    uk, group = np.unique(ia.reshape(-1).astype(np.int64) * len(ub) + ib.reshape(-1),
                          return_inverse=True)
    return np.stack([ua[uk // len(ub)], ub[uk % len(ub)]]), group.reshape(-1)


# --- host nesting ---------------------------------------------------------------------------


def host_depths(trace: Trace, rows: np.ndarray, tree: HostTree | None,
                thread: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nesting depth and clipped end (ns) of the host-lane events ``rows``, from the
    analysis' nesting (:func:`~stepscope.analysis.tree.build_tree`, SPEC §2.4.1): ``tree``
    when given, else built here. The threads also holding events the analysis does not nest
    (the ``Trace`` span, unknown categories) are nested together by the same function.
    ``thread``: ``trace.thread[rows]``, when the caller has it."""
    tree = build_tree(trace) if tree is None else tree
    pos = tree.pos_of_row[rows]
    if len(tree):  # wrong where pos is -1: those rows are redone below
        depth, vis_end = tree.depth()[pos], tree.end[pos]
    else:
        depth, vis_end = np.zeros((2, len(rows)), dtype=np.int64)
    if len(pos) and pos.min() < 0:
        thread = trace.thread[rows] if thread is None else thread
        redo_thread = np.zeros(len(trace.threads), dtype=bool)
        redo_thread[thread[pos < 0]] = True
        redo = np.flatnonzero(redo_thread[thread])
        own = build_tree(trace, rows[redo])
        pos = own.pos_of_row[rows[redo]]
        depth[redo] = own.depth()[pos]
        vis_end[redo] = own.end[pos]
    return depth.astype(np.int32), vis_end


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


def _order(g: np.ndarray, s: np.ndarray, e: np.ndarray, shift: int) -> np.ndarray:
    """Permutation sorting by (group, start asc, end desc, position): two stable sorts."""
    o = np.argsort(-e, kind="stable")
    return o[np.argsort(_composite(g[o], s[o], shift), kind="stable")]


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
