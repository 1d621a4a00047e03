"""Per-thread nesting of host events by time containment (SPEC §2.4.1-2).

Host events (ops, user ranges, python frames, steps) and runtime calls of one thread are
sorted by ``(start asc, end desc, host before runtime, file order)``; runtime calls are
leaves that tell which host event encloses them. event ``c`` is a child of ``p`` when
``p.start <= c.start < p.end`` and ``c.end <= p.end`` (torch's own rule, so a zero-length
event at its neighbour's end is a sibling, not a child). A partial overlap
(``c.start < p.end < c.end``, seen with fractional timestamps) is attached to the deepest
event containing its start and clipped to it (counted in :attr:`HostTree.clipped`).

The nesting is vectorised, O(n log n) and never recursive: in a laminar family the number
of ancestors of ``i`` is ``#{j before i: end_j > start_i}`` and its parent is the last
event before it with one ancestor fewer (sort + searchsorted). The rare top-level groups
holding a partial overlap are redone with an iterative stack (O(n), no recursion).

Example (one thread)::

    rows   A [0, 10)   B [2, 5)   C [5, 8)   D [6, 7)
    parent -1          A          A          C
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..processes import later
from ..taxonomy import HOST_KINDS, Kind


@dataclass
class HostTree:
    """Host events in tree order; per-position arrays (``-1`` = none). The index arrays
    (``rows``, ``parent``, ``subtree_end``, ``pos_of_row``) are int32 (:data:`INDEX`): half
    the memory of int64 on big traces (x200: 0.15 GB); combine them into keys as int64."""

    rows: np.ndarray         # trace row of each position
    start: np.ndarray        # ns
    end: np.ndarray          # ns, clipped to the parent on partial overlaps
    parent: np.ndarray       # parent position
    subtree_end: np.ndarray  # exclusive end position of the subtree (pre-order ranges)
    pos_of_row: np.ndarray   # trace row -> position (length len(trace))
    clipped: int             # partial overlaps clipped

    def __len__(self) -> int:
        return len(self.rows)

    def flag_at_rows(self, flag: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per trace row: ``flag`` of its tree position (False for rows not in the tree)."""
        pos = np.where(rows >= 0, self.pos_of_row[np.maximum(rows, 0)], -1)
        if not len(flag):
            return np.zeros(len(rows), dtype=bool)
        return (pos >= 0) & flag[np.maximum(pos, 0)]

    def contains(self, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
        """Per pair of positions: ``outer`` is ``inner`` or one of its ancestors."""
        ok = (outer >= 0) & (inner >= 0)
        o = np.maximum(outer, 0)
        return ok & (o <= inner) & (inner < self.subtree_end[o])

    def within(self, flag: np.ndarray) -> np.ndarray:
        """Per position: ``flag`` holds for it or for one of its ancestors (the result of
        :func:`any_ancestor_or_self` on ``parent``, from the pre-order ranges: O(n)).

        The flagged ranges ``[p, subtree_end[p])`` nest or are disjoint; the outermost ones
        are disjoint, so one int8 +1/-1 per range and a cumsum mark them."""
        n = len(self.rows)
        m = np.flatnonzero(flag)
        if not len(m):
            return np.zeros(n, dtype=bool)
        e = self.subtree_end[m]
        outer = np.ones(len(m), dtype=bool)
        outer[1:] = m[1:] >= np.maximum.accumulate(e)[:-1]
        delta = np.zeros(n + 1, dtype=np.int8)
        delta[m[outer]] = 1
        delta[e[outer]] -= 1  # distinct ends (disjoint ranges); may cancel a next start
        return np.cumsum(delta[:n], dtype=np.int8).view(bool)

    def depth(self) -> np.ndarray:
        """Number of ancestors of each position (int64), from the pre-order ranges: O(n).
        Position ``i`` has ``i`` subtrees opened before it, and ``#{j: subtree_end[j] <= i}``
        of them closed."""
        n = len(self.rows)
        closed = np.cumsum(np.bincount(self.subtree_end, minlength=n + 1)[:n])
        return np.subtract(np.arange(n, dtype=np.int64), closed, out=closed)

    def subtree_sum(self, raw: np.ndarray) -> np.ndarray:
        """Per position: the sum of the int64 ``raw`` over its subtree, itself included
        (prefix sums over the pre-order ranges; two arrays of n, no other temporaries)."""
        n = len(self.rows)
        cum = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(raw, out=cum[1:])
        out = cum[self.subtree_end]
        out -= cum[:n]
        return out

    def check(self) -> None:
        """Children lie inside their parents; subtrees are contiguous."""
        has = self.parent >= 0
        p = self.parent[has]
        assert (self.start[p] <= self.start[has]).all()
        assert (self.end[has] <= self.end[p]).all()
        assert (self.start[has] < self.end[p]).all()
        pos = np.flatnonzero(has)
        assert (pos > p).all() and (pos < self.subtree_end[p]).all()


#: dtype of the tree's and the launch links' row and position arrays: a trace holds fewer
#: than 2**31 events (the reader's columns index them with int32 too).
INDEX = np.int32

#: Kinds placed in the tree: host events, and runtime calls as leaves.
TREE_KINDS = (*HOST_KINDS, Kind.RUNTIME)


def build_tree(trace: Trace, rows: np.ndarray | None = None,
               pool: ThreadPoolExecutor | None = None,
               ends: np.ndarray | None = None) -> HostTree:
    """Nest the host events (and runtime calls) of every thread of ``trace``.

    ``rows``: the trace rows to nest instead (the timeline nests the threads holding events
    of other kinds, e.g. unknown categories, with the same rule). ``pool``: a one-thread
    pool (:func:`~stepscope.processes.second_thread`) that nests about half of the events'
    threads meanwhile (a training step's forward and backward run on two threads); the
    result is the same. ``ends``: the events' ends to nest by (ns, per trace row) instead of
    start + dur (the flame graph's, :func:`~stepscope.analysis.stacks.flame_tree`).
    """
    if rows is None:
        rows = np.flatnonzero(trace.mask(*TREE_KINDS))
    th = trace.thread[rows]
    s = trace.start[rows]
    e = s + trace.dur[rows] if ends is None else ends[rows]
    is_rt = trace.kind[rows] == Kind.RUNTIME
    order = _tree_order(rows, th, s, e, is_rt)
    rows, th, s, e = rows[order], th[order], s[order], e[order]
    n = len(rows)
    parent = np.full(n, -1, dtype=np.int64)
    sub_end = np.zeros(n, dtype=np.int64)
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(th)) + 1, [n])).tolist()

    def nest_threads(spans: list[tuple[int, int]]) -> int:
        """Nest the threads at positions ``[a, b)`` of ``spans`` (each writes only its own
        slice of ``e``, ``parent`` and ``sub_end``); the partial overlaps clipped."""
        clipped = 0
        for a, b in spans:
            par, end, nclip = nest(s[a:b], e[a:b])
            e[a:b] = end
            parent[a:b] = np.where(par >= 0, par + a, -1)
            sub_end[a:b] = a + np.searchsorted(s[a:b], end, side="left")
            clipped += nclip
        return clipped

    spans = list(zip(bounds[:-1], bounds[1:]))  # one per thread
    here, aside = _halves(spans) if pool else (spans, [])
    job = later(pool, nest_threads, aside)
    clipped = nest_threads(here) + job.result()
    sub_end = np.maximum(sub_end, np.arange(n) + 1)
    pos_of_row = np.full(len(trace), -1, dtype=INDEX)
    pos_of_row[rows] = np.arange(n, dtype=INDEX)
    return HostTree(rows=rows.astype(INDEX), start=s, end=e, parent=parent.astype(INDEX),
                    subtree_end=sub_end.astype(INDEX), pos_of_row=pos_of_row,
                    clipped=clipped)


def _halves(spans: list[tuple[int, int]]) -> tuple[list, list]:
    """``spans`` (``[a, b)`` ranges) in two groups of about equal length, the longer
    first: largest first, each to the shorter group."""
    groups: tuple[list, list] = ([], [])
    size = [0, 0]
    for a, b in sorted(spans, key=lambda ab: ab[0] - ab[1]):
        k = int(size[1] < size[0])
        groups[k].append((a, b))
        size[k] += b - a
    return groups


def _tree_order(rows: np.ndarray, th: np.ndarray, s: np.ndarray, e: np.ndarray,
                is_rt: np.ndarray) -> np.ndarray:
    """``np.lexsort((rows, is_rt, -e, s, th))``: by thread, start, end descending, host
    before runtime, row. One stable sort of ``(thread, start)`` packed in an int64 (when it
    fits: ns starts are >= 0); only the rare runs of equal ``(thread, start)`` are sorted by
    the other keys."""
    n = len(rows)
    if not n or int(s.min()) < 0 or (int(th.max()) + 1) * (int(s.max()) + 1) >= 2**62:
        return np.lexsort((rows, is_rt, -e, s, th))
    key = th.astype(np.int64) * (int(s.max()) + 1) + s
    order = np.argsort(key, kind="stable")
    k = key[order]
    tie = np.zeros(n, dtype=bool)
    tie[1:] = k[1:] == k[:-1]
    tie[:-1] |= tie[1:]
    d = np.flatnonzero(tie)
    if len(d):
        sub = order[d]
        order[d] = sub[np.lexsort((rows[sub], is_rt[sub], -e[sub], k[d]))]
    return order


def nest(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Parents of one thread's events sorted by (start asc, end desc, file order).

    Returns ``(parent, clipped_end, number_clipped)``. Vectorised for laminar data; the
    top-level groups that hold a partial overlap (rare: none in the shared real traces) are
    redone with :func:`nest_stack`, which gives the same answer on laminar data.
    """
    parent = _laminar_parents(s, e)
    has = parent >= 0
    viol = has & (e > np.where(has, e[np.maximum(parent, 0)], 0))
    if not viol.any():
        return parent, e, 0
    e = e.copy()
    # top-level groups: an event starting at or after every earlier end opens a new one
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] >= run[:-1]
    group = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:], len(s))
    clipped = 0
    for g in np.unique(group[viol]):
        a, b = firsts[g], lasts[g]
        par, end, more = nest_stack(s[a:b], e[a:b])
        parent[a:b] = np.where(par >= 0, par + a, -1)
        e[a:b] = end
        clipped += int(more.sum())
    return parent, e, clipped


def _laminar_parents(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Parents assuming no partial overlaps (callers verify and clip)."""
    n = len(s)
    parent = np.full(n, -1, dtype=np.int64)
    nz = np.flatnonzero(e > s)
    m = len(nz)
    if not m:
        return parent
    S, E = s[nz], e[nz]
    sorted_e = np.sort(E)
    idx = np.arange(m, dtype=np.int64)
    depth = idx - np.searchsorted(sorted_e, S, side="right")
    # parent: the last event before with one ancestor fewer. Depth rises by at most one per
    # event (starts are sorted), so that is the previous event when it sits one level up,
    # else the parent of the previous event of the same level: a forward fill along each
    # level (levels by a stable sort; values encoded per level so the running max restarts)
    top = int(depth.max())
    by_level = np.argsort(depth.astype(np.int16) if top < 2**15 else depth, kind="stable")
    enc = depth * (m + 1) - 1  # per level: -1 = not known yet
    up = np.flatnonzero(depth[:-1] == depth[1:] - 1) + 1
    enc[up] += up  # level * (m + 1) + (up - 1)
    filled = np.maximum.accumulate(enc[by_level])
    par = np.empty(m, dtype=np.int64)
    par[by_level] = filled - depth[by_level] * (m + 1)
    ok = depth > 0
    parent[nz[ok]] = nz[par[ok]]
    # zero-length events are leaves under the deepest event containing their instant
    z = np.flatnonzero(e <= s)
    if len(z):
        keys = np.sort(depth * m + idx)
        t = s[z]
        last = np.searchsorted(S, t, side="right") - 1
        c = (last + 1) - np.searchsorted(sorted_e, t, side="right")
        q = (c - 1) * m + last
        p = np.searchsorted(keys, q, side="right") - 1
        pk = keys[np.maximum(p, 0)]
        ok = (c > 0) & (last >= 0) & (p >= 0) & (pk // m == c - 1)
        parent[z[ok]] = nz[pk[ok] % m]
    return parent


def nest_stack(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference nesting with an explicit stack (iterative, O(n)); same rule as :func:`nest`.

    Returns ``(parent, clipped_end, clipped_mask)``.
    """
    n = len(s)
    sl = s.tolist()
    el = e.tolist()
    parent = [-1] * n
    clipped = np.zeros(n, dtype=bool)
    stack: list[int] = []
    for i in range(n):
        si = sl[i]
        while stack:
            top = stack[-1]
            et = el[top]
            if si >= et:
                stack.pop()
                continue
            if el[i] > et:
                el[i] = et
                clipped[i] = True
            parent[i] = top
            break
        stack.append(i)
    return np.array(parent, dtype=np.int64), np.array(el, dtype=np.int64), clipped


# --- tree helpers (pointer doubling: O(n log depth), no recursion) --------------------------


def any_ancestor_or_self(parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """``out[i]`` is true when ``flag`` holds for ``i`` or any of its ancestors."""
    out = flag.copy()
    anc = parent.copy()
    while True:
        live = anc >= 0
        if not live.any():
            return out
        out[live] |= out[anc[live]]
        anc[live] = anc[anc[live]]


def nearest_marked_ancestor(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Nearest strict ancestor of each position for which ``marked`` holds; -1."""
    nxt = parent.copy()
    while True:
        live = nxt >= 0
        live[live] &= ~marked[nxt[live]]
        if not live.any():
            return nxt
        # invariant: every node strictly between k and nxt[k] is unmarked, so jumping
        # from an unmarked nxt[k] to its own nxt never skips a marked node
        nxt[live] = nxt[nxt[live]]


def nearest_marked_ancestor_at(parent: np.ndarray, marked: np.ndarray, pos: np.ndarray,
                               climb: int = 16) -> np.ndarray:
    """``nearest_marked_ancestor(parent, marked)[pos]`` for the positions ``pos`` only (-1
    for ``pos`` -1): climbs one level per pass from ``pos`` (the op or host event enclosing
    a runtime call is mostly its parent); after ``climb`` passes the rest is looked up in
    the full :func:`nearest_marked_ancestor` (long unmarked chains)."""
    out = np.where(pos >= 0, parent[np.maximum(pos, 0)], -1)
    live = np.flatnonzero(out >= 0)  # out[live]: an ancestor not yet tested
    for _ in range(climb):
        live = live[~marked[out[live]]]
        if not len(live):
            return out
        out[live] = parent[out[live]]
        live = live[out[live] >= 0]
    if len(live):
        at = out[live]
        out[live] = np.where(marked[at], at, nearest_marked_ancestor(parent, marked)[at])
    return out


def collapse_same_name(parent: np.ndarray, is_op: np.ndarray, name: np.ndarray) -> np.ndarray:
    """Same-name collapse (SPEC §2.4.2): representative position of each position.

    An op whose only child op has its own name absorbs that child (repeatedly), as torch's
    table does for re-dispatched ops; ``rep[i] == i`` for every surviving node.

    Example: ``add_ -> add_ -> copy_`` gives ``rep == [0, 0, 2]``.
    """
    n = len(parent)
    rep = np.arange(n, dtype=np.int64)
    kids = np.flatnonzero((parent >= 0) & is_op)  # ops with a parent
    up = parent[kids]
    op_children = np.bincount(up, minlength=n)
    merge = is_op[up] & (name[kids] == name[up]) & (op_children[up] == 1)
    rep[kids[merge]] = up[merge]
    while True:
        nxt = rep[rep]
        if (nxt == rep).all():
            return rep
        rep = nxt
