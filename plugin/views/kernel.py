"""Kernel view payloads (SPEC §2.5, §3): ``kernel/table``, ``kernel`` pie and
``kernel/tc_pie``."""

from __future__ import annotations

from ..analysis import Analysis
from ..analysis.gpu_metrics import core_label
from ..analysis.kernels import GROUP_BY, kernel_pie, kernel_table, tensor_core_pie
from .registry import Param, Route, View

GROUP_BY_PARAM = Param("group_by", GROUP_BY, "rows per kernel name, or per name + operator")


def kernel_payloads(a: Analysis) -> dict:
    """``{"kernel/table": {group_by: payload}, "kernel": pie, "kernel/tc_pie": pie}``."""
    cores = core_label(a.rocm)    # "Matrix Cores" (MFMA) on ROCm
    return {
        "kernel/table": {g: {"data": kernel_table(a.trace, a.links, a.tc_kernel,
                                                   by_op=(g == "KernelNameAndOpName"),
                                                   show_tc=a.has_kernels, cores=cores)}
                         for g in GROUP_BY},
        "kernel": kernel_pie(a.trace),
        "kernel/tc_pie": tensor_core_pie(a.trace, a.tc_kernel, cores),
    }


VIEW = View(
    name="Kernel", frontend="kernel",
    build=kernel_payloads,
    has_data=lambda a: a.has_kernels,
    routes=(
        Route("kernel/table", lambda v, p: v.payload("Kernel")["kernel/table"][p["group_by"]],
              (GROUP_BY_PARAM,)),
        Route("kernel", lambda v, p: v.payload("Kernel")["kernel"], (GROUP_BY_PARAM,)),
        Route("kernel/tc_pie", lambda v, p: v.payload("Kernel")["kernel/tc_pie"]),
    ),
)
