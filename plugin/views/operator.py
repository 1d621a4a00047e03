"""Operator view payloads (SPEC §2.4, §3): ``operation`` pies, ``operation/table`` rows and
``operation/stack`` rows, for both ``group_by`` values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..analysis import Analysis
from ..analysis.breakdown import name_mask
from ..analysis.operators import (
    GROUP_BY,
    OpNodes,
    group_ids,
    grouping_shapes,
    operator_columns,
    range_mask,
    sum_to,
    table_mask,
)
from ..analysis.tree import HostTree
from ..errors import BadParameter, NotFound, echo
from ..model import Trace
from ..taxonomy import STEP_NAME
from ..units import us_list
from .registry import Param, Route, View

GROUP_BY_PARAM = Param("group_by", GROUP_BY, "rows per operator name, or per name + input shape")


@dataclass
class OperatorGroups:
    """Operator table rows, and per-call-stack rows of each group."""

    rows: list[dict]                           # operation/table payload
    stacks: dict[tuple[str, str], list[dict]]  # (name, input_shape or "") -> stack rows


_DURATIONS = ("device_self_duration", "device_total_duration", "host_self_duration",
              "host_total_duration")


def group_operators(trace: Trace, tree: HostTree, nodes: OpNodes, stack_ids: np.ndarray,
                    stack_strings: list[str], tc_eligible_name: np.ndarray, *, by_shape: bool,
                    gpu: bool, exact: bool = False) -> OperatorGroups:
    """Operator table rows grouped by name (and input shape), then the range rows of
    SPEC §2.4.8, sorted by device self time (host self without GPU); and per-call-stack rows
    for each operator group. ``exact``: durations as ns / 1000 (float µs, what
    ``stepscope summary`` prints) instead of the API's integer µs."""
    sel = np.flatnonzero(table_mask(trace, tree, nodes))
    cols = operator_columns(trace, tree, nodes, sel, by_shape)
    cols["stack"] = stack_ids[sel]
    fmt = _RowFormat(trace, trace.strings, stack_strings, tc_eligible_name, by_shape, gpu,
                     exact)
    table = fmt.rows(cols, ("name", "shape"))
    table += _range_rows(trace, tree, nodes, fmt, by_shape)
    table = _sorted(table, gpu)
    stacks: dict[tuple[str, str], list[dict]] = {}
    keep = cols["stack"] >= 0
    if keep.any():
        sub = {k: v[keep] for k, v in cols.items()}
        for row in fmt.rows(sub, ("name", "shape", "stack")):
            key = (row["name"], row.get("input_shape", ""))
            stacks.setdefault(key, []).append(row)
        stacks = {k: _sorted(v, gpu) for k, v in stacks.items()}
    return OperatorGroups(rows=table, stacks=stacks)


#: Label of the range row of all ``ProfilerStep#N`` events (SPEC §2.4.8).
STEP_RANGE_LABEL = "ProfilerStep#*"


def _range_rows(trace: Trace, tree: HostTree, nodes: OpNodes, fmt: _RowFormat,
                by_shape: bool) -> list[dict]:
    """Rows ``"kind": "range"``: per enclosing event name, the device time launched directly
    under user ranges, python frames and steps (SPEC §2.4.8). Their device total is that
    same time (the ops inside have their own rows)."""
    sel = np.flatnonzero(range_mask(trace, tree, nodes))
    if not len(sel):
        return []
    cols = operator_columns(trace, tree, nodes, sel, by_shape)
    cols["device_total_duration"] = cols["device_self_duration"]
    cols["tc_total"] = cols["tc_self"]
    step_label = len(trace.strings)
    is_step = name_mask(trace, STEP_NAME)[tree.rows[sel]]
    cols["name"] = np.where(is_step, step_label, cols["name"])
    names = [*trace.strings, STEP_RANGE_LABEL]
    rfmt = replace(fmt, strings=names,
                   tc_eligible_name=np.zeros(len(names), dtype=bool))
    rows = rfmt.rows(cols, ("name", "shape"))
    for r in rows:
        r["kind"] = "range"
    return rows


@dataclass
class _RowFormat:
    trace: Trace
    strings: list[str]
    stack_strings: list[str]
    tc_eligible_name: np.ndarray
    by_shape: bool
    gpu: bool
    exact: bool = False  # float µs (ns / 1000) instead of integer µs

    def rows(self, cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> list[dict]:
        """Group ``cols`` by ``keys`` and format one JSON row per group."""
        if not len(cols["name"]):
            return []
        first, inv = group_ids(*(cols[k] for k in keys))
        g = len(first)
        sums = {k: sum_to(inv, cols[k], g) for k in (*_DURATIONS, "tc_self", "tc_total")}
        out_us = {k: (sums[k] / 1000).tolist() if self.exact else us_list(sums[k])
                  for k in _DURATIONS}
        calls = np.bincount(inv, minlength=g).tolist()
        has_stack = (np.bincount(inv, weights=cols["stack"] >= 0, minlength=g) > 0).tolist()
        strings, shapes = self.strings, grouping_shapes(self.trace)[1]
        # Python lists, not numpy scalars, in the per-group loop (many small traces)
        names = cols["name"][first].tolist()
        shape_ids = cols["shape"][first].tolist() if self.by_shape else None
        stack_ids = cols["stack"][first].tolist() if "stack" in keys else None
        if self.gpu:
            eligible = self.tc_eligible_name[cols["name"][first]].tolist()
            tc = [sums[k].tolist() for k in ("tc_self", "device_self_duration", "tc_total",
                                              "device_total_duration")]
        out = []
        for j, nm in enumerate(names):
            row = {"name": strings[nm]}
            if shape_ids is not None:
                sh = shape_ids[j]
                row["input_shape"] = shapes[sh] if sh >= 0 else ""
            row["calls"] = calls[j]
            for k in _DURATIONS:
                row[k] = out_us[k][j]
            row["has_call_stack"] = bool(has_stack[j])
            if self.gpu:
                row["tc_eligible"] = bool(eligible[j])
                row["tc_self_ratio"] = _ratio(tc[0][j], tc[1][j])
                row["tc_total_ratio"] = _ratio(tc[2][j], tc[3][j])
            if stack_ids is not None:
                row["call_stack"] = self.stack_strings[stack_ids[j]]
            out.append(row)
        return out


def _ratio(part: int, whole: int) -> float:
    """Share in percent, two decimals; 0 when there is no device time."""
    return round(100 * int(part) / int(whole), 2) if whole else 0.0


def _sorted(rows: list[dict], gpu: bool) -> list[dict]:
    key = "device_self_duration" if gpu else "host_self_duration"
    return sorted(rows, key=lambda r: (-r[key], -r["host_self_duration"], r["name"],
                                       r.get("input_shape", ""), r.get("call_stack", "")))


PIES = (
    ("device_total_time", "Device Total Time (us)", "device_total_duration"),
    ("device_self_time", "Device Self Time (us)", "device_self_duration"),
    ("host_total_time", "Host Total Time (us)", "host_total_duration"),
    ("host_self_time", "Host Self Time (us)", "host_self_duration"),
)


def operator_pies(rows: list[dict], gpu: bool) -> dict:
    """The four pies of the operation view: every group with a value > 0, descending."""
    out = {}
    for key, title, col in PIES:
        if key.startswith("device") and not gpu:
            out[key] = None
            continue
        # range rows (SPEC §2.4.8) hold device time only ops would not show; their host
        # times overlap the ops inside them, so the host pies leave them out
        items = [(_label(r), r[col]) for r in rows
                 if r[col] > 0 and (key.startswith("device") or r.get("kind") != "range")]
        if not items:
            out[key] = None
            continue
        items.sort(key=lambda x: (-x[1], x[0]))
        out[key] = {"title": title,
                    "columns": [{"type": "string", "name": "name"},
                                {"type": "number", "name": "value"}],
                    "rows": [[nm, v] for nm, v in items]}
    return out


def _label(row: dict) -> str:
    shape = row.get("input_shape")
    return f"{row['name']} {shape}" if shape else row["name"]


def operator_groups(a: Analysis) -> dict[str, OperatorGroups]:
    """Grouped operator rows per ``group_by`` value."""
    return {g: group_operators(a.trace, a.tree, a.nodes, a.stack_ids, a.stack_strings,
                               a.tc_eligible_name, by_shape=(g == "OperationAndInputShape"),
                               gpu=a.gpu)
            for g in GROUP_BY}


def exact_operator_rows(a: Analysis, group_by: str) -> list[dict]:
    """The ``operation/table`` rows of ``group_by`` with durations in float µs, ns exact
    (the same grouping and order; for ``stepscope summary``)."""
    return group_operators(a.trace, a.tree, a.nodes, a.stack_ids, a.stack_strings,
                           a.tc_eligible_name, by_shape=(group_by == "OperationAndInputShape"),
                           gpu=a.gpu, exact=True).rows




def stack_rows(groups: dict[str, OperatorGroups], params: Mapping[str, str | None]) -> list[dict]:
    """``operation/stack``: per-call-stack rows of one operator (and input shape)."""
    group_by = params["group_by"]
    name = params.get("op_name")
    if not name:
        raise BadParameter("missing op_name",
                           "Pass op_name=<operator name> (and input_shape=<shape> when "
                           "group_by=OperationAndInputShape).")
    shape = params.get("input_shape") or "" if group_by == "OperationAndInputShape" else ""
    group = groups[group_by]
    rows = group.stacks.get((name, shape))
    if rows is None and not any(r["name"] == name and r.get("input_shape", "") == shape
                                for r in group.rows):
        what = f"{echo(name)} with input shape {echo(shape)}" if shape else echo(name)
        raise NotFound(f"unknown operator {what}", f"operation/table?group_by={group_by} "
                       "lists the operators of this span" + (" with their input_shape (leave "
                       "it out for an empty one)." if group_by == "OperationAndInputShape"
                       else "."))
    return rows or []


def stack_report_params(views) -> list[dict[str, str]]:
    """``operation/stack`` parameters of every operator group that has call stacks (what
    the table's expandable rows ask for; empty values left out, as the frontend does)."""
    out = []
    for g, grp in views.payload("Operator")["groups"].items():
        for name, shape in grp.stacks:
            p = {"group_by": g, "op_name": name}
            if shape and g == "OperationAndInputShape":
                p["input_shape"] = shape
            out.append(p)
    return out


def _payloads(a: Analysis) -> dict:
    """``{"groups": {group_by: OperatorGroups}, "pies": {group_by: pies}}``. The table rows
    are in ``groups`` only: a second reference to them was stored twice in the cache and
    unpacked twice in the server (100,000 operator names: 107 -> 67 MB of JSON)."""
    groups = operator_groups(a)
    return {"groups": groups, "pies": {g: operator_pies(grp.rows, a.gpu)
                                       for g, grp in groups.items()}}


VIEW = View(
    name="Operator", frontend="operator",
    build=_payloads,
    has_data=lambda a: a.has_host,
    routes=(
        Route("operation", lambda v, p: v.payload("Operator")["pies"][p["group_by"]],
              (GROUP_BY_PARAM,)),
        Route("operation/table",
              lambda v, p: v.payload("Operator")["groups"][p["group_by"]].rows,
              (GROUP_BY_PARAM,)),
        Route("operation/stack", lambda v, p: stack_rows(v.payload("Operator")["groups"], p),
              (GROUP_BY_PARAM, Param("op_name", doc="operator name (required)"),
               Param("input_shape", doc="input shape, with group_by=OperationAndInputShape")),
              report=stack_report_params),
    ),
)
