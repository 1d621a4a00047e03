"""Plain-language recommendations with their evidence (SPEC §2.6).

:func:`gather_facts` measures what the rules need; each rule is a small pure function
``Facts -> Item | None``; :func:`stepscope.views.overview.to_html` renders items for the legacy HTML field with
every trace-derived name escaped.

Example: a DataLoader share of 21.0 % gives the item ``{"id": "dataloader", "text": "This run
has high time cost on input data loading. 21.0% of the step time is in DataLoader. ..."}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..model import Trace
from ..taxonomy import (
    DATA_PARALLEL_FRAME,
    DATA_PARALLEL_OP,
    TENSOR_CORE_ELIGIBLE_OP,
    Kind,
)
from ..units import format_bytes
from .breakdown import name_mask, string_hits
from .gpu_metrics import GpuSummary, is_rocm
from .intervals import sorted_unique
from .links import Links
from .memory import MemoryAnalysis
from .tree import HostTree

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
#: a category this large (or the largest of the step) gets its own item
RUNTIME_SHARE = 25.0
CPU_EXEC_SHARE = 25.0
MEMCPY_SHARE = 10.0
OTHER_SHARE = 25.0
#: how many names an item quotes (top runtime calls, top host-self operators)
TOP_NAMES = 3

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
    "runtime_bound": ("https://pytorch.org/docs/stable/notes/cuda.html"
                      "#asynchronous-execution", "CUDA semantics: asynchronous execution"),
    "cpu_bound": ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
                  "Performance Tuning Guide"),
    "memcpy": ("https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",
               "Use pinned memory buffers"),
    "other": ("https://pytorch.org/docs/stable/profiler.html", "torch.profiler"),
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
    #: percent of the step time the advice addresses (the ranking key; 0 = not a time cost)
    share: float = 0.0


@dataclass
class Facts:
    """Measurements the rules read (shares in percent)."""

    dataloader_share: float = 0.0
    #: the DataLoader loads in worker processes already (``_MultiProcessingDataLoaderIter``)
    dataloader_workers: bool = False
    communication_share: float = 0.0
    #: step-time category -> percent of the step time (SPEC §2.2)
    shares: dict[str, float] = field(default_factory=dict)
    #: top runtime calls and top host-self operators: (name, total ns), largest first
    top_runtime: list[tuple[str, int]] = field(default_factory=list)
    #: percent of the step time that is Other while launched device work had not started
    device_wait_share: float = 0.0
    #: of each top runtime call name: (number of calls, longest call ns)
    runtime_calls: dict[str, tuple[int, int]] = field(default_factory=dict)
    top_host_self: list[tuple[str, int]] = field(default_factory=list)
    #: an AMD (ROCm) trace: HIP names, "Matrix Cores", compute units
    rocm: bool = False
    #: the GPU's architecture is known (compute capability or ROCm), not just assumed
    tc_known: bool = False
    #: the lowest compute capability major of the GPUs (0: not known); 7 (Volta) has no TF32
    tc_major: int = 0
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
    if linked.any():  # kernels per launching call (counted, not sorted)
        per_call[linked] = np.bincount(rt[linked])[rt[linked]]
    launch_ns = trace.dur[np.maximum(rt, 0)]
    return linked & (trace.dur[kernels] * np.maximum(per_call, 1) < launch_ns)


def top_names(trace: Trace, rows: np.ndarray, ns: np.ndarray,
              n: int = TOP_NAMES) -> list[tuple[str, int]]:
    """The ``n`` names with the most summed ``ns`` over ``rows``: ``[(name, ns)]``, largest
    first (ties by name). Example: rows named a, b, a with 1, 5, 2 ns -> ``[(b, 5), (a, 3)]``."""
    if not len(rows):
        return []
    # summed per name id (ids are small: counted, not sorted); names in id order
    sums = np.bincount(trace.name[rows], weights=ns).astype(np.int64)
    names = np.flatnonzero(sums > 0)
    pairs = [(trace.strings[int(i)], int(v)) for i, v in zip(names.tolist(), sums[names].tolist())]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))[:n]


def gather_facts(trace: Trace, links: Links, tree: HostTree, tc_kernel: np.ndarray, *,
                 shares: dict[str, float], gpus: list[GpuSummary],
                 memory: MemoryAnalysis | None = None,
                 host_self: tuple[np.ndarray, np.ndarray] | None = None) -> Facts:
    """Measure everything the rules need (vectorised); ``memory``: the span's memory
    analysis (peaks per device); ``host_self``: (trace rows, host self ns) of the operator
    table's rows (for naming the top host-self operators)."""
    f = Facts(dataloader_share=shares.get("DataLoader", 0.0),
              communication_share=shares.get("Communication", 0.0), gpus=gpus,
              shares=dict(shares))
    f.dataloader_workers = bool(string_hits(trace, MULTIPROCESS_LOADER)[trace.name].any())
    rt = np.flatnonzero(trace.kind == Kind.RUNTIME)
    f.top_runtime = top_names(trace, rt, trace.dur[rt])
    for name, _ns in f.top_runtime:
        durs = trace.dur[rt[trace.name[rt] == trace.strings.index(name)]]
        f.runtime_calls[name] = (len(durs), int(durs.max()))
    if host_self is not None:
        f.top_host_self = top_names(trace, *host_self)
    kernels = np.flatnonzero(trace.kind == Kind.KERNEL)
    kdur = trace.dur[kernels]
    ktotal = int(kdur.sum())
    if len(kernels):
        short = shorter_than_launch(trace, links, kernels)
        f.kernels = len(kernels)
        f.kernels_shorter_than_launch = int(short.sum())
        f.short_kernel_time_share = 100 * int(kdur[short].sum()) / ktotal if ktotal else 0.0

        # kernels launched from a tensor-core-eligible op (or one of its callers)
        eligible = tree.within(name_mask(trace, TENSOR_CORE_ELIGIBLE_OP)[tree.rows])
        from_eligible = tree.flag_at_rows(eligible, links.launching_op(kernels))
        if ktotal:
            f.tc_eligible_share = 100 * int(kdur[from_eligible].sum()) / ktotal
            f.tc_used_share = 100 * int(kdur[tc_kernel[kernels]].sum()) / ktotal
    # AMP advice unless the GPUs are known to lack tensor cores (NVIDIA compute capability
    # < 7): gpu_summaries leaves the tensor-core metric out exactly there, so a trace without
    # deviceProperties gets the same advice as one with them
    f.tc_supported = any(m.startswith("Kernel time using ") for g in gpus for m in g.metrics)
    f.rocm = is_rocm(trace)  # (gpu_summaries names Matrix Cores exactly then)
    f.tc_known = f.rocm or any(g.compute_capability for g in gpus)
    majors = [int(g.compute_capability.split(".")[0]) for g in gpus if g.compute_capability]
    f.tc_major = min(majors, default=0)

    if len(sorted_unique(trace.device[kernels])) > 1:
        markers = set()
        for pattern, kinds in ((DATA_PARALLEL_FRAME, (Kind.PYTHON, Kind.USER_RANGE)),
                               (DATA_PARALLEL_OP, (Kind.HOST_OP,))):
            hit = name_mask(trace, pattern, among=trace.mask(*kinds))
            markers.update(trace.strings[i] for i in sorted_unique(trace.name[hit]).tolist())
        f.data_parallel_markers = sorted(markers)

    for d in memory.devices if memory is not None else ():
        if d.capacity > 0:
            f.memory_peaks[d.label] = (d.peak_allocated, d.capacity)
        i = d.peak_index
        alloc, res = int(d.allocated[i]), int(d.reserved[i])
        if res >= 0 and 2 * res > 3 * alloc:
            f.memory_fragmentation[d.label] = (alloc, res)
    return f


def _item(rule: str, text: str, evidence: str, share: float = 0.0) -> Item:
    return Item(id=rule, text=text, evidence=evidence, doc_url=DOCS[rule][0],
                share=round(max(share, 0.0), 2))


def dominant(f: Facts) -> Optional[str]:
    """The largest step-time category (None when no step time was measured)."""
    best = max(f.shares.items(), key=lambda kv: kv[1], default=None)
    return best[0] if best and best[1] > 0 else None


def big(f: Facts, category: str, threshold: float) -> bool:
    """``category`` takes more than ``threshold`` % of the step, or is its largest."""
    share = f.shares.get(category, 0.0)
    return share > threshold or (share > 0 and dominant(f) == category)


def quote(names: list[tuple[str, int]]) -> str:
    """``a (1,234 µs), b (56 µs)``: names with their summed time in whole µs."""
    return ", ".join(f"{n} ({round(ns / 1000):,} µs)" for n, ns in names)


#: step-time categories that exist only when the trace has GPU (device or runtime) activity
DEVICE_CATEGORIES = ("Kernel", "Memcpy", "Memset", "Runtime")

#: categories whose time keeps the GPU idle, each addressed by an item of its own
IDLE_CAUSES = {"runtime_bound": "Runtime", "cpu_bound": "CPU Exec", "dataloader": "DataLoader",
               "other": "Other"}


#: The DataLoader iterator of ``num_workers > 0``.
MULTIPROCESS_LOADER = re.compile(r"_MultiProcessingDataLoaderIter")


def rule_dataloader(f: Facts) -> Optional[Item]:
    if f.dataloader_share <= DATALOADER_SHARE:
        return None
    share = f"{f.dataloader_share:.1f}%"
    advice = ("The DataLoader already loads in worker processes: try more num_workers, "
              "pin_memory=True, a larger prefetch_factor or persistent_workers=True, or "
              "lighter transforms." if f.dataloader_workers else
              "You could try to set num_workers on DataLoader's construction and enable "
              "multi-processes on data loading.")
    return _item("dataloader",
                 f"This run has high time cost on input data loading. {share} of the step "
                 f"time is in DataLoader. {advice}",
                 f"DataLoader: {share} of the average step time", f.dataloader_share)


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
                 f"GPU utilization {ev}, below {LOW_UTILIZATION:.0f}%",
                 100 - min(u for _, u in low))


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
                 f"(torch.compile), use {_graphs(f)}, or increase the batch size.",
                 f"{f.kernels_shorter_than_launch:,} of {f.kernels:,} kernels shorter "
                 f"than their launch; {f.short_kernel_time_share:.1f}% of kernel time",
                 f.shares.get("Runtime", 0.0))


def rule_low_sm_efficiency(f: Facts) -> Optional[Item]:
    low = [(g.id, g.metrics["Est. SM Efficiency"], g.metrics["GPU Utilization"]) for g in f.gpus
           if "Est. SM Efficiency" in g.metrics and "GPU Utilization" in g.metrics
           and g.metrics["Est. SM Efficiency"] < SM_EFFICIENCY_RATIO * g.metrics["GPU Utilization"]]
    if not low:
        return None
    ev = ", ".join(f"GPU{i}: SM efficiency {s:.2f}% vs utilization {u:.2f}%" for i, s, u in low)
    units, unit, blocks = (("compute units", "CUs", "workgroups") if f.rocm else
                           ("streaming multiprocessors", "SMs", "blocks"))
    return _item("low_sm_efficiency",
                 f"Kernels leave many {units} idle ({ev}): many kernels launch fewer {blocks} "
                 f"than the GPU has {unit}. Increase the batch size or fuse small kernels.",
                 ev, f.shares.get("Kernel", 0.0))


def rule_low_occupancy(f: Facts) -> Optional[Item]:
    low = [(g.id, g.metrics["Est. Achieved Occupancy"]) for g in f.gpus
           if g.metrics.get("Est. Achieved Occupancy", 100.0) < LOW_OCCUPANCY]
    if not low:
        return None
    ev = ", ".join(f"GPU{i}: {o:.2f}%" for i, o in low)
    return _item("low_occupancy",
                 f"Estimated achieved occupancy is low ({ev}): kernels keep few warps active "
                 "per SM. Larger batches or fused kernels usually raise it.",
                 f"est. achieved occupancy {ev}, below {LOW_OCCUPANCY:.0f}%",
                 f.shares.get("Kernel", 0.0))


def rule_communication(f: Facts) -> Optional[Item]:
    if f.communication_share <= COMMUNICATION_SHARE:
        return None
    share = f"{f.communication_share:.1f}%"
    return _item("communication",
                 f"{share} of the step time is communication that no computation overlaps. "
                 "Overlap it with computation (DDP bucketing, gradient accumulation with "
                 "no_sync) or reduce what is exchanged.",
                 f"Communication: {share} of the average step time", f.communication_share)


def rule_data_parallel(f: Facts) -> Optional[Item]:
    if not f.data_parallel_markers:
        return None
    names = ", ".join(f.data_parallel_markers[:5])
    return _item("data_parallel",
                 f"This run uses DataParallel on several GPUs ({names}). "
                 "DistributedDataParallel is faster: one process per GPU, no scatter/gather "
                 "through GPU 0 every step.",
                 f"several GPUs and {names}",
                 f.communication_share + f.shares.get("Memcpy", 0.0))


def rule_amp(f: Facts) -> Optional[Item]:
    if not f.tc_supported or f.tc_eligible_share <= TC_ELIGIBLE_SHARE or \
            f.tc_used_share >= TC_USED_SHARE:
        return None
    cores = "Matrix Cores" if f.rocm else "Tensor Cores"
    unknown = "" if f.tc_known else (" (the trace does not say which GPU ran it; this "
                                     "applies to Volta or newer)")
    # TF32 needs compute capability 8.0 (Ampere); a V100 user cannot act on it
    tf32 = ("" if f.rocm or f.tc_major == 7 else " or TF32" if f.tc_major
            else ", or TF32 on Ampere or newer")
    return _item("amp",
                 f"Operators that can use {cores} (convolutions, matrix multiplications, "
                 f"attention) launch {f.tc_eligible_share:.1f}% of the kernel time, but only "
                 f"{f.tc_used_share:.1f}% of the kernel time uses {cores}. Try Automatic "
                 f"Mixed Precision (torch.autocast){tf32}{unknown}.",
                 f"eligible {f.tc_eligible_share:.1f}%, using {cores} "
                 f"{f.tc_used_share:.1f}% of kernel time",
                 f.shares.get("Kernel", 0.0) * f.tc_eligible_share / 100)


def rule_memory(f: Facts) -> Optional[Item]:
    near = [(d, p, t) for d, (p, t) in sorted(f.memory_peaks.items())
            if 100 * p >= MEMORY_NEAR_CAPACITY * t]
    if not near:
        return None
    ev = ", ".join(f"{d}: peak {format_bytes(p)} of {format_bytes(t)}" for d, p, t in near)
    return _item("memory",
                 f"Allocated GPU memory comes close to the device's capacity ({ev}). Reduce "
                 "the batch size, use activation checkpointing or mixed precision to avoid "
                 "out-of-memory errors.", ev)


def rule_fragmentation(f: Facts) -> Optional[Item]:
    if not f.memory_fragmentation:
        return None
    ev = ", ".join(f"{d}: {format_bytes(r)} reserved for {format_bytes(a)} allocated "
                   f"({_times(r, a)}) at the allocated peak"
                   for d, (a, r) in sorted(f.memory_fragmentation.items()))
    return _item("memory_fragmentation",
                 f"The caching allocator reserves much more memory than is allocated ({ev}): "
                 "the free space is fragmented. Try "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.", ev)


def _times(part: int, whole: int) -> str:
    """``part / whole`` as ``1.9x``; ``over 100x`` beyond (9 GB reserved for 100 B
    allocated printed "90000000.0x")."""
    return f"{part / whole:.1f}x" if whole and part < 100 * whole else "over 100x"


def rule_runtime_bound(f: Facts) -> Optional[Item]:
    if not big(f, "Runtime", RUNTIME_SHARE):
        return None
    share = f"{f.shares['Runtime']:.1f}%"
    top = ", ".join(_calls(f, name, ns) for name, ns in f.top_runtime)
    api = "hip" if f.rocm else "cuda"
    once = ""
    if f.top_runtime and (longest := _dominant_call(f, *f.top_runtime[0])):
        name, ns = f.top_runtime[0]
        once = (f" One {name} call takes {round(longest / 1000):,} µs of its "
                f"{round(ns / 1000):,}: most likely a one-time cost (creating the "
                "context, loading the kernels at their first launch, a first allocation) "
                "that later steps do not pay; profile a few more steps "
                "(torch.profiler.schedule(wait, warmup, active)) to see the steady state.")
    return _item("runtime_bound",
                 f"This run is launch/synchronisation bound: {share} of the step time is in "
                 f"CUDA/HIP runtime calls, the most expensive being {top}.{once} Synchronising "
                 f"calls ({api}DeviceSynchronize, {api}StreamSynchronize, a blocking "
                 f"{api}Memcpy, .item(), .cpu(), printing a GPU tensor) make the CPU wait for "
                 "the GPU: remove them from the step loop, copy with non_blocking=True, and "
                 f"launch fewer, larger kernels (torch.compile, {_graphs(f)}).",
                 f"Runtime: {share} of the average step time; top calls: {top}",
                 f.shares["Runtime"])


def _graphs(f: Facts) -> str:
    """How to name graph capture: PyTorch's ``torch.cuda`` graphs are HIP graphs on ROCm."""
    return "HIP graphs (torch.cuda.graphs)" if f.rocm else "CUDA graphs"


def _dominant_call(f: Facts, name: str, ns: int) -> int:
    """The longest call (ns) of the runtime call ``name`` (``ns`` in all) when it takes
    more than half of them, one of several; else 0."""
    calls, longest = f.runtime_calls.get(name, (1, 0))
    return longest if calls > 1 and 2 * longest > ns else 0


def _calls(f: Facts, name: str, ns: int) -> str:
    """``cudaFree (6,012 µs)``; ``cudaFree (6,012 µs in 4 calls, one of 6,000 µs)`` when
    one call takes most of the time."""
    if longest := _dominant_call(f, name, ns):
        calls = f.runtime_calls[name][0]
        return f"{name} ({round(ns / 1000):,} µs in {calls:,} calls, one of {round(longest / 1000):,} µs)"
    return f"{name} ({round(ns / 1000):,} µs)"


def rule_cpu_bound(f: Facts) -> Optional[Item]:
    if not big(f, "CPU Exec", CPU_EXEC_SHARE):
        return None
    share = f"{f.shares['CPU Exec']:.1f}%"
    top = quote(f.top_host_self)
    named = f" The operators with the most host self time are {top}." if top else ""
    # a CPU-only trace has no GPU to keep waiting
    gpu = f.kernels > 0 or any(f.shares.get(c, 0.0) > 0 for c in DEVICE_CATEGORIES)
    waits = " while the GPU waits" if gpu else ""
    return _item("cpu_bound",
                 f"{share} of the step time is CPU execution (host operators, Python)"
                 f"{waits}.{named} Look for Python-side work in the step loop, "
                 "fuse small operations (torch.compile), or move the work off the critical "
                 "path (e.g. into the DataLoader workers).",
                 f"CPU Exec: {share} of the average step time"
                 + (f"; top host-self operators: {top}" if top else ""),
                 f.shares["CPU Exec"])


def rule_memcpy(f: Facts) -> Optional[Item]:
    share = f.shares.get("Memcpy", 0.0) + f.shares.get("Memset", 0.0)
    if not (big(f, "Memcpy", MEMCPY_SHARE) or big(f, "Memset", MEMCPY_SHARE)):
        return None
    return _item("memcpy",
                 f"{share:.1f}% of the step time is memory copies and sets that no kernel "
                 "overlaps. Use pinned memory (DataLoader(pin_memory=True)) with "
                 ".to(device, non_blocking=True), and keep tensors on the GPU between steps.",
                 f"Memcpy + Memset: {share:.1f}% of the average step time", share)


def rule_other(f: Facts) -> Optional[Item]:
    if not big(f, "Other", OTHER_SHARE):
        return None
    share = f"{f.shares['Other']:.1f}%"
    if 2 * f.device_wait_share > f.shares["Other"]:  # mostly waiting for queued GPU work
        wait = f"{f.device_wait_share:.1f}%"
        return _item("other",
                     f"{share} of the step time has no recorded activity; in {wait} of the "
                     "step time the CPU had launched GPU work that had not started yet: the GPU was "
                     "still running work queued earlier, outside the trace (before the "
                     "profiler started), or the host and GPU clocks disagree. The host is not "
                     "the bottleneck here; profile more steps (torch.profiler.schedule(wait, "
                     "warmup, active)) so the queued work is in the trace.",
                     f"Other: {share} of the average step time; {wait} waiting for launched "
                     "GPU work to start", f.shares["Other"])
    return _item("other",
                 f"{share} of the step time has no recorded activity: neither a host "
                 "operator, a runtime call nor GPU work. The process waits on something the "
                 "profiler does not record (I/O, sleep, a lock, another process) or runs "
                 "code outside any operator; record_function ranges around the step's parts "
                 "will show where.",
                 f"Other: {share} of the average step time", f.shares["Other"])


RULES: tuple[Callable[[Facts], Optional[Item]], ...] = (
    rule_dataloader, rule_low_utilization, rule_launch_bound, rule_low_sm_efficiency,
    rule_low_occupancy, rule_communication, rule_data_parallel, rule_amp, rule_memory,
    rule_fragmentation, rule_runtime_bound, rule_cpu_bound, rule_memcpy, rule_other,
)


def recommend(facts: Facts) -> list[Item]:
    """Every rule that fires, ranked by the share of step time it addresses, largest first
    (SPEC §2.6; ties keep rule order). The generic low-utilization item addresses only the
    idle time that no specific item (runtime, CPU, DataLoader, Other) covers, so on a run
    that is 97 % Runtime the runtime item leads."""
    items = [item for item in (rule(facts) for rule in RULES) if item is not None]
    fired = {it.id for it in items}
    for it in items:
        if it.id == "low_utilization":
            covered = sum(facts.shares.get(c, 0.0) for r, c in IDLE_CAUSES.items() if r in fired)
            it.share = round(max(it.share - covered, 0.0), 2)
    return sorted(items, key=lambda it: -it.share)
