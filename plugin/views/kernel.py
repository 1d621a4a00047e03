"""Kernel view payloads (SPEC §2.5, §3): ``kernel/table``, ``kernel`` pie and
``kernel/tc_pie``."""

from __future__ import annotations

from ..analysis import Analysis
from ..analysis.kernels import GROUP_BY, kernel_pie, kernel_table, tensor_core_pie


def kernel_payloads(a: Analysis) -> dict:
    """``{"kernel/table": {group_by: payload}, "kernel": pie, "kernel/tc_pie": pie}``."""
    show_tc = a.has_kernels and not a.rocm
    return {
        "kernel/table": {g: {"data": kernel_table(a.trace, a.links, a.tc_kernel,
                                                   by_op=(g == "KernelNameAndOpName"),
                                                   show_tc=show_tc)}
                         for g in GROUP_BY},
        "kernel": kernel_pie(a.trace),
        "kernel/tc_pie": tensor_core_pie(a.trace, a.tc_kernel),
    }
