"""``stepscope summary PATH``: the tables of one span as :class:`Section` s (SPEC §4.5).

Every number comes from the server's payloads (:meth:`ViewSet.get`) or the analyses they
are built from; nothing is computed a second time. The operator table has the layout of
torch's ``prof.key_averages().table()`` with ns-exact µs (the rows of ``operation/table``
before the API's rounding to integer µs, :func:`~stepscope.views.operator.exact_operator_rows`);
the others follow PaddlePaddle's profiler summary: device, overview by event type, steps,
phases, operator -> kernel, kernel, memcpy by direction, user ranges.

Column units: ``us`` (µs), ``pct`` (%), ``bytes``, ``count``, ``num``, ``text``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis.memcpy import memcpy_by_direction
from ..taxonomy import Kind
from ..views import ROUTES, ViewSet
from ..views.operator import exact_operator_rows

SECTIONS = ("device", "overview", "steps", "phases", "operators", "operator_kernel",
            "kernels", "memcpy", "ranges")
#: --sort names -> operator column; torch's key_averages names are accepted as well.
SORT_KEYS = {
    "self_cpu": "Self CPU", "cpu_total": "CPU total", "self_device": "Self CUDA",
    "device_total": "CUDA total", "calls": "# of Calls", "name": "Name",
    "cpu_memory": "CPU Mem", "self_cpu_memory": "Self CPU Mem",
    "device_memory": "CUDA Mem", "self_device_memory": "Self CUDA Mem",
    # torch's names (EventList.table(sort_by=...))
    "self_cpu_time_total": "Self CPU", "cpu_time_total": "CPU total",
    "self_cuda_time_total": "Self CUDA", "cuda_time_total": "CUDA total",
    "self_device_time_total": "Self CUDA", "device_time_total": "CUDA total",
    "self_cuda": "Self CUDA", "cuda_total": "CUDA total", "count": "# of Calls",
    "cpu_memory_usage": "CPU Mem", "self_cpu_memory_usage": "Self CPU Mem",
    "cuda_memory_usage": "CUDA Mem", "self_cuda_memory_usage": "Self CUDA Mem",
}


@dataclass
class Section:
    """One table: ``columns`` are (name, unit) pairs; ``rows`` raw values (µs, bytes...)."""

    key: str
    title: str
    columns: list[tuple[str, str]]
    rows: list[list]
    note: str = ""
    total_rows: int = field(default=-1)  # rows before --limit (-1: not limited)


def _unit_of(name: str, kind: str) -> str:
    if kind != "number":
        return "text"
    if name.endswith("(us)"):
        return "us"
    if name.endswith("(%)"):
        return "pct"
    return "count" if name in ("Calls", "Count") else "num"


def chart_section(key: str, title: str, table: dict) -> Section:
    """A chart table ``{columns, rows}`` (SPEC §3) as a section; tooltip columns dropped."""
    keep = [i for i, c in enumerate(table["columns"]) if c.get("role") != "tooltip"]
    cols = [(table["columns"][i]["name"], _unit_of(table["columns"][i]["name"],
                                                   table["columns"][i]["type"])) for i in keep]
    return Section(key, title, cols, [[r[i] for i in keep] for r in table["rows"]])


def _limited(s: Section, limit: int) -> Section:
    if limit and len(s.rows) > limit:
        s.total_rows = len(s.rows)
        s.rows = s.rows[:limit]
    return s


# -- sections ------------------------------------------------------------------------------
def device_section(views: ViewSet) -> Section:
    """Workers, device type and each GPU's properties and utilisation metrics."""
    ov = views.get("overview", {})
    rows = [[e["title"], e["value"]] for e in ov["environments"]
            if not e["title"].startswith("GPU Utilization")]
    for g in ov["gpu_metrics"]["gpus"]:
        rows.append([f"GPU{g['id']}", g.get("name") or "(name unknown)"])
        if g.get("memory_bytes"):
            rows.append([f"GPU{g['id']} memory", f"{g['memory_bytes'] / 2**30:.1f} GiB"])
        if g.get("compute_capability"):
            rows.append([f"GPU{g['id']} compute capability", g["compute_capability"]])
        for m in g["metrics"]:
            rows.append([f"GPU{g['id']} {m['name']}", f"{m['value']:.2f} %"])
    return Section("device", "Device", [("Property", "text"), ("Value", "text")], rows)


def overview_section(views: ViewSet) -> Section | None:
    """Average step time per event type (µs) and its share (%)."""
    ov = views.get("overview", {})
    if not ov["performance"]:
        return None
    top = ov["performance"][0]
    rows = [[c["name"], c["value"], c["extra"]] for c in top["children"]]
    rows.append([top["name"], top["value"], top["extra"]])
    n = ov["step_summary"]["kept"]
    return Section("overview", f"Overview by event type (average of {n} step{'s' * (n != 1)})",
                   [("Event type", "text"), ("Time per step (us)", "us"), ("Share (%)", "pct")],
                   rows)


def steps_section(views: ViewSet) -> Section | None:
    table = views.get("overview", {})["steps"]
    if not table["rows"]:
        return None
    s = chart_section("steps", "Steps (us per category)", table)
    s.columns = [(n, "text" if i == 0 else "us") for i, (n, _u) in enumerate(s.columns)]
    return s


def phases_section(views: ViewSet) -> Section | None:
    """Average host and device time per phase (module/phases, SPEC §4.7), when present."""
    if "module/phases" not in ROUTES or "Module" not in views.names():
        return None
    body = views.get("module/phases", {})
    avg = body.get("average") or {}
    rows = [[p, (avg.get("host_us") or {}).get(p), (avg.get("device_us") or {}).get(p)]
            for p in body.get("phases", [])]
    return Section("phases", "Phases (average per step)",
                   [("Phase", "text"), ("Host (us)", "us"), ("Device (us)", "us")], rows)


def ranges_section(views: ViewSet) -> Section | None:
    """User ranges (record_function), flat (module/ranges?flat=1, SPEC §4.7), when present."""
    if "module/ranges" not in ROUTES or "Module" not in views.names():
        return None
    body = views.get("module/ranges", {"flat": "1"})
    if not body:
        return None
    keys = [("name", "Name", "text"), ("calls", "Calls", "count"),
            ("host_total_us", "Host total (us)", "us"), ("host_avg_us", "Host avg (us)", "us"),
            ("host_min_us", "Host min (us)", "us"), ("host_max_us", "Host max (us)", "us"),
            ("device_us", "Device (us)", "us")]
    rows = [[r.get(k) for k, _n, _u in keys] for r in body]
    return Section("ranges", "User ranges", [(n, u) for _k, n, u in keys], rows)


def kernel_sections(views: ViewSet) -> list[Section]:
    if "Kernel" not in views.names():
        return []
    return [chart_section("operator_kernel", "Operator -> kernel",
                          views.get("kernel/table", {"group_by": "KernelNameAndOpName"})["data"]),
            chart_section("kernels", "Kernels",
                          views.get("kernel/table", {"group_by": "Kernel"})["data"])]


def memcpy_section(views: ViewSet) -> Section | None:
    rows = memcpy_by_direction(views.analysis.trace)
    if not rows:
        return None
    return Section("memcpy", "Memcpy by direction",
                   [("Direction", "text"), ("Calls", "count"), ("Total (us)", "us"),
                    ("Avg (us)", "us"), ("Min (us)", "us"), ("Max (us)", "us")],
                   [[r.direction, r.calls, r.total_ns / 1000, r.total_ns / r.calls / 1000,
                     r.min_ns / 1000, r.max_ns / 1000] for r in rows])


def _memory_by_key(views: ViewSet, by_shape: bool) -> dict[tuple, list[int]]:
    """(name, shape) -> [CPU Mem, Self CPU Mem, CUDA Mem, Self CUDA Mem] (bytes), from
    memory/stats (equal to torch's key_averages memory columns, SPEC §4.1)."""
    if "Memory" not in views.names():
        return {}
    g = "OperationAndInputShape" if by_shape else "Operation"
    out: dict[tuple, list[int]] = {}
    for d in views.get("memory/devices", {}):
        table = views.get("memory/stats", {"device": d["device"], "group_by": g})
        names = [c["name"] for c in table["columns"]]
        i_inc, i_self = names.index("Size Increase"), names.index("Self Size Increase")
        at = 0 if d["type"] == 0 else 2
        for r in table["rows"]:
            key = (r[0], r[1] if by_shape else "")
            m = out.setdefault(key, [0, 0, 0, 0])
            m[at] += r[i_inc]
            m[at + 1] += r[i_self]
    return out


def operator_section(views: ViewSet, *, by_shape: bool = False, sort: str | None = None,
                     limit: int = 0) -> Section | None:
    """The ``key_averages().table()`` layout: one row per operator (and input shape).

    Rows: the dashboard's operator table (its range rows included: device work launched
    outside any operator, SPEC §2.4.8) and, as torch's table has them, the runtime calls
    (``cudaLaunchKernel``...: host time no operator's self time holds). Percentages are of
    the sums over these rows (torch's also count ProfilerStep and record_function ranges,
    which SPEC §2.4.5 keeps out of the operator table); the note under the table says so,
    with those totals, as torch prints its own under its table.
    """
    if "Operator" not in views.names():
        return None
    a = views.analysis
    g = "OperationAndInputShape" if by_shape else "Operation"
    ops = exact_operator_rows(a, g) + runtime_rows(a)
    total_cpu = sum(r["host_self_duration"] for r in ops)
    total_dev = sum(r["device_self_duration"] for r in ops)
    self_cpu, self_dev = total_cpu or 1, total_dev or 1  # (percentages of an empty table)
    mem = _memory_by_key(views, by_shape)
    cols = [("Name", "text"), ("Self CPU %", "pct"), ("Self CPU", "us"),
            ("CPU total %", "pct"), ("CPU total", "us"), ("CPU time avg", "us")]
    if a.gpu:
        cols += [("Self CUDA", "us"), ("Self CUDA %", "pct"), ("CUDA total", "us"),
                 ("CUDA time avg", "us")]
    cols.append(("# of Calls", "count"))
    has_cpu_mem = any(m[0] or m[1] for m in mem.values())
    has_dev_mem = any(m[2] or m[3] for m in mem.values())
    if has_cpu_mem:
        cols += [("CPU Mem", "bytes"), ("Self CPU Mem", "bytes")]
    if has_dev_mem:
        cols += [("CUDA Mem", "bytes"), ("Self CUDA Mem", "bytes")]
    if by_shape:
        cols.append(("Input Shapes", "text"))
    rows = []
    for r in ops:
        n = r["calls"]
        row = [r["name"], 100 * r["host_self_duration"] / self_cpu, r["host_self_duration"],
               100 * r["host_total_duration"] / self_cpu, r["host_total_duration"],
               r["host_total_duration"] / n]
        if a.gpu:
            row += [r["device_self_duration"], 100 * r["device_self_duration"] / self_dev,
                    r["device_total_duration"], r["device_total_duration"] / n]
        row.append(n)
        m = mem.get((r["name"], r.get("input_shape", "")), [0, 0, 0, 0])
        if has_cpu_mem:
            row += m[:2]
        if has_dev_mem:
            row += m[2:]
        if by_shape:  # torch writes "[]" for an operator recorded without shapes
            row.append(r.get("input_shape") or "[]")
        rows.append(row)
    names = [c for c, _u in cols]
    default = "Self CUDA" if a.gpu else "Self CPU"
    column = SORT_KEYS.get(sort or "", default)
    unsorted = ""
    if column not in names:  # (a CPU trace has no CUDA columns, one without memory none)
        unsorted = f"; sorted by {default}: this trace has no {column} column"
        column = default
    k = names.index(column)
    rows.sort(key=(lambda x: x[k]) if column == "Name" else (lambda x: -x[k]))
    note = f"Self CPU time total: {_duration(total_cpu)}"
    if a.gpu:
        note += f"; Self CUDA time total: {_duration(total_dev)}"
    note += (" (this table's rows: operators" + (", runtime calls and the ranges that launched "
                                                  "device work outside any operator" if a.gpu else "")
             + "; torch's totals also count ProfilerStep and record_function ranges, so its "
             f"percentages are smaller){unsorted}")
    return _limited(Section("operators", "Operators (as torch's key_averages().table())",
                            cols, rows, note=note), limit)


def runtime_rows(a) -> list[dict]:
    """Rows of the runtime calls by name (float µs): host time only; the device work they
    launched is their operators' (as torch's table shows them). Empty for a CPU trace."""
    rt = np.flatnonzero(a.trace.kind == Kind.RUNTIME)
    if not len(rt):
        return []
    names = a.trace.name[rt]
    calls = np.bincount(names)
    ns = np.bincount(names, weights=a.trace.dur[rt])
    out = []
    for i in np.flatnonzero(calls).tolist():
        us = float(ns[i]) / 1000
        out.append({"name": a.trace.strings[i], "calls": int(calls[i]), "host_self_duration": us,
                    "host_total_duration": us, "device_self_duration": 0.0,
                    "device_total_duration": 0.0, "kind": "runtime"})
    return out


def _duration(us: float) -> str:
    """µs as torch's table footer writes them: ``1.092ms``, ``530.000us``, ``2.635s``."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    return f"{us / 1e3:.3f}ms" if us >= 1e3 else f"{us:.3f}us"


def summary_sections(views: ViewSet, *, by_shape: bool = False, sort: str | None = None,
                     limit: int = 20, only: tuple[str, ...] = ()) -> list[Section]:
    """The sections of one span, in :data:`SECTIONS` order (``only``: a subset; only those
    are built). A section the span has no data for is left out."""
    wanted = set(only or SECTIONS)
    build = {"device": lambda: device_section(views), "overview": lambda: overview_section(views),
             "steps": lambda: steps_section(views), "phases": lambda: phases_section(views),
             "operators": lambda: operator_section(views, by_shape=by_shape, sort=sort,
                                                   limit=limit),
             "memcpy": lambda: memcpy_section(views),
             "ranges": lambda: _limited_or_none(ranges_section(views), limit)}
    found: dict[str, Section | None] = {k: f() for k, f in build.items() if k in wanted}
    if wanted - set(build):
        for s in kernel_sections(views):
            found[s.key] = _limited(s, limit)
    return [found[k] for k in SECTIONS if found.get(k) is not None and k in wanted]


def _limited_or_none(s: Section | None, limit: int) -> Section | None:
    return None if s is None else _limited(s, limit)
