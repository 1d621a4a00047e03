"""Plain-language recommendations with their evidence (SPEC §2.6).

:func:`gather_facts` measures what the rules need; each rule is a small pure function
``Facts -> Item | None``; :func:`stepscope.views.overview.to_html` renders items for the legacy HTML field with
every trace-derived name escaped.

Example: a DataLoader share of 21.0 % gives the item ``{"id": "dataloader", "text": "This run
has high time cost on input data loading. 21.0% of the step time is in DataLoader. ..."}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..model import Trace
from ..taxonomy import (
    DATA_PARALLEL_FRAME,
    DATA_PARALLEL_OP,
    TENSOR_CORE_ELIGIBLE_OP,
    TENSOR_CORE_MIN_COMPUTE_MAJOR,
    Kind,
)
from .breakdown import name_mask
from .gpu_metrics import GpuSummary
from .links import Links
from .memory import MemoryAnalysis
from .tree import HostTree, any_ancestor_or_self

#: Thresholds of the rules, in percent unless said otherwise.
DATALOADER_SHARE = 5.0
LOW_UTILIZATION = 50.0
LAUNCH_BOUND_COUNT = 50.0
LAUNCH_BOUND_TIME = 20.0
SM_EFFICIENCY_RATIO = 0.8
LOW_OCCUPANCY = 50.0
COMMUNICATION_SHARE = 10.0
TC_ELIGIBLE_SHARE = 30.0
TC_USED_SHARE = 10.0
MEMORY_NEAR_CAPACITY = 90.0

DOCS = {
    "dataloader": ("https://pytorch.org/docs/stable/data.html"
                   "#single-and-multi-process-data-loading",
                   "Single- and Multi-process Data Loading"),
    "low_utilization": ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
                        "Performance Tuning Guide"),
    "launch_bound": ("https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
                     "CUDA Graphs"),
    "low_sm_efficiency": ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
                          "Performance Tuning Guide"),
    "low_occupancy": ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
                      "Performance Tuning Guide"),
    "communication": ("https://pytorch.org/docs/stable/notes/ddp.html",
                      "Distributed Data Parallel"),
    "data_parallel": ("https://pytorch.org/docs/stable/notes/cuda.html"
                      "#cuda-nn-ddp-instead", "Use nn.parallel.DistributedDataParallel "
                      "instead of multiprocessing or nn.DataParallel"),
    "amp": ("https://pytorch.org/docs/stable/amp.html", "Automatic Mixed Precision"),
    "memory": ("https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
               "CUDA memory management"),
    "memory_fragmentation": ("https://pytorch.org/docs/stable/notes/cuda.html"
                             "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
                             "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"),
}


@dataclass
class Item:
    id: str
    text: str       # plain text; names from the trace are raw here, escaped by the overview view
    evidence: str
    doc_url: str


@dataclass
class Facts:
    """Measurements the rules read (shares in percent)."""

    dataloader_share: float = 0.0
    communication_share: float = 0.0
    gpus: list[GpuSummary] = field(default_factory=list)
    kernels: int = 0
    kernels_shorter_than_launch: int = 0
    short_kernel_time_share: float = 0.0
    data_parallel_markers: list[str] = field(default_factory=list)
    tc_eligible_share: float = 0.0
    tc_used_share: float = 0.0
    tc_supported: bool = False
    #: device label (GPU0) -> (peak allocated bytes, total memory bytes)
    memory_peaks: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: device label -> (allocated, reserved) at the allocated peak, where reserved > 1.5 x
    memory_fragmentation: dict[str, tuple[int, int]] = field(default_factory=dict)


def shorter_than_launch(trace: Trace, links: Links, kernels: np.ndarray) -> np.ndarray:
    """Per kernel row: it ran shorter than its share of the launching call, the call's
    duration divided by the kernels it launched (a graph replay, one ``cudaGraphLaunch`` /
    ``hipGraphLaunch`` running many kernels, costs each kernel only a slice of the call).
    Kernels with no launching call in the trace are never short."""
    rt = links.launcher[kernels]
    linked = rt >= 0
    per_call = np.zeros(len(kernels), dtype=np.int64)
    calls, inv, count = np.unique(rt[linked], return_inverse=True, return_counts=True)
    per_call[linked] = count[inv.reshape(-1)]
    launch_ns = trace.dur[np.maximum(rt, 0)]
    return linked & (trace.dur[kernels] * np.maximum(per_call, 1) < launch_ns)


def gather_facts(trace: Trace, links: Links, tree: HostTree, tc_kernel: np.ndarray, *,
                 shares: dict[str, float], gpus: list[GpuSummary],
                 memory: MemoryAnalysis | None = None) -> Facts:
    """Measure everything the rules need (vectorised); ``memory``: the span's memory
    analysis (peaks per device)."""
    f = Facts(dataloader_share=shares.get("DataLoader", 0.0),
              communication_share=shares.get("Communication", 0.0), gpus=gpus)
    kernels = np.flatnonzero(trace.kind == Kind.KERNEL)
    kdur = trace.dur[kernels]
    ktotal = int(kdur.sum())
    if len(kernels):
        short = shorter_than_launch(trace, links, kernels)
        f.kernels = len(kernels)
        f.kernels_shorter_than_launch = int(short.sum())
        f.short_kernel_time_share = 100 * int(kdur[short].sum()) / ktotal if ktotal else 0.0

        # kernels launched from a tensor-core-eligible op (or one of its callers)
        eligible = any_ancestor_or_self(tree.parent,
                                        name_mask(trace, TENSOR_CORE_ELIGIBLE_OP)[tree.rows])
        from_eligible = tree.flag_at_rows(eligible, links.launching_op(kernels))
        if ktotal:
            f.tc_eligible_share = 100 * int(kdur[from_eligible].sum()) / ktotal
            f.tc_used_share = 100 * int(kdur[tc_kernel[kernels]].sum()) / ktotal
    # AMP advice only where tensor cores are known to exist (NVIDIA, compute capability >= 7)
    f.tc_supported = any("Kernel time using Tensor Cores" in g.metrics and g.compute_capability
                         and int(g.compute_capability.split(".")[0]) >= TENSOR_CORE_MIN_COMPUTE_MAJOR
                         for g in gpus)

    if len(np.unique(trace.device[kernels])) > 1:
        markers = set()
        for pattern, kinds in ((DATA_PARALLEL_FRAME, (Kind.PYTHON, Kind.USER_RANGE)),
                               (DATA_PARALLEL_OP, (Kind.HOST_OP,))):
            hit = name_mask(trace, pattern) & trace.mask(*kinds)
            markers.update(trace.strings[i] for i in np.unique(trace.name[hit]).tolist())
        f.data_parallel_markers = sorted(markers)

    for d in memory.devices if memory is not None else ():
        if d.capacity > 0:
            f.memory_peaks[d.label] = (d.peak_allocated, d.capacity)
        i = d.peak_index
        alloc, res = int(d.allocated[i]), int(d.reserved[i])
        if res >= 0 and 2 * res > 3 * alloc:
            f.memory_fragmentation[d.label] = (alloc, res)
    return f


def _item(rule: str, text: str, evidence: str) -> Item:
    return Item(id=rule, text=text, evidence=evidence, doc_url=DOCS[rule][0])


def rule_dataloader(f: Facts) -> Optional[Item]:
    if f.dataloader_share <= DATALOADER_SHARE:
        return None
    share = f"{f.dataloader_share:.1f}%"
    return _item("dataloader",
                 f"This run has high time cost on input data loading. {share} of the step "
                 "time is in DataLoader. You could try to set num_workers on DataLoader's "
                 "construction and enable multi-processes on data loading.",
                 f"DataLoader: {share} of the average step time")


def rule_low_utilization(f: Facts) -> Optional[Item]:
    low = [(g.id, g.metrics["GPU Utilization"]) for g in f.gpus
           if g.metrics.get("GPU Utilization", 100.0) < LOW_UTILIZATION]
    if not low:
        return None
    ev = ", ".join(f"GPU{i}: {u:.2f}%" for i, u in low)
    return _item("low_utilization",
                 f"GPU utilization is low ({ev}): the GPU is idle for much of each step. Look "
                 "at the steps' breakdown for where the time goes (data loading, CPU work, "
                 "synchronisation) and consider a larger batch size.",
                 f"GPU utilization {ev}, below {LOW_UTILIZATION:.0f}%")


def rule_launch_bound(f: Facts) -> Optional[Item]:
    if not f.kernels:
        return None
    count_share = 100 * f.kernels_shorter_than_launch / f.kernels
    if count_share <= LAUNCH_BOUND_COUNT or f.short_kernel_time_share <= LAUNCH_BOUND_TIME:
        return None
    return _item("launch_bound",
                 f"This run is kernel-launch bound: {count_share:.1f}% of the kernels run "
                 "shorter than the CPU call that launched them, and they take "
                 f"{f.short_kernel_time_share:.1f}% of the kernel time. Fuse small operations "
                 "(torch.compile), use CUDA graphs, or increase the batch size.",
                 f"{f.kernels_shorter_than_launch:,} of {f.kernels:,} kernels shorter "
                 f"than their launch; {f.short_kernel_time_share:.1f}% of kernel time")


def rule_low_sm_efficiency(f: Facts) -> Optional[Item]:
    low = [(g.id, g.metrics["Est. SM Efficiency"], g.metrics["GPU Utilization"]) for g in f.gpus
           if "Est. SM Efficiency" in g.metrics and "GPU Utilization" in g.metrics
           and g.metrics["Est. SM Efficiency"] < SM_EFFICIENCY_RATIO * g.metrics["GPU Utilization"]]
    if not low:
        return None
    ev = ", ".join(f"GPU{i}: SM efficiency {s:.2f}% vs utilization {u:.2f}%" for i, s, u in low)
    return _item("low_sm_efficiency",
                 f"Kernels leave many streaming multiprocessors idle ({ev}): many kernels "
                 "launch fewer blocks than the GPU has SMs. Increase the batch size or fuse "
                 "small kernels.", ev)


def rule_low_occupancy(f: Facts) -> Optional[Item]:
    low = [(g.id, g.metrics["Est. Achieved Occupancy"]) for g in f.gpus
           if g.metrics.get("Est. Achieved Occupancy", 100.0) < LOW_OCCUPANCY]
    if not low:
        return None
    ev = ", ".join(f"GPU{i}: {o:.2f}%" for i, o in low)
    return _item("low_occupancy",
                 f"Estimated achieved occupancy is low ({ev}): kernels keep few warps active "
                 "per SM. Larger batches or fused kernels usually raise it.",
                 f"est. achieved occupancy {ev}, below {LOW_OCCUPANCY:.0f}%")


def rule_communication(f: Facts) -> Optional[Item]:
    if f.communication_share <= COMMUNICATION_SHARE:
        return None
    share = f"{f.communication_share:.1f}%"
    return _item("communication",
                 f"{share} of the step time is communication that no computation overlaps. "
                 "Overlap it with computation (DDP bucketing, gradient accumulation with "
                 "no_sync) or reduce what is exchanged.",
                 f"Communication: {share} of the average step time")


def rule_data_parallel(f: Facts) -> Optional[Item]:
    if not f.data_parallel_markers:
        return None
    names = ", ".join(f.data_parallel_markers[:5])
    return _item("data_parallel",
                 f"This run uses DataParallel on several GPUs ({names}). "
                 "DistributedDataParallel is faster: one process per GPU, no scatter/gather "
                 "through GPU 0 every step.",
                 f"several GPUs and {names}")


def rule_amp(f: Facts) -> Optional[Item]:
    if not f.tc_supported or f.tc_eligible_share <= TC_ELIGIBLE_SHARE or \
            f.tc_used_share >= TC_USED_SHARE:
        return None
    return _item("amp",
                 f"Operators that can use Tensor Cores (convolutions, matrix multiplications, "
                 f"attention) launch {f.tc_eligible_share:.1f}% of the kernel time, but only "
                 f"{f.tc_used_share:.1f}% of the kernel time uses Tensor Cores. Try Automatic "
                 "Mixed Precision (torch.autocast) or TF32.",
                 f"eligible {f.tc_eligible_share:.1f}%, using Tensor Cores "
                 f"{f.tc_used_share:.1f}% of kernel time")


def rule_memory(f: Facts) -> Optional[Item]:
    near = [(d, p, t) for d, (p, t) in sorted(f.memory_peaks.items())
            if 100 * p >= MEMORY_NEAR_CAPACITY * t]
    if not near:
        return None
    ev = ", ".join(f"{d}: peak {p / 2**30:.2f} GiB of {t / 2**30:.2f} GiB" for d, p, t in near)
    return _item("memory",
                 f"Allocated GPU memory comes close to the device's capacity ({ev}). Reduce "
                 "the batch size, use activation checkpointing or mixed precision to avoid "
                 "out-of-memory errors.", ev)


def rule_fragmentation(f: Facts) -> Optional[Item]:
    if not f.memory_fragmentation:
        return None
    ev = ", ".join(f"{d}: {r / 2**30:.2f} GiB reserved for {a / 2**30:.2f} GiB allocated "
                   f"({r / max(a, 1):.1f}x) at the allocated peak"
                   for d, (a, r) in sorted(f.memory_fragmentation.items()))
    return _item("memory_fragmentation",
                 f"The caching allocator reserves much more memory than is allocated ({ev}): "
                 "the free space is fragmented. Try "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.", ev)


RULES: tuple[Callable[[Facts], Optional[Item]], ...] = (
    rule_dataloader, rule_low_utilization, rule_launch_bound, rule_low_sm_efficiency,
    rule_low_occupancy, rule_communication, rule_data_parallel, rule_amp, rule_memory,
    rule_fragmentation,
)


def recommend(facts: Facts) -> list[Item]:
    """Every rule that fires, in rule order."""
    return [item for item in (rule(facts) for rule in RULES) if item is not None]
