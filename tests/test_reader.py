"""Reader tests: every shared trace, exact timestamps, damage repair (SPEC §1.2-1.4)."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np
import pytest
from tracebuild import NO_SHARED

from stepscope.errors import TraceError
from stepscope.read.columns import us_to_ns
from stepscope.read.reader import read_trace
from stepscope.taxonomy import Kind

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ALL_FILES = sorted(p for p in TRACES.rglob("*.json*") if not p.name.endswith(".jsonl"))
NS_2024 = next((TRACES / "hta_v100_resnet_ns_2024").glob("*.json.gz"), TRACES / "missing")
RESNET0 = TRACES / "kineto_resnet50" / "resnet50_num_workers_0" / "worker0.pt.trace.json.gz"


def _load_json(path: Path, **kw):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return json.loads(f.read(), **kw)


def _events(doc):
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.skipif(not ALL_FILES, reason=NO_SHARED)
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


def _decimal_ns(text: str) -> tuple[int, bool]:
    """Reference: µs text -> ns through Decimal, rounded half to even; (0, False) if not a
    finite number within int64."""
    try:
        x = Decimal(text) * 1000
        if not x.is_finite() or (x and x.adjusted() > 30):
            return 0, False
        v = int(x.to_integral_value())
    except (ArithmeticError, ValueError):
        return 0, False
    return (v, True) if -2**63 <= v < 2**63 else (0, False)


@pytest.mark.parametrize("texts", [
    # all text, as in 2024 traces (the vectorised path), one length and mixed lengths
    ["1712195495519689.047", "1712195495519695.812", "1712195496603535.183"],
    ["1.280", "0.039", "135.162", "5", "5.", "5.1", "5.12", "-0", "-5", "-5.5", "007.5"],
    # rounding half to even beyond the ns, exponents, ranges, not numbers
    ["0.0005", "0.0015", "0.0025", "0.00250001", "-0.0025", "1.2345678901234567890123456789",
     "1e3", "1.5E-3", "-2.5e-4", "0E99", "1e999999", "5e555555", "-5e-555555",
     "9223372036854775.807", "9223372036854775.808", "-9223372036854775.808",
     "-9223372036854775.809", "99999999999999999", "9999999999999999.999",
     "", "-", ".", ".5", "-.5", "1-2", "1.2.3", "--1", "+5", " 5", "abc", "inf", "NaN", "１２"],
    # ASCII only (cut at the commas that join them): one length with a bad one, a comma
    # or a NUL inside a text, texts longer than any number the vectorised parse takes
    ["1712195495519689.047", "17121954955196x9.047", "-712195495519689.047"],
    ["1,5", "2.5", "3"], ["12\x00", "1.5", "\x001"],
    ["1234567890123456789012.5", "12345678901234567.5", "-1234567890123456789.123", "7"],
])
def test_us_to_ns_text_matches_decimal(texts):
    """The vectorised parse of decimal text equals Decimal's, to the ns, including the
    values it hands to Decimal; a huge exponent is refused, not expanded."""
    ns, ok = us_to_ns(texts)
    assert [(int(v) if o else 0, bool(o)) for v, o in zip(ns, ok)] == \
        [_decimal_ns(t) for t in texts]


def test_us_to_ns_parses_kineto_texts_without_decimal(monkeypatch):
    """The texts Kineto writes (epoch µs with ns fractions, durations with 0 to 3 decimals,
    negative ones) are parsed vectorised: none goes through Decimal."""
    from stepscope.read import columns

    def no_decimal(text):
        raise AssertionError(f"{text!r} went through Decimal")
    monkeypatch.setattr(columns, "_decimal_us_to_ns", no_decimal)
    texts = ["1712195495519689.047", "1712195495519695.8", "135.162", "1.28", "0.039", "5",
             "-5.5", "-0", "12.5", "9223372036854775.807", "-1"]
    ns, ok = us_to_ns(texts)
    assert ok.all() and ns.tolist() == [_decimal_ns(t)[0] for t in texts]


def test_us_to_ns_text_first_then_other_values():
    """A list starting with text takes the text path; ints in it stay exact, other types
    are invalid (not their repr parsed)."""
    ns, ok = us_to_ns(["1.5", 12, None, True, False, [1], {"a": 1}, 2**70, -12, "１２"])
    assert ns.tolist() == [1500, 12000, 0, 0, 0, 0, 0, 0, -12000, 12000]
    assert ok.tolist() == [True, True] + [False] * 6 + [True, True]


def test_us_to_ns_random_texts_match_decimal():
    rng = random.Random(7)
    texts = []
    for _ in range(20_000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 19)))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 5)))
        texts.append(rng.choice(["", "-"]) + digits + rng.choice(["", ".", "." + frac]))
    ns, ok = us_to_ns(texts)
    assert [(int(v) if o else 0, bool(o)) for v, o in zip(ns, ok)] == \
        [_decimal_ns(t) for t in texts]
    assert ok.sum() > 15_000  # mostly numbers: the vectorised path is exercised


#: ts values as JSON text: what a piece of a 2024-format trace holds when it is decoded with
#: its timestamps kept as text (msgspec.Raw), odd values among them
RAW_TIMES = ["1712195495519689.047", "135.162", "12", "-1.5", "1e3", "1.5E-3", "0.0015",
             '"12.5"', '"\\u0031"', '"１２"', '"abc"', "null", "true", "false", "[1,2]",
             '{"a":1}', str(2**70), "9223372036854775.808", "-0", "5"]


@pytest.mark.parametrize("texts", [RAW_TIMES, RAW_TIMES[:3], RAW_TIMES[2:], ["[1]"] + RAW_TIMES])
@pytest.mark.parametrize("absent", [None, 1])
def test_us_to_ns_of_json_text_equals_that_of_the_decoded_values(texts, absent):
    """Timestamps kept as their JSON text convert exactly as the values the reader decoded
    before (ints, floats as text, strings, others invalid), an absent one (None) included."""
    raws = [msgspec.Raw(t.encode()) for t in texts]
    values = [msgspec.json.Decoder(float_hook=str).decode(t) for t in texts]
    if absent is not None:
        raws.insert(absent, None)
        values.insert(absent, None)
    got, want = us_to_ns(raws), us_to_ns(values)
    assert got[1].tolist() == want[1].tolist() and (got[0] == want[0]).all()
    assert got[1].sum() >= (8 if texts is RAW_TIMES else 1)


@pytest.mark.parametrize("seed", [1, 2])
def test_plain_json_numbers_as_text_match_decimal(seed, monkeypatch):
    """JSON numbers without an exponent, kept as text, are parsed without the byte-matrix
    path (issue 19) and match Decimal: 0 to 5 fraction digits, negatives, integers, values
    at and beyond int64's range (numpy saturates those: Decimal decides)."""
    from stepscope.read import columns

    def no_matrix(*a, **k):
        raise AssertionError("plain numbers went through the byte-matrix parse")
    monkeypatch.setattr(columns, "_text_us_to_ns", no_matrix)
    rng = random.Random(seed)
    texts = []
    for _ in range(5_000):
        whole = str(rng.choice([0, rng.randint(1, 9), rng.randint(1, 10**rng.randint(1, 21))]))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 5)))
        texts.append(rng.choice(["", "-"]) + whole + ("." + frac if frac else ""))
    texts += ["9223372036854775807", "9223372036854775.807", "9223372036854775.808",
              "-9223372036854775.808", "-9223372036854775.809", "9223372036854775808",
              "-9223372036854775808", "9223372036854775", "9223372036854776", "0.0005",
              "0.0015", "-0", "-0.000", "1712195495519689.0475"]
    rng.shuffle(texts)
    for group in (texts, texts[:1], [t for t in texts if "." in t and len(t.split(".")[1]) == 3]):
        ns, ok = us_to_ns([msgspec.Raw(t.encode()) for t in group])
        assert [(int(v) if o else 0, bool(o)) for v, o in zip(ns, ok)] == \
            [_decimal_ns(t) for t in group]
    assert ok.sum() > 500  # 3 fraction digits, the common case: one C parse, no scaling


def test_kineto_json_text_is_parsed_without_decimal(monkeypatch):
    from stepscope.read import columns

    def no_decimal(text):
        raise AssertionError(f"{text!r} went through Decimal")
    monkeypatch.setattr(columns, "_decimal_us_to_ns", no_decimal)
    texts = ["1712195495519689.047", "135.162", "1.28", "5", "-5.5", "-0", "12.5"]
    ns, ok = us_to_ns([msgspec.Raw(t.encode()) for t in texts])
    assert ok.all() and ns.tolist() == [_decimal_ns(t)[0] for t in texts]


def test_pieces_with_fractional_timestamps_keep_them_as_text(tmp_path, monkeypatch):
    """A piece whose first timestamps have fractions is decoded with ts and dur as text
    (2024 formats, issue 19); a trace reads the same either way, odd values included."""
    from stepscope.read import decode
    from stepscope.read.decode import decode_events
    assert type(decode_events(b'[{"ph": "X", "ts": 1.5, "dur": 2}]')[0][0].ts) is msgspec.Raw
    assert type(decode_events(b'[{"ph": "X", "ts": 15, "dur": 2.5}]')[0][0].ts) is int
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1,
               "ts": t, "dur": 1.25} for i, t in enumerate(
                   ["<1712195495519689.047>", 1712195495519690, "1712195495519691.5", None, True,
                    [1], "<1712195495519692.0005>", "<1.712195495519693e15>"])]
    events.append({"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1})
    events.append({"ph": "X", "cat": "cpu_op", "name": "dur", "pid": 1, "tid": 1,
                   "ts": "<1712195495519694.25>", "dur": "2.5"})
    events += [5, [1, 2], "x"]  # entries that are not events: counted
    path = tmp_path / "w.pt.trace.json"  # "<x>": the number x as written (no float64)
    path.write_text(re.sub(r'"<([^>]*)>"', r"\1", json.dumps({"traceEvents": events})))

    def read(pattern: bytes):
        monkeypatch.setattr(decode, "_FRACTION_TS", re.compile(pattern))
        trace = read_trace(str(path))
        return (trace.origin_ns, {k: str(v.tolist()) for k, v in trace.events.items()},
                [n.text for n in trace.notes])
    as_text, as_values = read(rb"."), read(rb"(?!)")
    assert as_text == as_values
    assert as_text[0] == 1712195495519689047 and as_text[1]["start"] == "[0, 953, 2453, 2953, 3953, 5203]"
    assert as_text[1]["dur"].endswith(", 2500]") and "dropped 4 events" in " ".join(as_text[2])
    assert "ignored 3 entries" in " ".join(as_text[2])


def _read_both_ways(path, monkeypatch) -> tuple:
    """The trace of ``path`` read with the per-phase structs and with the loose ones."""
    from stepscope.read import decode, reader

    def read(by_phase: bool):
        monkeypatch.setattr(reader, "decode_events",
                            lambda chunk, _by_phase: decode.decode_events(chunk, by_phase))
        t = read_trace(str(path))
        assert [type(e).__name__.startswith("Event_") for e in
                decode.decode_events(b'[{"ph": "X"}]', by_phase)[0]] == [by_phase]
        return (t.origin_ns, {k: str(v.tolist()) for k, v in t.events.items()}, t.strings,
                t.threads, t.shapes, t.stacks, t.comms,
                {k: v.tolist() for k, v in t.memory.items()}, t.phase_counts,
                [(n.code, n.text) for n in t.notes])
    return read(True), read(False)


@pytest.mark.parametrize("sample", sorted(p.name for p in (SAMPLES / "logs").glob("*/*.json.gz"))[:3])
def test_per_phase_structs_read_the_samples_as_the_loose_ones(sample, monkeypatch):
    """Decoding each phase with its own struct (issue 19: fewer fields to look keys up in)
    gives the trace the loose :class:`Event` gave: memory, flows, metadata, shapes."""
    path, = (SAMPLES / "logs").glob(f"*/{sample}")
    by_phase, loose = _read_both_ways(path, monkeypatch)
    assert by_phase == loose and by_phase[1]["start"].count(",") > 100


def test_per_phase_structs_read_every_kind_of_event_as_the_loose_ones(tmp_path, monkeypatch):
    from stepscope.read.decode import MEMORY_ARGS, X_ARGS, Args
    assert sorted(X_ARGS + MEMORY_ARGS) == sorted(Args.__struct_fields__)  # none forgotten
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 5,
         "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float"], "External id": 7,
                  "Call stack": "a.py(1): f;b.py(2): g", "Sequence number": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 2, "ts": 20,
         "dur": 5, "args": {"Collective name": "allreduce", "In msg nelems": 100,
                            "Out msg nelems": 100, "dtype": "Float", "Process Group Name": "0"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
         "ts": 11, "dur": 2, "args": {"correlation": 9, "External id": 7, "cbid": 211}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 14, "dur": 3,
         "args": {"device": 0, "stream": 7, "correlation": 9, "grid": [4, 1, 1],
                  "block": [128, 1, 1], "blocks per SM": 0.5, "est. achieved occupancy %": 25,
                  "queued": 0, "registers per thread": 32}},
        {"ph": "X", "cat": "Operator", "name": "old", "pid": 1, "tid": "3", "ts": 30, "dur": 1,
         "args": {"Input dims": [[1]], "external id": 8}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 12,
         "s": "t", "args": {"Device Type": 1, "Device Id": 0, "Addr": 123, "Bytes": 512,
                            "Total Allocated": 512, "Total Reserved": 2048}},
        {"ph": "s", "id": 9, "pid": 1, "tid": 2, "ts": 11, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 14, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 4, "pid": "CPU functions", "tid": 2, "ts": 10, "cat": "cpu_to_cuda"},
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 5, "args": {"x": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 2, "ts": 40, "dur": 1,
         "args": [1, 2]},
    ]
    path = tmp_path / "every.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    by_phase, loose = _read_both_ways(path, monkeypatch)
    assert by_phase == loose
    assert by_phase[7]["bytes"] == [512] and by_phase[6] == [("allreduce", 100, 100, "Float", "0")]


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
    # SPEC §1.4: the note says what survives
    assert trace.notes[0].text.endswith("3 duration events survive, 2 of them complete ProfilerSteps.")


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Run a gzip test with ISA-L (the default) and with the stdlib zlib fallback."""
    import zlib

    from stepscope.read import rawfile

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


def test_garbage_after_the_gzip_data_is_noted(tmp_path, inflater):
    """The same garbage after plain JSON had a note; after a gzip stream it was dropped
    without one."""
    data = gzip.compress(_doc()) + b"<html>oops</html>"
    trace = read_trace(_write(tmp_path, data, "w.pt.trace.json.gz"))
    assert len(trace) == 4 and _notes(trace) == {
        "trailing_garbage": "w.pt.trace.json.gz: the bytes after the end of the gzip data are "
                            "not gzip; ignored."}


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
    (lambda d: d.replace(b'"args": {', b'"args": ["oops"], "y": {'), "ill_typed_values"),
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
    # said once: not again as "dropped ... missing or ill-typed" (it is well typed)
    assert "dropped_events" not in {n.code for n in trace.notes}


@pytest.mark.parametrize("late", [1, 2])
def test_two_even_groups_of_timestamps_keep_one_with_a_note(tmp_path, late):
    """Events split in two equal groups decades apart: one group is kept (the earlier one)
    and the other noted, never both dropped (a 422 blaming names and ids)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"a{i}", "pid": 1, "tid": 1, "ts": 5 + i,
               "dur": 5} for i in range(late)]
    events += [{"ph": "X", "cat": "cpu_op", "name": f"b{i}", "pid": 1, "tid": 1,
                "ts": 10**15 + i, "dur": 5} for i in range(late)]
    trace = read_trace(_write(tmp_path, _doc(events)))
    assert len(trace) == late and [trace.strings[n] for n in trace.events["name"]][0] == "a0"
    assert "absurd_timestamps" in {n.code for n in trace.notes}


def test_errors_name_the_actual_problem(tmp_path):
    """UTF-16 text, an event list of no events, a gzip stream damaged from its start: each
    422 says what is wrong (not "not JSON" with garbled bytes, not "stopped before the first
    step", not "kept the data before the damage... nothing could be decompressed")."""
    from stepscope.errors import TraceError
    doc = _doc(GOOD).decode()
    cases = {"u16.pt.trace.json": ("\ufeff" + doc).encode("utf-16-le"),
             "u16be.pt.trace.json": doc.encode("utf-16-be"),
             "ints.pt.trace.json": b'{"traceEvents": [1, 2, 3]}',
             "gz.pt.trace.json.gz": gzip.compress(doc.encode())[:10] + b"\xff" * 20}
    details = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(TraceError) as e:
            read_trace(str(tmp_path / name))
        details[name] = (e.value.status, e.value.error, e.value.detail)
    assert details["u16.pt.trace.json"][:2] == details["u16be.pt.trace.json"][:2] == (422, "not UTF-8")
    assert "Save it as UTF-8" in details["u16.pt.trace.json"][2]
    assert "none of the 3 entries" in details["ints.pt.trace.json"][2]
    gz = details["gz.pt.trace.json.gz"]
    assert gz[1] == "damaged gzip" and "kept the data" not in gz[2] and "nothing could be" in gz[2]


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


def test_deep_nesting_in_a_chunk_taken_over_from_a_helper_is_a_422(tmp_path, monkeypatch):
    """The reader decodes a chunk a helper has not started (take_over) straight from the
    shared slot. When that chunk nests too deeply, the error's traceback still views the
    slot as the helper pool closes: that must not turn the 422 into a crash (BufferError,
    seen as a flaky 500 of the hardening corpus)."""
    from stepscope.read import reader, shared

    reader_pid = os.getpid()
    claim = shared.Slots.claim

    def late_in_helpers(self, slot):  # the reader wins every slot: its helper comes late
        if os.getpid() != reader_pid:
            time.sleep(0.2)
        return claim(self, slot)
    monkeypatch.setattr(shared.Slots, "claim", late_in_helpers)
    taken = []
    take_over = reader._Job.take_over
    monkeypatch.setattr(reader._Job, "take_over", lambda job: taken.append(1) or take_over(job))
    _small_pieces(monkeypatch, 20_000)
    depth = 100_000
    deep = b'{"ph": "i", "name": "x", "args": ' + b'[' * depth + b']' * depth + b"}"
    data = _doc(GOOD * 200).replace(b'"traceEvents": [', b'"traceEvents": [' + deep + b",", 1)
    with pytest.raises(TraceError) as e:
        read_trace(_write(tmp_path, data), helpers=1)
    assert taken and e.value.status == 422 and "nested too deeply" in str(e.value.body())


@pytest.mark.parametrize("helpers", [0, 1, "pipe", "no slot"])
@pytest.mark.parametrize("path", [RESNET0, NS_2024] + sorted(
    (TRACES / "param_v100_dlrm_8rank").glob("worker0*")), ids=lambda p: p.name[:20])
def test_chunked_decode_equals_whole_document(path, helpers, monkeypatch):
    """Cutting the event list into many small chunks (decoded here, or every other one in a
    helper process) gives exactly the one-piece result, whichever way the helper's answers
    come back (its slot, or the pipe) and when no chunk fits a slot (all decoded here).
    Each chunk is decoded in pieces too (:func:`~stepscope.read.decode.cut_piece`)."""
    from stepscope.read import decode, reader, shared

    monkeypatch.setattr(decode, "PIECE_BYTES", 1 << 40)
    whole = read_trace(str(path))
    monkeypatch.setattr(decode, "PIECE_BYTES", 7_001)
    if helpers == "pipe":  # the helper's answers come back through the pipe
        monkeypatch.setattr(reader, "ANSWER_IN_SLOT", False)
    elif helpers == "no slot":
        monkeypatch.setattr(shared, "SLOT_BYTES", 1)
    sent = _count_jobs_sent(monkeypatch)
    _small_pieces(monkeypatch, 50_000)
    monkeypatch.setattr(decode, "TAIL_CUT_BYTES", 20_000)  # the end of the list is cut too
    chunked = read_trace(str(path), helpers=1 if helpers else 0)
    assert (sent[0] > 0) == (helpers in (1, "pipe"))  # the helper decoded chunks
    for col in whole.events:
        if col in ("cat", "name"):  # interning order may differ: compare the strings
            assert [whole.strings[i] for i in whole.events[col]] == \
                [chunked.strings[i] for i in chunked.events[col]]
        else:
            assert np.array_equal(whole.events[col], chunked.events[col], equal_nan=True), col
    assert sorted(whole.strings) == sorted(chunked.strings) and whole.shapes == chunked.shapes
    assert whole.origin_ns == chunked.origin_ns and whole.metadata == chunked.metadata
    assert whole.device_properties == chunked.device_properties


def _small_pieces(monkeypatch, chunk_bytes: int) -> None:
    """Cut the event list into chunks of about ``chunk_bytes``, from small odd-sized pieces
    of the file (many chunks from a small trace)."""
    from stepscope.read import decode, rawfile

    monkeypatch.setattr(decode, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(rawfile, "CHUNK", 7_919)
    monkeypatch.setattr(rawfile, "OUT_PIECE", 10_007)


def _in_helpers(monkeypatch, name: str, wrap) -> None:
    """Replace ``reader.<name>`` in the helper processes only (forked: they inherit it) by
    ``wrap(original)``."""
    from stepscope.read import reader

    here, original = os.getpid(), getattr(reader, name)
    wrapped = wrap(original)
    monkeypatch.setattr(reader, name, lambda *a: wrapped(*a) if os.getpid() != here
                        else original(*a))


def _count_jobs_sent(monkeypatch) -> list[int]:
    """Count the chunks the reader hands to a helper process (``[count]``, updated)."""
    from stepscope.read import reader

    sent = [0]
    send = reader._Helper.send

    def counted(self, job):
        ok = send(self, job)
        sent[0] += ok
        return ok
    monkeypatch.setattr(reader._Helper, "send", counted)
    return sent


def test_an_error_in_a_helper_is_raised_by_the_reader(tmp_path, monkeypatch):
    """What fails while a helper decodes a chunk fails the read as it would here (a
    RecursionError is a 422), and the helper process is gone afterwards."""
    import psutil

    events = [dict(GOOD[1], args={"External id": i}) for i in range(2000)]
    path = _write(tmp_path, _doc(events))
    _small_pieces(monkeypatch, 5_000)

    def too_deep(decode_events):
        def deep(chunk, by_phase):
            raise RecursionError("maximum recursion depth exceeded")
        return deep
    _in_helpers(monkeypatch, "decode_events", too_deep)
    sent = _count_jobs_sent(monkeypatch)
    before = set(psutil.Process().children())  # (a forkserver of other tests, ...)
    with pytest.raises(TraceError) as e:
        read_trace(path, helpers=1)
    assert e.value.status == 422 and "nested too deeply" in str(e.value.body())
    assert sent[0] > 0 and set(psutil.Process().children()) <= before


@pytest.mark.parametrize("window", [None, 16, "pieces"])
@pytest.mark.parametrize("helpers", [0, 1])
def test_chunk_cut_inside_args_is_joined(tmp_path, monkeypatch, helpers, window):
    """A '},{' inside args (a list of dicts) is not an event boundary: the chunk cut there
    is joined with the next one. ``window``: the last boundary is looked for in so few final
    bytes that it is mostly found by the search of the whole chunk; "pieces": the chunks
    are big, the pieces they are decoded in small (a piece cut there is cut again further)."""
    from stepscope.read import decode

    events = [dict(GOOD[1], args={"External id": i, "x": [{"a": 1}, {"b": 2}] * 50})
              for i in range(400)]
    path = _write(tmp_path, _doc(events))
    decoded = []
    if window == "pieces":
        from stepscope.read import reader

        monkeypatch.setattr(decode, "PIECE_BYTES", 3_000)
        monkeypatch.setattr(decode, "TAIL_CUT_BYTES", 20_000)  # (the events: one chunk)
        monkeypatch.setattr(reader, "decode_events", lambda chunk, by_phase:
                            decoded.append(1) or decode.decode_events(chunk, by_phase))
    else:
        monkeypatch.setattr(decode, "CHUNK_BYTES", 3_000)
    if window == 16:
        monkeypatch.setattr(decode, "_BOUNDARY_WINDOW", window)
    trace = read_trace(path, helpers=helpers)
    assert len(trace) == 400 and trace.events["external_id"].tolist() == list(range(400))
    assert trace.notes == []
    if window == "pieces" and not helpers:  # a piece, then the rest of the chunk at once;
        assert len(decoded) == 2  # not a try per '},{' (about 20,000 here)


@pytest.mark.parametrize("sep", [b"\x0c,\n", b",\x0b", b"} ,{"])
def test_what_is_not_json_between_events_is_refused_wherever_the_cuts_fall(tmp_path,
                                                                            monkeypatch, sep):
    """A form feed or vertical tab between two events (not JSON whitespace), or a stray
    ``}``: the file is refused as the whole-document decode refuses it, not accepted because
    a chunk or piece cut dropped the bytes it was cut at (fresh-eyes review, session 12)."""
    from stepscope.read import decode

    events = [json.dumps(dict(GOOD[1], ts=10 * i, args={"External id": i})).encode()
              for i in range(300)]
    body = b",\n".join(events[:100]) + sep + b",\n".join(events[100:])
    path = _write(tmp_path, b'{"traceEvents": [' + body + b"]}")
    for chunk, piece in ((1 << 40, 1 << 40), (4_000, 1 << 40), (1 << 40, 500), (4_000, 500)):
        monkeypatch.setattr(decode, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(decode, "TAIL_CUT_BYTES", min(chunk, 1 << 20))
        monkeypatch.setattr(decode, "PIECE_BYTES", piece)
        with pytest.raises(TraceError):
            read_trace(path)


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
    from stepscope.read import decode, reader

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


# --- issue 12: overflowing numbers, ill-typed metadata and values, NUL tails -----------------


def _notes(trace) -> dict[str, str]:
    return {n.code: n.text for n in trace.notes}


def _no_whole_document(monkeypatch):
    """Fail the test if the reader falls back to the in-memory whole-document path."""
    from stepscope.read import reader

    def no_whole(*a, **k):
        raise AssertionError("decoded whole")

    monkeypatch.setattr(reader, "decode_document", no_whole)


@pytest.mark.parametrize("value", [b"1e999999", b'"1e999999"', b"-1e999999", b'"-1E+999999"'])
@pytest.mark.parametrize("key", [b'"ts": 110', b'"dur": 5'])
def test_overflowing_ts_or_dur_drops_the_event(tmp_path, key, value):
    """ts/dur beyond any int64 of ns (as a number or as text): that event is dropped with a
    note, the others keep their exact times (before: decimal.Overflow, a 500)."""
    data = _doc().replace(key, key.split(b":")[0] + b": " + value)
    trace = read_trace(_write(tmp_path, data))
    trace.check()
    assert [trace.name_of(i) for i in range(len(trace))] == \
        ["ProfilerStep#1", "aten::mm", "ProfilerStep#2"]
    assert trace.events["start"].tolist() == [0, 10_000, 100_000]
    assert "dropped 1 events" in _notes(trace)["dropped_events"]


def test_int_args_of_another_type_are_missing(tmp_path):
    """An id or memory figure that is text, a float, a bool or a list is missing (-1), not
    converted: a ``[memory]`` event's ``"Total Reserved": []`` made its column 2-D and the
    trace failed its check (hypothesis found it); ``"7"`` and ``7.9`` were read as 7."""
    events = [dict(e) for e in GOOD] + [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 120, "dur": 3,
         "args": {"device": 0, "stream": 7, "correlation": "7", "External id": 7.9}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 130, "args": {"Total Reserved": [], "Total Allocated": True, "Bytes": 512,
                             "Addr": [1, 2]}}]
    trace = read_trace(_write(tmp_path, json.dumps({"traceEvents": events}).encode()))
    trace.check()
    kernel = int(np.flatnonzero(trace.kind == Kind.KERNEL)[0])
    assert trace.correlation[kernel] == -1 and trace.external_id[kernel] == -1
    memory = {k: v.tolist() for k, v in trace.memory.items() if k != "ts"}
    assert memory["total_reserved"] == [-1] and memory["total_allocated"] == [-1]
    assert memory["bytes"] == [512] and memory["addr"] == [-1]


def test_integers_beyond_64_bits_are_dropped_with_notes(tmp_path):
    """pid/tid, baseTimeNanoseconds, deviceProperties and distributedInfo integers >= 2**64
    (which no int64 column nor the cache's JSON holds) are ignored, with notes."""
    big = 2**64
    events = [dict(e) for e in GOOD] + [
        dict(GOOD[3], pid=big), dict(GOOD[3], tid=-big),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 120, "dur": 3,
         "args": {"device": big, "stream": 7, "grid": [big, 1, 1], "correlation": big,
                  "blocks per SM": "1e999999", "est. achieved occupancy %": "OCC"}}]
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": big, "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "A100", "totalGlobalMem": big, "numSms": 108,
                                 "x" * 500: big,
                                 "extra": [1, big, {"x": big, "y": 2}]}],
           "distributedInfo": {"rank": big, "world_size": 2, "backend": "nccl"}}
    data = json.dumps(doc).encode().replace(b'"OCC"', b"1e999999")
    trace = read_trace(_write(tmp_path, data))
    trace.check()
    assert len(trace) == 5 and trace.origin_ns == 0  # base time ignored: ts 0 is the origin
    assert trace.threads == [(1, 1), (None, 1), (1, None), (0, 7)]
    kernel = int(np.flatnonzero(trace.kind == Kind.KERNEL)[0])
    assert trace.start[kernel] == 120_000 and trace.device[kernel] == 0  # pid: the fallback
    assert trace.blocks[kernel] == -1 and trace.correlation[kernel] == -1
    assert np.isnan(trace.blocks_per_sm[kernel]) and np.isnan(trace.occupancy[kernel])
    assert trace.device_properties == [{"id": 0, "name": "A100", "numSms": 108,
                                        "extra": [1, {"y": 2}]}]
    assert trace.distributed_info == {"world_size": 2, "backend": "nccl"}
    assert trace.metadata == {"schemaVersion": 1}
    notes = _notes(trace)
    assert "(grid: 1, pid: 1, tid: 1)" in notes["ill_typed_values"]
    assert "dropped 2 events" in notes["dropped_events"]
    assert "ignored 6 top-level metadata value(s)" in notes["bad_metadata"]
    assert notes["bad_metadata"].endswith("distributedInfo.rank and 1 more.")
    assert f"deviceProperties[0].{'x' * 59}\u2026," in notes["bad_metadata"]  # 80 chars
    for where in ("deviceProperties[0].totalGlobalMem", "deviceProperties[0].extra[1]",
                  "deviceProperties[0].extra[2].x"):
        assert where in notes["bad_metadata"]


def test_ill_typed_metadata_fields_are_ignored(tmp_path):
    """A deviceProperties or distributedInfo field of the wrong type (a list name, an object
    rank) is ignored with a note; the other fields and entries stay (before: a 500 in the
    GPU summary, which hashes names)."""
    doc = {"traceEvents": GOOD,
           "deviceProperties": [{"id": 0, "name": ["A100"], "numSms": 108, "computeMajor": "8",
                                 "totalGlobalMem": {"GB": 80}, "vendor": "x"},
                                "V100", {"id": 1, "name": "A100", "numSms": True}],
           "distributedInfo": {"rank": [3], "world_size": 4, "backend": {"nccl": 1},
                               "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}}
    trace = read_trace(_write(tmp_path, json.dumps(doc).encode()))
    assert trace.device_properties == [{"id": 0, "numSms": 108, "vendor": "x"},
                                       {"id": 1, "name": "A100"}]
    assert trace.distributed_info == {"world_size": 4,
                                      "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}
    text = _notes(trace)["bad_metadata"]
    assert "ignored 7 top-level metadata value(s)" in text and "and 2 more" in text
    assert text.startswith("w.pt.trace.json: ") and "deviceProperties[0].name" in text


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("chunked,helpers", [(False, 0), (True, 0), (True, 1)])
def test_nul_tail_is_cut_with_a_note(tmp_path, monkeypatch, gz, chunked, helpers):
    """A crashed writer's preallocated file: the JSON, then zeros. The zeros are cut with a
    note, on the in-memory path, the chunked path and with a helper process; the chunked
    paths never fall back to the whole-document repair (bounded by MAX_REPAIR_BYTES)."""
    from stepscope.read import decode, rawfile

    events = [dict(GOOD[1], ts=10 * i, args={"External id": i}) for i in range(3000)]
    data = _doc(events) + b"\n" + bytes(3 << 20)
    monkeypatch.setattr(rawfile, "CHUNK", 100_003)
    monkeypatch.setattr(rawfile, "OUT_PIECE", 65_537)
    if chunked:
        monkeypatch.setattr(decode, "CHUNK_BYTES", 20_000)
        monkeypatch.setattr(rawfile, "MAX_REPAIR_BYTES", 1 << 20)
        _no_whole_document(monkeypatch)
    name = "w.pt.trace.json" + (".gz" if gz else "")
    path = _write(tmp_path, gzip.compress(data, 1) if gz else data, name)
    trace = read_trace(path, helpers=helpers)
    assert trace.events["external_id"].tolist() == list(range(3000))
    assert set(_notes(trace)) == {"nul_tail"}
    cut = len(data) - (3 << 20)
    assert _notes(trace)["nul_tail"] == (
        f"{name}: ignored {3 << 20:,} NUL bytes at the end of its JSON (from byte {cut:,}): "
        "the file was preallocated and its writer stopped early.")


def test_truncated_json_before_a_nul_tail_keeps_its_complete_events(tmp_path, monkeypatch):
    from stepscope.read import decode

    events = [dict(GOOD[1], ts=10 * i, args={"External id": i}) for i in range(3000)]
    data = _doc(events)
    cut = data.rindex(b'"External id": 2990')
    monkeypatch.setattr(decode, "CHUNK_BYTES", 20_000)
    _no_whole_document(monkeypatch)
    trace = read_trace(_write(tmp_path, data[:cut] + bytes(1 << 20)))
    assert trace.events["external_id"].tolist() == list(range(2990))
    assert set(_notes(trace)) == {"nul_tail", "truncated"}


def _ill_typed_events() -> list[dict]:
    """300 kernels, 9 of them with one ill-typed value each, and 3 non-event entries."""
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10 * i,
               "dur": 4, "args": {"correlation": i, "grid": [i + 1, 2, 1], "block": [32, 1, 1]}}
              for i in range(300)]
    events[10]["args"]["grid"] = [1, 2]  # -> blocks unknown, event kept
    events[20]["args"]["block"] = "big"  # -> threads per block unknown, event kept
    events[30]["args"] = ["not", "a", "dict"]  # -> no args (stream from tid), event kept
    events[40]["dur"] = "soon"  # -> dropped
    events[50]["name"] = {"a": 1}  # -> dropped
    events[60]["name"] = 5  # -> dropped
    events[70]["pid"] = [0]  # -> dropped
    events[80]["ph"] = 88  # -> not a duration event
    events[90]["cat"] = ["kernel"]  # -> kind OTHER, event kept
    return events[:100] + [5, None, "x"] + events[100:]


@pytest.mark.parametrize("helpers", [0, 1])
def test_one_ill_typed_value_drops_only_that_value(tmp_path, monkeypatch, helpers):
    """An ill-typed value (a 2-element grid, a string dur, a list pid...) costs only that
    value (or its event when it is the name, pid/tid, ts or dur), counted in one note. The
    chunks stay on the fast path: a big such trace loads even above the repair limit (it
    used to fall back to the whole-document repair, and answer 422 above it)."""
    from stepscope.read import decode, rawfile

    data = _doc(_ill_typed_events())
    monkeypatch.setattr(decode, "CHUNK_BYTES", 5_000)
    monkeypatch.setattr(rawfile, "MAX_REPAIR_BYTES", len(data) // 4)
    _no_whole_document(monkeypatch)
    trace = read_trace(_write(tmp_path, data), helpers=helpers)
    trace.check()
    kept = [i for i in range(300) if i not in (40, 50, 60, 70, 80)]
    assert [trace.name_of(r) for r in range(len(trace))] == [f"k{i}" for i in kept]
    assert trace.events["correlation"].tolist() == [-1 if i == 30 else i for i in kept]
    # k90 (a list cat) is of kind OTHER: no kernel columns
    assert trace.blocks.tolist() == [-1 if i in (10, 30, 90) else 2 * (i + 1) for i in kept]
    assert trace.threads_per_block.tolist() == [-1 if i in (20, 30, 90) else 32 for i in kept]
    assert trace.stream.tolist() == [-1 if i == 90 else 7 for i in kept]
    assert trace.kind.tolist() == [Kind.OTHER if i == 90 else Kind.KERNEL for i in kept]
    assert trace.phase_counts == {"X": 299}
    notes = _notes(trace)
    assert notes["ill_typed_values"].startswith(
        "w.pt.trace.json: ignored 8 ill-typed or out-of-range values (args: 1, block: 1, cat: 1, "
        "grid: 1, name: 2, ph: 1, pid: 1)")
    assert "dropped 4 events" in notes["dropped_events"]  # dur, 2 names, pid
    assert "ignored 3 entries" in notes["ill_typed_events"]


def test_link_ids_missing_null_and_both_spellings(tmp_path):
    """correlation / External id: missing or null -> -1; "External id" wins over the older
    "external id", which is used when the first is missing or null."""
    rows = [{"correlation": 5, "External id": 9}, {}, {"correlation": None, "external id": 4},
            {"External id": None, "external id": 6}, {"External id": 3, "external id": 8},
            {"correlation": "x", "External id": [1]}]
    events = [dict(GOOD[1], ts=100 + i, args=a) for i, a in enumerate(rows)]
    trace = read_trace(_write(tmp_path, _doc(events)))
    assert trace.events["correlation"].tolist() == [5, -1, -1, -1, -1, -1]
    assert trace.events["external_id"].tolist() == [9, -1, 4, 6, 3, -1]


@pytest.mark.parametrize("helpers", [0, 1])
def test_last_cut_inside_the_closing_keys_is_joined(tmp_path, monkeypatch, helpers):
    """The end of the event list is cut once more before the tail; when that cut lands in a
    key after ``traceEvents`` (a list of dicts), the chunk does not decode and is joined
    with the tail: the same events and keys as one piece."""
    from stepscope.read import decode

    events = [dict(GOOD[1], ts=10 + i, args={"External id": i}) for i in range(3000)]
    doc = {"traceEvents": events, "deviceProperties": [{"id": i, "name": "V100"}
                                                        for i in range(400)]}
    path = _write(tmp_path, json.dumps(doc, indent=1).encode())
    whole = read_trace(path)
    monkeypatch.setattr(decode, "CHUNK_BYTES", 40_000)
    monkeypatch.setattr(decode, "TAIL_CUT_BYTES", 1_000)
    _no_whole_document(monkeypatch)
    cut = read_trace(path, helpers=helpers)
    assert cut.events["external_id"].tolist() == list(range(3000)) == \
        whole.events["external_id"].tolist()
    assert cut.device_properties == whole.device_properties and len(cut.device_properties) == 400
    assert cut.notes == whole.notes == []


@pytest.mark.parametrize("memory_events", [3, 400])
def test_memory_instants_few_or_many_among_ops(tmp_path, monkeypatch, memory_events):
    """[memory] instants are taken from a chunk whether they are few (found by scanning the
    phases) or many; other instants and flows among them are not memory events."""
    from stepscope.read import decode

    events = []
    for i in range(600):
        events.append(dict(GOOD[1], ts=10 + i, args={"External id": i}))
        if i % (600 // memory_events) == 0 and len(events) < 2000:
            events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i,
                           "args": {"Bytes": i, "Total Allocated": 2 * i, "Device Id": 0}})
        if i % 50 == 0:
            events.append({"ph": "i", "name": "Iteration Start", "pid": 1, "tid": 1, "ts": i})
            events.append({"ph": "f", "id": i, "pid": 1, "tid": 1, "ts": i, "cat": "ac2g"})
    monkeypatch.setattr(decode, "CHUNK_BYTES", 8_000)
    trace = read_trace(_write(tmp_path, _doc(events)))
    want = [i for i in range(600) if i % (600 // memory_events) == 0]
    assert trace.memory["bytes"].tolist() == want
    assert trace.memory["total_allocated"].tolist() == [2 * i for i in want]
    assert trace.events["external_id"].tolist() == list(range(600))
    assert trace.phase_counts["i"] == len(want) + 12 and trace.phase_counts["f"] == 12


def test_launch_sizes_at_c_speed_equal_the_rule_for_each():
    """Grid and block sizes are multiplied at C speed when every one is three small
    non-negative ints, else one by one: both give :func:`_product` of each."""
    from stepscope.read.builder import _product, _products

    cases = [[[1, 2, 3], [4, 5, 6]], [], [[0, 0, 7]],
             [[1, 2, 3], [2, 2]], [[1, 2, 3], [-1, 2, 3]], [[1, 2, 3], [True, 2, 3]],
             [[1, 2, 3], [1.0, 2, 3]], [[1, 2, 3], None], [[1, 2, 3], "abc"],
             [[2**40, 2**40, 2**40]], [[2**70, 1, 1]], [[1, 2, 3], [1, 2, 3, 4]],
             [[1, 2, 3], {"x": 1}]]
    for dims in cases:
        assert _products(dims).tolist() == [_product(d) for d in dims], dims


@pytest.mark.parametrize("lanes", [
    [(0, 7), (1, 13)], [(0, 7), (None, 13)], [(0, "7"), (1, 13)], [(True, 7), (1, 13)],
    [(0, 7), (2**64, 13)], [(0, 7), (1, 2**63)]])
def test_device_and_stream_at_c_speed_equal_the_rule_for_each(tmp_path, lanes):
    """Kernels' device and stream come from int args (at C speed when all are ints), else
    from the number in pid/tid: the same either way, per kernel."""
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 3, "tid": "stream 9",
               "ts": 10 * i, "dur": 5, "args": {k: v for k, v in
                                                (("device", d), ("stream", s)) if v is not None}}
              for i, (d, s) in enumerate(lanes)]
    trace = read_trace(_write(tmp_path, _doc(events)))

    def rule(v, fallback):
        return v if type(v) is int and -2**63 <= v < 2**63 else fallback
    assert trace.device.tolist() == [rule(d, 3) for d, _ in lanes]
    assert trace.stream.tolist() == [rule(s, 9) for _, s in lanes]


def test_the_reader_takes_over_chunks_a_slow_helper_has_not_started(tmp_path, monkeypatch):
    """Rather than wait for its helper (slow here), the reader decodes the chunks the helper
    has not started yet: the helper answers "taken" for them, and the trace is the same."""
    import time

    from stepscope.read import shared

    events = [dict(GOOD[1], ts=10 + i, args={"External id": i}) for i in range(3000)]
    path = _write(tmp_path, _doc(events))
    whole = read_trace(path)
    _small_pieces(monkeypatch, 20_000)
    here = os.getpid()

    def slow(build_local):
        def slowly(chunk):
            time.sleep(0.2)
            return build_local(chunk)
        return slowly
    _in_helpers(monkeypatch, "build_local", slow)
    taken = []
    claim = shared.Slots.claim

    def counted(self, slot):
        ok = claim(self, slot)
        if os.getpid() == here:
            taken.append(ok)
        return ok
    monkeypatch.setattr(shared.Slots, "claim", counted)
    sent = _count_jobs_sent(monkeypatch)
    trace = read_trace(path, helpers=1)
    assert sent[0] > 0 and any(taken)  # the helper had chunks, the reader took some over
    assert trace.events["external_id"].tolist() == list(range(3000))
    for col in whole.events:
        assert np.array_equal(whole.events[col], trace.events[col], equal_nan=True), col


def test_begin_end_pairs_are_named_in_a_note_or_the_422(tmp_path):
    """B/E pairs were dropped without a word; a file of only them got "Was the profiler
    stopped before the first step?"."""
    from stepscope.errors import TraceError

    pair = [{"ph": "B", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 20},
            {"ph": "E", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 30}]
    trace = read_trace(_write(tmp_path, _doc(GOOD + pair)))
    (note,) = [n for n in trace.notes if n.code == "begin_end_events"]
    assert "ignored 2 begin/end events" in note.text
    with pytest.raises(TraceError) as e:
        read_trace(_write(tmp_path, _doc(pair)))
    assert 'begin/end event pairs ("ph": "B"/"E", 2 events)' in e.value.detail
