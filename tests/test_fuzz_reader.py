"""Property-based fuzzing of the reader (issue 7, SPEC §1.4), bounded for CI.

Two generators: random event lists (plausible keys, implausible values) encoded as a trace,
and random byte-level mutations (flips, inserts, deletes, cuts, gzip) of a small real trace.
Properties: :func:`read_trace` raises nothing but :class:`TraceError`; a trace that comes back
passes ``trace.check()``; for event lists, the analyses and every payload are built without
error (a crash there would be a 500 in the app).

Deterministic by default (``derandomize``); ``STEPSCOPE_FUZZ_EXAMPLES=N`` runs N random
examples per property instead, for a longer local hunt.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepscope.errors import BadParameter, NotFound, TraceError
from stepscope.read.reader import read_trace

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto_resnet50" / \
    "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"
_LONG = int(os.environ.get("STEPSCOPE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_LONG or 200, deadline=None, derandomize=not _LONG, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CATS = ["cpu_op", "Operator", "user_annotation", "python_function", "cuda_runtime", "Runtime",
        "kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "gpu_user_annotation",
        "cuda_sync", "Trace", "cpu_instant_event", "ac2g", "cpu_to_cuda", "weird", ""]
NAMES = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x", "aten::mm", "aten::conv2d",
         "cudaLaunchKernel", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
         "nccl:all_reduce", "ncclKernel_AllReduce", "volta_h884gemm", "[memory]",
         "Optimizer.step#SGD.step", "<img src=x onerror=alert(1)>", "", "\u2603\x00"]
ints = st.one_of(st.integers(-5, 10**6), st.integers(-(2**70), 2**70),
                 st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), 2**64]))
numbers = st.one_of(ints, st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([1.5e15, 1712195495519689.047, 1e300, -0.0, 0.001]))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)
weird = st.one_of(json_values, st.text(max_size=8))
args = st.fixed_dictionaries({}, optional={
    "correlation": st.one_of(st.integers(0, 6), weird),
    "External id": st.one_of(st.integers(0, 6), weird),
    "external id": st.one_of(st.integers(0, 6), weird),
    "device": st.one_of(st.integers(-1, 3), weird), "stream": st.one_of(st.integers(0, 9), weird),
    "grid": st.one_of(st.lists(ints, min_size=3, max_size=3), weird),
    "block": st.one_of(st.lists(ints, min_size=3, max_size=3), weird),
    "est. achieved occupancy %": weird, "blocks per SM": weird,
    "Input Dims": weird, "Input dims": st.lists(st.lists(st.integers(0, 64), max_size=4), max_size=3),
    "Call stack": st.one_of(st.text(max_size=30), weird),
    "Device Type": weird, "Device Id": weird, "Bytes": weird, "Total Allocated": weird,
    "Total Reserved": weird,
})
times = st.one_of(st.integers(0, 2000), numbers, st.text(max_size=6), st.none())
events = st.fixed_dictionaries({}, optional={
    "ph": st.one_of(st.sampled_from(["X", "X", "X", "i", "M", "s", "f", "B", "E"]), weird),
    "cat": st.one_of(st.sampled_from(CATS), weird), "name": st.one_of(st.sampled_from(NAMES), weird),
    "pid": st.one_of(st.integers(0, 3), st.sampled_from(["CPU functions", "CUDA functions", "0"]), weird),
    "tid": st.one_of(st.integers(0, 3), st.sampled_from(["stream 7", "t"]), weird),
    "ts": times, "dur": times, "args": st.one_of(args, weird),
    "id": st.one_of(st.integers(0, 6), weird),
})
tops = st.fixed_dictionaries({}, optional={
    "schemaVersion": weird, "deviceProperties": st.one_of(st.lists(st.dictionaries(
        st.sampled_from(["id", "name", "totalGlobalMem", "numSms", "computeMajor"]), weird)), weird),
    "distributedInfo": weird, "baseTimeNanoseconds": st.one_of(ints, weird),
    "displayTimeUnit": weird, "traceName": weird,
})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _read(path: Path):
    """read_trace, allowing only TraceError; returns the trace or None."""
    try:
        trace = read_trace(str(path))
    except TraceError as e:
        assert e.status == 422 and e.error and e.detail
        assert e.file == path.name
        return None
    trace.check()
    return trace


def _encode(top: dict, evs: list, as_list: bool, pretty: bool) -> bytes:
    doc = evs if as_list else {**top, "traceEvents": evs}
    # json (not orjson): ints beyond 64 bits, NaN/Infinity tokens as old Kineto wrote them
    return json.dumps(doc, indent=1 if pretty else None, allow_nan=True).encode()


@FUZZ
@given(top=tops, evs=st.lists(events, max_size=25), as_list=st.booleans(), pretty=st.booleans(),
       gz=st.booleans())
def test_random_event_lists_read_and_analyse(workdir, top, evs, as_list, pretty, gz):
    from test_invariants import assert_invariants

    from stepscope.views import ViewSet, build_views
    from stepscope.web.app import json_response

    data = _encode(top, evs, as_list, pretty)
    path = workdir / ("events.pt.trace.json" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    trace = _read(path)
    if trace is None:
        return
    views = build_views(trace)
    a = views.analysis  # operator invariants (SPEC §2.7): self times >= 0, device time kept
    a.tree.check()
    a.nodes.check()
    a.accounts.check()
    assert_invariants(views)  # percentages in [0, 100], categories sum to each step (§2.7)
    for route in ViewSet.ROUTES:
        params = {"op_name": "aten::mm"} if route == "operation/stack" else {"id": "0"}
        try:
            payload = views.get(route, params)
        except (NotFound, BadParameter):  # documented answers (404, 400), not crashes
            continue
        json_response(payload)  # serialisable as the app serialises it


def _small_trace() -> bytes:
    with gzip.open(SOURCE, "rb") as f:
        doc = orjson.loads(f.read())
    doc["traceEvents"] = doc["traceEvents"][:60]
    return json.dumps(doc, indent=1).encode()


SMALL = _small_trace() if SOURCE.is_file() else b'{"traceEvents": []}'

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 10**6),
              st.sampled_from([b"N/A", b"NaN", b"\xff\xfe", b"\x00", b"\xef\xbb\xbf", b"},{",
                               b"]", b"}", b'"', b"\\", b"\\ud800", b"[" * 50, b"\n"])),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 200)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("repeat"), st.integers(0, 10**6), st.integers(1, 400)),
)


def _mutate(data: bytes, ops: list) -> bytes:
    buf = bytearray(data)
    for op, pos, arg in ops:
        at = pos % (len(buf) + 1)
        if op == "flip" and at < len(buf):
            buf[at] ^= arg
        elif op == "insert":
            buf[at:at] = arg
        elif op == "delete":
            del buf[at: at + arg]
        elif op == "cut":
            del buf[at:]
        elif op == "repeat":
            buf[at:at] = buf[at: at + arg]
    return bytes(buf)


@FUZZ
@given(ops=st.lists(mutation, min_size=1, max_size=6),
       wrap=st.sampled_from(["plain", "gzip", "gzip-cut", "gzip-flip", "gzip2"]),
       where=st.integers(0, 10**6))
def test_mutated_bytes_never_raise_anything_but_trace_error(workdir, ops, wrap, where):
    data = _mutate(SMALL, ops)
    if wrap != "plain":
        data = gzip.compress(data, 6, mtime=0)
        if wrap == "gzip-cut":
            data = data[: where % (len(data) + 1)]
        elif wrap == "gzip-flip":
            b = bytearray(data)
            b[where % len(b)] ^= 0x55
            data = bytes(b)
        elif wrap == "gzip2":
            data = gzip.compress(data, 1, mtime=0)
    path = workdir / ("mutated.pt.trace.json" + (".gz" if wrap != "plain" else ""))
    path.write_bytes(data)
    _read(path)


@FUZZ
@given(raw=st.binary(max_size=300), gz=st.booleans())
def test_arbitrary_bytes(workdir, raw, gz):
    path = workdir / "bytes.pt.trace.json"
    path.write_bytes(zlib.compress(raw) if gz else raw)
    _read(path)
