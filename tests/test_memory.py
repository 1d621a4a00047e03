"""Memory view (SPEC §4.1): curve, allocations, per-operator table, recommendations, bad
input. Hand-built traces with known answers; the real profile_memory trace; torch's own
numbers are compared in test_torch_crosscheck.py."""

from __future__ import annotations

import gzip
import json
import time

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    SHARED,
    SHARED_TRACES,
    build,
    have_shared,
    memory,
    op,
    shared_views,
)

from stepscope.analysis.memory import device_label, downsample, pair_frees
from stepscope.errors import BadParameter
from stepscope.model import MEMORY_COLUMNS, Trace
from stepscope.read.reader import read_trace
from stepscope.views import build_views

V100 = [{"id": 0, "name": "V100", "totalGlobalMem": 1000, "computeMajor": 7, "computeMinor": 0}]


def hand_built():
    """Ops on thread 1: A [0, 10] > B [2, 5], C [6, 9] > C [6.5, 8.5] (same name: collapsed).
    GPU0 events: +8 @1 (addr 1), +2 @2.5 on thread 2 (addr 4), +4 @3 (addr 2), -4 @4
    (addr 2), +16 @7 (addr 3), -8 @12 (addr 1). CPU: +100 @3.5."""
    return [
        op("A", 0, 10), op("B", 2, 3, shape=[[2, 3]]), op("C", 6, 3), op("C", "6.5", 2),
        memory(1, 8, nbytes=8, addr=1, reserved=40),
        memory("2.5", 10, nbytes=2, addr=4, tid=2, reserved=40),
        memory(3, 14, nbytes=4, addr=2, reserved=40),
        memory(4, 10, nbytes=-4, addr=2, reserved=40),
        memory(7, 26, nbytes=16, addr=3, reserved=40),
        memory(12, 18, nbytes=-8, addr=1, reserved=40),
        memory("3.5", 100, nbytes=100, addr=9, device_type=0, device_id=-1),
    ]


def rows_of(table):
    names = [c["name"] for c in table["columns"]]
    return [dict(zip(names, r)) for r in table["rows"]]


@pytest.fixture(scope="module")
def views():
    return build_views(build(hand_built(), device_properties=V100))


def test_devices_listed_with_peak_and_capacity(views):
    assert "Memory" in views.names()
    assert views.get("memory/devices", {}) == [
        {"device": "CPU", "type": 0, "id": -1, "events": 1, "peak_allocated": 100},
        {"device": "GPU0", "type": 1, "id": 0, "events": 6, "peak_allocated": 26,
         "capacity_bytes": 1000}]


def test_stats_size_increase_self_and_allocation_columns(views):
    rows = rows_of(views.get("memory/stats", {"device": "GPU0"}))
    got = {r["Name"]: [r[k] for k in ("Calls", "Size Increase", "Self Size Increase",
                                      "Allocation Count", "Self Allocation Count",
                                      "Allocation Size", "Self Allocation Size")] for r in rows}
    # the thread-2 event counts for A and B (any thread); C's same-name child is merged
    assert got == {"A": [1, 26, 8, 4, 1, 30, 8], "C": [1, 16, 16, 1, 1, 16, 16],
                   "B": [1, 2, 2, 2, 2, 6, 6]}
    assert [r["Name"] for r in rows] == ["A", "C", "B"]       # by size increase
    cpu = {r["Name"]: r["Size Increase"] for r in rows_of(views.get("memory/stats",
                                                                    {"device": "CPU"}))}
    assert cpu == {"A": 100, "B": 100, "C": 0}


def test_stats_by_input_shape(views):
    rows = rows_of(views.get("memory/stats", {"device": "GPU0",
                                              "group_by": "OperationAndInputShape"}))
    assert {(r["Name"], r["Input Shape"]): r["Self Size Increase"] for r in rows} == {
        ("A", ""): 8, ("B", "[[2, 3]]"): 2, ("C", ""): 16}


def test_allocations_paired_with_frees_and_named_by_their_operator(views):
    rows = views.get("memory/events", {"device": "GPU0"})["rows"]
    assert rows == [["A", 8, 1.0, 12.0, 11.0],
                    ["B", 2, 2.5, None, None],      # thread 2 has no op: any thread's innermost
                    ["B", 4, 3.0, 4.0, 1.0],
                    ["C", 16, 7.0, None, None]]     # never freed in the span


def test_allocations_page_window_search_and_sort(views):
    """The dashboard's paged form: rows live in a window, searched, sorted, one page."""
    def page(**q):
        return views.get("memory/events", {"device": "GPU0", **q})
    # live in [3.5, 5]: A (1..12), B@2.5 (never freed), B@3 (3..4, freed at 4 >= 3.5); C is later
    w = page(start="3.5", end="5")
    assert (w["total"], w["matched"], w["offset"], w["index"]) == (3, 3, 0, [0, 1, 2])
    assert [r[:3] for r in w["rows"]] == [["A", 8, 1.0], ["B", 2, 2.5], ["B", 4, 3.0]]
    assert page(start="4.5")["index"] == [0, 1, 3]               # B@3 freed at 4: gone
    assert page(end="2")["index"] == [0]
    # search: every term in operator or status
    assert page(search="never")["index"] == [1, 3]
    assert page(search="b NEVER")["index"] == [1]
    assert page(search="b freed")["index"] == [1, 2]               # "never freed" has "freed"
    assert page(search="zzz")["rows"] == [] and page(search="zzz")["total"] == 4
    # sort: size desc / asc, release time (never-freed rows last in both directions)
    assert page(sort="size")["index"] == [3, 0, 2, 1]
    assert page(sort="size", dir="asc")["index"] == [1, 2, 0, 3]
    assert page(sort="release_time")["index"] == [0, 2, 1, 3]
    assert page(sort="release_time", dir="asc")["index"] == [2, 0, 1, 3]
    assert page(sort="duration")["index"] == [0, 2, 1, 3]
    assert page(sort="operator", dir="asc")["index"] == [0, 1, 2, 3]  # stable among "B"
    assert page(sort="status", dir="asc")["index"] == [0, 2, 1, 3]
    # paging, and one row by its id
    p = page(sort="size", offset="1", limit="2")
    assert (p["index"], p["matched"], p["offset"]) == ([0, 2], 4, 1)
    assert [r[:2] for r in p["rows"]] == [["A", 8], ["B", 4]]
    assert page(offset="3", limit="1")["rows"] == [["C", 16, 7.0, None, None]]
    assert page(offset="9", limit="5")["rows"] == []
    # the plain form is unchanged: every row, no paging keys
    assert set(page()) == {"columns", "rows"}


@pytest.mark.parametrize("q", [{"offset": "-1"}, {"limit": "x"}, {"sort": "nope"},
                               {"offset": "99999999999999999999999"},  # was a 500 (int64)
                               {"dir": "up", "sort": "size"}, {"start": "9", "end": "1"},
                               {"start": "abc"}, {"offset": "1_0"}, {"limit": "+2"},
                               {"limit": " 2"}, {"offset": "\uff11"}])  # one rule: ASCII digits
def test_allocations_page_bad_parameters_are_400(views, q):
    with pytest.raises(BadParameter):
        views.get("memory/events", {"device": "GPU0", **q})


def test_curve_whole_span_peak_steps_and_capacity(views):
    c = views.get("memory/curve", {"device": "GPU0"})
    assert c["columns"] == ["ts_us", "allocated", "reserved"]
    assert c["rows"] == [[1.0, 8, 40], [2.5, 10, 40], [3.0, 14, 40], [4.0, 10, 40],
                         [7.0, 26, 40], [12.0, 18, 40]]
    assert c["peak"] == {"allocated": 26, "ts_us": 7.0}
    assert c["peak_reserved"] == 40 and c["capacity_bytes"] == 1000


def test_curve_window_opens_at_the_previous_level(views):
    c = views.get("memory/curve", {"device": "GPU0", "start": "3.5", "end": "8"})
    assert c["rows"] == [[3.0, 14, 40], [4.0, 10, 40], [7.0, 26, 40]]
    assert c["window_peak"] == {"allocated": 26, "ts_us": 7.0}
    assert (c["start_us"], c["end_us"]) == (3.5, 8.0)
    # the level the window opens at is its peak when nothing inside is higher
    c = views.get("memory/curve", {"device": "GPU0", "start": "7.5", "end": "11"})
    assert c["window_peak"] == {"allocated": 26, "ts_us": 7.5}
    c = views.get("memory/curve", {"device": "GPU0", "start": "3.5", "end": "3.9"})
    assert c["window_peak"] == {"allocated": 14, "ts_us": 3.5}


def test_two_devices_of_one_label_are_both_reachable(tmp_path):
    v = _write(tmp_path, [op("A", 0, 10),
                          memory(1, 8, nbytes=8, addr=1, device_type=0, device_id=-1),
                          memory(2, 5, nbytes=5, addr=2, device_type=0, device_id=0)])
    labels = [d["device"] for d in v.get("memory/devices", {})]
    assert len(set(labels)) == 2, labels
    assert [v.get("memory/curve", {"device": d})["peak"]["allocated"] for d in labels] == [8, 5]


def test_memory_events_before_the_first_event_start_the_span(tmp_path):
    """An allocation at 1000 µs, freed at 1010, the first op at 1100: times count from the
    allocation (they were negative: the free was lost, the peak out of the curve)."""
    v = _write(tmp_path, [memory(1000, 500, nbytes=500, addr=7),
                          memory(1010, 0, nbytes=-500, addr=7), op("aten::mm", 1100, 5)])
    rows = rows_of(v.get("memory/events", {"device": "GPU0"}))
    assert [(r["Allocation Time"], r["Release Time"], r["Duration"])
            for r in rows] == [(0.0, 10.0, 10.0)]
    c = v.get("memory/curve", {"device": "GPU0"})
    assert c["peak"] == {"allocated": 500, "ts_us": 0.0} and c["rows"][0][:2] == [0.0, 500]


@pytest.mark.parametrize("params", [{"device": "GPU7"}, {"width": "x"}, {"width": "3"},
                                    {"start": "5", "end": "5"}, {"start": "nan"}])
def test_bad_curve_parameters_are_400(views, params):
    with pytest.raises(BadParameter):
        views.get("memory/curve", {"device": "GPU0", **params})


def test_downsample_keeps_exact_peak_and_at_most_two_points_per_pixel():
    rng = np.random.default_rng(0)
    ts = np.cumsum(rng.integers(1, 100, 100_000)).astype(np.int64)
    vals = rng.integers(0, 1 << 40, len(ts)).astype(np.int64)
    for width, (s, e) in [(50, (0, int(ts[-1]))), (7, (int(ts[1000]), int(ts[5000])))]:
        idx = downsample(ts, vals, s, e, (2 * width - 1) // 4)
        assert len(idx) <= 2 * width
        inside = (ts >= s) & (ts <= e)
        assert vals[idx].max() >= vals[inside].max()
        assert int(np.argmax(np.where(inside, vals, -1))) in idx.tolist()
        assert (np.diff(idx) > 0).all()


def test_downsample_of_a_long_trace_keeps_every_bucket():
    """25 days (the reader keeps events up to 30 days apart) in 4,999 buckets: offset x
    buckets is beyond int64 (it wrapped: buckets and their first/last/min/max samples
    were lost)."""
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, 25 * 86400 * 10**9, 200_000)).astype(np.int64)
    vals = rng.integers(0, 1 << 40, len(ts)).astype(np.int64)
    buckets = 4999
    idx = downsample(ts, vals, 0, int(ts[-1]), buckets)
    span = int(ts[-1])
    want = {}
    for i, t in enumerate(ts.tolist()):  # the bucket of each sample, in Python ints
        want.setdefault(min(t * buckets // span, buckets - 1), []).append(i)
    kept = set(idx.tolist())
    assert len(want) > 4_900
    for members in want.values():
        v = vals[members]
        assert {members[0], members[-1], members[int(np.argmax(v))],
                members[int(np.argmin(v))]} <= kept
    assert len(idx) <= 4 * buckets + 1


def test_pair_frees_reuse_unmatched_and_missing_addresses():
    addr = np.array([5, 5, 5, 5, 7, -1, 5, 9])
    b = np.array([10, -10, 20, 30, -6, 4, -30, -1])
    alloc, release, unmatched, again = pair_frees(addr, b)
    assert alloc.tolist() == [0, 2, 3, 5]
    assert release[[0, 2, 3, 5]].tolist() == [1, -1, 6, -1]  # 2 reallocated before a free
    assert (unmatched, again) == (2, 1)                       # frees of 7 and 9


@pytest.mark.parametrize("dtype,did,label", [(0, -1, "CPU"), (1, 3, "GPU3"), (6, 0, "GPU0"),
                                             (12, 1, "XPU1"), (99, 2, "device99:2")])
def test_device_labels(dtype, did, label):
    assert device_label(dtype, did) == label


def test_trace_without_memory_events_has_no_memory_view():
    v = build_views(build([op("A", 0, 10)]))
    assert "Memory" not in v.names()
    assert v.get("memory/devices", {}) == []
    assert v.get("memory/curve", {})["rows"] == [] and v.get("memory/events", {})["rows"] == []
    assert v.get("memory/stats", {"group_by": "OperationAndInputShape"})["rows"] == []
    with pytest.raises(BadParameter):
        v.get("memory/curve", {"device": "GPU0"})


def _write(tmp_path, events, props=None):
    p = tmp_path / "w.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": props or []}))
    return build_views(read_trace(str(p)))


def test_hostile_memory_events_give_a_view_and_notes(tmp_path):
    def mem(ts, args):
        return {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1, "args": args}
    ok = {"Device Type": 1, "Device Id": 0, "Addr": 16, "Total Reserved": 64}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 0, "dur": 50, "pid": 1,
         "tid": 1},
        mem(1, {**ok, "Bytes": 8, "Total Allocated": 8}),
        mem(2, {**ok, "Bytes": 8, "Total Allocated": 16}),          # address reused
        mem(3, {**ok, "Bytes": -8, "Total Allocated": 8}),
        mem(4, {**ok, "Addr": 99, "Bytes": -4, "Total Allocated": 4}),  # free, no alloc
        mem(5, {"Device Type": "cuda", "Bytes": "x"}),               # garbled
        mem(6, None), mem(7, [1, 2]), mem("x", ok),                  # no args, bad ts
        mem(8, {"Device Type": 99, "Device Id": 3, "Bytes": 5, "Addr": 1}),  # unknown type,
        mem(9, {"Device Type": 99, "Device Id": 3, "Bytes": 7, "Addr": 2}),  # no totals
    ]
    v = _write(tmp_path, events)
    assert "Memory" in v.names()
    devices = [d["device"] for d in v.get("memory/devices", {})]
    assert devices == ["GPU0", "device99:3"]
    codes = {n["code"] for n in v.notes()}
    assert {"memory_bad_args", "memory_unmatched_frees", "memory_address_reused",
            "memory_totals_missing"} <= codes
    odd = v.get("memory/curve", {"device": "device99:3"})
    assert [r[1] for r in odd["rows"]] == [5, 12]        # running sum of Bytes
    assert [r[3] for r in v.get("memory/events", {"device": "GPU0"})["rows"]] == [None, 3.0]
    for d in devices:
        for route in ("memory/curve", "memory/events", "memory/stats"):
            json.dumps(v.get(route, {"device": d}))


def test_a_million_memory_events_analyse_and_answer_fast():
    n = 1_000_000
    trace = build([op("A", 0, 2_000_000), op("B", 10, 1_000_000)])
    rng = np.random.default_rng(1)
    size = rng.integers(1, 1 << 20, n // 2)
    b = np.empty(n, dtype=np.int64)
    b[0::2], b[1::2] = size, -size
    mem = {"ts": np.arange(n, dtype=np.int64) * 1000, "device_type": np.ones(n, np.int32),
           "device_id": np.zeros(n, np.int32), "bytes": b,
           "total_allocated": np.cumsum(b), "total_reserved": np.full(n, 1 << 30),
           "addr": np.repeat(np.arange(n // 2), 2).astype(np.int64),
           "thread": np.zeros(n, np.int32)}
    assert set(mem) == set(MEMORY_COLUMNS)
    trace = Trace(**{**trace.__dict__, "memory": mem})
    trace.check()
    v = build_views(trace)
    t0 = time.perf_counter()
    c = v.get("memory/curve", {"device": "GPU0", "width": "1000"})
    assert time.perf_counter() - t0 < 1.0        # generous: a shared CI machine
    assert len(c["rows"]) <= 2000
    assert c["peak"]["allocated"] == int(np.cumsum(b).max())
    stats = rows_of(v.get("memory/stats", {"device": "GPU0"}))
    by = {r["Name"]: r for r in stats}
    inside_b = (mem["ts"] >= 10_000) & (mem["ts"] <= 1_000_010_000)   # B in ns
    assert by["B"]["Size Increase"] == int(b[inside_b].sum())
    assert by["A"]["Allocation Count"] == n // 2


pytestmark_real = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)


@pytestmark_real
def test_real_profile_memory_trace():
    v = shared_views("hta_v100_profile_memory")
    with gzip.open(f"{SHARED}/{SHARED_TRACES['hta_v100_profile_memory']}") as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    gpu = [e["args"] for e in raw if e["args"]["Device Type"] == 1]
    devices = {d["device"]: d for d in v.get("memory/devices", {})}
    assert set(devices) == {"CPU", "GPU1"}
    assert devices["GPU1"]["events"] == len(gpu)
    assert devices["GPU1"]["peak_allocated"] == max(a["Total Allocated"] for a in gpu)
    assert devices["GPU1"]["capacity_bytes"] == 34089730048
    events = v.get("memory/events", {"device": "GPU1"})["rows"]
    assert len(events) == sum(a["Bytes"] > 0 for a in gpu)
    assert sum(r[1] for r in events) == sum(a["Bytes"] for a in gpu if a["Bytes"] > 0)
    curve = v.get("memory/curve", {"device": "GPU1", "width": "600"})
    assert len(curve["rows"]) <= 1200
    assert max(r[1] for r in curve["rows"]) == devices["GPU1"]["peak_allocated"]
    items = {it["id"] for it in v.get("overview", {})["recommendation_items"]}
    assert "memory_fragmentation" in items and "memory" not in items   # 6.2 of 31.7 GiB


def test_payloads_survive_the_payload_cache(views):
    """The payload cache stores JSON only (load_views unpacks without arrays): the memory
    routes answer the same from an unpacked ViewSet."""
    from stepscope.store.packing import pack, unpack

    state, arrays = pack(views)
    again = unpack(json.loads(json.dumps(state)), {})
    for route, params in [("memory/curve", {"device": "GPU0", "start": "2", "end": "9"}),
                          ("memory/events", {"device": "GPU0"}), ("memory/devices", {}),
                          ("memory/stats", {"device": "CPU", "group_by": "OperationAndInputShape"})]:
        assert again.get(route, params) == views.get(route, params)


def test_count_parameters_accept_their_whole_documented_range():
    """trace/search documents offset 0..10**12 but refused 10**12 itself (13 digits > 12)."""
    from stepscope.views.trace import _search

    class Timeline:
        def search(self, q, offset, limit):
            return (offset, limit)

    class Views:
        timeline = Timeline()

    assert _search(Views(), {"q": "a", "offset": str(10**12), "limit": "1000"}) == (10**12, 1000)
    with pytest.raises(BadParameter):
        _search(Views(), {"q": "a", "offset": str(10**12 + 1)})
