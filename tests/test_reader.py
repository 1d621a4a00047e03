"""Reader tests: every shared trace, exact timestamps, damage repair (SPEC §1.2-1.4)."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from stepscope.columns import us_to_ns
from stepscope.errors import TraceError
from stepscope.reader import read_trace
from stepscope.taxonomy import Kind

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ALL_FILES = sorted(p for p in TRACES.rglob("*.json*") if not p.name.endswith(".jsonl"))
NS_2024 = next((TRACES / "hta_v100_resnet_ns_2024").glob("*.json.gz"))
RESNET0 = TRACES / "kineto_resnet50" / "resnet50_num_workers_0" / "worker0.pt.trace.json.gz"


def _load_json(path: Path, **kw):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return json.loads(f.read(), **kw)


def _events(doc):
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.parent.name + "/" + p.name[:20])
def test_counts_per_category_equal_plain_json(path):
    trace = read_trace(str(path))
    trace.check()
    events = _events(_load_json(path))
    want = Counter(e.get("cat", "") for e in events if e.get("ph") == "X")
    got = Counter(trace.strings[c] for c in trace.events["cat"])
    assert got == want
    steps = sum(1 for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")
                and e.get("cat") in ("Operator", "cpu_op", "user_annotation"))
    assert trace.kind_counts().get("STEP", 0) == steps
    mem = sum(1 for e in events if e.get("ph") == "i" and e.get("name") == "[memory]")
    assert len(trace.memory["ts"]) == mem
    assert trace.phase_counts == dict(Counter(e.get("ph") for e in events))


def test_kind_mapping_both_generations():
    old = read_trace(str(RESNET0)).kind_counts()
    assert old == {"HOST_OP": 33378, "STEP": 6, "RUNTIME": 10920, "KERNEL": 9564,
                   "MEMCPY": 12, "MEMSET": 439, "TRACE_SPAN": 1}
    new = read_trace(str(NS_2024)).kind_counts()
    assert new["GPU_RANGE"] == 15 and new["STEP"] == 5 and new["KERNEL"] == 4350


def test_ns_fraction_timestamps_are_exact():
    """Every ts and dur of the 2024 trace equals a Decimal parse of its text, to the ns."""
    trace = read_trace(str(NS_2024))
    xs = [e for e in _events(_load_json(NS_2024, parse_float=Decimal)) if e.get("ph") == "X"]
    ts = [int(Decimal(e["ts"]) * 1000) for e in xs]
    dur = [int(Decimal(e["dur"]) * 1000) for e in xs]
    assert any(Decimal(e["ts"]) % 1 for e in xs), "the trace really has ns fractions"
    origin = min(ts)
    assert trace.origin_ns == origin
    assert trace.events["start"].tolist() == [t - origin for t in ts]
    assert trace.events["dur"].tolist() == dur


def test_base_time_nanoseconds(tmp_path):
    doc = {"baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10.5, "dur": 2.25},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 11.001, "dur": 1},
    ]}
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps(doc))
    trace = read_trace(str(path))
    assert trace.origin_ns == 1_700_000_000_000_000_000 + 10_500
    assert trace.events["start"].tolist() == [0, 501]
    assert trace.events["dur"].tolist() == [2250, 1000]


def test_us_to_ns_text_forms():
    ns, ok = us_to_ns(["1712195495519689.047", 12, "135.162", "-1.5", "1e3", "0.0015",
                       "abc", None, 2**70, True])
    assert ns[:6].tolist() == [1712195495519689047, 12000, 135162, -1500, 1_000_000, 2]
    assert ok.tolist() == [True] * 6 + [False] * 4


def test_links_and_metadata():
    trace = read_trace(str(next((TRACES / "param_v100_dlrm_8rank").glob("worker3*"))))
    assert trace.distributed_info["rank"] == 3
    assert trace.device_properties[0]["name"].startswith("Tesla V100")
    kern = trace.mask(Kind.KERNEL)
    assert (trace.events["correlation"][kern] >= 0).all()
    assert (trace.events["device"][kern] >= 0).all()
    rt = trace.mask(Kind.RUNTIME)
    assert (trace.events["external_id"][rt] >= 0).mean() > 0.5
    assert (trace.events["blocks"][kern] > 0).all()


def test_old_external_id_spelling_and_shapes():
    trace = read_trace(str(RESNET0))
    ops = trace.mask(Kind.HOST_OP)
    assert (trace.events["external_id"][ops] > 0).all()
    rt = trace.mask(Kind.RUNTIME)
    assert (trace.events["external_id"][rt] > 0).mean() > 0.9  # 'external id' spelling
    assert "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]" in trace.shapes \
        or any(s.startswith("[[32, 3, 224, 224]") for s in trace.shapes)


# --- damage (SPEC §1.4) ---------------------------------------------------------------------

GOOD = [
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
     "args": {"External id": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 110, "dur": 5},
]


def _write(tmp_path, data: bytes, name="w.pt.trace.json") -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def _doc(events=GOOD) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1).encode()


@pytest.mark.parametrize("data,error", [
    (b"", "empty file"), (b"   \n", "empty file"), (b"<html><body>502</body></html>", "not JSON"),
    (b"{}", "not a trace"), (b"[]", "no events"), (b'{"traceEvents": []}', "no events"),
    (b'{"traceEvents": 5}', "not a trace"), (b"\x00\x01\x02garbage", "not JSON"),
    (b'{"traceEvents": [{"ph": "X", "na', "truncated before the first complete event"),
])
def test_unusable_files_raise_trace_error(tmp_path, data, error):
    with pytest.raises(TraceError) as e:
        read_trace(_write(tmp_path, data))
    assert e.value.error == error
    assert e.value.status == 422
    assert e.value.body()["file"] == "w.pt.trace.json"


def test_truncated_tail_keeps_complete_events(tmp_path):
    data = _doc()
    cut = data.index(b'"aten::add"')  # inside the last event
    trace = read_trace(_write(tmp_path, data[:cut]))
    assert [trace.name_of(i) for i in range(len(trace))] == \
        ["ProfilerStep#1", "aten::mm", "ProfilerStep#2"]
    assert [n.code for n in trace.notes] == ["truncated"]


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Run a gzip test with ISA-L (the default) and with the stdlib zlib fallback."""
    import zlib

    from stepscope import rawfile

    if request.param == "zlib":
        monkeypatch.setattr(rawfile, "zlib", zlib)
    else:
        assert rawfile.zlib.__name__.startswith("isal")
    return request.param


def test_truncated_gzip(tmp_path, inflater):
    big = _doc(GOOD * 2000)
    gz = gzip.compress(big)
    trace = read_trace(_write(tmp_path, gz[: len(gz) // 2], "w.pt.trace.json.gz"))
    codes = {n.code for n in trace.notes}
    assert {"gzip_truncated", "truncated"} <= codes
    assert 0 < len(trace) < 8000


def test_gzip_of_gzip(tmp_path, inflater):
    trace = read_trace(_write(tmp_path, gzip.compress(gzip.compress(_doc())), "w.json.gz"))
    assert len(trace) == 4 and "nested_gzip" in {n.code for n in trace.notes}


def test_damaged_gzip_keeps_what_precedes_the_damage(tmp_path, inflater):
    rng = random.Random(5)  # names that compress badly: the stream spans many input pieces
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{rng.getrandbits(64):x}", "pid": 1,
               "tid": 1, "ts": i, "dur": 1} for i in range(60000)]
    gz = bytearray(gzip.compress(_doc(events), 1))
    gz[len(gz) // 2: len(gz) // 2 + 64] = b"\xff" * 64  # garbage mid-stream
    trace = read_trace(_write(tmp_path, bytes(gz), "w.pt.trace.json.gz"))
    assert "gzip_damaged" in {n.code for n in trace.notes}
    assert 10000 < len(trace) < 60000
    assert trace.name_of(0) == events[0]["name"]


@pytest.mark.parametrize("mutate,code", [
    (lambda d: d.replace(b'"dur": 20', b'"dur": N/A'), "bare_tokens"),
    (lambda d: d.replace(b"aten::mm", b"aten::\xff\xfemm"), "invalid_utf8"),
    (lambda d: d.replace(b"aten::mm", b"aten::\x01mm\tx"), "control_chars"),
    (lambda d: b"\xef\xbb\xbf" + d, "bom"),
    (lambda d: d.replace(b'"dur": 20', b'"dur": 99999999999999999999999'), "dropped_events"),
    (lambda d: d.replace(b'"ts": 10,', b'"ts": "soon",'), "dropped_events"),
    (lambda d: d.replace(b'"dur": 20', b'"dur": -1'), "dropped_events"),
    (lambda d: d.replace(b'"External id": 7', b'"External id": [7]'), None),
    (lambda d: d.replace(b'"args": {', b'"args": ["oops"], "y": {'), "ill_typed_events"),
    (lambda d: d.replace(b'"traceEvents": [', b'"traceEvents": [5, null, "x",'), "ill_typed_events"),
])
def test_repairable_damage(tmp_path, mutate, code):
    data = mutate(_doc())
    assert data != _doc()
    trace = read_trace(_write(tmp_path, data))
    trace.check()
    assert len(trace) >= 3
    if code:
        assert code in {n.code for n in trace.notes}, [n.code for n in trace.notes]


def test_absurd_timestamp_ignored_for_origin(tmp_path):
    events = GOOD + [{"ph": "X", "cat": "cpu_op", "name": "Record Window End", "pid": 1,
                      "tid": 1, "ts": 10**15, "dur": 0}]
    trace = read_trace(_write(tmp_path, _doc(events)))
    assert len(trace) == 4 and trace.events["start"].max() == 110_000
    assert "absurd_timestamps" in {n.code for n in trace.notes}


def test_legacy_autograd_export(tmp_path):
    events = [
        {"name": "aten::mm", "ph": "X", "ts": 5, "dur": 10, "tid": 0, "pid": "CPU functions",
         "args": {}},
        {"name": "gemm", "ph": "X", "ts": 7, "dur": 3, "tid": 0, "pid": "CUDA functions",
         "args": {}},
        {"name": "aten::mm", "ph": "s", "id": 1, "ts": 5, "tid": 0, "pid": "CPU functions",
         "cat": "cpu_to_cuda"},
    ]
    trace = read_trace(_write(tmp_path, json.dumps(events).encode(), "trace.json"))
    assert trace.kind_counts() == {"HOST_OP": 1, "KERNEL": 1}
    assert np.array_equal(trace.events["start"], [0, 2000])


def test_string_pids_and_stream_lanes(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "0", "tid": "stream 7", "ts": 1, "dur": 1,
         "args": {"correlation": 3, "grid": [2, 3, 1], "block": [128, 1, 1],
                  "est. achieved occupancy %": 50}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": "t",
         "ts": 0, "dur": 1, "args": {"correlation": 3, "external id": 4}},
    ]
    trace = read_trace(_write(tmp_path, _doc(events)))
    e = trace.events
    assert e["device"].tolist() == [0, -1] and e["stream"].tolist() == [7, -1]
    assert e["blocks"].tolist() == [6, -1] and e["threads_per_block"].tolist() == [128, -1]
    assert e["occupancy"][0] == 50 and e["external_id"].tolist() == [-1, 4]
    assert trace.threads == [("0", "stream 7"), (9, "t")]


def test_deep_nesting_does_not_overflow(tmp_path):
    depth = 100_000
    data = b'{"traceEvents": [' + _doc()[len(b'{"schemaVersion": 1, "traceEvents": ['):-2] + \
        b', {"ph": "i", "name": "x", "args": ' + b'[' * depth + b']' * depth + b"}]}"
    try:
        trace = read_trace(_write(tmp_path, data))
    except TraceError as e:  # refusing is acceptable too, crashing is not
        assert e.status == 422
    else:
        assert len(trace) == 4


@pytest.mark.parametrize("helpers", [0, 1])
@pytest.mark.parametrize("path", [RESNET0, NS_2024] + sorted(
    (TRACES / "param_v100_dlrm_8rank").glob("worker0*")), ids=lambda p: p.name[:20])
def test_chunked_decode_equals_whole_document(path, helpers, monkeypatch):
    """Cutting the event list into many small chunks (decoded here, or every other one in a
    helper process) gives exactly the one-piece result."""
    from stepscope import decode, rawfile

    whole = read_trace(str(path))
    monkeypatch.setattr(decode, "CHUNK_BYTES", 50_000)
    monkeypatch.setattr(rawfile, "CHUNK", 7_919)
    monkeypatch.setattr(rawfile, "OUT_PIECE", 10_007)
    chunked = read_trace(str(path), helpers=helpers)
    for col in whole.events:
        if col in ("cat", "name"):  # interning order may differ: compare the strings
            assert [whole.strings[i] for i in whole.events[col]] == \
                [chunked.strings[i] for i in chunked.events[col]]
        else:
            assert np.array_equal(whole.events[col], chunked.events[col], equal_nan=True), col
    assert sorted(whole.strings) == sorted(chunked.strings) and whole.shapes == chunked.shapes
    assert whole.origin_ns == chunked.origin_ns and whole.metadata == chunked.metadata
    assert whole.device_properties == chunked.device_properties


@pytest.mark.parametrize("helpers", [0, 1])
def test_chunk_cut_inside_args_is_joined(tmp_path, monkeypatch, helpers):
    """A '},{' inside args (a list of dicts) is not an event boundary: the chunk cut there
    is joined with the next one."""
    from stepscope import decode

    events = [dict(GOOD[1], args={"External id": i, "x": [{"a": 1}, {"b": 2}] * 50})
              for i in range(400)]
    path = _write(tmp_path, _doc(events))
    monkeypatch.setattr(decode, "CHUNK_BYTES", 3_000)
    trace = read_trace(path, helpers=helpers)
    assert len(trace) == 400 and trace.events["external_id"].tolist() == list(range(400))
    assert trace.notes == []


@pytest.mark.parametrize("gz", [True, False])
def test_progress_follows_the_bytes_decoded(tmp_path, gz):
    """Progress counts the file's bytes as they are inflated / handed on, not as the
    read-ahead thread reads them: a gzip file smaller than one read (here 1 MB) still
    reports many steps, from near 0 up to 1."""
    seen = []
    path = str(RESNET0)
    if not gz:
        path = _write(tmp_path, gzip.decompress(RESNET0.read_bytes()))
    read_trace(path, progress=seen.append)
    assert seen and seen[-1] == 1.0 and seen == sorted(seen)
    if gz:
        assert len(set(seen)) >= 4 and seen[0] <= 0.3


def test_big_truncated_file_is_repaired_without_whole_decoding(tmp_path, monkeypatch):
    """A killed job's cut-off file keeps its complete events through the chunked path (the
    whole-document path, which would hold the file in memory, is never taken)."""
    from stepscope import decode, reader

    events = [dict(GOOD[1], ts=10 * i, args={"External id": i}) for i in range(3000)]
    data = _doc(events)
    cut = data.rindex(b'"External id": 2990')
    monkeypatch.setattr(decode, "CHUNK_BYTES", 20_000)

    def no_whole(*a, **k):
        raise AssertionError("decoded whole")

    monkeypatch.setattr(reader, "decode_document", no_whole)
    trace = read_trace(_write(tmp_path, b"\xef\xbb\xbf" + data[:cut]))
    assert trace.events["external_id"].tolist() == list(range(2990))
    notes = {n.code: n.text for n in trace.notes}
    assert set(notes) == {"bom", "truncated"}
    assert f"truncated at byte {cut + 3:,}" in notes["truncated"]  # the BOM counts too
