"""Where inside the model the time goes (SPEC §4.2): phases per step, user ranges and the
nn.Module tree. The flame graph of the same host nesting is in :mod:`.stacks`.

Everything reads the host tree of :mod:`.tree` (one nesting for all views) and the launch
links of :mod:`.links`; times are integer ns.

- **Phases**: per host step ``[host_start, host_end)`` each instant is charged to the first
  active phase of :data:`~stepscope.taxonomy.PHASE_PRIORITY`; ``Other`` gets the rest, so
  the phases of a step sum to its host duration exactly (:meth:`Phases.check`). A phase the
  user marked with ``record_function`` is those ranges exactly; an unmarked one is inferred
  (DataLoader ops, ``Optimizer.*`` ranges, autograd ops and autograd threads, any other host
  event of the main thread). A launch's device time goes to the phase active at the start
  of its runtime call.
- **Ranges** and **modules**: nodes merged by their path of names from the outermost range
  (module); per path calls, host total / min / max, device time launched inside.

Example: step ``[0, 100)``, ``forward [10, 40)``, ``backward [40, 90)`` -> Forward 30,
Backward 50, Other 20 (µs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import Note, Trace
from ..taxonomy import (
    AUTOGRAD_FUNCTION_NAME,
    DATALOADER_NAME,
    MODULE_FRAME_NAME,
    OPTIMIZER_RANGE_NAME,
    PHASE_NAME_STRIP,
    PHASE_PRIORITY,
    PHASE_RANGE_NAMES,
    PHASES,
    STEP_NAME,
    Kind,
)
from .breakdown import name_mask
from .intervals import covered, inside, union
from .links import Links
from .operators import group_ids, group_min_max, sum_to
from .steps import Steps
from .tree import HostTree, build_tree

#: Host kinds that are phase work (steps are the windows, runtime calls sit inside ops).
_WORK = np.array([Kind.HOST_OP, Kind.USER_RANGE, Kind.PYTHON], dtype=np.uint8)


@dataclass
class Phases:
    """``host[i, k]`` / ``device[i, k]``: ns of step ``i`` in phase ``PHASES[k]``."""

    steps: list[str]
    host: np.ndarray        # (steps, phases) int64 ns; rows sum to the step's host duration
    device: np.ndarray      # (steps, phases) int64 ns of device work launched in the phase
    step_ns: np.ndarray     # (steps,) host duration of each step
    marked: dict[str, bool]  # phase -> defined by the user's record_function ranges
    main_thread: int        # index into trace.threads; -1 without host events
    notes: list[Note] = field(default_factory=list)

    def check(self) -> None:
        assert (self.host >= 0).all() and (self.device >= 0).all()
        assert (self.host.sum(axis=1) == self.step_ns).all(), "phases sum to the step"


@dataclass
class PathTable:
    """Nodes merged by path (a range or module inside another is its child); per path."""

    name: np.ndarray        # string id of the last name of the path
    parent: np.ndarray      # parent path (-1 = root); parents number below children
    depth: np.ndarray
    calls: np.ndarray
    host_total: np.ndarray  # ns, summed over calls
    host_self: np.ndarray   # ns, minus the child paths' spans
    host_min: np.ndarray
    host_max: np.ndarray
    device: np.ndarray      # ns of device work launched inside

    def __len__(self) -> int:
        return len(self.name)

    def check(self) -> None:
        assert (self.host_self >= 0).all() and (self.host_self <= self.host_total).all()
        assert (self.parent < np.arange(len(self))).all()


@dataclass
class ModuleAnalysis:
    phases: Phases
    ranges: PathTable
    modules: PathTable
    notes: list[Note] = field(default_factory=list)

    def check(self) -> None:
        self.phases.check()
        self.ranges.check()
        self.modules.check()


def phase_of_name(name: str) -> str | None:
    """The phase a ``record_function`` name marks: ``"## Forward ##"`` -> ``"Forward"``."""
    return PHASE_RANGE_NAMES.get(PHASE_NAME_STRIP.sub("", name).lower())


def main_thread(trace: Trace, tree: HostTree) -> int:
    """The thread carrying the most ProfilerStep events; without any, the process's main
    thread (its tid is the pid, as Kineto writes system thread ids) when it has host work,
    else the thread with the most top-level host time (-1 without host events). (A worker
    thread busier than the main one was taken for it: a numbers audit, 3 threads.)"""
    steps = trace.thread[trace.kind == Kind.STEP]
    if len(steps):
        return int(np.bincount(steps).argmax())
    top = (tree.parent < 0) & np.isin(trace.kind[tree.rows], _WORK)
    if not top.any():
        return -1
    th = trace.thread[tree.rows[top]]
    busy = np.bincount(th, weights=(tree.end - tree.start)[top])
    mains = [t for t in np.flatnonzero(busy).tolist() if _is_main(trace.threads[t])]
    return mains[int(busy[mains].argmax())] if mains else int(busy.argmax())


def _is_main(lane: tuple) -> bool:
    """Is ``(pid, tid)`` a process's main thread (tid == pid, as numbers or as text)?"""
    pid, tid = lane
    return pid is not None and tid is not None and str(pid) == str(tid)


def phase_intervals(trace: Trace, tree: HostTree, steps: Steps,
                    main: int) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, bool]]:
    """Per phase of :data:`PHASE_PRIORITY`: its union of intervals; and which were marked."""
    rows = tree.rows
    kind = trace.kind[rows]
    work = np.isin(kind, _WORK)
    # per string: index in PHASE_PRIORITY of the phase its name marks (-1: none); per
    # position: that of a user range's name (small ints: no object array per event)
    code = np.array([PHASE_PRIORITY.index(ph) if ph in PHASE_PRIORITY else -1
                     for ph in map(phase_of_name, trace.strings)], dtype=np.int8)
    user = kind == Kind.USER_RANGE
    phase_code = np.full(len(rows), -1, dtype=np.int8)
    phase_code[user] = code[trace.name[rows[user]]]
    # the file's own intervals: a range the tree clipped (it overlaps a python frame without
    # nesting, common with with_stack=True) still covers its whole span
    s = trace.start[rows]
    e = s + trace.dur[rows]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    marked: dict[str, bool] = {}
    for k, ph in enumerate(PHASE_PRIORITY):
        m = phase_code == k
        marked[ph] = bool(m.any())
        if not marked[ph]:
            m = _inferred(trace, tree, steps, ph, work, main, s, e)
        if isinstance(m, tuple):
            out[ph] = union(*m)
        else:
            out[ph] = union(s[m], e[m])
    return out, marked


def _inferred(trace: Trace, tree: HostTree, steps: Steps, phase: str, work: np.ndarray,
              main: int, start: np.ndarray, end: np.ndarray):
    """Mask of tree positions (or ``(starts, ends)``) of an unmarked phase; ``start``,
    ``end``: the file's times of each position (ns)."""
    rows = tree.rows
    if phase == "DataLoader":
        return work & (trace.kind[rows] != Kind.PYTHON) & name_mask(trace, DATALOADER_NAME)[rows]
    if phase == "Optimizer":
        return work & name_mask(trace, OPTIMIZER_RANGE_NAME)[rows]
    if phase == "Forward":
        return work & (trace.thread[rows] == main)
    # Backward: autograd ops anywhere, plus per step the whole span of work on autograd threads
    ops = work & name_mask(trace, AUTOGRAD_FUNCTION_NAME)[rows]
    s, e = start[ops], end[ops]
    th = trace.thread[rows]
    top = work & (tree.parent < 0) & (th != main)
    auto = np.unique(th[top & ops])
    spans_s, spans_e = [s], [e]
    hs, he = steps.host_start, steps.host_end
    for t in auto.tolist():
        sel = top & (th == t)
        ts, te = start[sel], end[sel]
        k = np.searchsorted(hs, ts, side="right") - 1
        ok = (k >= 0) & (ts < he[np.maximum(k, 0)])
        if not ok.any():
            continue
        lo = np.full(len(hs), np.iinfo(np.int64).max)
        hi = np.full(len(hs), np.iinfo(np.int64).min)
        np.minimum.at(lo, k[ok], ts[ok])
        np.maximum.at(hi, k[ok], te[ok])
        got = hi > lo
        spans_s.append(lo[got])
        spans_e.append(np.minimum(hi[got], he[got]))
    return np.concatenate(spans_s), np.concatenate(spans_e)


def phases(trace: Trace, tree: HostTree, links: Links, steps: Steps) -> Phases:
    """Host and device time per phase of every kept step (SPEC §4.2)."""
    n = len(steps)
    hs, he = steps.host_start, steps.host_end
    main = main_thread(trace, tree)
    spans, marked = phase_intervals(trace, tree, steps, main)
    k_of = {ph: PHASES.index(ph) for ph in PHASES}
    host = np.zeros((n, len(PHASES)), dtype=np.int64)
    device = np.zeros((n, len(PHASES)), dtype=np.int64)
    step_ns = (he - hs).astype(np.int64)
    # launches: the step whose host window holds the call's start, the first phase active
    # then, on any thread (a "backward" range on the main thread holds the launches of the
    # autograd thread it runs)
    launch = links.launch_rows[links.device_ns[links.launch_rows] > 0]
    t = trace.start[launch]
    k = np.searchsorted(hs, t, side="right") - 1
    in_step = (k >= 0) & (t < he[np.maximum(k, 0)])
    launch, t, k = launch[in_step], t[in_step], k[in_step]
    left = np.ones(len(t), dtype=bool)
    acc_s = acc_e = np.zeros(0, dtype=np.int64)
    prev = np.zeros(n, dtype=np.int64)
    for ph in PHASE_PRIORITY:
        ps, pe = spans[ph]
        acc_s, acc_e = union(np.concatenate((acc_s, ps)), np.concatenate((acc_e, pe)))
        cov = covered(acc_s, acc_e, hs, he)
        host[:, k_of[ph]] = cov - prev
        prev = cov
        hit = left & inside(ps, pe, t)
        device[:, k_of[ph]] = sum_to(k[hit], links.device_ns[launch[hit]], n)
        left &= ~hit
    host[:, k_of["Other"]] = step_ns - prev
    device[:, k_of["Other"]] = sum_to(k[left], links.device_ns[launch[left]], n)
    notes = []
    if not marked["Forward"] and n and not host[:, k_of["Forward"]].all():
        missing = [steps.names[i] for i in np.flatnonzero(host[:, k_of["Forward"]] == 0)]
        notes.append(Note("info", "steps_without_forward",
                          f"{len(missing):,} steps show no Forward time ({', '.join(missing[:5])}"
                          f"{', ...' if len(missing) > 5 else ''}): no host work on the main "
                          "thread outside the other phases."))
    if not any(marked.values()) and n:
        notes.append(Note("info", "phases_inferred",
                          "No record_function ranges named forward / backward / optimizer / "
                          "dataloader: the phases are inferred from operator names and threads. "
                          "Wrap each phase in torch.profiler.record_function(\"forward\") (and "
                          "so on) to define them exactly."))
    return Phases(steps=list(steps.names), host=host, device=device, step_ns=step_ns,
                  marked=marked, main_thread=main, notes=notes)


def marked_depth(tree: HostTree, marked: np.ndarray) -> np.ndarray:
    """Per position: how many strict ancestors are ``marked`` (O(n), pre-order ranges)."""
    n = len(tree)
    m = np.flatnonzero(marked)
    opened = np.bincount(m + 1, minlength=n + 1)
    opened -= np.bincount(tree.subtree_end[m], minlength=n + 1)
    return np.cumsum(opened, out=opened)[:n]


def intern_paths(sel: np.ndarray, parent: np.ndarray, depth: np.ndarray,
                 key: np.ndarray, root_key: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge the positions ``sel`` by their path of ``key`` from the root, level by level.

    ``parent[p]``: the nearest selected ancestor of ``p`` (-1); ``depth[p]``: the number of
    selected ancestors. ``root_key`` (optional, per position) separates roots further (the
    thread, say). Returns ``(path of each position (-1 outside sel), parent path of each
    path, key of each path, depth of each path)``; a parent path numbers below its children.
    """
    # one spare slot at the end: path[-1] is the path of "no parent" (-1)
    path = np.full(len(parent) + 1, -1, dtype=np.int64)
    if not len(sel):
        e = np.zeros(0, dtype=np.int64)
        return path[:-1], e, e, e
    d = depth[sel]
    top = int(d.max())
    bounds = np.concatenate(([0], np.cumsum(np.bincount(d, minlength=top + 1))))
    # stable sort by level: a radix sort when the levels fit in int16 (the usual case)
    order = sel[np.argsort(d.astype(np.int16) if top < 2**15 else d, kind="stable")]
    del d  # per-position temporaries: freed before the levels' (flame graph's peak memory)
    pp, pk, pd = [], [], []
    count = 0
    for lvl, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        at = order[a:b]
        par = path[parent[at]]
        if lvl == 0 and root_key is not None:
            first, ids = group_ids(root_key[at], key[at])
        else:
            first, ids = group_ids(par, key[at])
        path[at] = count + ids
        pp.append(par[first])
        pk.append(key[at][first].astype(np.int64))
        pd.append(np.full(len(first), lvl, dtype=np.int64))
        count += len(first)
    return path[:-1], np.concatenate(pp), np.concatenate(pk), np.concatenate(pd)


def path_table(trace: Trace, tree: HostTree, links: Links, marked: np.ndarray) -> PathTable:
    """Merge the marked positions of ``tree`` by path. The marked events nest among
    themselves (:func:`~.tree.build_tree` over just their rows), so a range that the full
    tree clipped against a python frame still holds the ranges inside it. Host times are the
    file's durations (as torch's key_averages counts them); self time is the total minus the
    child paths' totals, at least 0; device time is what the runtime calls on the event's
    thread inside its span launched (:func:`launched_within`)."""
    rows = np.sort(tree.rows[marked])
    sub = build_tree(trace, rows)
    sel = np.arange(len(sub))
    depth = sub.depth()
    path, pp, pk, pd = intern_paths(sel, sub.parent, depth, trace.name[sub.rows].astype(np.int64))
    m = len(pp)
    p = path[sel]
    dur = trace.dur[sub.rows]
    kid = sub.parent >= 0
    child_ns = sum_to(path[sub.parent[kid]], dur[kid], m)
    total = sum_to(p, dur, m)
    hmin, hmax = group_min_max(p, dur, m)  # every path has a node; durations >= 0
    device = launched_within(trace, links, sub.rows)
    return PathTable(name=pk, parent=pp, depth=pd, calls=np.bincount(p, minlength=m),
                     host_total=total, host_self=np.maximum(total - child_ns, 0),
                     host_min=hmin, host_max=hmax, device=sum_to(p, device, m))


def launched_within(trace: Trace, links: Links, rows: np.ndarray) -> np.ndarray:
    """Per host event ``rows``: device time (ns) launched by the runtime calls on its thread
    that start inside its span. Not the host tree's device total: with ``with_stack=True``,
    a ``record_function`` range begins inside the python frame that enters it and ends
    outside it, and the tree clips it at the frame's end (SPEC §2.4.1), so its ops (and
    their kernels) were not under it: a forward range showed 0 of its 12 µs of kernels."""
    out = np.zeros(len(rows), dtype=np.int64)
    launch = links.launch_rows[links.device_ns[links.launch_rows] > 0]
    if not len(launch) or not len(rows):
        return out
    lt, rt = trace.thread[launch], trace.thread[rows]
    for th in np.intersect1d(lt, rt).tolist():
        mine = launch[lt == th]
        order = np.argsort(trace.start[mine], kind="stable")
        ls = trace.start[mine][order]
        cum = np.concatenate(([0], np.cumsum(links.device_ns[mine][order])))
        at = np.flatnonzero(rt == th)
        s = trace.start[rows[at]]
        out[at] = cum[np.searchsorted(ls, s + trace.dur[rows[at]])] - cum[np.searchsorted(ls, s)]
    return out


def launched_beside(trace: Trace, links: Links, rows: np.ndarray) -> int:
    """Device time (ns) launched by runtime calls on other threads than the host events
    ``rows``' own while they ran (the backward pass: the autograd engine launches from its
    own threads while a ``backward`` range runs on the main one), and in none of ``rows`` of
    their own thread (those count there). Each launch counts once."""
    launch = links.launch_rows[links.device_ns[links.launch_rows] > 0]
    if not len(launch) or not len(rows):
        return 0
    lt, rt, s = trace.thread[launch], trace.thread[rows], trace.start[launch]
    during, owned = np.zeros(len(launch), dtype=bool), np.zeros(len(launch), dtype=bool)
    for th in np.unique(rt).tolist():
        own = rows[rt == th]
        held = inside(*union(trace.start[own], trace.start[own] + trace.dur[own]), s)
        during |= held & (lt != th)
        owned |= held & (lt == th)
    return int(links.device_ns[launch[during & ~owned]].sum())


def range_mask(trace: Trace, tree: HostTree) -> np.ndarray:
    """Positions of user ranges (``record_function``), ProfilerStep left out."""
    rows = tree.rows
    return (trace.kind[rows] == Kind.USER_RANGE) & ~name_mask(trace, STEP_NAME)[rows]


def module_mask(trace: Trace, tree: HostTree) -> np.ndarray:
    """Positions of ``nn.Module: <Type>_<k>`` python frames (``with_stack=True``)."""
    rows = tree.rows
    return (trace.kind[rows] == Kind.PYTHON) & name_mask(trace, MODULE_FRAME_NAME)[rows]


def analyze_module(trace: Trace, tree: HostTree, links: Links, steps: Steps) -> ModuleAnalysis:
    """Phases, user ranges and the module tree of one trace."""
    ph = phases(trace, tree, links, steps)
    ranges = path_table(trace, tree, links, range_mask(trace, tree))
    modules = path_table(trace, tree, links, module_mask(trace, tree))
    notes = list(ph.notes)
    if not len(modules):
        notes.append(Note("info", "no_module_frames",
                          "No nn.Module frames in this trace: profile with "
                          "torch.profiler.profile(with_stack=True) to see the module tree "
                          "(with_modules=True alone records none in eager mode: torch 2.13 "
                          "writes the nn.Module frames with the python stack)."))
    beside = launched_beside(trace, links, tree.rows[range_mask(trace, tree)])
    if beside > int(ranges.device.sum()) // 100:  # (more than 1 % of their own)
        notes.append(Note("info", "ranges_device_time_own_thread",
                          "A range's device time counts the kernels launched on its own "
                          f"thread; {beside / 1e6:,.1f} ms more was launched from other threads "
                          "while ranges ran (the autograd engine runs the backward pass on "
                          "threads of its own): the Phases tab counts it in its phase."))
    return ModuleAnalysis(phases=ph, ranges=ranges, modules=modules, notes=notes)
