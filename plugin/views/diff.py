"""Diff view (SPEC §4.4): what changed between a baseline and an experiment span.

Pure functions over the two sides' own, already-built view payloads (``overview``,
``operation/table``, ``kernel/table``): nothing is analysed again, and every delta is the
difference of the two values the sides' own views show (``experiment - baseline``, µs as
those views round them).

- A name present on one side only is a row with the other side 0.
- A side without device activity (a CPU-only trace) has **null** device values (operator
  device self/total, every kernel value, the Kernel/Memcpy/Memset/Runtime categories), not
  0; a delta with a null side is null.
- Rows are sorted by their largest absolute delta over the time columns (µs), then name.

Example::

    diff_operators(base_rows, exp_rows, base_gpu=True, exp_gpu=True)[0]
    # {"name": "aten::copy_", "baseline": {"calls": 300, "host_self_us": 900, ...},
    #  "experiment": {...}, "delta": {"calls": 412, "host_self_us": 2100, ...}}
"""

from __future__ import annotations

from typing import Any

from ..errors import StepscopeError
from ..taxonomy import BREAKDOWN_ORDER
from .diff_summary import change, summary
from .registry import PairRoute, PairView

SIDES = ("baseline", "experiment")
#: operator diff field -> operation/table field
OP_FIELDS = {"calls": "calls", "host_self_us": "host_self_duration",
             "host_total_us": "host_total_duration", "device_self_us": "device_self_duration",
             "device_total_us": "device_total_duration"}
OP_DEVICE = frozenset({"device_self_us", "device_total_us"})
#: user-range diff fields (``module/ranges?flat=1`` fields of the same names)
RANGE_FIELDS = ("calls", "host_total_us")
#: kernel diff field -> kernel/table column name
KERNEL_FIELDS = {"calls": "Calls", "total_us": "Total Duration (us)",
                 "mean_us": "Mean Duration (us)"}
#: breakdown categories only a trace with device activity has (Communication may be host
#: collectives in a CPU trace: absent there means 0)
DEVICE_CATEGORIES = frozenset({"Kernel", "Memcpy", "Memset", "Runtime"})
TOTAL = "Total"


def is_gpu(overview: dict) -> bool:
    """Whether a side has device activity: its overview's ``Device Type`` (SPEC §2.3)."""
    for env in overview.get("environments", ()):
        if env.get("title") == "Device Type":
            return env.get("value") == "GPU"
    return bool(overview.get("gpu_metrics", {}).get("gpus"))


def _delta(b: Any, e: Any) -> Any:
    return None if b is None or e is None else e - b


def _pct_change(b: Any, e: Any) -> float | None:
    """Relative change in percent of the baseline, two decimals; null when it has none."""
    return None if b is None or e is None or not b else round(100 * (e - b) / b, 2)


# -- overview ----------------------------------------------------------------------------------
def breakdown_of(overview: dict) -> tuple[dict[str, int], dict[str, float], int | None]:
    """``({category: avg µs, "Total": avg µs}, {category: share %}, steps)`` of a side's
    overview, as its "Performance summary" shows them (empty without steps)."""
    perf = overview.get("performance") or []
    steps = (overview.get("step_summary") or {}).get("kept")
    if not perf:
        return {}, {}, steps
    values = {c["name"]: c["value"] for c in perf[0].get("children", ())}
    shares = {c["name"]: c["extra"] for c in perf[0].get("children", ())}
    values[TOTAL] = perf[0]["value"]
    return values, shares, steps


def diff_overview(base: dict, exp: dict) -> dict:
    """``diff/overview`` without its summary: both sides' average step breakdown (µs), the
    delta per category (µs) and its relative change (``delta_pct``, % of the baseline)."""
    sides = {}
    for side, ov in zip(SIDES, (base, exp)):
        values, shares, steps = breakdown_of(ov)
        sides[side] = (values, shares, steps, is_gpu(ov))
    present = {c for values, *_ in sides.values() for c in values if c != TOTAL}
    categories = [c for c in BREAKDOWN_ORDER if c in present]
    categories += sorted(present - set(categories))  # an unknown category: keep it
    out: dict[str, Any] = {"categories": categories}
    for side, (values, shares, steps, gpu) in sides.items():
        row: dict[str, Any] = {}
        for c in [*categories, TOTAL]:
            if c in values:
                row[c] = values[c]
            elif not values or (c in DEVICE_CATEGORIES and not gpu):
                row[c] = None  # no steps at all, or a device category of a CPU-only trace
            else:
                row[c] = 0
        out[side] = row
        out.setdefault("share", {})[side] = {c: shares.get(c) for c in categories}
        out.setdefault("steps", {})[side] = steps
        out.setdefault("device", {})[side] = "GPU" if gpu else "CPU"
    b, e = out["baseline"], out["experiment"]
    out["delta"] = {c: _delta(b[c], e[c]) for c in b}
    out["delta_pct"] = {c: _pct_change(b[c], e[c]) for c in b}
    return out


# -- tables ------------------------------------------------------------------------------------
def _sort_key(row: dict, time_fields: tuple[str, ...]) -> tuple:
    """Largest change first (a CPU-only side's null device times count as 0: by name
    alone, a CPU/GPU pair's kernels came out alphabetical), then name."""
    deltas = [abs(change(row["baseline"][f], row["experiment"][f])) for f in time_fields]
    return (-max(deltas, default=0), row["name"], row.get("kind", ""))


def diff_tables(base: dict[tuple, dict], exp: dict[tuple, dict], fields: tuple[str, ...],
                null_fields: tuple[frozenset, frozenset]) -> list[dict]:
    """Rows of both sides matched by key ``(name, kind)``: a side's values, 0 where it lacks
    the key, null for its ``null_fields`` (device values of a CPU-only side); the deltas;
    sorted by the largest absolute delta of a time field (every field but ``calls``)."""
    rows = []
    for key in {**base, **exp}:  # baseline's order first: deterministic
        row: dict[str, Any] = {"name": key[0]}
        if key[1]:
            row["kind"] = key[1]
        for side, table, nulls in zip(SIDES, (base, exp), null_fields):
            values = table.get(key, {})
            row[side] = {f: None if f in nulls else values.get(f, 0) for f in fields}
        row["delta"] = {f: _delta(row["baseline"][f], row["experiment"][f]) for f in fields}
        rows.append(row)
    time_fields = tuple(f for f in fields if f != "calls")
    rows.sort(key=lambda r: _sort_key(r, time_fields))
    return rows


def operator_values(rows: list[dict]) -> dict[tuple, dict]:
    """``operation/table`` rows (group_by Operation) -> ``{(name, kind): {field: value}}``;
    ``kind`` is ``"range"`` for the range rows of SPEC §2.4.8, else ``""``."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["name"], r.get("kind", ""))
        acc = out.setdefault(key, dict.fromkeys(OP_FIELDS, 0))
        for f, src in OP_FIELDS.items():
            acc[f] += r.get(src) or 0
    return out


def kernel_values(table: dict) -> dict[tuple, dict]:
    """``kernel/table`` (group_by Kernel: one row per name) -> ``{(name, ""): {field: value}}``."""
    names = [c["name"] for c in table.get("columns", ())]
    index = {f: names.index(col) for f, col in KERNEL_FIELDS.items() if col in names}
    if len(index) < len(KERNEL_FIELDS) or "Name" not in names:
        return {}
    name_at = names.index("Name")
    return {(r[name_at], ""): {f: r[i] for f, i in index.items()} for r in table.get("rows", ())}


def diff_operators(base_rows: list[dict], exp_rows: list[dict], *, base_gpu: bool,
                   exp_gpu: bool) -> list[dict]:
    """``diff/operators``: per operator name, both sides' calls and times and the deltas."""
    nulls = tuple(frozenset() if gpu else OP_DEVICE for gpu in (base_gpu, exp_gpu))
    return diff_tables(operator_values(base_rows), operator_values(exp_rows),
                       tuple(OP_FIELDS), nulls)


def diff_kernels(base_table: dict, exp_table: dict, *, base_gpu: bool,
                 exp_gpu: bool) -> list[dict]:
    """``diff/kernels``: per kernel name, both sides' calls, total and mean (µs), deltas."""
    every = frozenset(KERNEL_FIELDS)
    nulls = tuple(frozenset() if gpu else every for gpu in (base_gpu, exp_gpu))
    return diff_tables(kernel_values(base_table), kernel_values(exp_table),
                       tuple(KERNEL_FIELDS), nulls)


# -- routes: each side answers get(route, params) like a span's views -------------------------
def _overview(side) -> dict:
    return side.get("overview", {})


def operators_of(baseline, experiment) -> list[dict]:
    return diff_operators(baseline.get("operation/table", {}),
                          experiment.get("operation/table", {}),
                          base_gpu=is_gpu(_overview(baseline)),
                          exp_gpu=is_gpu(_overview(experiment)))


def kernels_of(baseline, experiment) -> list[dict]:
    return diff_kernels(baseline.get("kernel/table", {})["data"],
                        experiment.get("kernel/table", {})["data"],
                        base_gpu=is_gpu(_overview(baseline)),
                        exp_gpu=is_gpu(_overview(experiment)))


def ranges_of(baseline, experiment) -> list[dict]:
    """Per user-range name (``module/ranges?flat=1``), calls and host total of both sides
    and the deltas: on CPU traces, the time of host collectives (``gloo:*``) lies in such
    ranges, not in operator rows (an empty list when a side has no ranges)."""
    def values(side) -> dict[tuple, dict]:
        try:
            rows = side.get("module/ranges", {"flat": "1"})
        except StepscopeError:  # no Module view for this span
            return {}
        return {(r["name"], "range"): {f: r[f] for f in RANGE_FIELDS} for r in rows or ()}
    return diff_tables(values(baseline), values(experiment), RANGE_FIELDS,
                       (frozenset(), frozenset()))


def overview_of(baseline, experiment) -> dict:
    """``diff/overview``: the breakdown diff plus the "what changed most" summary."""
    out = diff_overview(_overview(baseline), _overview(experiment))
    out["summary"] = summary(out, operators_of(baseline, experiment),
                             kernels_of(baseline, experiment), lambda: ranges_of(baseline, experiment))
    return out


VIEW = PairView(
    name="Diff", frontend="diff",
    routes=(
        PairRoute("diff/overview", lambda b, e, p: overview_of(b, e)),
        PairRoute("diff/operators", lambda b, e, p: operators_of(b, e)),
        PairRoute("diff/kernels", lambda b, e, p: kernels_of(b, e)),
    ),
)
