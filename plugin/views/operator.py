"""Operator view payloads (SPEC §2.4, §3): ``operation`` pies, ``operation/table`` rows and
``operation/stack`` rows, for both ``group_by`` values."""

from __future__ import annotations

from collections.abc import Mapping

from ..analysis import Analysis
from ..analysis.operators import GROUP_BY, OperatorGroups, group_operators, operator_pies
from ..errors import BadParameter
from .registry import Param, Route, View

GROUP_BY_PARAM = Param("group_by", GROUP_BY, "rows per operator name, or per name + input shape")


def operator_groups(a: Analysis) -> dict[str, OperatorGroups]:
    """Grouped operator rows per ``group_by`` value."""
    return {g: group_operators(a.trace, a.tree, a.nodes, a.stack_ids, a.stack_strings,
                               a.tc_eligible_name, by_shape=(g == "OperationAndInputShape"),
                               gpu=a.gpu)
            for g in GROUP_BY}


def operation_payloads(groups: dict[str, OperatorGroups], gpu: bool) -> dict[str, dict]:
    """``{group_by: {"operation": pies, "operation/table": rows}}``."""
    return {g: {"operation": operator_pies(grp.rows, gpu), "operation/table": grp.rows}
            for g, grp in groups.items()}


def stack_rows(groups: dict[str, OperatorGroups], params: Mapping[str, str | None]) -> list[dict]:
    """``operation/stack``: per-call-stack rows of one operator (and input shape)."""
    group_by = params["group_by"]
    name = params.get("op_name")
    if not name:
        raise BadParameter("missing op_name",
                           "Pass op_name=<operator name> (and input_shape=<shape> when "
                           "group_by=OperationAndInputShape).")
    shape = params.get("input_shape") or "" if group_by == "OperationAndInputShape" else ""
    return groups[group_by].stacks.get((name, shape), [])


def _payloads(a: Analysis) -> dict:
    groups = operator_groups(a)
    return {"groups": groups, "by_group": operation_payloads(groups, a.gpu)}


VIEW = View(
    name="Operator", frontend="operator",
    build=_payloads,
    has_data=lambda a: a.has_host,
    routes=(
        Route("operation", lambda v, p: v.payload("Operator")["by_group"][p["group_by"]]["operation"],
              (GROUP_BY_PARAM,)),
        Route("operation/table",
              lambda v, p: v.payload("Operator")["by_group"][p["group_by"]]["operation/table"],
              (GROUP_BY_PARAM,)),
        Route("operation/stack", lambda v, p: stack_rows(v.payload("Operator")["groups"], p),
              (GROUP_BY_PARAM, Param("op_name", doc="operator name (required)"),
               Param("input_shape", doc="input shape, with group_by=OperationAndInputShape"))),
    ),
)
