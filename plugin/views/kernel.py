"""Kernel view payloads (SPEC §2.5, §3): ``kernel/table``, ``kernel`` pie and
``kernel/tc_pie``. Durations are summed in ns and rounded to µs once; the mean is
``total / calls`` rounded half to even."""

from __future__ import annotations

import numpy as np

from ..analysis import Analysis
from ..analysis.gpu_metrics import core_label
from ..analysis.kernels import GROUP_BY, NO_OP, kernel_rows, launching_op_names
from ..analysis.links import Links
from ..analysis.operators import group_ids, group_min_max
from ..model import Trace
from ..taxonomy import Kind
from ..units import div_round, us_list
from .registry import Param, Route, View

GROUP_BY_PARAM = Param("group_by", GROUP_BY, "rows per kernel name, or per name + operator")


def _num(name: str) -> dict:
    return {"type": "number", "name": name}


def _str(name: str) -> dict:
    return {"type": "string", "name": name}


def _weighted_mean(inv: np.ndarray, g: int, values: np.ndarray, weights: np.ndarray) -> list:
    """Per group, the ``weights``-weighted mean of the known (non-nan) ``values``; None if
    the group has none (plain mean when all weights are 0)."""
    known = ~np.isnan(values)
    v = np.where(known, values, 0.0)
    w = np.where(known, weights.astype(np.float64), 0.0)
    sw = np.bincount(inv, weights=w, minlength=g)
    swv = np.bincount(inv, weights=w * v, minlength=g)
    cnt = np.bincount(inv, weights=known, minlength=g)
    sv = np.bincount(inv, weights=v, minlength=g)
    out = []
    for a, b, c, d in zip(sw.tolist(), swv.tolist(), cnt.tolist(), sv.tolist()):
        if not c:
            out.append(None)
        else:
            out.append(_round2(b / a if a > 0 else d / c))
    return out


def _round2(x: float) -> float:
    """``x`` to two decimals, a tie (0.025) always up: summed in the trace's event order, a
    mean of 50 kernels of 0.025 blocks per SM came out 0.03 or 0.02 by that order (the sums
    differ in their last bits; the nudge is far above that and far below 0.005)."""
    return round(x + 1e-9, 2)


def kernel_table(trace: Trace, links: Links, tc_kernel: np.ndarray, *, by_op: bool,
                 show_tc: bool, cores: str = "Tensor Cores") -> dict:
    """``{"columns", "rows"}`` of the kernel table, sorted by total duration descending;
    ``cores`` names the matrix units in the ``<cores> Used`` column ("Matrix Cores" on ROCm)."""
    rows = kernel_rows(trace)
    dur = trace.dur[rows]
    name = trace.name[rows].astype(np.int64)
    if by_op:
        op_name = launching_op_names(trace, links, rows)
    else:
        op_name = np.zeros(len(rows), dtype=np.int64)
    bps, occ = trace.blocks_per_sm[rows], trace.occupancy[rows]
    show_bps = bool((~np.isnan(bps)).any())
    show_occ = bool((~np.isnan(occ)).any())

    columns = [_str("Name")] + ([_str("Operator")] if by_op else []) + [
        _num("Calls"), _num("Total Duration (us)"), _num("Mean Duration (us)"),
        _num("Max Duration (us)"), _num("Min Duration (us)")]
    if show_bps:
        columns.append(_num("Mean Blocks Per SM"))
    if show_occ:
        columns.append(_num("Mean Est. Achieved Occupancy (%)"))
    if show_tc:
        columns.append(_str(f"{cores} Used"))
    if not len(rows):
        return {"columns": columns, "rows": []}

    first, inv = group_ids(name, op_name)
    g = len(first)
    calls = np.bincount(inv, minlength=g).astype(np.int64)
    total = np.rint(np.bincount(inv, weights=dur, minlength=g)).astype(np.int64)
    mn, mx = group_min_max(inv, dur, g)  # durations >= 0: as from 0 and int64 max
    mean = div_round(total, calls * 1000)
    cols = [calls.tolist(), us_list(total), mean.tolist(), us_list(mx), us_list(mn)]
    if show_bps:
        cols.append(_weighted_mean(inv, g, bps, dur))
    if show_occ:
        cols.append(_weighted_mean(inv, g, occ, dur))
    if show_tc:
        tc = np.bincount(inv, weights=tc_kernel[rows], minlength=g) > 0
        cols.append(["Yes" if t else "No" for t in tc.tolist()])
    strings = trace.strings
    out = []
    for j, f in enumerate(first.tolist()):
        row = [strings[name[f]]]
        if by_op:
            row.append(strings[op_name[f]] if op_name[f] >= 0 else NO_OP)
        row.extend(c[j] for c in cols)
        out.append(row)
    out.sort(key=lambda r: (-r[3 if by_op else 2], r[0], r[1] if by_op else ""))
    return {"columns": columns, "rows": out}


def kernel_pie(trace: Trace) -> dict:
    """Total duration (µs) per kernel name, every kernel, descending."""
    rows = kernel_rows(trace)
    items: list = []
    if len(rows):
        uniq, inv = np.unique(trace.name[rows], return_inverse=True)
        total = np.rint(np.bincount(inv.reshape(-1), weights=trace.dur[rows])).astype(np.int64)
        items = [[trace.strings[int(u)], t] for u, t in zip(uniq.tolist(), us_list(total))]
        items.sort(key=lambda r: (-r[1], r[0]))
    return {"total": {"columns": [_str("name"), _num("value")], "rows": items}}


def tensor_core_pie(trace: Trace, tc_kernel: np.ndarray, cores: str = "Tensor Cores") -> dict:
    """Kernel time in tensor-core kernels vs the rest (µs); ``cores`` as in :func:`kernel_table`."""
    k = trace.kind == Kind.KERNEL
    tc = int(trace.dur[k & tc_kernel].sum())
    rest = int(trace.dur[k & ~tc_kernel].sum())
    return {"total": {"columns": [_str("name"), _num("value")],
                      "rows": [[f"Using {cores}", us_list(np.array([tc]))[0]],
                               [f"Not Using {cores}", us_list(np.array([rest]))[0]]]}}


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
