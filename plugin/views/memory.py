"""Memory view payloads (SPEC §4.1, §4.7): ``memory/devices``, ``memory/curve``,
``memory/events`` and ``memory/stats``.

``build`` keeps each device's curve and allocations as plain int lists (cached with the
other payloads as JSON: the payload cache stores no arrays) and the per-operator tables as
chart tables; a route turns a device's lists into numpy arrays once per loaded span
(:func:`_arrays`), and ``memory/curve`` downsamples the asked window on each request (at
most ``2 x width`` points, the window's exact peak kept).
Times are µs from the trace start (floats, ns exact to 3 decimals); sizes are bytes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

import numpy as np

from ..analysis import Analysis
from ..analysis.memory import STAT_COLUMNS, DeviceMemory, downsample
from ..analysis.operators import GROUP_BY, grouping_shapes
from ..errors import BadParameter, echo
from ..timeline.build import MAX_WIDTH, _ns
from .registry import Param, Route, View, int_param

#: Fewest pixels a curve request may ask for (4 samples per bucket of 2 px, see curve()).
MIN_WIDTH = 4
#: Per-device lists of the payload (numbers), turned into int64 arrays on first use.
ARRAY_KEYS = ("ts", "allocated", "reserved", "op", "size", "alloc", "release")
_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # ViewSet -> {label: arrays}
_ARRAYS_LOCK = threading.Lock()
EVENT_COLUMNS = (("string", "Operator"), ("number", "Size"), ("number", "Allocation Time"),
                 ("number", "Release Time"), ("number", "Duration"))


def _us(ns: np.ndarray) -> list:
    return (ns / 1000).tolist()


def _device_entry(d: DeviceMemory) -> dict:
    out = {"device": d.label, "type": d.type, "id": d.id, "events": len(d.ts),
           "peak_allocated": d.peak_allocated}
    if d.capacity > 0:
        out["capacity_bytes"] = d.capacity
    return out


def _stats_table(a: Analysis, d: DeviceMemory, group_by: str) -> dict:
    st = d.stats[group_by]
    by_shape = group_by == GROUP_BY[1]
    t = a.trace
    cols = [{"type": "string", "name": "Name"}]
    if by_shape:
        cols.append({"type": "string", "name": "Input Shape"})
    cols += [{"type": "number", "name": c} for c in ("Calls", *STAT_COLUMNS)]
    names = [t.strings[i] for i in st.name.tolist()]
    shapes = grouping_shapes(t)[1]
    lead = ([[n, shapes[s] if s >= 0 else ""] for n, s in zip(names, st.shape.tolist())]
            if by_shape else [[n] for n in names])
    rows = [h + [c] + v for h, c, v in zip(lead, st.calls.tolist(), st.values.tolist())]
    return {"columns": cols, "rows": rows}


def memory_payloads(a: Analysis) -> dict:
    """Per device: curve and allocation arrays, the stats tables; plus steps and names."""
    devs = a.memory.devices
    t = a.trace
    used = np.unique(np.concatenate([d.op_name for d in devs] + [np.zeros(0, np.int64)]))
    used = used[used >= 0]
    local = np.full(len(t.strings) + 1, -1, dtype=np.int64)
    local[used] = np.arange(len(used))
    end_ns = int((t.start + t.dur).max()) if len(t) else 0
    end_ns = max([end_ns] + [int(d.ts[-1]) for d in devs])
    per = {}
    for d in devs:
        i = d.peak_index
        per[d.label] = {
            "ts": d.ts.tolist(), "allocated": d.allocated.tolist(),
            "reserved": d.reserved.tolist(),
            "peak": {"allocated": int(d.allocated[i]), "ts_us": int(d.ts[i]) / 1000},
            "peak_reserved": int(d.reserved.max()) if (d.reserved >= 0).any() else None,
            "op": local[d.op_name].tolist(), "size": d.size.tolist(),
            "alloc": d.alloc_ts.tolist(), "release": d.release_ts.tolist(),
            "stats": {g: _stats_table(a, d, g) for g in GROUP_BY},
        }
    return {"devices": [_device_entry(d) for d in devs], "per": per,
            "names": [t.strings[i] for i in used.tolist()], "end_us": end_ns / 1000,
            "steps": [[n, s / 1000, e / 1000] for n, s, e in
                      zip(a.steps.names, a.steps.start.tolist(), a.steps.end.tolist())]}


def _device(views, p: Mapping[str, str | None]) -> tuple[dict, str | None]:
    """The payload and the device asked by ``device`` (default: the first; None when the
    span has no memory events and none was asked). 400 for a device the span lacks."""
    pay = views.payload("Memory")
    labels = [d["device"] for d in pay["devices"]]
    label = p.get("device") or (labels[0] if labels else None)
    if label is not None and label not in pay["per"]:
        raise BadParameter(f"unknown device {echo(label)}",
                           f"Use one of: {', '.join(labels)} (see memory/devices)." if labels
                           else "This span has no [memory] events: profile with "
                           "profile_memory=True to see the Memory view.")
    return pay, label


def _table(columns, rows: list) -> dict:
    return {"columns": [{"type": ty, "name": n} for ty, n in columns], "rows": rows}


def _arrays(views, label: str) -> dict[str, np.ndarray]:
    """The device's payload lists as int64 arrays, converted once per loaded ViewSet."""
    with _ARRAYS_LOCK:
        per_view = _ARRAYS.setdefault(views, {})
        if label not in per_view:
            dev = views.payload("Memory")["per"][label]
            per_view[label] = {k: np.asarray(dev[k], dtype=np.int64) for k in ARRAY_KEYS}
        return per_view[label]


def curve(views, p: Mapping[str, str | None], exact: bool = False) -> dict:
    """``memory/curve``: the window ``[start, end]`` (µs, default the whole span),
    downsampled to per 2-pixel bucket first/min/max/last sample (<= 2 x width points);
    ``exact``: every sample of the window instead (``stepscope report`` embeds a small
    device's curve so, for the page to cut any window from it exactly)."""
    pay, label = _device(views, p)
    if label is None:   # no memory events: an empty curve
        return {"device": None, "unit": "bytes", "columns": ["ts_us", "allocated", "reserved"],
                "rows": [], "peak": None, "window_peak": None, "peak_reserved": None,
                "steps": pay["steps"], "start_us": 0.0, "end_us": pay["end_us"],
                "range": [0, pay["end_us"]]}
    dev = {**pay["per"][label], **_arrays(views, label)}
    width = int_param(p, "width", 1000, MIN_WIDTH, MAX_WIDTH)
    s = 0 if p.get("start") is None else _ns(p["start"], "start")
    e = round(pay["end_us"] * 1000) if p.get("end") is None else _ns(p["end"], "end")
    if s >= e:
        raise BadParameter("empty window", f"start ({s / 1000} µs) must be before end "
                           f"({e / 1000} µs).")
    ts, alloc, res = dev["ts"], dev["allocated"], dev["reserved"]
    # 4 samples per bucket + the level before the window: at most 2 x width points
    if exact:
        lo, hi = np.searchsorted(ts, s, side="left"), np.searchsorted(ts, e, side="right")
        idx = np.arange(max(lo - 1, 0), hi)  # (with the level before the window)
    else:
        idx = downsample(ts, alloc, s, e, (2 * width - 1) // 4)
    reserved = np.where(res[idx] >= 0, res[idx], -1).tolist()
    rows = [[t, a, r if r >= 0 else None] for t, a, r in
            zip(_us(ts[idx]), alloc[idx].tolist(), reserved)]
    lo, hi = int(np.searchsorted(ts, s, side="left")), int(np.searchsorted(ts, e, side="right"))
    win = None
    if hi > lo:
        k = lo + int(np.argmax(alloc[lo:hi]))
        win = {"allocated": int(alloc[k]), "ts_us": int(ts[k]) / 1000}
    if lo > 0 and (win is None or alloc[lo - 1] > win["allocated"]):  # the level it opens at
        win = {"allocated": int(alloc[lo - 1]), "ts_us": s / 1000}
    out = {"device": label, "unit": "bytes", "columns": ["ts_us", "allocated", "reserved"],
           "rows": rows, "peak": dev["peak"], "window_peak": win,
           "peak_reserved": dev["peak_reserved"], "steps": pay["steps"],
           "start_us": s / 1000, "end_us": e / 1000, "range": [0, pay["end_us"]]}
    cap = next(d.get("capacity_bytes") for d in pay["devices"] if d["device"] == label)
    if cap:
        out["capacity_bytes"] = cap
    return out


EVENT_KEYS = ("operator", "size", "allocation_time", "release_time", "duration", "status")
NEVER_FREED = "never freed"


def _window(p: Mapping[str, str | None]) -> tuple[int | None, int | None]:
    """The ``start``/``end`` query values in ns (None when absent); 400 when inverted."""
    s = None if p.get("start") is None else _ns(p["start"], "start")
    e = None if p.get("end") is None else _ns(p["end"], "end")
    if s is not None and e is not None and s > e:
        raise BadParameter("empty window", f"start ({s / 1000} µs) must not be after end "
                           f"({e / 1000} µs).")
    return s, e


#: largest offset/limit accepted (a row count; bigger ones do not fit the JSON's int64)
MAX_COUNT = 2**53


def _matching(names: list[str], freed: np.ndarray, op: np.ndarray, query: str) -> np.ndarray:
    """Rows whose operator name or status ("freed" / "never freed") holds every
    whitespace-separated term of ``query``, case-insensitive (as the dashboard's tables)."""
    terms = query.lower().split()
    labels = [n.lower() for n in names] + ["<unknown>"]
    keep = np.ones(len(op), dtype=bool)
    for status, rows in (("freed", freed), (NEVER_FREED, ~freed)):
        ok = np.array([all(t in f"{n}\0{status}" for t in terms) for n in labels], dtype=bool)
        keep &= ~rows | ok[op]
    return keep


def _order(dev: dict, names: list[str], idx: np.ndarray, key: str, desc: bool) -> np.ndarray:
    """``idx`` sorted by column ``key`` (stable: ties keep allocation order; rows without a
    release time last in either direction, as the dashboard's tables sort)."""
    if key == "operator":
        rank = np.argsort(np.argsort(np.array([n.lower() for n in names] + ["<unknown>"],
                                               dtype=object), kind="stable"), kind="stable")
        v = rank[dev["op"][idx]]
    elif key == "status":
        v = (dev["release"][idx] < 0).astype(np.int64)
    elif key == "size":
        v = dev["size"][idx]
    elif key == "allocation_time":
        v = dev["alloc"][idx]
    else:
        rel = dev["release"][idx]
        v = rel if key == "release_time" else np.where(rel >= 0, rel - dev["alloc"][idx], -1)
    empty = (dev["release"][idx] < 0) if key in ("release_time", "duration") else \
        np.zeros(len(idx), dtype=bool)
    order = np.lexsort((idx, -v if desc else v, empty))
    return idx[order]


def events(views, p: Mapping[str, str | None]) -> dict:
    """``memory/events``: one row per allocation, in allocation order (every row).

    Optional, for the dashboard's table on big spans: ``start``/``end`` (µs) keep the
    allocations live in that window (allocated by its end, not freed before its start);
    ``search``, ``sort``/``dir`` order them; ``offset``/``limit`` cut one page. The answer
    then also holds ``total`` (rows in the window), ``matched`` (after search), ``offset``
    and ``index`` (each row's position in allocation order: its stable id).
    """
    pay, label = _device(views, p)
    paged = any(p.get(k) for k in ("start", "end", "search", "sort", "offset", "limit"))
    if label is None:
        out = _table(EVENT_COLUMNS, [])
        return {**out, "total": 0, "matched": 0, "offset": 0, "index": []} if paged else out
    dev = _arrays(views, label)
    at, rel = dev["alloc"], dev["release"]
    idx = np.arange(len(at))
    if paged:
        s, e = _window(p)
        live = np.ones(len(at), dtype=bool)
        if e is not None:
            live &= at <= e
        if s is not None:
            live &= (rel < 0) | (rel >= s)
        idx = idx[live]
        total = len(idx)
        if p.get("search"):
            idx = idx[_matching(pay["names"], rel[idx] >= 0, dev["op"][idx], p["search"])]
        matched = len(idx)
        if p.get("sort"):
            idx = _order(dev, pay["names"], idx, p["sort"], p.get("dir") != "asc")
        offset = int_param(p, "offset", 0, 0, MAX_COUNT)
        limit = int_param(p, "limit", None, 0, MAX_COUNT)
        idx = idx[offset:None if limit is None else offset + limit]
    names = np.array(pay["names"] + ["<unknown>"], dtype=object)  # op index -1 -> <unknown>
    at, rel = at[idx], rel[idx]
    freed = rel >= 0
    release = np.where(freed, rel / 1000, None)        # object arrays: None where not freed
    duration = np.where(freed, (rel - at) / 1000, None)
    rows = list(map(list, zip(names[dev["op"][idx]].tolist(), dev["size"][idx].tolist(),
                              _us(at), release.tolist(), duration.tolist())))
    out = _table(EVENT_COLUMNS, rows)
    if paged:
        out.update(total=total, matched=matched, offset=offset, index=idx.tolist())
    return out


def stats(views, p: Mapping[str, str | None]) -> dict:
    """``memory/stats``: the per-operator memory table of the device."""
    pay, label = _device(views, p)
    if label is None:
        cols = [("string", "Name")] + ([("string", "Input Shape")]
                                       if p["group_by"] == GROUP_BY[1] else [])
        return _table(cols + [("number", c) for c in ("Calls", *STAT_COLUMNS)], [])
    return pay["per"][label]["stats"][p["group_by"]]


#: Pixels of the whole-span curve a ``stepscope report`` file embeds (<= 2x points per device;
#: the report cuts zoomed windows out of it in the page).
REPORT_WIDTH = 2000


def _devices(views) -> list[str]:
    return [d["device"] for d in views.payload("Memory")["devices"]]


GROUP_BY_PARAM = Param("group_by", GROUP_BY, "rows per operator name, or per name + input shape")
DEVICE_PARAM = Param("device", doc="device label from memory/devices (default: the first)")

VIEW = View(
    name="Memory", frontend="memory",
    build=memory_payloads,
    has_data=lambda a: bool(a.memory.devices),
    routes=(
        Route("memory/devices", lambda v, p: v.payload("Memory")["devices"]),
        Route("memory/curve", curve,
              (DEVICE_PARAM, Param("start", doc="window start, µs from the trace start"),
               Param("end", doc="window end, µs from the trace start"),
               Param("width", doc=f"pixels across the curve ({MIN_WIDTH}..{MAX_WIDTH}, "
                                  "default 1000)")),
              report=lambda v: [{"device": d, "width": str(REPORT_WIDTH)} for d in _devices(v)]),
        Route("memory/events", events,
              (DEVICE_PARAM,
               Param("start", doc="keep allocations live from this time on (µs from the trace start)"),
               Param("end", doc="keep allocations made by this time (µs from the trace start)"),
               Param("search", doc="keep rows whose operator or status (freed / never freed) "
                                   "holds every term"),
               Param("sort", ("",) + EVENT_KEYS, "order rows by this column (default: "
                                                 "allocation order)"),
               Param("dir", ("desc", "asc"), "sort direction"),
               Param("offset", doc="first row to send (0-based, after search and sort)"),
               Param("limit", doc="at most this many rows")),
              report=lambda v: [{"device": d} for d in _devices(v)]),
        Route("memory/stats", stats, (DEVICE_PARAM, GROUP_BY_PARAM),
              report=lambda v: [{"device": d, "group_by": g} for d in _devices(v) for g in GROUP_BY]),
    ),
)
