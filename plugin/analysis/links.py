"""Who launched what: runtime call <-> device activity <-> host op (SPEC §1.3, §2.4.3).

A device activity (kernel, memcpy, memset) and the runtime call that launched it share
``args.correlation``; a runtime call belongs to the host event whose ``External id``
equals its own (id 0 / missing: to no host event). Flow events are never used, except in
legacy ``torch.autograd.profiler`` exports, which have no runtime calls: the reader writes
each ``cpu_to_cuda`` flow's id into the correlation of the op and of the kernel it joins,
and the op is then its own launcher (and owner).

Correlation ids repeat across the processes of one trace, and a device activity's ``pid``
is its device, not a process: among the launches sharing an activity's id, the one that
started last at or before the activity launched it (a launch precedes its work).

Example: kernel row 9 (correlation 42) <- runtime row 4 (correlation 42, External id 7)
<- host op row 2 (External id 7) gives ``launcher[9] == 4`` and ``owner[4] == 2``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..model import Trace
from ..taxonomy import DEVICE_ACTIVITY_KINDS, HOST_KINDS, Kind
from .intervals import sorted_unique
from .tree import INDEX, HostTree, nearest_marked_ancestor_at


@dataclass
class Links:
    """Row-indexed link arrays (length ``len(trace)``, ``-1`` = none); rows and counts are
    int32 (:data:`~.tree.INDEX`), ``device_ns`` int64."""

    #: device activity row -> row of the runtime call that launched it
    launcher: np.ndarray
    #: runtime call row -> row of the host event it belongs to (External id)
    owner: np.ndarray
    #: runtime call row -> summed duration (ns) of the device activities it launched
    device_ns: np.ndarray
    #: runtime call row -> number of device activities it launched
    device_count: np.ndarray
    #: rows of device activities, of runtime calls (file order)
    activity_rows: np.ndarray
    runtime_rows: np.ndarray
    #: rows that launch device work: runtime calls, and host ops of legacy exports
    launch_rows: np.ndarray

    #: runtime calls attached by time because their External id named no enclosing event
    owners_by_time: int = 0

    def launching_op(self, rows: np.ndarray) -> np.ndarray:
        """Host event that launched each device activity row (via its runtime call); -1."""
        rt = self.launcher[rows]
        return np.where(rt >= 0, self.owner[np.maximum(rt, 0)], -1)


def _lookup(keys: np.ndarray, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Row of ``rows`` whose key equals each query (first in file order on ties); -1."""
    if not len(keys) or not len(queries):
        return np.full(len(queries), -1, dtype=np.int64)
    kmax = int(keys.max())
    if int(keys.min()) >= 0 and kmax <= 4 * (len(keys) + len(queries)) + (1 << 20):
        # ids of small range (the usual case): a table key -> first index, no sort
        first = np.full(kmax + 1, len(keys), dtype=np.int64)
        np.minimum.at(first, keys, np.arange(len(keys), dtype=np.int64))
        inside = (queries >= 0) & (queries <= kmax)
        at = first[np.where(inside, queries, 0)]
        hit = inside & (at < len(keys))
        return np.where(hit, rows[np.minimum(at, len(keys) - 1)], -1)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.searchsorted(sk, queries)
    pos_c = np.minimum(pos, len(sk) - 1)
    hit = (pos < len(sk)) & (sk[pos_c] == queries)
    return np.where(hit, rows[order[pos_c]], -1)


def _lookup_before(keys: np.ndarray, starts: np.ndarray, rows: np.ndarray,
                   queries: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Row of ``rows`` whose key equals each query, the last one starting at or before
    ``at`` (else the first one with that key); -1 when no key matches. Keys are mostly
    unique: only the repeated ones are ordered and searched by start."""
    if not len(keys) or not len(queries):
        return np.full(len(queries), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    dup = np.zeros(len(sk), dtype=bool)
    dup[1:] = sk[1:] == sk[:-1]
    dup[:-1] |= dup[1:]
    d = np.flatnonzero(dup)  # whole blocks of equal keys, in key order: sort each by start
    if len(d):
        order[d] = order[d][np.lexsort((order[d], starts[order[d]], sk[d]))]
    lo = np.searchsorted(sk, queries, side="left")
    hi = np.searchsorted(sk, queries, side="right")
    pos = np.minimum(lo, len(sk) - 1)
    multi = np.flatnonzero(hi - lo > 1)
    if len(multi):
        last = np.searchsorted(_pair(sk[d], starts[order[d]]),
                               _pair(queries[multi], at[multi]), side="right") - 1
        at_d = np.searchsorted(d, lo[multi])  # the block start within d
        pos[multi] = np.where(last >= at_d, d[np.maximum(last, 0)], lo[multi])
    return np.where(hi > lo, rows[order[pos]], -1)


def _pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sortable ``(a, b)`` pairs as one structured array (lexicographic order)."""
    out = np.empty(len(a), dtype=[("a", np.int64), ("b", np.int64)])
    out["a"], out["b"] = a, b
    return out


def link(trace: Trace) -> Links:
    """Build the launch links of ``trace`` (vectorised: sort + searchsorted)."""
    n = len(trace)
    kind = trace.kind
    corr = trace.correlation
    ext = trace.external_id
    dur = trace.dur

    runtime_rows = np.flatnonzero(kind == Kind.RUNTIME)
    activity_rows = np.flatnonzero(trace.mask(*DEVICE_ACTIVITY_KINDS))

    rt_c = runtime_rows[corr[runtime_rows] >= 0]
    act_c = activity_rows[corr[activity_rows] >= 0]
    launcher = np.full(n, -1, dtype=INDEX)
    launcher[act_c] = _lookup_before(corr[rt_c], trace.start[rt_c], rt_c, corr[act_c],
                                     trace.start[act_c])
    # legacy exports: the host op is the launcher (correlation from cpu_to_cuda flows)
    legacy = np.zeros(0, dtype=np.int64)
    rest = act_c[launcher[act_c] < 0]
    ops = np.flatnonzero((kind == Kind.HOST_OP) & (corr >= 0))
    if len(rest) and len(ops):
        launcher[rest] = _lookup(corr[ops], ops, corr[rest])
        legacy = sorted_unique(launcher[rest][launcher[rest] >= 0])

    # host events by External id; host ops win over ranges/steps that share an id
    host = np.flatnonzero(trace.mask(*HOST_KINDS) & (ext > 0))
    host = host[np.argsort(kind[host] != Kind.HOST_OP, kind="stable")]
    rt_e = runtime_rows[ext[runtime_rows] > 0]
    owner = np.full(n, -1, dtype=INDEX)
    owner[rt_e] = _lookup(ext[host], host, ext[rt_e])
    owner[legacy] = legacy

    linked = activity_rows[launcher[activity_rows] >= 0]
    device_ns = np.zeros(n, dtype=np.int64)
    device_count = np.zeros(n, dtype=INDEX)
    if len(linked):
        # float sums are exact below 2**53 ns (104 days)
        device_ns = np.bincount(launcher[linked], weights=dur[linked], minlength=n).astype(np.int64)
        device_count = np.bincount(launcher[linked], minlength=n).astype(INDEX)
    return Links(launcher=launcher, owner=owner, device_ns=device_ns,
                 device_count=device_count, activity_rows=activity_rows,
                 runtime_rows=runtime_rows,
                 launch_rows=np.sort(np.concatenate((runtime_rows, legacy))))


def attach_by_time(trace: Trace, links: Links, tree: HostTree) -> Links:
    """Check each External-id owner against the host tree; re-attach the wrong ones by time.

    In a sound trace a runtime call's owner is the innermost host op enclosing it (checked
    on every shared trace). Some Kineto versions write the call's ``correlation`` into its
    ``External id`` (seen in 2023 traces), so the id names an unrelated op - or by chance an
    outer one. An id whose owner does not enclose the call, or encloses an op that itself
    encloses the call, is replaced by the innermost enclosing op (else the innermost
    enclosing host event). A call without an id (0 / missing) stays unattached (SPEC §2.4.3).
    """
    rts = links.runtime_rows
    pos = tree.pos_of_row[rts]
    own = links.owner[rts]
    own_pos = np.where(own >= 0, tree.pos_of_row[np.maximum(own, 0)], -1)
    is_op = trace.kind[tree.rows] == Kind.HOST_OP
    inner_op = nearest_marked_ancestor_at(tree.parent, is_op, pos)
    skipped = (inner_op >= 0) & (inner_op != own_pos) & tree.contains(own_pos, inner_op)
    valid = tree.contains(own_pos, pos) & ~skipped
    # nearest enclosing host event (a runtime call may nest in another: not an owner)
    host = trace.kind[tree.rows] != Kind.RUNTIME
    parent = nearest_marked_ancestor_at(tree.parent, host, pos)
    by_time = np.where(inner_op >= 0, inner_op, parent)
    redo = ~valid & (trace.external_id[rts] > 0) & (by_time >= 0)
    owner = links.owner.copy()
    owner[rts[~valid]] = -1
    owner[rts[redo]] = tree.rows[by_time[redo]]
    return replace(links, owner=owner, owners_by_time=int(redo.sum()))
