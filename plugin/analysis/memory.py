"""Memory analysis (SPEC §4.1): per device, the allocated/reserved curve, the allocations
(paired with their frees) and the per-operator memory table.

Input: ``trace.memory`` (``[memory]`` instants, :data:`~stepscope.model.MEMORY_COLUMNS`).
A device is ``(Device Type, Device Id)``; its label is ``CPU``, ``GPU<id>`` (CUDA, HIP),
``XPU<id>``, ``MPS<id>``, ``PrivateUse1:<id>``, else ``device<type>:<id>``.

Per-operator numbers follow torch's ``key_averages()``: an op's size increase is the sum of
``Bytes`` of the device's events with ``op start <= ts <= op end`` on any thread; its self
size increase is that minus the same sum over its direct children (every nested host event
and runtime call, after the same-name collapse); allocation count/size count ``Bytes > 0``
only. Everything is vectorised (cumulative sums + ``searchsorted``).

Units: times in ns relative to the trace origin, sizes in bytes (int64).

Example: op ``A [0, 10]`` holding ``B [2, 5]``; events ``+8 @1, +4 @3, -4 @6`` on GPU0:
A's size increase 8, self 4; B's 4 and 4; A's allocation count 2 (self 1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..model import Note, Trace
from ..taxonomy import Kind
from .intervals import sorted_unique
from .operators import GROUP_BY, OpNodes, group_ids, grouping_shapes, table_mask
from .tree import HostTree, nearest_marked_ancestor

#: c10 DeviceType -> label prefix (SPEC §4.1); CPU is labelled without an id.
DEVICE_PREFIX = {1: "GPU", 6: "GPU", 12: "XPU", 13: "MPS", 20: "PrivateUse1:"}
#: CUDA and HIP: devices whose capacity is a deviceProperties' totalGlobalMem.
GPU_TYPES = (1, 6)
#: Names of the per-operator columns, in table order (bytes; counts for the two counts).
STAT_COLUMNS = ("Size Increase", "Self Size Increase", "Allocation Count",
                "Self Allocation Count", "Allocation Size", "Self Allocation Size")


def device_label(dtype: int, did: int) -> str:
    """``CPU``, ``GPU0``, ``XPU1``, ... ; an unknown type ``device<type>:<id>``."""
    if dtype == 0:
        return "CPU" if did <= 0 else f"CPU{did}"
    prefix = DEVICE_PREFIX.get(dtype)
    return f"{prefix}{did}" if prefix else f"device{dtype}:{did}"


@dataclass
class OpStats:
    """Per-operator memory table of one device and one grouping (rows sorted)."""

    name: np.ndarray     # string id of the op name
    shape: np.ndarray    # shape id (-1 none); all -1 when grouped by name only
    calls: np.ndarray
    values: np.ndarray   # (rows, 6) int64, columns as STAT_COLUMNS


@dataclass
class DeviceMemory:
    """One device's memory events, in time order (ties: file order)."""

    label: str
    type: int
    id: int
    ts: np.ndarray           # ns
    bytes: np.ndarray
    allocated: np.ndarray    # Total Allocated after each event (bytes)
    reserved: np.ndarray     # Total Reserved after each event; -1 when not recorded
    capacity: int            # totalGlobalMem, -1 unknown
    # allocations (Bytes > 0), in time order
    alloc_ts: np.ndarray
    release_ts: np.ndarray   # -1: not freed inside the span
    size: np.ndarray
    op_name: np.ndarray      # string id of the enclosing op; -1 <unknown>
    stats: dict[str, OpStats] = field(default_factory=dict)   # by GROUP_BY value

    @property
    def peak_index(self) -> int:
        """Index of the first event where Total Allocated is largest (-1: no events)."""
        return int(np.argmax(self.allocated)) if len(self.allocated) else -1

    @property
    def peak_allocated(self) -> int:
        return int(self.allocated.max()) if len(self.allocated) else 0


@dataclass
class MemoryAnalysis:
    """Every device with memory events (in (type, id) order), and data-quality notes."""

    devices: list[DeviceMemory]
    notes: list[Note] = field(default_factory=list)

    def device(self, label: str) -> DeviceMemory | None:
        return next((d for d in self.devices if d.label == label), None)


@dataclass
class DevicePart:
    """One device's memory events: ``rows`` (indices into ``trace.memory``) in time order
    (ties: file order), its label and its allocated bytes after each event."""

    label: str
    type: int
    id: int
    rows: np.ndarray
    allocated: np.ndarray  # Total Allocated; the running sum of Bytes where it is missing
    totals_missing: bool


def device_parts(memory: dict[str, np.ndarray]) -> list[DevicePart]:
    """The memory events of each device with a usable Device Type, in (type, id) order: the
    one split and the one set of labels of the Memory view and the Trace view's memory lanes.
    Two devices of one label (CPU ids -1 and 0) get their type and id in it."""
    m = memory
    n = len(m["ts"])
    order = np.lexsort((np.arange(n), m["ts"], m["device_id"], m["device_type"]))
    order = order[m["device_type"][order] >= 0]
    if not len(order):
        return []
    dt, di = m["device_type"][order], m["device_id"][order]
    cut = np.flatnonzero((np.diff(dt) != 0) | (np.diff(di) != 0)) + 1
    parts = []
    for rows in np.split(order, cut):
        dtype, did = int(m["device_type"][rows[0]]), int(m["device_id"][rows[0]])
        allocated = m["total_allocated"][rows]
        missing = bool((allocated < 0).any())
        parts.append(DevicePart(device_label(dtype, did), dtype, did, rows,
                                np.cumsum(m["bytes"][rows]) if missing else allocated, missing))
    taken = Counter(p.label for p in parts)
    for p in parts:
        if taken[p.label] > 1:
            p.label = f"{p.label} (type {p.type}, id {p.id})"
    return parts


def analyze_memory(trace: Trace, tree: HostTree, nodes: OpNodes, capacity_of) -> MemoryAnalysis:
    """Memory analysis of ``trace``; ``nodes`` gives the same-name collapse of the host tree,
    ``capacity_of(device_id)`` a GPU's totalGlobalMem (an int, or None)."""
    m = trace.memory
    n = len(m["ts"])
    notes: list[Note] = []
    usable = m["device_type"] >= 0
    if n and not usable.all():
        notes.append(Note("warning", "memory_bad_args",
                          f"{int((~usable).sum()):,} of {n:,} memory events lack a usable "
                          "Device Type; they are left out of the Memory view."))
    parts = device_parts(m)
    if not parts:
        return MemoryAnalysis([], notes)
    order = np.concatenate([p.rows for p in parts])
    owner = enclosing_ops(trace, tree, m["thread"][order], m["ts"][order])
    cut = np.cumsum([len(p.rows) for p in parts])[:-1]
    children = child_positions(tree, nodes)
    groups = groupings(trace, tree, nodes)
    devices = []
    totals_missing = unmatched = reused = 0
    for p, own in zip(parts, np.split(owner, cut)):
        part, dtype, did, allocated = p.rows, p.type, p.id, p.allocated
        ts, b = m["ts"][part], m["bytes"][part]
        totals_missing += len(part) if p.totals_missing else 0
        cap = capacity_of(did) if dtype in GPU_TYPES else None
        alloc, release, bad_free, again = pair_frees(m["addr"][part], b)
        unmatched += bad_free
        reused += again
        rel_ts = np.where(release >= 0, ts[np.maximum(release, 0)], -1)
        name = np.where(own >= 0, trace.name[tree.rows[np.maximum(own, 0)]], -1)
        dev = DeviceMemory(
            label=p.label, type=dtype, id=did, ts=ts, bytes=b,
            allocated=allocated, reserved=m["total_reserved"][part],
            capacity=int(cap) if isinstance(cap, int) and cap > 0 else -1,
            alloc_ts=ts[alloc], release_ts=rel_ts[alloc], size=b[alloc],
            op_name=name[alloc].astype(np.int64))
        sums = node_sums(trace, tree, children, ts, b)
        dev.stats = {g: op_stats(groups[g], sums) for g in GROUP_BY}
        devices.append(dev)
    if totals_missing:
        notes.append(Note("info", "memory_totals_missing",
                          f"{totals_missing:,} memory events carry no Total Allocated (older "
                          "traces): their devices' curves are the running sum of Bytes from "
                          "the first event, not the allocator's totals."))
    if unmatched:
        notes.append(Note("info", "memory_unmatched_frees",
                          f"{unmatched:,} frees have no allocation of their address earlier in "
                          "the span (allocated before the profiler started, or a missing Addr)."))
    if reused:
        notes.append(Note("warning", "memory_address_reused",
                          f"{reused:,} allocations were followed by another allocation of the "
                          "same address without a free in between; each is shown as not "
                          "freed in the span."))
    return MemoryAnalysis(devices, notes)


def pair_frees(addr: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Pair each allocation with the first later free of its address (events in time order).

    Returns ``(alloc, release, unmatched_frees, reallocated)``: ``alloc`` the indices of
    the allocations (``b > 0``), ``release`` per event the index of its free (-1 none).
    An allocation whose next event at the address is another allocation stays unfreed
    (counted in ``reallocated``); a free not preceded by an allocation is unmatched.
    Events without an address (``addr < 0``) pair with nothing.
    """
    n = len(b)
    idx = np.arange(n)
    by_addr = np.lexsort((idx, addr))
    a_sorted, b_sorted = addr[by_addr], b[by_addr]
    same_next = np.zeros(n, dtype=bool)
    same_next[:-1] = (a_sorted[1:] == a_sorted[:-1]) & (a_sorted[:-1] >= 0)
    is_alloc = b_sorted > 0
    is_free = b_sorted < 0
    nxt_free = np.zeros(n, dtype=bool)
    nxt_free[:-1] = is_free[1:]
    nxt_alloc = np.zeros(n, dtype=bool)
    nxt_alloc[:-1] = is_alloc[1:]
    pairs = is_alloc & same_next & nxt_free
    release = np.full(n, -1, dtype=np.int64)
    release[by_addr[pairs]] = by_addr[np.flatnonzero(pairs) + 1]
    paired_free = np.zeros(n, dtype=bool)
    paired_free[np.flatnonzero(pairs) + 1] = True
    unmatched = int((is_free & ~paired_free).sum())
    reallocated = int((is_alloc & same_next & nxt_alloc).sum())
    return np.flatnonzero(b > 0), release, unmatched, reallocated


def enclosing_ops(trace: Trace, tree: HostTree, thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Tree position of the innermost host op enclosing each instant (``start <= ts <= end``)
    on the instant's thread, else on any thread (the shortest such op); -1 when none."""
    is_op = trace.kind[tree.rows] == Kind.HOST_OP
    th = trace.thread[tree.rows].astype(np.int64)
    up = nearest_marked_ancestor(tree.parent, is_op)
    out = _innermost(tree, is_op, up, th, thread.astype(np.int64), ts)
    left = np.flatnonzero(out < 0)
    if len(left) and len(tree):
        best = np.full(len(left), -1, dtype=np.int64)
        for t in np.unique(th[is_op]).tolist():
            c = _innermost(tree, is_op, up, th, np.full(len(left), t, dtype=np.int64), ts[left])
            dur = tree.end - tree.start
            shorter = (c >= 0) & ((best < 0) | (dur[np.maximum(c, 0)] < dur[np.maximum(best, 0)]))
            best = np.where(shorter, c, best)
        out[left] = best
    return out


def _innermost(tree: HostTree, is_op: np.ndarray, up: np.ndarray, th: np.ndarray,
               thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Innermost op of ``thread`` enclosing ``ts`` (tree positions are sorted by thread, then
    start): start from the last event of the thread starting at or before ``ts`` and walk up
    its op ancestors until one ends at or after ``ts`` (in a laminar nesting every op
    enclosing ``ts`` is an ancestor-or-self of that event)."""
    c = np.full(len(ts), -1, dtype=np.int64)
    if not len(tree):
        return c
    lo_of = np.searchsorted(th, thread, side="left")
    hi_of = np.searchsorted(th, thread, side="right")
    for t in np.unique(thread[hi_of > lo_of]).tolist():
        q = np.flatnonzero(thread == t)
        a, z = int(lo_of[q[0]]), int(hi_of[q[0]])
        c[q] = a + np.searchsorted(tree.start[a:z], ts[q], side="right") - 1
        c[q[c[q] < a]] = -1
    c = np.where((c >= 0) & ~is_op[np.maximum(c, 0)], up[np.maximum(c, 0)], c)
    while True:
        live = np.flatnonzero(c >= 0)
        live = live[tree.end[c[live]] < ts[live]]
        if not len(live):
            return c
        c[live] = up[c[live]]


def child_positions(tree: HostTree, nodes: OpNodes) -> tuple[np.ndarray, np.ndarray]:
    """``(kid, parent_rep)``: every surviving nested event (host events and runtime calls)
    and the surviving node it is a direct child of, after the same-name collapse."""
    kid = np.flatnonzero(nodes.alive & (tree.parent >= 0))
    return kid, nodes.rep[tree.parent[kid]]


def node_sums(trace: Trace, tree: HostTree, children: tuple[np.ndarray, np.ndarray],
              ts: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(total, self)`` per tree position, ``(n, 3)`` int64: Σ Bytes, allocation count and
    Σ Bytes > 0 of the events (time order) with ``start <= ts <= end``; self = total minus
    the direct children's totals (after the same-name collapse)."""
    rows = tree.rows
    start = trace.start[rows]
    lo = np.searchsorted(ts, start, side="left")
    hi = np.searchsorted(ts, start + trace.dur[rows], side="right")
    pos = b > 0
    per_event = np.stack([b, pos.astype(np.int64), np.where(pos, b, 0)], axis=1)
    cum = np.vstack([np.zeros((1, 3), dtype=np.int64), np.cumsum(per_event, axis=0)])
    total = cum[hi] - cum[lo]
    kid, parent = children
    return total, total - group_sum(parent, total[kid], len(rows))


def group_sum(gid: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``out[k] = values[gid == k].sum(axis=0)`` for 2-D int64 ``values``, exact: float
    bincounts while every partial sum stays below 2**53, else an integer sort + reduceat."""
    out = np.zeros((n, values.shape[1]), dtype=np.int64)
    if not len(gid):
        return out
    bound = max(int(values.max(initial=0)), -int(values.min(initial=0))) * len(gid)
    if bound < 1 << 53:  # every partial sum is exact in float64
        for c in range(values.shape[1]):
            out[:, c] = np.rint(np.bincount(gid, weights=values[:, c], minlength=n))
        return out
    order = np.argsort(gid, kind="stable")
    g = gid[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    out[g[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


@dataclass
class Grouping:
    """Operator-table positions and their groups (by name, or name + input shape)."""

    sel: np.ndarray      # tree positions of table rows
    gid: np.ndarray      # group of each
    name: np.ndarray     # per group: name string id
    shape: np.ndarray    # per group: shape id (-1)


def groupings(trace: Trace, tree: HostTree, nodes: OpNodes) -> dict[str, Grouping]:
    """The operator table's groups for each ``GROUP_BY`` value (computed once per trace)."""
    sel = np.flatnonzero(table_mask(trace, tree, nodes))
    names = trace.name[tree.rows[sel]].astype(np.int64)
    out = {}
    for g in GROUP_BY:
        shapes = (grouping_shapes(trace)[0][trace.shape[tree.rows[sel]]] if g == GROUP_BY[1]
                  else np.full(len(sel), -1, dtype=np.int64))
        if not len(sel):
            z = np.zeros(0, dtype=np.int64)
            out[g] = Grouping(sel, z, z, z)
            continue
        first, gid = group_ids(names, shapes)
        out[g] = Grouping(sel, gid, names[first], shapes[first])
    return out


def op_stats(grouping: Grouping, sums: tuple[np.ndarray, np.ndarray]) -> OpStats:
    """Per-operator memory table of one device from its :func:`node_sums`, sorted by size
    increase, then self size increase, then name id."""
    total, self_ = sums
    gr = grouping
    per = np.concatenate([total[gr.sel], self_[gr.sel]], axis=1)   # t0 t1 t2 s0 s1 s2
    vals = group_sum(gr.gid, per, len(gr.name))[:, [0, 3, 1, 4, 2, 5]]
    calls = np.bincount(gr.gid, minlength=len(gr.name)).astype(np.int64)
    order = np.lexsort((gr.name, -vals[:, 1], -vals[:, 0]))
    return OpStats(name=gr.name[order], shape=gr.shape[order], calls=calls[order],
                   values=vals[order])


def downsample(ts: np.ndarray, values: np.ndarray, start: int, end: int,
               buckets: int) -> np.ndarray:
    """Indices of the samples to draw in ``[start, end]`` (ns): per time bucket the first,
    the min, the max and the last sample of ``values`` (so the window's exact peak is
    kept), plus the last sample before ``start`` (the level the window opens at)."""
    lo = int(np.searchsorted(ts, start, side="left"))
    hi = int(np.searchsorted(ts, end, side="right"))
    before = [lo - 1] if lo > 0 else []
    if hi <= lo:
        return np.array(before, dtype=np.int64)
    t, v = ts[lo:hi], values[lo:hi]
    span = max(end - start, 1)
    off = t - start
    # (offset x buckets overflows int64 past 21 days at 5,000 buckets: coarser ns then)
    shift = max(0, (span * buckets).bit_length() - 62)
    if shift:
        off, span = off >> shift, max(span >> shift, 1)
    bucket = np.minimum(off * buckets // span, buckets - 1)
    cut = np.flatnonzero(np.diff(bucket)) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [len(t)])) - 1
    vmax = np.maximum.reduceat(v, starts)
    vmin = np.minimum.reduceat(v, starts)
    seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(t))))
    idx = np.arange(len(t))
    big = len(t)
    at_max = np.minimum.reduceat(np.where(v == vmax[seg], idx, big), starts)
    at_min = np.minimum.reduceat(np.where(v == vmin[seg], idx, big), starts)
    keep = sorted_unique(np.concatenate((starts, ends, at_max, at_min))) + lo
    return np.concatenate((np.array(before, dtype=np.int64), keep))
