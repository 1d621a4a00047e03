"""Flame graph of the host nesting (SPEC §4.2 "Flame graph / stacks").

Frames are the host tree's events (python frames, user ranges, ops, runtime calls; the
ProfilerStep windows are left out so that every step's frames merge) under one root per
thread, merged by their path of names. Two weights per frame:

- host self: its (clipped) duration minus its child frames' durations; a thread root's is
  the time of its steps outside every frame (a step's own time: python between the ops);
- device: the device time its launches ran (runtime calls are the leaves that launch).

Totals are subtree sums. Frames nested deeper than :data:`MAX_DEPTH` fold into their
ancestor at that depth (their time stays in the graph). :func:`cap_children` keeps the
heaviest :data:`MAX_CHILDREN` children of a node and folds the rest into one remainder.

Example: thread 1 ``a [0, 10) > b [2, 5)`` and ``a [20, 24)`` give paths
``thread 1`` (total 14), ``thread 1;a`` (self 11, total 14), ``thread 1;a;b`` (self 3); the
same inside a step ``[0, 30)`` gives ``thread 1`` self 16 and total 30.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..taxonomy import Kind
from .breakdown import string_hits
from .links import Links
from .module import intern_paths, marked_depth
from .operators import sum_to
from .tree import (
    HostTree,
    any_ancestor_or_self,
    build_tree,
    nearest_marked_ancestor,
    nearest_marked_ancestor_at,
)

#: Frame levels kept below a thread root; deeper frames fold into their ancestor.
MAX_DEPTH = 512
#: Children a node sends at most; the rest are summed into one remainder node.
MAX_CHILDREN = 1000


@dataclass
class Flame:
    """Merged frames; per node (thread roots first, a parent numbers below its children)."""

    labels: list[str]        # text of each name id
    name: np.ndarray         # index into labels
    parent: np.ndarray       # parent node, -1 for thread roots
    host_self: np.ndarray    # ns
    host_total: np.ndarray   # ns
    device_self: np.ndarray  # ns
    device_total: np.ndarray  # ns
    folded: int              # frames folded into an ancestor at MAX_DEPTH

    def __len__(self) -> int:
        return len(self.name)

    def check(self) -> None:
        for s, t in ((self.host_self, self.host_total), (self.device_self, self.device_total)):
            assert (s >= 0).all() and (s <= t).all()
            kids = self.parent >= 0
            assert (sum_to(self.parent[kids], t[kids], len(self)) + s == t).all(), "totals"


def thread_label(trace: Trace, thread: int) -> str:
    pid, tid = trace.threads[thread]
    return f"thread {tid} (pid {pid})"


#: The op older torch versions open a record_function range in
#: (``profiler::_record_function_enter_new``; now a python frame of that name).
ENTER_RANGE = re.compile(r"_record_function_enter")


def entered_ranges(trace: Trace, tree: HostTree) -> tuple[np.ndarray, np.ndarray]:
    """``(clipped, entered)``: the tree positions of the events the nesting clipped (SPEC
    §2.4.1), and which of them are record_function ranges (ProfilerStep#N too) entered
    inside a python frame (or torch 1.x's ``_record_function_enter`` op) that ends before
    them, as torch records every range with ``with_stack=True``."""
    clipped = np.flatnonzero(tree.end != trace.start[tree.rows] + trace.dur[tree.rows])
    parent = tree.parent[clipped]
    opener = tree.rows[np.maximum(parent, 0)]
    entered = (np.isin(trace.kind[tree.rows[clipped]], (Kind.USER_RANGE, Kind.STEP))
               & (parent >= 0)
               & ((trace.kind[opener] == Kind.PYTHON)
                  | string_hits(trace, ENTER_RANGE)[trace.name[opener]]))
    return clipped, entered


def flame_tree(trace: Trace, tree: HostTree) -> HostTree:
    """The host nesting the flame graph draws: ``tree``, except that the python frames
    entering a record_function range (``__enter__``, ``_record_function_enter_new``: they
    end a few µs after the range starts) end where the range starts, so the range keeps its
    whole span and holds the ops it wraps. (Clipped to those frames as SPEC §2.4.1 does for
    the operator view, a with_stack trace's ``backward`` range of 838.75 µs was a leaf of
    8.2 µs under ``__enter__``, its ops beside it.)"""
    if not tree.clipped:
        return tree
    clipped, entered = entered_ranges(trace, tree)
    ranges = clipped[entered]
    if not len(ranges):
        return tree
    whole = trace.start + trace.dur
    ends = whole.copy()
    opener = (trace.kind == Kind.PYTHON) | string_hits(trace, ENTER_RANGE)[trace.name]
    range_start = tree.start[ranges]
    range_end = whole[tree.rows[ranges]]
    frame = tree.parent[ranges].astype(np.int64)
    while len(frame):  # up the entering frames: python frames (or the enter op) ending first
        row = tree.rows[np.maximum(frame, 0)]
        opens = (frame >= 0) & opener[row] & (whole[row] < range_end)
        frame, range_start, range_end = frame[opens], range_start[opens], range_end[opens]
        np.minimum.at(ends, tree.rows[frame], range_start)
        frame = tree.parent[frame].astype(np.int64)
    del whole, opener
    # (no second thread: the Module view is built beside the Operator view already)
    return build_tree(trace, ends=ends)


def flame(trace: Trace, tree: HostTree, links: Links) -> Flame:
    """The merged host frames of every thread with their host-self and device weights
    (``tree``: the analysis' nesting; drawn as :func:`flame_tree` nests it)."""
    tree = flame_tree(trace, tree)
    n = len(tree)
    rows = tree.rows
    frame = trace.kind[rows] != Kind.STEP
    # only the children of ProfilerStep windows climb: from every position, a few levels
    # (int32 while the paths are interned: the flame graph's peak memory, issue 19)
    parent = nearest_marked_ancestor_at(tree.parent, frame, np.arange(n)).astype(np.int32)
    depth = marked_depth(tree, frame).astype(np.int32)
    dur = tree.end - tree.start
    sel = np.flatnonzero(frame)
    kid = sel[parent[sel] >= 0]
    host_self = np.where(frame, dur - sum_to(parent[kid], dur[kid], n), 0)
    dev_self = np.where(frame, links.device_ns[rows], 0)
    thread = trace.thread[rows]
    # a ProfilerStep's own time (not in its frames) stays in the frame enclosing it, or, for
    # a step under no frame, goes to its thread's root: the graph adds up to the threads'
    # busy time (left out, it lost 20 % of a step's host time on a small model)
    outer = np.flatnonzero(tree.parent < 0)
    lone = sel[parent[sel] < 0]
    nthreads = len(trace.threads)
    root_self = (sum_to(thread[outer], dur[outer], nthreads)
                 - sum_to(thread[lone], dur[lone], nthreads))
    del dur, kid, outer, lone  # per-node temporaries: freed before the next ones
    deep = frame & (depth >= MAX_DEPTH)
    folded = int(deep.sum())
    if folded:
        anchor = nearest_marked_ancestor(tree.parent, frame & (depth == MAX_DEPTH - 1))[deep]
        host_self = host_self + sum_to(anchor, host_self[deep], n)
        dev_self = dev_self + sum_to(anchor, dev_self[deep], n)
        sel = np.flatnonzero(frame & ~deep)
    path, pp, pk, pd = intern_paths(sel, parent, depth, trace.name[rows], root_key=thread)
    del parent, depth
    m = len(pp)
    p = path[sel]
    del path
    # one root per thread, numbered first
    roots = np.flatnonzero(pp < 0)
    root_thread = np.zeros(m, dtype=np.int64)
    root_thread[p] = thread[sel]
    threads = np.unique(root_thread[roots])
    t_idx = np.searchsorted(threads, root_thread[roots])
    nt = len(threads)
    parent_out = np.concatenate((np.full(nt, -1, dtype=np.int64), pp + nt))
    parent_out[nt + roots] = t_idx
    labels = list(trace.strings) + [thread_label(trace, t) for t in threads.tolist()]
    name = np.concatenate((len(trace.strings) + np.arange(nt), pk))
    hs = sum_to(p, host_self[sel], m)
    ds = sum_to(p, dev_self[sel], m)
    del host_self, dev_self
    ht, dt = _path_totals(hs, pp, pd), _path_totals(ds, pp, pd)
    hs = np.concatenate((root_self[threads], hs))
    ds = np.concatenate((np.zeros(nt, np.int64), ds))
    ht = np.concatenate((sum_to(t_idx, ht[roots], nt) + root_self[threads], ht))
    dt = np.concatenate((sum_to(t_idx, dt[roots], nt), dt))
    return Flame(labels=labels, name=name, parent=parent_out, host_self=hs, host_total=ht,
                 device_self=ds, device_total=dt, folded=folded)


def _path_totals(own: np.ndarray, parent: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Per merged path: its ``own`` weight plus those of all its descendant paths (paths
    are numbered level by level, ``level`` ascending, a parent on the level above). This
    equals the sum of the subtree totals of the path's positions: they are disjoint
    subtrees, and every frame below them lies on a descendant path (a folded one on its
    anchor's), so per-position subtree sums (two arrays as long as the tree) are not
    needed (issue 19: the flame graph's peak memory at x200)."""
    total = own.copy()
    top = int(level.max(initial=0))
    ends = np.searchsorted(level, np.arange(top + 2)).tolist()  # level k: ends[k]:ends[k+1]
    for k in range(top, 0, -1):  # deepest level first, each onto its parents
        a, b = ends[k], ends[k + 1]
        np.add.at(total, parent[a:b], total[a:b])
    return total


def cap_children(parent: np.ndarray, total: np.ndarray, keep: np.ndarray,
                 cap: int = MAX_CHILDREN
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keep at most ``cap`` children per node, the heaviest by ``total`` (ties: lower id).

    ``keep``: the nodes eligible at all (e.g. total > 0, which holds for every ancestor of
    such a node). A dropped node's subtree goes with it (its own cut children are not
    reported again). Returns ``(kept mask, kept parents that lost children, the lost
    children's summed total, how many)``.

    Example: parent ``[-1, 0, 0, 0]``, total ``[6, 3, 2, 1]``, cap 2 -> node 3 dropped,
    ``lost = ([0], [1], [1])``.
    """
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((idx, -total[idx], parent[idx]))]
    par = parent[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = par[1:] != par[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    over = order[np.arange(len(order)) - start >= cap]
    dropped = np.zeros(len(parent), dtype=bool)
    dropped[over] = True
    kept = keep & ~any_ancestor_or_self(parent, dropped)
    # a cut node's own cut children went with it (in its parent's remainder): not reported
    over = over[(parent[over] < 0) | kept[np.maximum(parent[over], 0)]]
    lost_parent, inv = np.unique(parent[over], return_inverse=True)
    inv = inv.reshape(-1)
    return (kept, lost_parent, sum_to(inv, total[over], len(lost_parent)),
            np.bincount(inv, minlength=len(lost_parent)))
