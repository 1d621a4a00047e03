"""Domain knowledge about PyTorch profiler traces, one table per concept.

Everything that depends on Kineto's category spellings, collective op names, tensor-core
kernel names or the step-breakdown priority lives here, so a new Kineto generation means
editing one file.
"""

from __future__ import annotations

import re
from enum import IntEnum


class Kind(IntEnum):
    """What a duration event is, across every Kineto generation (SPEC §1.2)."""

    HOST_OP = 0      # cpu_op, or any 2020-21 `Operator` event
    USER_RANGE = 1   # record_function range (`user_annotation`)
    PYTHON = 2       # python frame (`python_function`, 2021 `Python`)
    STEP = 3         # ProfilerStep#N on a host category
    RUNTIME = 4      # CUDA/HIP/XPU runtime or driver call
    KERNEL = 5
    MEMCPY = 6
    MEMSET = 7
    GPU_RANGE = 8    # gpu_user_annotation: never device activity
    SYNC = 9         # cuda_sync / xpu_sync: own lane, no breakdown category
    TRACE_SPAN = 10  # the whole-window `Trace` span: never host time
    OTHER = 11       # unknown category: kept for the timeline only


#: Lower-cased ``cat`` -> kind. ProfilerStep is decided by name (see :data:`STEP_NAME`).
CATEGORY_KIND: dict[str, Kind] = {
    "operator": Kind.HOST_OP,
    "cpu_op": Kind.HOST_OP,
    "user_annotation": Kind.USER_RANGE,
    "python": Kind.PYTHON,
    "python_function": Kind.PYTHON,
    "runtime": Kind.RUNTIME,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "memcpy": Kind.MEMCPY,
    "gpu_memcpy": Kind.MEMCPY,
    "memset": Kind.MEMSET,
    "gpu_memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_RANGE,
    "cuda_sync": Kind.SYNC,
    "xpu_sync": Kind.SYNC,
    "trace": Kind.TRACE_SPAN,
}

#: Kinds that live on a host thread and nest by containment.
HOST_KINDS = (Kind.HOST_OP, Kind.USER_RANGE, Kind.PYTHON, Kind.STEP)
#: Kinds that count as device activity (breakdown, utilization, kernel counts).
DEVICE_ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
#: Kinds that run on a device stream lane (timeline), activity or not.
DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_RANGE, Kind.SYNC)
#: Host categories a ProfilerStep may carry (2021 `Operator`, newer `user_annotation`/`cpu_op`).
STEP_KINDS = (Kind.HOST_OP, Kind.USER_RANGE)
#: ``ProfilerStep#12`` -> step "12".
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def category_kind(cat: str) -> Kind:
    """Map a raw ``cat`` value to a :class:`Kind` (unknown categories -> OTHER)."""
    return CATEGORY_KIND.get(cat.lower(), Kind.OTHER) if isinstance(cat, str) else Kind.OTHER


# --- step-time breakdown (SPEC §2.2) -------------------------------------------------------

#: Categories of the step-time breakdown, highest priority first.
BREAKDOWN_ORDER = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader",
                   "CPU Exec", "Other")

#: Categories only a trace with GPU activity shows (a CPU-only overview has none of them).
GPU_BREAKDOWN_CATEGORIES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime")

#: Host ops that load data: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``.
DATALOADER_NAME = re.compile(r"^enumerate\((DataLoader|DataPipe)\)#.*__next__$")

#: Host ops that are collectives: their kernels count as Communication.
COLLECTIVE_OP_NAME = re.compile(
    r"^(nccl:|c10d::|record_param_comms$|gloo:|ProcessGroup(NCCL|Gloo|MPI|UCC)?[:.]|"
    r"ProcessGroup\w*::)"
)
#: Kernels that are communication by their own name.
COMMUNICATION_KERNEL_NAME = re.compile(r"^(nccl|rccl)", re.IGNORECASE)

# --- distributed view (SPEC §4.3) ------------------------------------------------------------

#: Host ranges that *are* a CPU collective (gloo runs each on its own worker thread; the
#: range spans the wait for the peers and the transfer).
HOST_COLLECTIVE_RANGE = re.compile(r"^gloo:")
#: The collective op of a kernel name across NCCL/RCCL versions:
#: ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``, ...
COLLECTIVE_KERNEL_OP = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)",
                                  re.IGNORECASE)
#: Spellings of collective ops (range names, kernel names, ``Collective name`` args) ->
#: the view's op name; keys are lower case without ``_`` (see
#: :func:`stepscope.analysis.collectives.canonical_op`).
COLLECTIVE_OPS = {
    "allreduce": "all_reduce", "allreducecoalesced": "all_reduce",
    "allgather": "all_gather", "allgatherbase": "all_gather",
    "allgatherintotensor": "all_gather", "allgatherintotensorcoalesced": "all_gather",
    "allgathercoalesced": "all_gather",
    "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensor": "reduce_scatter", "reducescattertensorcoalesced": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallbase": "all_to_all", "alltoallsingle": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "barrier": "barrier", "send": "send", "recv": "recv", "sendrecv": "send_recv",
    "recvanysource": "recv",
}
#: Bytes per element of the ``dtype`` arg of ``record_param_comms``.
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2,
               "double": 8, "float64": 8, "long": 8, "int64": 8, "int": 4, "int32": 4,
               "short": 2, "int16": 2, "byte": 1, "uint8": 1, "char": 1, "int8": 1,
               "bool": 1}

# --- operator view (SPEC §2.4) -------------------------------------------------------------

#: Host ops left out of the operator table (besides ProfilerStep and DataLoader __next__).
OPERATOR_EXCLUDED_NAME = re.compile(r"^(ProfilerStep#\d+|Optimizer\.|enumerate\((DataLoader|DataPipe)\)#)")

#: Runtime/driver calls that queue device work (a kernel, graph, memcpy or memset); one
#: with no captured device activity is counted in a data-quality note (SPEC §2.4.8).
LAUNCH_CALL_NAME = re.compile(
    r"^(cu|cuda|hip|hipExt)\w*(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset)")

# --- tensor cores (SPEC §2.3, §2.6) --------------------------------------------------------

class LowercasePattern:
    """A case-insensitive pattern, written in lower case, searched in the lower-cased text:
    3x faster than ``re.IGNORECASE`` on long C++ kernel names (which defeats the regex
    engine's literal prefix search); same answers for ASCII names. ``search`` only."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._re = re.compile(pattern)

    def search(self, text: str) -> re.Match | None:
        return self._re.search(text.lower())


#: Kernel names recognised as using tensor cores (NVIDIA) or matrix cores (AMD MFMA), one
#: list for every generation (tested on kernel names from real traces, tests/test_taxonomy.py).
TENSOR_CORE_KERNEL = LowercasePattern(
    # Volta..Ampere cuBLAS/cuDNN/CUTLASS 2
    r"h884|s884|h1688|s1688|i8816|h16816|s16816|bf16816|hmma|xmma|wmma|imma|gmma|"
    r"gemm_.*tf32|tf32.*gemm|cutlass.*tensorop|tensorop.*cutlass|ampere_(fp16|bf16|h|s16816)|"
    # Hopper/Blackwell: cuBLASLt nvjet, CUTLASS 3 sm90/sm100 kernels
    r"nvjet_|sm(90|100|101|103|120)a?_\w*?(gemm|mma|tensorop|fprop|dgrad|wgrad|conv)|"
    # fp8/fp4 GEMMs (cuBLASLt, CUTLASS, DeepGEMM, Triton mxfp4 matmuls)
    r"^(?=.*(e4m3|e5m2|e2m1|fp8|fp4))(?=.*(gemm|matmul))|"
    # FlashAttention (1-3, also PyTorch's pytorch_flash), FMHA, Triton flash attention,
    # vLLM's Triton attention (tl.dot: MFMA / tensor cores)
    r"flash_fwd|flash_bwd|flash::(flashattn|compute_attn)|fmha|^_?attn_(fwd|bwd)|"
    r"^kernel_unified_attention_[23]d|"
    # AMD matrix cores: MFMA, Tensile GEMMs with an MFMA (MI) tile, CK xdl(ops), MIOpen
    # xdlops implicit GEMMs (gtcx*)
    r"mfma|^cijk_\w*_mt\d+x\d+x\d+\w*_mi\d+x\d+x\d+|xdl|^igemm_\w+_gtcx",
)

#: Host ops eligible for tensor cores (convolutions, matmuls, attention).
TENSOR_CORE_ELIGIBLE_OP = re.compile(
    r"^aten::(_?convolution|conv\w*|cudnn_convolution\w*|mm|addmm|bmm|baddbmm|matmul|linear|"
    r"_scaled_dot_product\w*|scaled_dot_product_attention|_flash_attention\w*|"
    r"_efficient_attention\w*)$|^(CudnnConvolutionBackward|ConvolutionBackward|MmBackward|"
    r"AddmmBackward|BmmBackward|BaddbmmBackward)",
)

# --- steps (SPEC §2.1) -----------------------------------------------------------------------

#: The last step with GPU work is dropped when the step before it launched more than this
#: many times as many device activities (its kernels were probably cut off).
TRAILING_STEP_RATIO = 1.25

# --- vendors (SPEC §2.3) ---------------------------------------------------------------------

#: Runtime calls of AMD's HIP runtime (ROCm traces keep the `cuda_runtime` category).
ROCM_RUNTIME_NAME = re.compile(r"^hip[A-Z]")
#: HIP launch calls that take the grid as a global work size in work-items (OpenCL style),
#: which the trace's ``args.grid`` records: the kernel's workgroups are ``grid / block``.
#: ``hipLaunchKernel`` and ``hipModuleLaunchKernel`` record workgroups, as CUDA does.
WORK_ITEM_LAUNCH = re.compile(r"^hip(Ext|Hcc)ModuleLaunchKernel$")
#: deviceProperties names of AMD GPUs.
AMD_DEVICE_NAME = re.compile(r"\b(AMD|Radeon|Instinct)\b|\bMI\d{3}", re.IGNORECASE)
#: AMD architecture in a Tensile GEMM's name (``Cijk_..._ISA90a_...`` -> ``gfx90a``), for
#: ROCm traces whose deviceProperties carry no ``gcnArchName``.
TENSILE_ISA = re.compile(r"^Cijk_\w*?_ISA([0-9a-f]{3,4})_")

#: What the matrix units are called: NVIDIA "Tensor Cores", AMD (ROCm) "Matrix Cores".
TENSOR_CORES = "Tensor Cores"
MATRIX_CORES = "Matrix Cores"
#: Tensor cores exist from compute capability 7.0 (Volta) on NVIDIA GPUs.
TENSOR_CORE_MIN_COMPUTE_MAJOR = 7

# --- recommendations (SPEC §2.6) ---------------------------------------------------------------

#: Python frames of torch.nn.DataParallel (it should be DistributedDataParallel).
DATA_PARALLEL_FRAME = re.compile(r"^nn\.Module: DataParallel")
#: Autograd functions torch.nn.DataParallel runs every step.
DATA_PARALLEL_OP = re.compile(
    r"^(torch::autograd::)?(Broadcast|Scatter|Gather|ReduceAddCoalesced)(Backward\d*)?$|"
    r"^(autograd::engine::evaluate_function: )?(Broadcast|Scatter|Gather)Backward\d*$"
)

#: Copy direction in a memcpy activity's name: Kineto writes ``Memcpy HtoD (Pageable ->
#: Device)`` on CUDA and ROCm alike (HtoD, DtoH, DtoD, HtoH, PtoP = peer to peer).
MEMCPY_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoA|HtoA|AtoH)\b")

# --- module view (SPEC §4.2) -------------------------------------------------------------------

#: Phases of a step in display order, and the order that charges an instant to one of them
#: (the first active wins; ``Other`` takes the rest).
PHASES = ("DataLoader", "Forward", "Backward", "Optimizer", "Other")
PHASE_PRIORITY = ("DataLoader", "Optimizer", "Backward", "Forward")
#: record_function names that mark a phase, after lower-casing and dropping ``#``, spaces and
#: ``_`` (``"## forward ##"`` and ``"Forward"`` both mark Forward).
PHASE_RANGE_NAMES = {"dataloader": "DataLoader", "forward": "Forward", "backward": "Backward",
                     "optimizer": "Optimizer", "optimizerstep": "Optimizer",
                     "zerograd": "Optimizer"}
#: What surrounds a phase name (``## Forward ##``); inside, ``_`` or a space between words
#: is dropped too (``zero_grad``, ``optimizer step``), a letter split up is not a name.
PHASE_NAME_STRIP = re.compile(r"^[#\s_]+|[#\s_]+$|(?<=[a-z])[\s_](?=[a-z]{3})", re.IGNORECASE)
#: Ranges torch.optim records around step() and zero_grad().
OPTIMIZER_RANGE_NAME = re.compile(r"^Optimizer\.(step|zero_grad)#")
#: Host ops the autograd engine runs for each backward node (2021 traces name the node
#: alone: ``CudnnConvolutionBackward``, ``torch::autograd::AccumulateGrad``).
AUTOGRAD_FUNCTION_NAME = re.compile(
    r"^(autograd::engine::evaluate_function: |torch::autograd::AccumulateGrad$|\w*Backward\d*$)")
#: Python frames torch records per nn.Module call with ``with_modules=True``.
MODULE_FRAME_NAME = re.compile(r"^nn\.Module: ")
