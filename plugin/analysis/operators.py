"""Operator statistics (SPEC §2.4): host/device self and total time per host op.

Per node of the host tree (after same-name collapse):

- host total  = its (clipped) duration
- host self   = host total - (clipped) durations of its direct children: ops, user ranges,
  python frames, and the attached runtime calls directly inside it. Each nested event is
  subtracted once, from its direct parent, so host self >= 0 (SPEC §2.7)
- device self = device time of its runtime calls (kernels, memcpys, memsets they launched)
- device total = device self of its whole subtree (a contiguous range in tree order)

Device time launched directly under a user range, python frame or step is the device self
of that range (range rows, SPEC §2.4.8); :class:`DeviceAccounts` says where all of the
span's device time went.

Example: ``conv [0, 10)`` with child ``cudnn [2, 8)`` whose ``cudaLaunchKernel [3, 4)``
launched a 5 µs kernel: conv self 4 / total 10 host, 0 / 5 device; cudnn 5 / 6, 5 / 5.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..taxonomy import LAUNCH_CALL_NAME, OPERATOR_EXCLUDED_NAME, Kind
from .breakdown import name_mask
from .links import Links
from .tree import (
    HostTree,
    collapse_same_name,
    nearest_marked_ancestor,
    nearest_marked_ancestor_at,
)

GROUP_BY = ("Operation", "OperationAndInputShape")


@dataclass
class OpNodes:
    """Per tree position (``tree.rows``), int64 ns; merged positions are not ``alive``."""

    alive: np.ndarray
    rep: np.ndarray
    host_total: np.ndarray
    host_self: np.ndarray
    device_self: np.ndarray
    device_total: np.ndarray
    tc_self: np.ndarray
    tc_total: np.ndarray
    table: np.ndarray  # operator-table rows (SPEC §2.4.5): alive ops, excluded names left out

    def check(self) -> None:
        a = self.alive
        assert (self.host_self[a] <= self.host_total[a]).all()
        assert (self.device_self[a] <= self.device_total[a]).all()
        assert (self.host_self[a] >= 0).all() and (self.device_self[a] >= 0).all()


def group_ids(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by equal values of the int columns: ``(a row of each group, group of each
    row)``, groups in ascending key order. Columns are combined pairwise into dense ids, so
    keys never overflow (cheaper than ``np.unique(axis=0)``); a combined key of small range
    (the usual case: interned names, shapes, stacks) is made dense by counting, not sorting."""
    n = len(cols[0])
    ids = np.zeros(n, dtype=np.int64)
    if not n:
        return np.zeros(0, dtype=np.int64), ids
    first = None  # set by np.unique; else filled once, after the last column
    groups = 1  # ids are dense: 0 .. groups - 1
    for col in cols:
        lo = int(col.min())
        span = int(col.max()) - lo + 1
        if span == 1:
            continue  # a constant column splits no group
        key = col.astype(np.int64)
        if lo:
            key -= lo
        if groups > 1:
            ids *= span  # ids is this function's own array
            key += ids
        size = groups * span
        if size <= 4 * n + (1 << 20):
            # rank of each present key among the present keys, in one array of ``size``
            rank = np.zeros(size, dtype=np.int64)
            rank[key] = 1
            present = np.flatnonzero(rank)
            rank[present] = np.arange(len(present))
            ids = rank[key]
            del rank
            first = None
            groups = len(present)
        else:
            _, first, ids = np.unique(key, return_index=True, return_inverse=True)
            ids = ids.reshape(-1).astype(np.int64)
            groups = len(first)
    if first is None:
        first = np.empty(groups, dtype=np.int64)
        first[ids] = np.arange(n)  # some row of each group (any will do: they agree)
    return first, ids


def sum_to(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``out[k] = sum(values[index == k])`` as int64 (float sums exact below 2**53 ns)."""
    if not len(index):
        return np.zeros(n, dtype=np.int64)
    out = np.bincount(index, weights=values, minlength=n)
    return np.rint(out, out=out).astype(np.int64)


def group_min_max(index: np.ndarray, values: np.ndarray, n: int,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(min, max)`` of the int64 ``values`` per group ``0 <= index < n``, every group
    non-empty (the ids of :func:`group_ids`). Few groups: a radix sort by group and
    ``reduceat`` (``np.minimum.at`` stalls when a group repeats row after row); else ``.at``."""
    if n < 2**15:
        v = values[np.argsort(index.astype(np.int16), kind="stable")]
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(np.bincount(index, minlength=n)[:-1], out=starts[1:])
        return np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts)
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, index, values)
    np.maximum.at(hi, index, values)
    return lo, hi


def op_nodes(trace: Trace, tree: HostTree, links: Links, tc_kernel: np.ndarray) -> OpNodes:
    """Host/device self and total time of every host-tree node (vectorised)."""
    n = len(tree)
    rows = tree.rows
    kind = trace.kind[rows]
    is_op = kind == Kind.HOST_OP
    rep = collapse_same_name(tree.parent, is_op, trace.name[rows])
    alive = rep == np.arange(n)
    dur = tree.end - tree.start

    # launches -> owning node (the collapse maps it to the representative below)
    launches, owner_pos = launch_owners(trace, tree, links)
    dev_raw = sum_to(owner_pos, links.device_ns[launches], n)  # on the original position

    # every nested host event and every attached runtime call counts once, against its
    # direct parent (a call inside a user range inside an op is the range's, not the op's;
    # a driver call inside its runtime call is the runtime call's), with clipped durations;
    # children of merged nodes are re-parented onto the representative
    attached = np.zeros(n, dtype=bool)
    attached[tree.pos_of_row[launches]] = True
    kid = np.flatnonzero(alive & (tree.parent >= 0) & ((kind != Kind.RUNTIME) | attached))
    child_ns = sum_to(rep[tree.parent[kid]], dur[kid], n)

    # tensor-core device time per launch
    # (each tensor-core kernel straight to its launch's owner: launches are sorted and
    # distinct; integer ns sum exactly, so this equals summing per launch first)
    acts = links.activity_rows[tc_kernel[links.activity_rows]]
    by = links.launcher[acts]
    at = np.minimum(np.searchsorted(launches, by), max(len(launches) - 1, 0))
    hit = (by >= 0) & (launches[at] == by) if len(launches) else np.zeros(len(acts), bool)
    tc_raw = sum_to(owner_pos[at[hit]], trace.dur[acts[hit]], n)

    merged = np.flatnonzero(~alive)  # few: only same-name chains collapse

    def to_rep(raw: np.ndarray) -> np.ndarray:
        """``sum_to(rep, raw, n)``: a merged node's time moves to its representative."""
        out = np.where(alive, raw, 0)
        np.add.at(out, rep[merged], raw[merged])
        return out

    table = alive & is_op & ~name_mask(trace, OPERATOR_EXCLUDED_NAME)[rows]
    return OpNodes(alive=alive, rep=rep, host_total=dur, host_self=dur - child_ns,
                   device_self=to_rep(dev_raw), device_total=tree.subtree_sum(dev_raw),
                   tc_self=to_rep(tc_raw), tc_total=tree.subtree_sum(tc_raw), table=table)


def launch_owners(trace: Trace, tree: HostTree, links: Links) -> tuple[np.ndarray, np.ndarray]:
    """Launches that belong to a host-tree node and that node's position (SPEC §2.4.3, 8).

    A launch belongs to its owner (External id, checked by :func:`~.links.attach_by_time`);
    a runtime call without an id whose nearest enclosing host event is a user range, python
    frame or step belongs to that range (Triton kernels launched from Python). Calls without
    an id under an op, and calls enclosed by no host event, belong to no node."""
    owner_pos = launch_owner_pos(trace, tree, links)
    ok = owner_pos >= 0
    return links.launch_rows[ok], owner_pos[ok]


def launch_owner_pos(trace: Trace, tree: HostTree, links: Links) -> np.ndarray:
    """Per row of ``links.launch_rows``: the position of the node it belongs to (-1: none),
    by the rule of :func:`launch_owners`."""
    launches = links.launch_rows
    owner = links.owner[launches]
    owner_pos = np.where(owner >= 0, tree.pos_of_row[np.maximum(owner, 0)], -1)
    host = trace.kind[tree.rows] != Kind.RUNTIME
    pos = tree.pos_of_row[launches]
    encl = nearest_marked_ancestor_at(tree.parent, host, pos)
    encl_op = encl >= 0
    encl_op[encl_op] = trace.kind[tree.rows[encl[encl_op]]] == Kind.HOST_OP
    by_time = (owner_pos < 0) & (encl >= 0) & ~encl_op
    return np.where(by_time, encl, owner_pos)


@dataclass
class DeviceAccounts:
    """Where the span's device time went (SPEC §2.4.8, §2.7), ns; counts of events."""

    total_ns: int            # all device activities (kernel, memcpy, memset)
    operator_ns: int         # device self of operator-table rows
    range_ns: int            # device self of range rows
    unattributed_ns: int     # launched by calls that belong to no host event
    unattributed_calls: int
    orphan_ns: int           # activities with no launching call in the trace
    orphans: int
    idle_launches: int       # launch calls with a correlation id and no captured activity

    def check(self) -> None:
        assert (self.operator_ns + self.range_ns + self.unattributed_ns + self.orphan_ns
                == self.total_ns), self


def device_accounts(trace: Trace, tree: HostTree, links: Links,
                    nodes: OpNodes) -> DeviceAccounts:
    """Account for every device activity's time: operator rows, range rows, or a note."""
    acts = links.activity_rows
    orphan = acts[links.launcher[acts] < 0]
    # launch_rows are sorted and distinct: the rows that belong to no node, in order
    free = links.launch_rows[launch_owner_pos(trace, tree, links) < 0]
    free = free[links.device_count[free] > 0]
    ops = table_mask(trace, tree, nodes)
    ranges = range_mask(trace, tree, nodes)
    rt = links.runtime_rows
    idle = rt[(trace.correlation[rt] >= 0) & (links.device_count[rt] == 0)
              & name_mask(trace, LAUNCH_CALL_NAME)[rt]]
    return DeviceAccounts(
        total_ns=int(trace.dur[acts].sum()), operator_ns=int(nodes.device_self[ops].sum()),
        range_ns=int(nodes.device_self[ranges].sum()),
        unattributed_ns=int(links.device_ns[free].sum()), unattributed_calls=len(free),
        orphan_ns=int(trace.dur[orphan].sum()), orphans=len(orphan), idle_launches=len(idle))


def call_stacks(trace: Trace, tree: HostTree) -> tuple[np.ndarray, list[str]]:
    """Call stack per tree position: ``args["Call stack"]``, else the chain of enclosing
    python frames, innermost first, ``;``-separated (SPEC §1.3). Returns ``(ids, strings)``
    with ids into the returned string list (``-1`` = none).

    Python frames are per-call instances, so chains are interned level by level as
    ``(frame name, id of the caller's chain)`` pairs (vectorised); text is built only for
    the distinct chains ops actually sit under.
    """
    stack = trace.stack[tree.rows].astype(np.int64)
    strings = list(trace.stacks)
    kind = trace.kind[tree.rows]
    is_py = kind == Kind.PYTHON
    if not is_py.any():
        return stack, strings
    up = nearest_marked_ancestor(tree.parent, is_py)
    need = np.flatnonzero((stack < 0) & (up >= 0) & (kind == Kind.HOST_OP))
    if not len(need):
        return stack, strings
    py = np.flatnonzero(is_py)
    py_up = up[py]
    # python depth of each frame (pointer doubling along py_up)
    local = np.full(len(tree), -1, dtype=np.int64)
    local[py] = np.arange(len(py))
    jump = np.where(py_up >= 0, local[np.maximum(py_up, 0)], -1)
    depth = (jump >= 0).astype(np.int64)   # levels between a frame and jump[frame]
    while (jump >= 0).any():
        live = np.flatnonzero(jump >= 0)
        depth[live] += depth[jump[live]]
        jump[live] = jump[jump[live]]
    chain = np.full(len(py), -1, dtype=np.int64)       # interned chain id per frame
    names = trace.name[tree.rows[py]].astype(np.int64)
    caller = np.where(py_up >= 0, local[np.maximum(py_up, 0)], -1)
    by_depth = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
    tab_name: list = []
    tab_caller: list = []
    count = 0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        at = by_depth[a:b]
        if b - a == 1:  # a lone frame at this depth (deep, narrow chains): no grouping
            i = int(at[0])
            c = int(caller[i])
            tab_name.append(np.array([names[i]]))
            tab_caller.append(np.array([chain[c] if c >= 0 else -1]))
            chain[i] = count
            count += 1
            continue
        callers = np.where(caller[at] >= 0, chain[np.maximum(caller[at], 0)], -1)
        first, ids = group_ids(callers, names[at])
        chain[at] = count + ids
        tab_name.append(names[at][first])
        tab_caller.append(callers[first])
        count += len(first)
    tname = np.concatenate(tab_name)
    tcaller = np.concatenate(tab_caller)
    op_chain = chain[local[up[need]]]
    used, inv = np.unique(op_chain, return_inverse=True)
    index = {t: i for i, t in enumerate(strings)}
    callers_of = tcaller.tolist()
    name_of = tname.tolist()
    ids = []
    for c in used.tolist():
        frames = []
        while c >= 0:  # iterative walk up the callers (no per-level text: O(depth) memory)
            frames.append(trace.strings[name_of[c]])
            c = callers_of[c]
        t = ";".join(frames)
        if t not in index:
            index[t] = len(strings)
            strings.append(t)
        ids.append(index[t])
    stack[need] = np.array(ids, dtype=np.int64)[inv.reshape(-1)]
    return stack, strings


def table_mask(trace: Trace, tree: HostTree, nodes: OpNodes) -> np.ndarray:
    """Positions that are operator-table rows (SPEC §2.4.5); computed once by
    :func:`op_nodes` (do not mutate)."""
    return nodes.table


def range_mask(trace: Trace, tree: HostTree, nodes: OpNodes) -> np.ndarray:
    """Positions that are range rows (SPEC §2.4.8): host events other than operator rows
    (user ranges, python frames, steps, excluded ranges) that launched device work."""
    host = trace.kind[tree.rows] != Kind.RUNTIME
    return host & ~table_mask(trace, tree, nodes) & nodes.alive & (nodes.device_self > 0)


def grouping_shapes(trace: Trace) -> tuple[np.ndarray, list[str]]:
    """Input shapes as ``key_averages(group_by_input_shape=True)`` groups and prints them:
    ``(ids, shapes)``, ``ids[k]`` the index in ``shapes`` of :attr:`Trace.shapes` ``[k]``
    (and ``ids[-1]`` = -1, so that ``ids[trace.shape]`` keeps -1 for no shape). A
    tensor-list argument (its dims a list of lists: ``aten::cat``'s ``[[2, 3], [4, 3]]``)
    is ``[]`` there, so calls with lists of different shapes are one row (they were split
    into rows torch does not have). The trace keeps the dims as written (event details)."""
    memo = trace.__dict__.get("_grouping_shapes")  # not a field: never compared
    if memo is not None and len(memo[0]) == len(trace.shapes) + 1:
        return memo
    index: dict[str, int] = {}
    ids = np.full(len(trace.shapes) + 1, -1, dtype=np.int64)
    for k, text in enumerate(trace.shapes):
        ids[k] = index.setdefault(_torch_printed(text), len(index))
    trace.__dict__["_grouping_shapes"] = memo = (ids, list(index))
    return memo


def _torch_printed(dims: str) -> str:
    """``"[[[2, 3], [4, 3]], []]"`` -> ``"[[], []]"`` (see :func:`grouping_shapes`)."""
    if "[[[" not in dims and "], [[" not in dims:  # no list of lists in it: as it is
        return dims
    try:
        parsed = json.loads(dims)
    except ValueError:
        return dims
    if not isinstance(parsed, list):
        return dims
    return str([[] if isinstance(d, list) and any(isinstance(x, list) for x in d) else d
                for d in parsed])


def operator_columns(trace: Trace, tree: HostTree, nodes: OpNodes, sel: np.ndarray,
                     by_shape: bool) -> dict[str, np.ndarray]:
    """Per tree position in ``sel``: interned name and input shape, ns durations and
    tensor-core time (the operator view groups and formats these)."""
    rows = tree.rows[sel]
    return {
        "name": trace.name[rows].astype(np.int64),
        "shape": (grouping_shapes(trace)[0][trace.shape[rows]] if by_shape
                  else np.zeros(len(sel), np.int64)),
        "stack": np.full(len(sel), -1, dtype=np.int64),
        "device_self_duration": nodes.device_self[sel],
        "device_total_duration": nodes.device_total[sel],
        "host_self_duration": nodes.host_self[sel],
        "host_total_duration": nodes.host_total[sel],
        "tc_self": nodes.tc_self[sel],
        "tc_total": nodes.tc_total[sel],
    }


