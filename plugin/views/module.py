"""Module view payloads (SPEC §4.2, §4.7): ``module/phases``, ``module/ranges``,
``module/tree``, ``module/flame`` and ``stacks/collapsed``.

``build`` runs :mod:`stepscope.analysis.module` and :mod:`stepscope.analysis.stacks` in the
analysis worker and formats every answer up front (plain JSON, cached with the other
payloads), so a route is a lookup; only ``stacks/collapsed`` writes its text on first use
per loaded span (kept while the span's views are loaded).

Big trees are cut server-side: a node sends its :data:`~stepscope.analysis.stacks.MAX_CHILDREN`
heaviest children and one remainder node ``"(N more)"`` summing the rest; the nested trees
stop at :data:`MAX_TREE_DEPTH` levels (JSON nesting), the flame graph at
:data:`~stepscope.analysis.stacks.MAX_DEPTH`. Phases are µs with ns exactness (they
partition the step exactly); table values are integer µs, rounded half to even.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

import numpy as np

from ..analysis import Analysis
from ..analysis.module import ModuleAnalysis, PathTable, Phases, analyze_module
from ..analysis.stacks import Flame, cap_children, flame
from ..model import Note
from ..taxonomy import PHASES
from ..units import pct, us
from .registry import Param, Route, View

#: Levels of the nested ``module/ranges`` and ``module/tree`` answers (deeper nodes are
#: counted in their ancestors' totals and named in a note).
MAX_TREE_DEPTH = 64
METRICS = ("host_self", "device")
_TEXT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ViewSet -> {metric: text}
_TEXT_LOCK = threading.Lock()


def _us3(ns) -> float:
    """ns -> µs, exact to the ns (three decimals)."""
    return int(ns) / 1000


def phases_payload(ph: Phases) -> dict:
    """``module/phases``: per step and on average, phase -> host / device µs and shares."""
    def entry(host: np.ndarray, dev: np.ndarray, total_host: int, total_dev: int) -> dict:
        return {"host_us": {p: _us3(v) for p, v in zip(PHASES, host.tolist())},
                "device_us": {p: _us3(v) for p, v in zip(PHASES, dev.tolist())},
                "host_pct": {p: pct(int(v), total_host) for p, v in zip(PHASES, host.tolist())},
                "device_pct": {p: pct(int(v), total_dev) for p, v in zip(PHASES, dev.tolist())},
                "host_total_us": _us3(total_host), "device_total_us": _us3(total_dev)}

    steps = [{"step": name, **entry(ph.host[i], ph.device[i], int(ph.step_ns[i]),
                                     int(ph.device[i].sum()))}
             for i, name in enumerate(ph.steps)]
    n = max(len(ph.steps), 1)
    h, d = ph.host.sum(axis=0), ph.device.sum(axis=0)
    # averages to the ns, as the steps' values (241.06966666666665 was printed as such)
    avg = {"host_us": {p: round(int(v) / n / 1000, 3) for p, v in zip(PHASES, h.tolist())},
           "device_us": {p: round(int(v) / n / 1000, 3) for p, v in zip(PHASES, d.tolist())},
           "host_pct": {p: pct(int(v), int(h.sum())) for p, v in zip(PHASES, h.tolist())},
           "device_pct": {p: pct(int(v), int(d.sum())) for p, v in zip(PHASES, d.tolist())},
           "host_total_us": round(int(h.sum()) / n / 1000, 3),
           "device_total_us": round(int(d.sum()) / n / 1000, 3)}
    return {"phases": list(PHASES), "steps": steps, "average": avg,
            "source": {p: ("record_function" if ph.marked.get(p) else "inferred")
                       for p in PHASES if p != "Other"}}


def _node_fields(t: PathTable, strings: list[str], kind: str) -> list[dict]:
    """One dict per path of ``t`` (without children)."""
    names = [strings[i] for i in t.name.tolist()]
    total, dev = us(t.host_total).tolist(), us(t.device).tolist()
    calls = t.calls.tolist()
    if kind == "ranges":
        avg = [round(tt / c / 1000, 3) if c else 0.0 for tt, c in zip(t.host_total.tolist(), calls)]
        return [{"name": nm, "calls": c, "host_total_us": tt, "host_avg_us": a,
                 "host_min_us": lo, "host_max_us": hi, "device_us": dv}
                for nm, c, tt, a, lo, hi, dv in zip(names, calls, total, avg, us(t.host_min).tolist(),
                                                    us(t.host_max).tolist(), dev)]
    return [{"name": nm, "occurrences": c, "host_total_us": tt, "host_self_us": sf,
             "device_total_us": dv}
            for nm, c, tt, sf, dv in zip(names, calls, total, us(t.host_self).tolist(), dev)]


def nested(t: PathTable, strings: list[str], kind: str) -> tuple[list[dict], int, int]:
    """The paths of ``t`` as a nested tree, heaviest children first, capped (see module
    docstring). Returns ``(roots, nodes cut by depth, children folded into remainders)``."""
    nodes = _node_fields(t, strings, kind)
    names = [strings[i] for i in t.name.tolist()]
    keep = t.depth < MAX_TREE_DEPTH
    kept, lost_parent, _, lost_count = cap_children(t.parent, t.host_total, keep)
    for i in np.flatnonzero(kept).tolist():
        p = int(t.parent[i])
        if kind == "tree":
            nodes[i]["path"] = (nodes[p]["path"] if p >= 0 else []) + [names[i]]
        nodes[i]["children"] = []
    roots: list[dict] = []
    order = np.flatnonzero(kept)
    order = order[np.lexsort((order, -t.host_total[order], t.parent[order]))]
    for i in order.tolist():
        p = int(t.parent[i])
        (nodes[p]["children"] if p >= 0 else roots).append(nodes[i])
    # remainders: the children a kept node lost to the cap, summed
    direct = keep & ~kept
    direct[direct] &= (t.parent[direct] < 0) | kept[np.maximum(t.parent[direct], 0)]
    for p, count in zip(lost_parent.tolist(), lost_count.tolist()):
        members = np.flatnonzero(direct & (t.parent == p))
        rem = _remainder(t, members, count, kind)
        if kind == "tree":
            rem["path"] = (nodes[p]["path"] if p >= 0 else []) + [rem["name"]]
        (nodes[p]["children"] if p >= 0 else roots).append(rem)
    return roots, int((~keep).sum()), int(lost_count.sum())


def _remainder(t: PathTable, members: np.ndarray, count: int, kind: str) -> dict:
    name = f"({count:,} more)"
    total = int(t.host_total[members].sum())
    if kind == "ranges":
        calls = int(t.calls[members].sum())
        return {"name": name, "calls": calls, "host_total_us": us(total),
                "host_avg_us": round(total / calls / 1000, 3) if calls else 0.0,
                "host_min_us": us(int(t.host_min[members].min())),
                "host_max_us": us(int(t.host_max[members].max())),
                "device_us": us(int(t.device[members].sum())), "children": [], "remainder": count}
    return {"name": name, "occurrences": int(t.calls[members].sum()), "host_total_us": us(total),
            "host_self_us": us(int(t.host_self[members].sum())),
            "device_total_us": us(int(t.device[members].sum())), "children": [], "remainder": count}


def flat_ranges(t: PathTable, strings: list[str]) -> list[dict]:
    """One row per range name (all paths of that name summed), by host total."""
    if not len(t):
        return []
    first, g = _groups(t.name)
    m = len(first)
    calls = np.bincount(g, weights=t.calls, minlength=m).astype(np.int64)
    total = np.bincount(g, weights=t.host_total, minlength=m).astype(np.int64)
    dev = np.bincount(g, weights=t.device, minlength=m).astype(np.int64)
    lo = np.full(m, np.iinfo(np.int64).max)
    hi = np.zeros(m, dtype=np.int64)
    np.minimum.at(lo, g, t.host_min)
    np.maximum.at(hi, g, t.host_max)
    flat = PathTable(name=t.name[first], parent=np.full(m, -1), depth=np.zeros(m, np.int64),
                     calls=calls, host_total=total, host_self=total, host_min=lo, host_max=hi,
                     device=dev)
    rows = _node_fields(flat, strings, "ranges")
    order = np.lexsort((np.arange(m), -total))
    return [rows[i] for i in order.tolist()]


def _groups(name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first, inv = np.unique(name, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def flame_payload(fl: Flame, metric: str) -> dict:
    """``module/flame``: nodes with weight, parents first, siblings heaviest first, capped."""
    self_ns = fl.host_self if metric == "host_self" else fl.device_self
    total_ns = fl.host_total if metric == "host_self" else fl.device_total
    kept, lost_parent, lost_total, lost_count = cap_children(fl.parent, total_ns, total_ns > 0)
    idx = np.flatnonzero(kept)
    idx = idx[np.lexsort((idx, -total_ns[idx], fl.parent[idx]))]
    new = np.full(len(fl) + 1, -1, dtype=np.int64)
    new[idx] = np.arange(len(idx))
    used, name = np.unique(fl.name[idx], return_inverse=True)
    labels = [fl.labels[i] for i in used.tolist()]
    parent = new[fl.parent[idx]].tolist()   # -1 stays -1 (new[-1] is the spare slot)
    names = name.reshape(-1).tolist()
    selfs = (self_ns[idx] / 1000).tolist()
    totals = (total_ns[idx] / 1000).tolist()
    for p, tot, cnt in zip(lost_parent.tolist(), lost_total.tolist(), lost_count.tolist()):
        labels.append(f"({cnt:,} more)")
        names.append(len(labels) - 1)
        parent.append(int(new[p]) if p >= 0 else -1)
        selfs.append(tot / 1000)
        totals.append(tot / 1000)
    roots = total_ns[fl.parent < 0]
    return {"metric": metric, "unit": "us", "labels": labels, "name": names, "parent": parent,
            "self": selfs, "total": totals, "total_us": int(roots.sum()) / 1000,
            "folded": fl.folded, "capped": int(lost_count.sum())}


def collapsed_text(fp: dict) -> str:
    """``frame;frame;leaf <integer µs>`` per path with self time (export_stacks format);
    ``;`` and line breaks in names become ``,`` and spaces."""
    labels = [str(s).replace(";", ",").replace("\n", " ").replace("\r", " ")
              for s in fp["labels"]]
    prefix: list[str] = []
    lines = []
    self_us = us(np.rint(np.asarray(fp["self"], dtype=np.float64) * 1000).astype(np.int64))
    for p, nm, v in zip(fp["parent"], fp["name"], self_us.tolist()):
        text = labels[nm] if p < 0 else f"{prefix[p]};{labels[nm]}"
        prefix.append(text)
        if v > 0:
            lines.append(f"{text} {v}")
    return "\n".join(lines) + ("\n" if lines else "")


def module_payloads(a: Analysis) -> dict:
    """Every answer of the Module view (JSON-able)."""
    t = a.trace
    m: ModuleAnalysis = analyze_module(t, a.tree, a.links, a.steps)
    fl = flame(t, a.tree, a.links)
    ranges, cut_r, _ = nested(m.ranges, t.strings, "ranges")
    tree, cut_m, _ = nested(m.modules, t.strings, "tree")
    notes = list(m.notes)
    if cut_r or cut_m:
        notes.append(Note("info", "deep_tree", f"Ranges or modules nested more than "
                          f"{MAX_TREE_DEPTH} levels deep ({cut_r + cut_m:,} nodes) are counted "
                          "in their ancestors but not listed."))
    if fl.folded:
        notes.append(Note("info", "deep_stacks", f"{fl.folded:,} frames nested deeper than the "
                          "flame graph shows were folded into their ancestor."))
    flames = {k: flame_payload(fl, k) for k in METRICS}
    return {"phases": phases_payload(m.phases), "ranges": ranges,
            "ranges_flat": flat_ranges(m.ranges, t.strings), "tree": tree, "flame": flames,
            "notes": [n.to_json() for n in notes], "has_modules": bool(len(m.modules)),
            "has_ranges": bool(len(m.ranges))}


def collapsed(views, p: Mapping[str, str | None]) -> str:
    """``stacks/collapsed``: text, written once per loaded span and metric."""
    metric = p["metric"]
    with _TEXT_LOCK:
        per = _TEXT.setdefault(views, {})
        if metric not in per:
            per[metric] = collapsed_text(views.payload("Module")["flame"][metric])
        return per[metric]


def _summary(views, p) -> dict:
    pay = views.payload("Module")
    return {"notes": pay["notes"], "has_modules": pay["has_modules"],
            "has_ranges": pay["has_ranges"], "source": pay["phases"]["source"]}


METRIC_PARAM = Param("metric", METRICS, "host_self: host self time; device: device time launched")

VIEW = View(
    name="Module", frontend="module",
    build=module_payloads,
    has_data=lambda a: bool(a.has_host),
    routes=(
        Route("module/summary", _summary),
        Route("module/phases", lambda v, p: v.payload("Module")["phases"]),
        Route("module/ranges", lambda v, p: v.payload("Module")[
            "ranges_flat" if p["flat"] == "1" else "ranges"],
              (Param("flat", ("0", "1"), "1: one row per range name instead of the tree"),)),
        Route("module/tree", lambda v, p: v.payload("Module")["tree"]),
        Route("module/flame", lambda v, p: v.payload("Module")["flame"][p["metric"]],
              (METRIC_PARAM,)),
        Route("stacks/collapsed", collapsed, (METRIC_PARAM,), mimetype="text/plain"),
    ),
)
