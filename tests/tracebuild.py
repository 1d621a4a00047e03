"""Build tiny :class:`~stepscope.model.Trace` objects by hand, for unit tests.

Events are written the way Kineto writes them (``cat``, ``name``, ``ts``/``dur`` in µs,
``pid``/``tid``, ``args``) and turned straight into the model's columns, without the reader,
so an analysis test depends only on the model. Shortcuts build the common events::

    t = build([
        step(1, 0, 100),
        op("aten::mm", 10, 50, ext=7),
        runtime("cudaLaunchKernel", 20, 5, corr=1, ext=7),
        kernel("volta_sgemm", 30, 40, corr=1),
    ], device_properties=[{"id": 0, "numSms": 80}])

Times may be ints or decimal strings/floats of µs (``"1.5"`` is 1500 ns).
"""

from __future__ import annotations

import functools
import os
from decimal import Decimal
from typing import Any, Optional

import numpy as np

from stepscope.model import EVENT_COLUMNS, MEMORY_COLUMNS, Trace
from stepscope.taxonomy import HOST_KINDS, STEP_KINDS, STEP_NAME, Kind, category_kind

HOST_PID = 100


def ns(us: Any) -> int:
    """µs (int, float or decimal text) -> exact int ns."""
    return int((Decimal(str(us)) * 1000).to_integral_value())


def ev(cat: str, name: str, ts: Any, dur: Any, *, pid: Any = HOST_PID, tid: Any = 1,
       args: Optional[dict] = None) -> dict:
    """A Kineto-style duration event; ``args`` keys as in the trace (``External id`` ...)."""
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": dict(args or {})}


def op(name: str, ts: Any, dur: Any, *, tid: Any = 1, ext: Optional[int] = None,
       cat: str = "cpu_op", shape: Optional[list] = None, stack: Optional[str] = None) -> dict:
    args: dict = {}
    if ext is not None:
        args["External id"] = ext
    if shape is not None:
        args["Input Dims"] = shape
    if stack is not None:
        args["Call stack"] = stack
    return ev(cat, name, ts, dur, tid=tid, args=args)


def user(name: str, ts: Any, dur: Any, *, tid: Any = 1, ext: Optional[int] = None) -> dict:
    """A record_function range (``user_annotation``)."""
    return op(name, ts, dur, tid=tid, ext=ext, cat="user_annotation")


def py(name: str, ts: Any, dur: Any, *, tid: Any = 1) -> dict:
    """A python frame (``python_function``)."""
    return op(name, ts, dur, tid=tid, cat="python_function")


def step(n: int, ts: Any, dur: Any, *, tid: Any = 1, cat: str = "user_annotation") -> dict:
    return op(f"ProfilerStep#{n}", ts, dur, tid=tid, cat=cat)


def runtime(name: str, ts: Any, dur: Any, *, corr: Optional[int] = None,
            ext: Optional[int] = None, tid: Any = 1) -> dict:
    args = {k: v for k, v in (("correlation", corr), ("External id", ext)) if v is not None}
    return ev("cuda_runtime", name, ts, dur, tid=tid, args=args)


def device(cat: str, name: str, ts: Any, dur: Any, *, corr: Optional[int] = None,
           device_id: int = 0, stream: int = 7, **args: Any) -> dict:
    args = {"device": device_id, "stream": stream, **args}
    if corr is not None:
        args["correlation"] = corr
    return ev(cat, name, ts, dur, pid=device_id, tid=stream, args=args)


def kernel(name: str, ts: Any, dur: Any, *, corr: Optional[int] = None, device_id: int = 0,
           stream: int = 7, grid: Optional[list] = None, occupancy: Optional[float] = None,
           blocks_per_sm: Optional[float] = None) -> dict:
    args: dict = {}
    if grid is not None:
        args["grid"] = grid
    if occupancy is not None:
        args["est. achieved occupancy %"] = occupancy
    if blocks_per_sm is not None:
        args["blocks per SM"] = blocks_per_sm
    return device("kernel", name, ts, dur, corr=corr, device_id=device_id, stream=stream, **args)


def memcpy(ts: Any, dur: Any, *, corr: Optional[int] = None, device_id: int = 0) -> dict:
    return device("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", ts, dur, corr=corr,
                  device_id=device_id)


def memset(ts: Any, dur: Any, *, corr: Optional[int] = None, device_id: int = 0) -> dict:
    return device("gpu_memset", "Memset (Device)", ts, dur, corr=corr, device_id=device_id)


def launch(op_name: str, ts: Any, dur: Any, kernel_name: str, k_ts: Any, k_dur: Any, *,
           corr: int, ext: int, tid: Any = 1, rt_dur: Any = 1, **kernel_args: Any) -> list[dict]:
    """An op ``[ts, ts+dur)`` whose ``cudaLaunchKernel`` (at ``ts``, ``rt_dur`` long) runs
    ``kernel_name`` at ``[k_ts, k_ts+k_dur)``."""
    return [op(op_name, ts, dur, tid=tid, ext=ext),
            runtime("cudaLaunchKernel", ts, rt_dur, corr=corr, ext=ext, tid=tid),
            kernel(kernel_name, k_ts, k_dur, corr=corr, **kernel_args)]


def memory(ts: Any, total_allocated: int, *, device_id: int = 0, device_type: int = 1,
           nbytes: int = 0, addr: Optional[int] = None, reserved: Optional[int] = None,
           tid: Any = 1) -> dict:
    """A ``[memory]`` instant event (``reserved`` defaults to ``total_allocated``)."""
    args = {"Device Type": device_type, "Device Id": device_id, "Bytes": nbytes,
            "Total Allocated": total_allocated,
            "Total Reserved": total_allocated if reserved is None else reserved}
    if addr is not None:
        args["Addr"] = addr
    return {"ph": "i", "name": "[memory]", "ts": ts, "pid": HOST_PID, "tid": tid, "args": args}


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _lane(v: Any) -> int:
    if isinstance(v, int):
        return v
    digits = "".join(c for c in str(v) if c.isdigit())
    return int(digits) if digits else -1


def build(events: list[dict], *, device_properties: Optional[list[dict]] = None,
          distributed_info: Optional[dict] = None, metadata: Optional[dict] = None,
          path: str = "built.pt.trace.json") -> Trace:
    """A :class:`Trace` from Kineto-style event dicts (duration events and ``[memory]``)."""
    strings: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    shapes: dict[str, int] = {}
    stacks: dict[str, int] = {}
    comms: dict[tuple, int] = {}
    cols: dict[str, list] = {k: [] for k in EVENT_COLUMNS}
    mem: dict[str, list] = {k: [] for k in MEMORY_COLUMNS}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "i" and e.get("name") == "[memory]":
            mem["ts"].append(ns(e["ts"]))
            mem["device_type"].append(_int(args.get("Device Type")))
            mem["device_id"].append(_int(args.get("Device Id")))
            nbytes = args.get("Bytes")
            mem["bytes"].append(nbytes if type(nbytes) is int else 0)
            mem["total_allocated"].append(_int(args.get("Total Allocated")))
            mem["total_reserved"].append(_int(args.get("Total Reserved")))
            mem["addr"].append(_int(args.get("Addr")))
            mem["thread"].append(threads.setdefault((e["pid"], e["tid"]), len(threads)))
            continue
        kind = category_kind(e["cat"])
        if kind in STEP_KINDS and STEP_NAME.match(e["name"]):
            kind = Kind.STEP
        cols["kind"].append(int(kind))
        cols["cat"].append(strings.setdefault(e["cat"], len(strings)))
        cols["name"].append(strings.setdefault(e["name"], len(strings)))
        cols["thread"].append(threads.setdefault((e["pid"], e["tid"]), len(threads)))
        cols["start"].append(ns(e["ts"]))
        cols["dur"].append(ns(e["dur"]))
        cols["correlation"].append(_int(args.get("correlation")))
        ext = args.get("External id", args.get("external id"))
        cols["external_id"].append(_int(ext))
        is_dev = kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_RANGE, Kind.SYNC)
        cols["device"].append(_int(args.get("device", _lane(e["pid"]))) if is_dev else -1)
        cols["stream"].append(_int(args.get("stream", _lane(e["tid"]))) if is_dev else -1)
        grid, block = args.get("grid"), args.get("block")
        cols["blocks"].append(int(np.prod(grid)) if kind == Kind.KERNEL and grid else -1)
        cols["threads_per_block"].append(int(np.prod(block)) if kind == Kind.KERNEL and block
                                         else -1)
        cols["blocks_per_sm"].append(float(args.get("blocks per SM", np.nan))
                                     if kind == Kind.KERNEL else np.nan)
        cols["occupancy"].append(float(args.get("est. achieved occupancy %", np.nan))
                                 if kind == Kind.KERNEL else np.nan)
        host = kind in HOST_KINDS
        dims = args.get("Input Dims", args.get("Input dims"))
        cols["shape"].append(shapes.setdefault(str(dims), len(shapes))
                             if host and dims is not None else -1)
        cs = args.get("Call stack")
        cols["stack"].append(stacks.setdefault(cs, len(stacks)) if host and cs else -1)
        comm = (args.get("Collective name"), args.get("In msg nelems", -1),
                args.get("Out msg nelems", -1), args.get("dtype"), args.get("Process Group Name"))
        cols["comm"].append(comms.setdefault(comm, len(comms))
                            if host and (comm[0] is not None or comm[1] != -1) else -1)
    arrays = {k: np.array(v, dtype=EVENT_COLUMNS[k][0]) for k, v in cols.items()}
    origin = int(arrays["start"].min()) if len(arrays["start"]) else 0
    arrays["start"] -= origin
    memory_cols = {k: np.array(v, dtype=MEMORY_COLUMNS[k][0]) for k, v in mem.items()}
    memory_cols["ts"] -= origin
    trace = Trace(path=path, origin_ns=origin, events=arrays, strings=list(strings),
                  threads=list(threads), shapes=list(shapes), stacks=list(stacks),
                  comms=list(comms), memory=memory_cols, device_properties=list(device_properties or []),
                  distributed_info=dict(distributed_info or {}), metadata=dict(metadata or {}))
    trace.check()
    return trace


# --- real traces shared between tests --------------------------------------------------------

#: ``../shared/traces`` next to the project root (SPEC: tests use them from there).
SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces")
#: The one reason every test that reads the real traces skips without ``../shared``.
NO_SHARED = (f"needs the real traces in {os.path.normpath(SHARED)} (the project's ../shared "
             "folder, present in CI; absent in a plain clone)")
SHARED_TRACES = {
    "kineto_resnet50_w0": "kineto_resnet50/resnet50_num_workers_0/worker0.pt.trace.json.gz",
    "kineto_resnet50_w4": "kineto_resnet50/resnet50_num_workers_4/worker0.pt.trace.json.gz",
    "hta_v100_resnet_ns_2024": "hta_v100_resnet_ns_2024/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta_mi250_rocm62": "hta_mi250_rocm62/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta_a100_alexnet_nosteps":
        "hta_a100_alexnet_nosteps/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta_cpu_only_gloo": "hta_cpu_only_gloo/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta_v100_profile_memory": "hta_v100_profile_memory/df_index_resolver.json.gz",
    "param_v100_dlrm_rank0": "param_v100_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json",
    "param_v100_dlrm_rank3": "param_v100_dlrm_8rank/worker3_step_12.1694128201557.pt.trace.json",
    "tracelens_h100_qwen_chat": "tracelens_h100_qwen_chat/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens_mi210_gpu_only": "tracelens_mi210_gpu_only/gpu_only_trace.json.gz",
    "tracelens_mi300x_compile_triton": "tracelens_mi300x_compile_triton/trace.json.gz",
    "tracelens_mi300x_vllm_graph_replay":
        "tracelens_mi300x_vllm_graph_replay/graph_execution.json.gz",
}


def have_shared() -> bool:
    return os.path.isdir(SHARED)


@functools.cache
def shared_views(key: str):
    """``build_views`` of a shared real trace (read once per test session)."""
    from stepscope.read.reader import read_trace
    from stepscope.views import build_views

    return build_views(read_trace(os.path.join(SHARED, SHARED_TRACES[key])))
