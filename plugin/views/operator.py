"""Operator view payloads (SPEC §2.4, §3): ``operation`` pies, ``operation/table`` rows and
``operation/stack`` rows, for both ``group_by`` values."""

from __future__ import annotations

from collections.abc import Mapping

from ..analysis import Analysis
from ..analysis.operators import GROUP_BY, OperatorGroups, group_operators, operator_pies
from ..errors import BadParameter


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


def group_by_param(params: Mapping[str, str], choices: tuple[str, ...]) -> str:
    """``group_by`` from the query (default: the first choice); 400 on an unknown value."""
    value = params.get("group_by") or choices[0]
    if value not in choices:
        raise BadParameter(f"unknown group_by {value!r}",
                           f"Use one of: {', '.join(choices)}.")
    return value


def stack_rows(groups: dict[str, OperatorGroups], params: Mapping[str, str]) -> list[dict]:
    """``operation/stack``: per-call-stack rows of one operator (and input shape)."""
    group_by = group_by_param(params, GROUP_BY)
    name = params.get("op_name")
    if not name:
        raise BadParameter("missing op_name",
                           "Pass op_name=<operator name> (and input_shape=<shape> when "
                           "group_by=OperationAndInputShape).")
    shape = params.get("input_shape") or "" if group_by == "OperationAndInputShape" else ""
    return groups[group_by].stacks.get((name, shape), [])
