"""GPU summary (SPEC §2.3): per GPU over ``[first step start, last step end)``.

- GPU Utilization = |union of the GPU's kernel intervals in the window| / window
- Est. SM Efficiency = integral over the window of ``min(1, sum over running kernels of
  min(blocks / numSms, 1))`` / window (concurrent kernels never push it above 100 %);
  blocks are workgroups (:func:`workgroups`: ROCm launches that record work-items)
- Est. Achieved Occupancy = in-window-duration-weighted mean of ``est. achieved occupancy %``
- Kernel time using Tensor Cores = in-window time of tensor-core kernels / kernel time
  (on ROCm "Kernel time using Matrix Cores": MFMA kernels)

A metric that cannot be computed (a kernel in the window without grid, no numSms, no occupancy args, an NVIDIA GPU older
than Volta for tensor cores) is left out, never shown as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..model import Trace
from ..taxonomy import (
    AMD_DEVICE_NAME,
    MATRIX_CORES,
    ROCM_RUNTIME_NAME,
    TENSILE_ISA,
    TENSOR_CORE_MIN_COMPUTE_MAJOR,
    TENSOR_CORES,
    WORK_ITEM_LAUNCH,
    Kind,
)
from .breakdown import name_mask
from .intervals import clipped_durations, covered, sorted_unique, union

DEFINITIONS = {
    "GPU Utilization": "Share of the steps' time in which at least one kernel ran on this "
                       "GPU.",
    "Est. SM Efficiency": "Estimated share of streaming multiprocessors (on AMD: compute "
                          "units) busy over the steps' time: at each instant the running "
                          "kernels' min(blocks / SMs, 1) summed, capped at 1 (concurrent "
                          "kernels never exceed 100 %).",
    "Est. Achieved Occupancy": "Duration-weighted mean of the kernels' estimated achieved "
                               "occupancy (active warps / maximum warps per SM).",
    "Kernel time using Tensor Cores": "Share of kernel time spent in kernels that use Tensor "
                                      "Cores.",
    "Kernel time using Matrix Cores": "Share of kernel time spent in kernels that use the "
                                      "Matrix Cores (MFMA instructions).",
}


def core_label(rocm: bool) -> str:
    """``"Matrix Cores"`` on ROCm (AMD's name for its MFMA units), else ``"Tensor Cores"``."""
    return MATRIX_CORES if rocm else TENSOR_CORES


@dataclass
class GpuSummary:
    id: int
    name: Optional[str]
    memory_bytes: Optional[int]
    compute_capability: Optional[str]
    #: metric name -> percent (unrounded); only the metrics that could be computed
    metrics: dict[str, float] = field(default_factory=dict)
    #: AMD architecture (``gfx90a``) on ROCm when known; the key is left out otherwise
    arch: Optional[str] = None



def is_rocm(trace: Trace) -> bool:
    """AMD GPU trace: HIP runtime calls or an AMD device name."""
    rt = trace.kind == Kind.RUNTIME
    if rt.any() and name_mask(trace, ROCM_RUNTIME_NAME)[rt].any():
        return True
    return any(isinstance(p.get("name"), str) and AMD_DEVICE_NAME.search(p["name"])
               for p in trace.device_properties)


def device_props(trace: Trace, device: int) -> dict:
    """deviceProperties entry of ``device``; a lone (or uniform) list stands for every GPU
    (a rank's trace may list only its own GPU under id 0)."""
    props = trace.device_properties
    for p in props:
        if p.get("id") == device:
            return p
    names = {p.get("name") for p in props}
    return props[0] if props and len(names) == 1 else {}


def capped_load_integral(start: np.ndarray, end: np.ndarray, load: np.ndarray) -> float:
    """Integral over time (ns) of ``min(1, sum of load over intervals active at t)``.

    A sweep over the start (+load) and end (-load) events: sort, cumulative sum, and weigh
    each gap between consecutive events by the capped level. Example: loads 0.5 on
    ``[0, 10)`` and 0.8 on ``[5, 15)`` give 0.5 x 5 + 1 x 5 + 0.8 x 5 = 11.5.
    """
    keep = end > start
    t = np.concatenate((start[keep], end[keep]))
    if not len(t):
        return 0.0
    delta = np.concatenate((load[keep], -load[keep]))
    order = np.argsort(t, kind="stable")
    t = t[order]
    level = np.cumsum(delta[order])[:-1]
    return float((np.clip(level, 0.0, 1.0) * np.diff(t)).sum())


def amd_arch(trace: Trace, props: dict, kernel_rows: np.ndarray) -> Optional[str]:
    """``gfx90a``-style architecture of an AMD GPU: deviceProperties' ``gcnArchName``
    (features after ``:`` dropped), else the ISA tag of its Tensile GEMM kernels."""
    gcn = props.get("gcnArchName")
    if isinstance(gcn, str) and gcn.strip():
        return gcn.split(":")[0].strip()
    for sid in sorted_unique(trace.name[kernel_rows]).tolist():
        m = TENSILE_ISA.search(trace.strings[sid])
        if m:
            return f"gfx{m.group(1)}"
    return None


def workgroups(trace: Trace, rows: np.ndarray, launcher: np.ndarray) -> np.ndarray:
    """Blocks (workgroups) of kernel ``rows``: the product of ``args.grid`` (-1: unknown);
    for a kernel launched by ``hipExtModuleLaunchKernel`` (``launcher``: the runtime call
    row of each row of the trace, -1), whose grid is its work-items, ``ceil(grid / block)``
    (of the products: exact for 1-D launches and whole workgroups). Counted as blocks,
    a ROCm GEMM of 1,400,832 work-items in 256-wide groups (5,472 workgroups) filled an
    MI210's 104 CUs 13,469 times over, and kernels of 32 workgroups looked like full GPUs
    (tracelens_mi210_gpu_only: SM efficiency 76.48 %, 74.61 % so)."""
    blocks = trace.blocks[rows].copy()
    rt = launcher[rows]
    tpb = trace.threads_per_block[rows]
    items = (rt >= 0) & (blocks >= 0) & (tpb > 0)
    items[items] = name_mask(trace, WORK_ITEM_LAUNCH)[rt[items]]
    blocks[items] = -(-blocks[items] // tpb[items])
    return blocks


def gpu_summaries(trace: Trace, window: tuple[int, int], tc_kernel: np.ndarray,
                  launcher: np.ndarray) -> list[GpuSummary]:
    """One summary per GPU id seen on kernels, in id order (``launcher``: the runtime call
    row that launched each row, -1; :attr:`~.links.Links.launcher`)."""
    kernels = np.flatnonzero(trace.kind == Kind.KERNEL)
    lo, hi = window
    length = hi - lo
    rocm = is_rocm(trace)
    out = []
    for dev in sorted_unique(trace.device[kernels]).tolist():
        if dev < 0:
            continue
        rows = kernels[trace.device[kernels] == dev]
        props = device_props(trace, dev)
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        cc = f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None
        mem = props.get("totalGlobalMem")
        name = props.get("name")
        summary = GpuSummary(id=int(dev), name=name if isinstance(name, str) and name.strip() else None,
                             memory_bytes=mem if isinstance(mem, int) else None,
                             compute_capability=cc,
                             arch=amd_arch(trace, props, rows) if rocm else None)
        out.append(summary)
        if length <= 0:
            continue
        s = trace.start[rows]
        e = s + trace.dur[rows]
        ms, me = union(s, e)
        busy = int(covered(ms, me, np.array([lo]), np.array([hi]))[0])
        m = summary.metrics
        m["GPU Utilization"] = 100 * busy / length
        d = clipped_durations(s, e, lo, hi)
        blocks = workgroups(trace, rows, launcher)
        sms = props.get("numSms")
        known = blocks >= 0
        # every kernel running in the window needs its grid: a kernel without one (a HIP
        # graph replay's kernels) would count as 0 SMs busy and fake a low efficiency
        if isinstance(sms, int) and sms > 0 and known.any() and known[d > 0].all():
            busy_sms = capped_load_integral(np.clip(s[known], lo, hi), np.clip(e[known], lo, hi),
                                            np.minimum(blocks[known] / sms, 1.0))
            m["Est. SM Efficiency"] = 100 * busy_sms / length
        occ = trace.occupancy[rows]
        known = ~np.isnan(occ) & (d > 0)
        if known.any():
            m["Est. Achieved Occupancy"] = float((occ[known] * d[known]).sum() / d[known].sum())
        no_tc = not rocm and isinstance(major, int) and major < TENSOR_CORE_MIN_COMPUTE_MAJOR
        if not no_tc and d.sum() > 0:
            m[f"Kernel time using {core_label(rocm)}"] = \
                100 * int(d[tc_kernel[rows]].sum()) / int(d.sum())
    return out
