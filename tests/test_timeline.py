"""Timeline tests (issue 6): lanes, nesting, packing, the merge rule, conservation, LOD, 400s.

Tiny hand-built traces pin the exact layout and blocks; the shared ResNet-50 trace checks
conservation (every event overlapping a window is counted exactly once per lane, at any
zoom) against a direct count, and the launch links of the detail panel.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    SHARED,
    SHARED_TRACES,
    build,
    device,
    ev,
    have_shared,
    kernel,
    memcpy,
    memory,
    op,
    runtime,
    step,
)

from stepscope.errors import BadParameter, NotFound
from stepscope.taxonomy import DEVICE_ACTIVITY_KINDS, DEVICE_KINDS, Kind
from stepscope.timeline import build_timeline, event, lanes, lod
from stepscope.timeline.query import greedy_blocks

RESNET0 = os.path.join(SHARED, SHARED_TRACES["kineto_resnet50_w0"])
needs_shared = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)


# --- helpers -----------------------------------------------------------------------------------


def blocks_of(answer: dict, lane_id: str) -> list[list]:
    return next(ln["blocks"] for ln in answer["lanes"] if ln["id"] == lane_id)


def lane_counts(answer: dict, kind: str) -> int:
    return sum(b[4] for ln in answer["lanes"] if ln["kind"] == kind for b in ln["blocks"])


def overlapping(start: np.ndarray, end: np.ndarray, s: int, e: int) -> np.ndarray:
    """Half-open rule: overlaps [s, e), or zero-length with s <= start < e."""
    return (start < e) & ((end > s) | (start >= s))


def window_ns(answer: dict) -> tuple[int, int]:
    return round(answer["start"] * 1000), round(answer["end"] * 1000)


def check_answer(answer: dict, width: int) -> None:
    """Shape and invariants of one ``trace/timeline`` answer."""
    assert set(answer) == {"range", "start", "end", "names", "lanes", "steps"}
    s, e = window_ns(answer)
    px = (e - s) / width
    used = set()
    for ln in answer["lanes"]:
        assert ln["kind"] in ("host", "device", "counter")
        assert ln["id"].startswith(ln["kind"] + ":")
        if ln["kind"] == "counter":
            assert all(len(p) == 2 for p in ln["points"])
            continue
        rows: dict[int, list] = {}
        for b in ln["blocks"]:
            start, dur, name, depth, count = b[:5]
            assert len(b) == (6 if count == 1 else 5)
            assert round(start, 3) == start and round(dur, 3) == dur
            assert 0 <= name < len(answer["names"]) and count >= 1 and dur >= 0
            assert 0 <= depth < ln["rows"]
            if count > 1:
                assert dur * 1000 <= px + 1e-6, "a merged block stays within one pixel"
            used.add(name)
            rows.setdefault(depth, []).append((start, start + dur))
        for spans in rows.values():  # in time order, never overlapping within a row
            assert all(a[1] <= b[0] + 1e-9 and a[0] <= b[0] for a, b in zip(spans, spans[1:]))
    assert used == set(range(len(answer["names"]))), "names holds only the names used"


# --- the shared ResNet-50 sample ---------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet():
    from stepscope.read.reader import read_trace

    trace = read_trace(RESNET0)
    return trace, build_timeline(trace)


def _windows(tl, trace) -> list[tuple[float | None, float | None]]:
    end = tl.end_ns / 1000
    k = np.flatnonzero(trace.kind == Kind.KERNEL)
    k0, k1 = int(k[100]), int(k[5000])
    rng = np.random.default_rng(6)
    out: list[tuple[float | None, float | None]] = [
        (None, None), (0.0, 1000.0), (-50.0, end + 50), (end / 3, end / 2),
        # edges exactly on event boundaries (half-open rule)
        (trace.start[k0] / 1000, (trace.start[k1] + trace.dur[k1]) / 1000),
        ((trace.start[k0] + trace.dur[k0]) / 1000, trace.start[k1] / 1000),
    ]
    for _ in range(8):
        a, b = sorted(rng.uniform(0, end, 2).round(3))
        out.append((float(a), float(b)))
    for _ in range(6):
        a = round(float(rng.uniform(0, end)), 3)
        out.append((a, a + float(rng.choice([0.5, 3.0, 40.0, 2000.0]))))
    return out


@needs_shared
@pytest.mark.parametrize("width", [1, 137, 1000, 2000, 10000])
def test_conservation_device_and_host(resnet, width):
    trace, tl = resnet
    kind = trace.kind
    assert not np.isin(kind, [Kind.GPU_RANGE, Kind.SYNC]).any()
    assert tl.layout.clipped == 0
    end = trace.start + trace.dur
    act = np.isin(kind, np.array(DEVICE_ACTIVITY_KINDS, dtype=np.uint8))
    host = ~np.isin(kind, np.array(DEVICE_KINDS, dtype=np.uint8))
    whole = tl.query(None, None, width)
    assert lane_counts(whole, "device") == int(act.sum()) == 9564 + 12 + 439
    assert lane_counts(whole, "host") == int(host.sum())
    for a, b in _windows(tl, trace):
        answer = tl.query(a, b, width)
        s, e = window_ns(answer)
        hit = overlapping(trace.start, end, s, e)
        assert lane_counts(answer, "device") == int((hit & act).sum()), (a, b)
        assert lane_counts(answer, "host") == int((hit & host).sum()), (a, b)
        per_lane = np.bincount(tl.layout.lane[hit], minlength=len(tl.layout.lanes))
        got = [sum(b[4] for b in ln["blocks"]) for ln in answer["lanes"] if "blocks" in ln]
        assert got == per_lane.tolist()
        check_answer(answer, width)


@needs_shared
def test_two_ms_window_mid_step_shows_single_events(resnet):
    trace, tl = resnet
    act = np.isin(trace.kind, np.array(DEVICE_ACTIVITY_KINDS, dtype=np.uint8))
    assert len(tl.steps) == 6
    for _name, a, b in tl.steps:
        mid = (a + b) / 2000
        answer = tl.query(mid - 1000, mid + 1000, 1000)
        s, e = window_ns(answer)
        want = int((overlapping(trace.start, trace.start + trace.dur, s, e) & act).sum())
        dev = [b for ln in answer["lanes"] if ln["kind"] == "device" for b in ln["blocks"]]
        singles = sum(1 for b in dev if b[4] == 1)
        assert want > 5 and sum(b[4] for b in dev) == want
        assert singles >= 0.9 * want
        assert all(act[b[5]] for b in dev if b[4] == 1)


@needs_shared
def test_whole_range_answer(resnet):
    trace, tl = resnet
    answer = tl.query(None, None, 2000)
    check_answer(answer, 2000)
    assert answer["range"] == [0, (trace.start + trace.dur).max() / 1000]
    assert answer["start"] == 0 and answer["end"] == answer["range"][1]
    assert [ln["id"] for ln in answer["lanes"]] == [
        "host:119771:509646592", "host:119771:1890023232", "host:Traces:PyTorch Profiler",
        "device:0:7", "counter:GPU 0 Utilization"]
    assert [s[0] for s in answer["steps"]] == ["5", "6", "7", "8", "9", "10"]
    util = next(ln for ln in answer["lanes"] if ln["kind"] == "counter")["points"]
    assert len(util) == 2000 and all(0 <= v <= 1 for _, v in util)
    assert len(json.dumps(answer, separators=(",", ":"))) < 2_000_000


@needs_shared
def test_event_details_link_kernel_runtime_op(resnet, monkeypatch):
    trace, tl = resnet
    kernels = np.flatnonzero(trace.kind == Kind.KERNEL)
    assert tl.event(int(kernels[0]))["runtime"] is None  # launched before the profiler began
    k = int(kernels[tl.event_index.links.launcher[kernels] >= 0][500])
    kd = tl.event(k)
    assert kd["id"] == k and kd["kind"] == "kernel" and kd["lane"] == "device:0:7"
    assert kd["name"] == trace.name_of(k) and kd["category"] == "Kernel"
    assert kd["start"] == trace.start[k] / 1000 and kd["dur"] == trace.dur[k] / 1000
    assert kd["correlation"] == trace.correlation[k] and kd["args"]["device"] == 0
    rt = kd["runtime"]
    assert rt["kind"] == "runtime" and rt["name"] == "cudaLaunchKernel"
    assert trace.correlation[rt["id"]] == trace.correlation[k]
    op_ = kd["op"]
    assert op_["kind"] == "host_op"
    assert trace.external_id[op_["id"]] == trace.external_id[rt["id"]] > 0
    rd = tl.event(rt["id"])
    assert rd["op"]["id"] == op_["id"]
    assert [a["id"] for a in rd["launched"]] == [k] and rd["launched"][0]["runtime"] == rt["id"]
    od = tl.event(op_["id"])
    assert k in [a["id"] for a in od["launched"]] and od["lane"].startswith("host:")
    assert od["input_shape"] is not None
    # a step launches thousands: the count is exact, the list capped
    monkeypatch.setattr(event, "MAX_LAUNCHED", 100)
    sd = tl.event(int(np.flatnonzero(trace.kind == Kind.STEP)[0]))
    assert sd["launched_count"] == 921 and len(sd["launched"]) == 100
    for bad in (-1, len(trace), "x"):
        with pytest.raises(NotFound) as err:
            tl.event(bad)
        assert err.value.status == 404


@needs_shared
def test_steps_carry_their_host_span_and_event():
    from stepscope.read.reader import read_trace
    from stepscope.views import build_views
    from stepscope.views.trace import timeline_of

    a = build_views(read_trace(RESNET0)).analysis
    steps = timeline_of(a).query(None, None, 1000)["steps"]
    assert [s[0] for s in steps] == [str(n) for n in range(5, 11)]
    for (name, start, end, hs, he, hid), k in zip(steps, range(6)):
        assert (start, end) == (a.steps.start[k] / 1000, a.steps.end[k] / 1000)
        assert (hs, he) == (a.steps.host_start[k] / 1000, a.steps.host_end[k] / 1000)
        assert a.trace.name_of(hid) == f"ProfilerStep#{name}"
        assert a.trace.start[hid] / 1000 == hs
    assert steps[1][1:5] == [166483.0, 324982.0, 159374.0, 310164.0]   # re-timed: later


@needs_shared
def test_bad_parameters_answer_400(resnet):
    _trace, tl = resnet
    for args in [(5, 5, 100), (10, 5, 100), (None, None, 0), (None, None, 10001),
                 (None, None, "wide"), ("soon", None, 100), (float("nan"), 10, 100),
                 (0, float("inf"), 100), (None, -1, 100)]:
        with pytest.raises(BadParameter) as err:
            tl.query(*args)
        assert err.value.status == 400 and err.value.body()["detail"]
    with pytest.raises(BadParameter) as err:  # finite, but past the range: say the range
        tl.query("1e16", None, 100)
    assert "within ±1e15 (31 years) of the trace's start, got '1e16'" in err.value.body()["detail"]
    assert tl.query(None, None, 1)["lanes"] and tl.query(None, None, 10000)["lanes"]


# --- tiny hand-built traces with known answers --------------------------------------------------


def test_host_nesting_depths_and_blocks():
    t = build([op("A", 0, 10), op("B", 2, 3), op("C", 5, 4), op("D", 6, 1),
               op("E", 20, 5, tid=2), op("F", 20, 5, tid=2)])
    tl = build_timeline(t)
    assert tl.layout.row.tolist() == [0, 1, 1, 2, 0, 1]  # equal spans: file order nests
    assert [(ln.id, ln.rows) for ln in tl.layout.lanes] == [("host:100:1", 3), ("host:100:2", 2)]
    answer = tl.query(None, None, 10000)
    names = answer["names"]
    got = [[names[b[2]], b[0], b[1], b[3], b[4], b[5]] for b in blocks_of(answer, "host:100:1")]
    assert got == [["A", 0.0, 10.0, 0, 1, 0], ["B", 2.0, 3.0, 1, 1, 1],
                   ["C", 5.0, 4.0, 1, 1, 2], ["D", 6.0, 1.0, 2, 1, 3]]
    assert answer["range"] == [0, 25.0] and answer["steps"] == []


def test_search_covers_the_whole_trace_by_start_then_id():
    t = build([op("aten::add", 5, 1), op("aten::addmm", 2, 1), op("aten::mul", 0, 9),
               op("Add", 2, 1, tid=2), op("aten::ADD_", 50_000, 1)])
    tl = build_timeline(t)
    found = tl.search("add")
    assert found["total"] == 4 and (found["offset"], found["limit"]) == (0, 100)
    assert [(m["name"], m["start"]) for m in found["matches"]] == [
        ("aten::addmm", 2.0), ("Add", 2.0), ("aten::add", 5.0), ("aten::ADD_", 50_000.0)]
    assert found["matches"][1]["lane"] == "host:100:2" and found["matches"][0]["id"] == 1
    page = tl.search("ADD", offset=1, limit=2)
    assert page["total"] == 4 and [m["name"] for m in page["matches"]] == ["Add", "aten::add"]
    assert tl.search("add", offset=9)["matches"] == [] and tl.search("zzz")["total"] == 0


def test_partial_overlap_is_clipped_to_the_enclosing_event():
    # B overlaps A partially: clipped to A's end, so C (inside the original B) is top level
    # and z sits under C only; the cluster after it keeps the fast path
    t = build([op("A", 0, 10), op("B", 5, 10), op("C", 12, 2), op("X", 0, 4, tid=2),
               op("Y", 1, 2, tid=2), op("z", 13, 0), op("P", 20, 10), op("Q", 22, 2)])
    tl = build_timeline(t)
    assert tl.layout.row.tolist() == [0, 1, 0, 0, 1, 1, 0, 1]
    assert tl.layout.vis_end.tolist() == [10000, 10000, 14000, 4000, 3000, 13000, 30000, 24000]
    assert tl.layout.clipped == 1
    assert tl.event(1)["clipped_end"] == 10.0 and tl.event(1)["end"] == 15.0
    assert "clipped_end" not in tl.event(0)
    answer = tl.query(None, None, 10000)
    check_answer(answer, 10000)
    assert [(b[0], b[1], b[3]) for b in blocks_of(answer, "host:100:1")] == [
        (0.0, 10.0, 0), (12.0, 2.0, 0), (20.0, 10.0, 0),  # by row, then time
        (5.0, 5.0, 1), (13.0, 0.0, 1), (22.0, 2.0, 1)]


def test_zero_length_events_and_half_open_windows():
    t = build([op("A", 0, 10), op("z0", 0, 0), op("z5", 5, 0), op("z10", 10, 0),
               op("B", 10, 5)])
    tl = build_timeline(t)
    assert tl.layout.row.tolist() == [0, 1, 1, 1, 0]

    def ids(a, b):
        answer = tl.query(a, b, 10000)
        return sorted(b[5] for b in blocks_of(answer, "host:100:1"))

    assert ids(0, 10) == [0, 1, 2]          # z10 starts at the (excluded) end
    assert ids(10, 20) == [3, 4]            # A ends where the window starts: out
    assert ids(5, 5.001) == [0, 2]
    assert ids(9.999, 10) == [0]


def test_device_streams_pack_overlaps_into_rows():
    t = build([kernel("k0", 0, 4), kernel("k1", 2, 4), kernel("k2", 5, 3),
               kernel("s", 0, 1, stream=20), memcpy(9, 1), kernel("k3", 1, 1),
               device("gpu_user_annotation", "range", 0, 10),
               device("cuda_sync", "Stream Sync", 3, 2),
               kernel("g1", 0, 1, device_id=1)])
    tl = build_timeline(t)
    lay = tl.layout
    ids = {ln.id: ln.rows for ln in lay.lanes}
    assert ids == {"device:0:7": 3, "device:0:20": 1, "device:1:7": 1, "device:0:sync": 1}
    # in (start, end desc) order: the range encloses everything (row 0), k0 row 1, k3 row 2,
    # k1 takes row 2 again (k3 ended), k2 and the memcpy row 1 (k0 ended)
    assert lay.row.tolist() == [1, 2, 1, 0, 1, 2, 0, 0, 0]
    answer = tl.query(None, None, 10000)
    check_answer(answer, 10000)
    assert lane_counts(answer, "device") == 9
    assert [c["id"] for c in answer["lanes"] if c["kind"] == "counter"] == [
        "counter:GPU 0 Utilization", "counter:GPU 1 Utilization"]


def test_greedy_merge_rule():
    # px = 10 µs: [0,3)+[4,9) fit one pixel and take the longer one's name; [12,30) is longer
    # than a pixel; [31,33)+[35,40) would span 9 µs: merged; [41,52) alone
    t = build([op("a", 0, 3), op("b", 4, 5), op("long", 12, 18), op("c", 31, 2), op("d", 35, 5),
               op("e", 41, 11), op("end", 100, 0, tid=2)])
    tl = build_timeline(t)
    answer = tl.query(0, 100, 10)
    names = answer["names"]
    got = [[names[b[2]], *b[:2], *b[3:]] for b in blocks_of(answer, "host:100:1")]
    assert got == [["b", 0.0, 9.0, 0, 2], ["long", 12.0, 18.0, 0, 1, 2],
                   ["d", 31.0, 9.0, 0, 2], ["e", 41.0, 11.0, 0, 1, 5]]
    assert sorted(names) == ["b", "d", "e", "long"]
    # zoomed in, every block is a single event
    fine = tl.query(0, 60, 6000)
    assert [b[4] for b in blocks_of(fine, "host:100:1")] == [1] * 6


def test_greedy_matches_reference_on_single_events():
    """Below the first LOD bucket the blocks are exactly the greedy merge of the events."""
    rng = np.random.default_rng(3)
    durs = rng.integers(0, 300, 3000)
    gaps = rng.integers(0, 400, 3000)
    starts = np.cumsum(gaps) + np.r_[0, np.cumsum(durs)[:-1]]  # one row: never overlapping
    ends = starts + durs
    L = lod.LOD(np.zeros(3000, dtype=np.int32), starts, ends, np.arange(3000), 1)
    for s, e, px in [(0, int(ends[-1]) + 1, 900.0), (12345, 400000, 250.5), (5000, 6000, 3.0)]:
        lo, hi = L.window(s, e)
        blocks, _ = greedy_blocks(L, L.cover(lo, hi, px), px)
        ref, i = [], int(lo[0])
        while i < hi[0]:
            j = i + 1
            while j < hi[0] and ends[j] - starts[i] <= px:
                j += 1
            ref.append((int(starts[i]), int(ends[j - 1]), j - i))
            i = j
        assert list(zip(blocks.start.tolist(), blocks.end.tolist(), blocks.count.tolist())) == ref


def test_counters_utilization_and_memory():
    t = build([kernel("k0", 0, 5), kernel("k1", 3, 5), op("host", 0, 10),
               memory(1, 100), memory(2, 50), memory(3, 200), memory(6, 10),
               memory(4, 7, device_type=0)])
    tl = build_timeline(t)
    answer = tl.query(0, 10, 2)
    pts = {ln["id"]: ln["points"] for ln in answer["lanes"] if ln["kind"] == "counter"}
    assert pts["counter:GPU 0 Utilization"] == [[0.0, 1.0], [5.0, 0.6]]
    assert pts["counter:GPU0 Memory Allocated"] == [[2.0, 50], [3.0, 200], [6.0, 10]]
    assert pts["counter:CPU Memory Allocated"] == [[4.0, 7]]
    later = tl.query(2.5, 10, 1)
    pts = {ln["id"]: ln["points"] for ln in later["lanes"] if ln["kind"] == "counter"}
    assert pts["counter:GPU0 Memory Allocated"] == [[2.5, 50], [3.0, 200], [6.0, 10]]
    assert pts["counter:GPU 0 Utilization"] == [[2.5, 0.7333]]


def test_memory_lanes_are_the_memory_views_devices():
    """One lane per device of ``memory/devices``, named by its label: CPU ids -1 and 0 were
    two lanes of one id, a ROCm device (type 6) "Device type 6 0", and a trace without
    Total Allocated had no lane (the Memory view draws the running sum of Bytes)."""
    from stepscope.views import build_views

    no_total = memory(5, 0, device_id=1, nbytes=30)
    del no_total["args"]["Total Allocated"]
    views = build_views(build([op("host", 0, 10), memory(1, 1000, device_id=-1, device_type=0),
                               memory(2, 50, device_type=0), memory(3, 7, device_type=6),
                               no_total, {**no_total, "ts": 6}]))
    answer = views.timeline.query(0, 10, 10)
    lanes = {ln["name"]: ln["points"] for ln in answer["lanes"] if ln["kind"] == "counter"}
    labels = [d["device"] for d in views.get("memory/devices", {})]
    assert labels == ["CPU (type 0, id -1)", "CPU (type 0, id 0)", "GPU1", "GPU0"]
    assert lanes == {"CPU (type 0, id -1) Memory Allocated": [[1.0, 1000]],
                     "CPU (type 0, id 0) Memory Allocated": [[2.0, 50]],
                     "GPU0 Memory Allocated": [[3.0, 7]],
                     "GPU1 Memory Allocated": [[5.0, 30], [6.0, 60]]}
    assert len({ln["id"] for ln in answer["lanes"]}) == len(answer["lanes"])


def test_counters_of_a_window_of_days_stay_in_range_and_order():
    # (e - s) in ns times the width left int64: negative shares, times out of order
    tl = build_timeline(build([kernel("k0", 0, 5), op("host", 0, 10), memory(1, 100),
                               memory(2, 50)]))
    for start, end in ((0, 1e15), (-1e15, 1e15)):
        answer = tl.query(start, end, 10000)
        for ln in answer["lanes"]:
            if ln["kind"] != "counter":
                continue
            times = [p[0] for p in ln["points"]]
            assert times == sorted(times), ln["id"]
            if ln["id"].endswith("Utilization"):
                assert all(0 <= p[1] <= 1 for p in ln["points"])
            else:
                assert [p[1] for p in ln["points"]] == [100, 50]


def test_utilization_of_zero_length_kernels_only_is_zero():
    tl = build_timeline(build([kernel("k", 5, 0), op("host", 0, 10)]))
    pts = {ln["id"]: ln["points"] for ln in tl.query(0, 10, 2)["lanes"] if ln["kind"] == "counter"}
    assert pts["counter:GPU 0 Utilization"] == [[0.0, 0.0], [5.0, 0.0]]


def test_steps_are_window_filtered():
    t = build([step(1, 0, 10), step(2, 10, 10), op("x", 1, 1), op("y", 12, 1)])
    tl = build_timeline(t)
    # [name, start, end, host start, host end, ProfilerStep event id]
    assert tl.query(None, None, 10)["steps"] == [["1", 0.0, 10.0, 0.0, 10.0, 0],
                                                 ["2", 10.0, 20.0, 10.0, 20.0, 1]]
    assert tl.query(10, 12, 10)["steps"] == [["2", 10.0, 20.0, 10.0, 20.0, 1]]
    custom = build_timeline(t, steps=[("1", 0, 15000)])
    assert custom.query(None, None, 10)["steps"] == [["1", 0.0, 15.0, 0.0, 15.0, 0]]
    retimed = build_timeline(t, steps=[("1", 2000, 15000, 0, 10000)])
    assert retimed.query(None, None, 10)["steps"] == [["1", 2.0, 15.0, 0.0, 10.0, 0]]


def test_event_links_on_a_tiny_trace():
    t = build([op("aten::conv2d", 0, 20, ext=1), op("aten::cudnn_convolution", 1, 18, ext=2),
               runtime("cudaLaunchKernel", 2, 1, corr=7, ext=2), kernel("conv", 5, 10, corr=7),
               kernel("orphan", 30, 1, corr=99)])
    tl = build_timeline(t)
    assert tl.event(3)["runtime"]["id"] == 2 and tl.event(3)["op"]["id"] == 1
    assert [a["id"] for a in tl.event(0)["launched"]] == [3]  # outer op: nested launches
    assert [a["id"] for a in tl.event(1)["launched"]] == [3]
    assert tl.event(2)["op"]["name"] == "aten::cudnn_convolution"
    assert tl.event(4)["runtime"] is None and tl.event(4)["op"] is None


def test_a_long_event_lists_only_launches_of_its_own_thread():
    # an event ending after about twice the latest start spilled into the thread bits of
    # the (thread, start) key: thread 1's range listed a kernel launched on thread 2
    t = build([op("outer_t1", 0, 5000, tid=1), op("op_t2", 0.5, 1, tid=2, ext=2),
               runtime("cudaLaunchKernel", 0.6, 0.2, corr=9, ext=2, tid=2),
               kernel("k_from_t2", 1, 1, corr=9)])
    tl = build_timeline(t)
    assert tl.event(0)["launched"] == []
    assert [a["name"] for a in tl.event(1)["launched"]] == ["k_from_t2"]


# --- scale and robustness ---------------------------------------------------------------------------


def test_deep_nesting_does_not_overflow():
    n = 100_000
    t = build([op(f"f{i % 7}", i, 2 * (n - i)) for i in range(n)])
    tl = build_timeline(t)
    assert tl.layout.lanes[0].rows == n and tl.layout.row[-1] == n - 1
    answer = tl.query(None, None, 2000)
    assert lane_counts(answer, "host") == n
    assert max(b[3] for b in blocks_of(answer, "host:100:1")) == n - 1
    assert tl.event(n - 1)["depth"] == n - 1


def test_deep_partial_overlaps_do_not_overflow():
    n = 100_000  # a staircase: each event partially overlaps the one before it
    tl = build_timeline(build([op("f", i, n) for i in range(n)]))
    assert tl.layout.row.tolist() == list(range(n)) and tl.layout.clipped == n - 1
    assert (tl.layout.vis_end == n * 1000).all()


def test_host_rows_are_the_depths_of_the_analysis_tree():
    from stepscope.analysis.tree import build_tree

    rng = np.random.default_rng(11)
    # random properly nested events from a random open/close walk; equal times are common
    # (ties, identical spans, zero-length events), plus a few partial overlaps
    spans, stack, t = [], [], 0
    for _ in range(4000):
        t += int(rng.integers(0, 3))
        if stack and rng.random() < 0.5:
            spans.append((stack.pop(), t))
        else:
            stack.append(t)
    spans += [(a, t + 1) for a in stack] + [(a, a + 7) for a in rng.integers(0, t, 20)]
    spans = [spans[i] for i in rng.permutation(len(spans))]  # file order is arbitrary
    tids = rng.integers(1, 4, len(spans))
    trace = build([op("x", a, b - a, tid=int(k)) for (a, b), k in zip(spans, tids)])
    tree = build_tree(trace)
    ancestors = np.zeros(len(tree), dtype=np.int64)  # by walking up the parents
    for i, p in enumerate(tree.parent.tolist()):
        ancestors[i] = ancestors[p] + 1 if p >= 0 else 0
    assert (tree.depth() == ancestors).all() and ancestors.max() > 5
    layout = build_timeline(trace).layout
    assert (layout.row[tree.rows] == ancestors).all()
    assert (layout.vis_end[tree.rows] == tree.end).all() and layout.clipped == tree.clipped > 0


def test_runtime_call_spanning_its_op_exactly_nests_under_it():
    # identical spans: the analysis' rule (host event before runtime call, SPEC §2.4.1) wins
    # over file order, which used to put the runtime call first and the op under it
    t = build([runtime("cudaLaunchKernel", 0, 5, corr=1), op("aten::add", 0, 5),
               op("aten::mul", 10, 2), runtime("cudaMemcpyAsync", 10, 2, corr=2)])
    tl = build_timeline(t)
    assert tl.layout.row.tolist() == [1, 0, 0, 1]
    assert tl.event(0)["depth"] == 1 and tl.event(1)["depth"] == 0


def test_unknown_categories_nest_with_the_ops_of_their_thread():
    # the analysis does not nest unknown categories: their thread is nested as a whole by the
    # same function, partial overlaps clipped as for ops
    t = build([ev("my_category", "outer", 0, 10), op("A", 1, 4), op("B", 2, 10),
               op("C", 0, 3, tid=2)])
    assert t.kind.tolist() == [Kind.OTHER, Kind.HOST_OP, Kind.HOST_OP, Kind.HOST_OP]
    tl = build_timeline(t)
    assert tl.layout.row.tolist() == [0, 1, 2, 0]
    assert tl.layout.vis_end.tolist() == [10000, 5000, 5000, 3000]
    assert tl.layout.clipped == 1


def test_the_timeline_reuses_the_analysis_nesting(monkeypatch):
    from stepscope.analysis import analyze
    from stepscope.views.trace import timeline_of

    a = analyze(build([op("A", 0, 10), op("B", 2, 3), runtime("cudaLaunchKernel", 3, 1),
                       ev("Trace", "PyTorch Profiler (0)", 0, 20, pid="Spans", tid=1)]))

    nested = []
    real = lanes.build_tree

    def nest_again(trace, rows=None):
        nested.append(None if rows is None else rows.tolist())
        return real(trace, rows)

    monkeypatch.setattr(lanes, "build_tree", nest_again)
    build_timeline(a.trace)
    assert nested == [None, [3]]  # without the analysis: every thread, then the span's
    nested.clear()
    tl = timeline_of(a)
    assert nested == [[3]]  # only the span's thread, which the analysis does not nest
    assert tl.layout.row.tolist() == [0, 1, 2, 0]


def test_lod_levels_conserve_counts_on_a_dense_random_trace(monkeypatch):
    monkeypatch.setattr(lod, "BASE_BUCKET", 16)
    monkeypatch.setattr(lod, "FACTOR", 2)
    rng = np.random.default_rng(5)
    n = 20000
    start = rng.integers(0, 2_000_000, n)
    dur = rng.choice([0, 1, 3, 10, 50, 400, 5000], n)
    kinds = rng.integers(0, 2, n)
    events = [(op if k else kernel)(f"n{i % 13}", f"{s / 1000:.3f}", f"{d / 1000:.3f}",
                                    **({"tid": int(i % 2)} if k else {"stream": int(i % 3)}))
              for i, (s, d, k) in enumerate(zip(start, dur, kinds))]
    t = build(events)
    tl = build_timeline(t)
    assert len(tl.lod.levels) > 4
    vis = tl.layout.vis_end
    for a, b, width in [(None, None, 50), (0.5, 1500.25, 300), (777.777, 778.9, 3),
                        (100, 1900, 2000), (-5, 3000, 7)]:
        answer = tl.query(a, b, width)
        check_answer(answer, width)
        s, e = window_ns(answer)
        hit = overlapping(t.start, vis, s, e)
        per_lane = np.bincount(tl.layout.lane[hit], minlength=len(tl.layout.lanes))
        got = [sum(b[4] for b in ln["blocks"]) for ln in answer["lanes"] if "blocks" in ln]
        assert got == per_lane.tolist()


@needs_shared
@pytest.mark.parametrize("key", sorted(SHARED_TRACES))
def test_every_shared_trace_builds_and_conserves(key):
    from stepscope.read.reader import read_trace

    trace = read_trace(os.path.join(SHARED, SHARED_TRACES[key]))
    tl = build_timeline(trace)
    vis = tl.layout.vis_end
    for a, b in [(None, None), (tl.end_ns / 3000, tl.end_ns / 2000)]:
        answer = tl.query(a, b, 1500)
        check_answer(answer, 1500)
        s, e = window_ns(answer)
        hit = overlapping(trace.start, vis, s, e)
        assert sum(lane_counts(answer, k) for k in ("host", "device")) == int(hit.sum())
    json.dumps(tl.event(len(trace) - 1))


@needs_shared
def test_worker_order_lanes_first_then_timeline_gives_the_same_timeline(resnet):
    """Issue 19: the worker lays out the lanes from the analysis' nesting, frees the nesting,
    then builds the rest (``layout=``): the same answers as building it in one call."""
    from stepscope.analysis import analyze
    from stepscope.views.trace import timeline_inputs

    trace, _ = resnet
    inputs = timeline_inputs(analyze(trace))
    whole = build_timeline(**inputs)
    inputs["layout"] = lanes.assign_lanes(inputs["trace"], inputs.pop("tree"))
    parts = build_timeline(**inputs)
    for width in (300, 2000):
        assert parts.query(None, None, width) == whole.query(None, None, width)
    assert (parts.layout.row == whole.layout.row).all()


def test_row_start_order_is_the_stable_order_of_row_then_start():
    """The LOD's order (starts sorted, then rows by a 16-bit radix sort) is exactly the
    stable sort of ``row << shift | start``: ties keep the event order."""
    rng = np.random.default_rng(11)
    for nrows in (1, 7, 70_000):
        row = rng.integers(0, nrows, 5000)
        start = rng.integers(0, 300, 5000)  # many ties
        key = (row << 20) | start
        assert np.array_equal(lod._row_start_order(row, start, nrows),
                              np.argsort(key, kind="stable"))


@needs_shared
def test_timeline_built_with_a_second_thread_equals_the_serial_build(resnet, monkeypatch):
    """Big traces build the counters and link tables beside the LOD index in a second
    thread: every query, event detail and stored array is the same as built serially."""
    from stepscope import processes
    from stepscope.store.packing import pack

    trace, _ = resnet
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(0))
    serial = build_timeline(trace)
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(10**9))
    threaded = build_timeline(trace)
    for width in (300, 2000):
        assert threaded.query(None, None, width) == serial.query(None, None, width)
    assert threaded.event(len(trace) // 2) == serial.event(len(trace) // 2)
    (state_s, arrays_s), (state_t, arrays_t) = pack(serial), pack(threaded)
    assert state_s == state_t and arrays_s.keys() == arrays_t.keys()
    assert all(arrays_s[k].tobytes() == arrays_t[k].tobytes() for k in arrays_s)


# --- read back from the cache -------------------------------------------------------------------


def _cached(tmp_path, tl, rebuild=None):
    """``tl`` stored in a disk cache and read back as the server does: (LazyTimeline, cache)."""
    from stepscope.store.cache import DiskCache
    from stepscope.store.lazy import LazyTimeline, TimelineSlots
    from stepscope.store.packing import pack

    cache = DiskCache(str(tmp_path / "cache"))
    source = str(tmp_path / "w.pt.trace.json")
    state, arrays = pack(tl)
    cache.put(source, {"state": state}, arrays, key="k")
    return LazyTimeline(lambda: cache.get(source, "k"), rebuild or (lambda: 1 / 0),
                        TimelineSlots()), cache


def _tiny_timeline():
    return build_timeline(build(
        [step(1, 0, 100), op("aten::conv2d", 1, 50, ext=1), runtime("cudaLaunchKernel", 2, 5, corr=7),
         kernel("conv", 10, 30, corr=7), op("aten::add", 60, 5), step(2, 100, 100),
         op("aten::add", 110, 5), kernel("add", 120, 4)]))


@pytest.mark.parametrize("own_files", [False, True])
def test_a_cached_timeline_unpacks_its_event_tables_when_first_used(tmp_path, monkeypatch,
                                                                    own_files):
    """The server draws a cached timeline's first window without loading the per-event
    tables (issue 19, x200: 0.88-1.10 -> 0.30-0.40 s to the first answer); an event or a
    search loads them then, from files held open even if the entry was evicted meanwhile,
    and every answer is the one of the timeline as built."""
    from stepscope.store import cache as cache_mod
    from stepscope.store.packing import refs

    if own_files:  # every array in a file of its own (big traces), else all in small.bin
        monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    tl = _tiny_timeline()
    lazy, cache = _cached(tmp_path, tl)
    for width in (300, 2000):
        assert lazy.query(None, None, width) == tl.query(None, None, width)
    entry = lazy.entry
    later_only = set(entry.names()) - refs(entry.meta["state"])
    assert later_only and not later_only & set(entry._arrays)  # trace columns among them
    assert bool(entry._files) == own_files
    import shutil
    shutil.rmtree(entry.folder)  # evicted (by another server sharing the cache, say)
    for i in range(len(tl.trace)):
        assert lazy.event(i) == tl.event(i)
    assert lazy.search("add") == tl.search("add")
    assert later_only <= set(entry._arrays) and not entry._files
    with pytest.raises(NotFound):
        lazy.event(len(tl.trace))


def test_a_cached_timeline_whose_later_part_is_corrupt_is_analysed_again(tmp_path, monkeypatch):
    """A table unpacked on first use whose file turns out corrupt: the entry is removed and
    the trace analysed again (202 meanwhile), as when it is corrupt at load."""
    from stepscope.errors import Loading, NotReady
    from stepscope.store import cache as cache_mod
    from stepscope.store.packing import refs

    monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    rebuilt = []

    class Building:
        def done(self):
            return False

        def loading(self):
            return Loading("analyse", 0.5, 1.0)

    def rebuild():
        rebuilt.append(1)
        return Building()
    tl = _tiny_timeline()
    lazy, _ = _cached(tmp_path, tl, rebuild)
    assert lazy.query(None, None, 500) == tl.query(None, None, 500)
    entry = lazy.entry
    name = sorted(set(entry.names()) - refs(entry.meta["state"]))[0]
    with open(os.path.join(entry.folder, name + ".npy"), "r+b") as f:
        f.seek(130)
        f.write(b"\xff\xff\xff")
    with pytest.raises(NotReady):
        lazy.event(1)
    assert rebuilt == [1] and not os.path.exists(entry.folder)


def test_a_field_left_packed_is_unpacked_once_whichever_thread_asks():
    from concurrent.futures import ThreadPoolExecutor

    from stepscope.store.packing import pack, unpack

    tl = _tiny_timeline()
    state, arrays = pack(tl)
    back = unpack(state, arrays)
    assert set(back._later) == {"trace", "layout", "event_index"}
    assert "trace" not in vars(back)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: back.trace, range(8)))
    assert all(g is got[0] for g in got) and vars(back)["trace"] is got[0]
    assert got[0].events.keys() == tl.trace.events.keys()
    assert all(got[0].events[k].tobytes() == tl.trace.events[k].tobytes() for k in tl.trace.events)


def test_a_later_part_that_stays_corrupt_answers_503_after_one_retry(tmp_path, monkeypatch):
    """The entry cannot be removed (another user's cache, say): its timeline is loaded once
    more, and a second failure answers 503 rather than loading it again and again."""
    from stepscope.errors import StepscopeError
    from stepscope.store import cache as cache_mod
    from stepscope.store import lazy as lazy_mod
    from stepscope.store.packing import refs

    monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    loads = []
    monkeypatch.setattr(lazy_mod.shutil, "rmtree", lambda *a, **k: loads.append("rmtree"))
    tl = _tiny_timeline()
    lazy, _ = _cached(tmp_path, tl)  # (rebuilding would raise ZeroDivisionError)
    lazy.query(None, None, 500)
    entry = lazy.entry
    name = sorted(set(entry.names()) - refs(entry.meta["state"]))[0]
    with open(os.path.join(entry.folder, name + ".npy"), "r+b") as f:
        f.seek(130)
        f.write(b"\xff\xff\xff")
    with pytest.raises(StepscopeError) as e:
        lazy.event(1)
    assert e.value.status == 503 and loads == ["rmtree"]
    assert lazy.query(None, None, 500) == tl.query(None, None, 500)  # the rest still answers


def test_a_timeline_unloaded_during_a_request_still_answers_it(tmp_path, monkeypatch):
    """A request holding a timeline that another request unloads (a fifth trace opened),
    and whose entry is then evicted, still unpacks its tables from the held files; they
    close once nothing uses the timeline."""
    import gc
    import shutil

    from stepscope.store import cache as cache_mod

    monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    tl = _tiny_timeline()
    lazy, _ = _cached(tmp_path, tl)
    held = lazy.get()
    folder, files = lazy.entry.folder, list(lazy.entry._files.values())
    assert files
    lazy.unload()
    shutil.rmtree(folder)
    assert held.event(2) == tl.event(2) and held.search("add") == tl.search("add")
    assert all(f.closed for f in files)  # (loaded)
    lazy, _ = _cached(tmp_path / "again", tl)
    held = lazy.get()
    files = list(lazy.entry._files.values())
    lazy.unload()
    del held
    gc.collect()
    assert files and all(f.closed for f in files)
