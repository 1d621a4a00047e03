"""Steps: detection, device-aware re-timing, prev_end seeding, trailing drop (SPEC §2.1)."""

from __future__ import annotations

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    build,
    have_shared,
    kernel,
    launch,
    op,
    runtime,
    shared_views,
    step,
    user,
)

from stepscope.analysis.links import link
from stepscope.analysis.steps import find_steps


def steps_of(events):
    trace = build(events)
    steps = find_steps(trace, link(trace))
    steps.check()
    return steps


def us(a):
    return (np.asarray(a) // 1000).tolist()


def test_retiming_follows_launched_device_work():
    # host [0, 10) and [10, 20); their kernels run [8, 14) and [21, 25)
    s = steps_of([
        step(1, 0, 10), step(2, 10, 10),
        *launch("aten::mm", 1, 2, "k1", 8, 6, corr=1, ext=1),
        *launch("aten::mm", 12, 2, "k2", 21, 4, corr=2, ext=2),
    ])
    assert s.names == ["1", "2"]
    assert us(s.start) == [0, 14] and us(s.end) == [14, 25]
    assert s.activities.tolist() == [1, 1]


def test_step_without_device_work_keeps_host_end_but_starts_after_previous():
    s = steps_of([
        step(1, 0, 10), step(2, 10, 5), step(3, 15, 10),
        *launch("aten::mm", 1, 2, "k1", 5, 12, corr=1, ext=1),   # runs into step 2
        *launch("aten::mm", 16, 2, "k3", 18, 3, corr=3, ext=3),
    ])
    # step 2 launched nothing: start = max(prev_end 17, 10), end = max(15, 17)
    assert us(s.start) == [0, 17, 17] and us(s.end) == [17, 17, 25]


def test_runtime_call_must_lie_entirely_inside_the_step():
    s = steps_of([
        step(1, 0, 10), step(2, 10, 10),
        runtime("cudaLaunchKernel", 9, 2, corr=1),   # straddles the boundary: no step
        kernel("k", 30, 5, corr=1),
        *launch("aten::mm", 12, 2, "k2", 14, 2, corr=2, ext=2),
    ])
    assert s.activities.tolist() == [0, 1]
    assert us(s.end) == [10, 20]


def test_prev_end_seeded_by_work_queued_before_the_first_step():
    s = steps_of([
        # launched before any step (from outside), runs [2, 6)
        runtime("cudaLaunchKernel", 0, 1, corr=1), kernel("early", 2, 4, corr=1),
        # no launching runtime call in the trace at all (queued before the profiler)
        kernel("orphan", 1, 6, corr=99),
        # ends after the first step's own device work starts: not a seed
        runtime("cudaLaunchKernel", 0, 1, corr=5), kernel("late", 8, 10, corr=5),
        step(1, 3, 10),
        *launch("aten::mm", 4, 2, "k1", 8, 4, corr=2, ext=2),
    ])
    # first step's device work starts at 8; seeds end at 6 and 7 -> start 7
    assert us(s.start) == [7] and us(s.end) == [13]


def test_trailing_steps_without_device_work_are_dropped_with_a_note():
    s = steps_of([
        step(1, 0, 10), step(2, 10, 10), step(3, 20, 10),
        *launch("aten::mm", 1, 2, "k1", 3, 2, corr=1, ext=1),
        *launch("aten::mm", 11, 2, "k2", 13, 2, corr=2, ext=2),
    ])
    assert s.names == ["1", "2"] and s.found == 3 and s.dropped == 1
    assert [n.code for n in s.notes] == ["dropped_steps"]
    assert "(3)" in s.notes[0].text


def _two_steps(first: int, last: int):
    events = [step(1, 0, 100), step(2, 100, 100)]
    corr = 0
    for k in range(first):
        corr += 1
        events += launch("aten::add", 1 + k, 1, "add", 50 + k, 1, corr=corr, ext=corr)
    for k in range(last):
        corr += 1
        events += launch("aten::add", 101 + k, 1, "add", 150 + k, 1, corr=corr, ext=corr)
    return steps_of(events)


def test_last_step_dropped_when_previous_launched_more_than_1_25x():
    s = _two_steps(first=6, last=4)       # 6 > 1.25 * 4
    assert s.names == ["1"] and s.dropped == 1
    assert "probably not fully captured" in s.notes[0].text


def test_last_step_kept_at_exactly_1_25x():
    s = _two_steps(first=5, last=4)       # 5 == 1.25 * 4: not more
    assert s.names == ["1", "2"] and s.dropped == 0 and not s.notes


def test_cpu_only_steps_are_not_retimed_or_dropped():
    s = steps_of([step(1, 0, 10), step(2, 12, 10), op("aten::add", 1, 3),
                  op("aten::add", 13, 3)])
    assert us(s.start) == [0, 12] and us(s.end) == [10, 22] and s.dropped == 0


def test_cpu_only_trailing_step_without_operators_is_dropped_with_a_note():
    # torch records the time from the last prof.step() to the profiler's exit as one more
    # step (python frames of the exit inside it with with_stack, no operator): counting it
    # halved a CPU trace's average step (6,444 and 74 µs); SPEC §2.1.4 drops only on GPU
    s = steps_of([step(1, 0, 100), step(2, 100, 100), step(3, 200, 5),
                  op("aten::mm", 1, 50), op("aten::mm", 101, 50), user("torch/profiler/"
                  "profiler.py(1121): __exit__", 201, 2)])
    assert s.names == ["1", "2"] and s.found == 3 and s.dropped == 1
    assert [n.code for n in s.notes] == ["dropped_steps"]
    assert "(3) from the overview: it ran no operator" in s.notes[0].text
    # an empty step between steps with operators stays (only trailing ones go), and a trace
    # whose steps hold no operator at all keeps them all
    s = steps_of([step(1, 0, 10), step(2, 10, 10), step(3, 20, 10), op("aten::add", 1, 3),
                  op("aten::add", 21, 3)])
    assert s.names == ["1", "2", "3"] and not s.notes
    s = steps_of([step(1, 0, 10), step(2, 10, 10), user("forward", 1, 3)])
    assert s.names == ["1", "2"] and not s.notes


def test_launch_inside_overlapping_host_steps_goes_to_the_step_containing_it():
    # step 2 [20, 40) nests in step 1 [0, 100) (e.g. a second thread's ProfilerStep); the
    # launch at [50, 51) lies inside step 1 only, so step 1 ends with its kernel at 120
    s = steps_of([
        step(1, 0, 100), step(2, 20, 20, tid=2), step(3, 100, 100),
        *launch("aten::mm", 50, 2, "k1", 90, 30, corr=1, ext=1),
        *launch("aten::mm", 150, 2, "k3", 160, 10, corr=3, ext=3),
    ])
    assert s.names == ["1", "2", "3"] and s.activities.tolist() == [1, 0, 1]
    assert us(s.start) == [0, 120, 120] and us(s.end) == [120, 120, 200]


def test_overlapping_host_steps_without_device_work_do_not_overlap():
    # SPEC §2.1: each step starts no earlier than the previous one ended
    s = steps_of([step(1, 0, 100), step(2, 50, 100), step(3, 60, 20, tid=2),
                  op("aten::add", 1, 3), op("aten::add", 65, 3, tid=2)])
    assert us(s.start) == [0, 100, 150] and us(s.end) == [100, 150, 150]
    assert [n.code for n in s.notes] == ["overlapping_steps"]
    assert s.notes[0].text.startswith("2 of 3 ProfilerSteps start before an earlier step ends")


def test_containing_step_walks_back_over_nested_steps():
    from stepscope.analysis.steps import containing_step

    rng = np.random.default_rng(3)
    for _ in range(300):
        n, m = int(rng.integers(1, 8)), int(rng.integers(1, 20))
        hs = np.sort(rng.integers(0, 100, n))
        he = hs + rng.integers(0, 80, n)
        cs = rng.integers(0, 150, m)
        ce = cs + rng.integers(0, 30, m)
        valid = rng.random(m) < 0.9
        got = containing_step(hs, he, cs, ce, valid)
        for i in range(m):
            inside = [j for j in range(n) if hs[j] <= cs[i] and ce[i] <= he[j]]
            assert got[i] == (inside[-1] if inside and valid[i] else -1)


def test_no_profiler_step_gives_one_step_over_the_host_events():
    s = steps_of([
        user("[param|cuda]", 5, 10), op("aten::add", 20, 5),
        *launch("aten::mm", 30, 2, "k", 31, 10, corr=1, ext=1),
    ])
    assert s.names == ["0"] and s.synthetic
    assert us(s.start) == [0] and us(s.end) == [36]    # origin 5; re-timed to its kernel
    assert [n.code for n in s.notes] == ["no_steps"]


def test_device_side_copy_of_profiler_step_is_not_a_step():
    gpu_step = kernel("ProfilerStep#1", 0, 10)
    gpu_step["cat"] = "gpu_user_annotation"
    s = steps_of([gpu_step, step(1, 0, 10), op("aten::add", 1, 2)])
    assert s.names == ["1"]


def test_steps_are_named_by_number_in_time_order_and_deduplicated():
    s = steps_of([step(7, 20, 10), step(6, 0, 10), step(6, 0, 10, tid=2),
                  op("aten::add", 21, 1)])
    assert s.names == ["6", "7"] and not s.notes


def test_a_step_number_seen_again_after_its_step_ended_is_noted():
    # the same number on another thread at the same time is one step; a later one is not
    s = steps_of([step(3, 0, 100), step(3, 100, 100), step(4, 200, 100),
                  *launch("aten::mm", 1, 2, "k", 3, 2, corr=1, ext=1),
                  *launch("aten::mm", 101, 2, "k", 103, 2, corr=2, ext=2),
                  *launch("aten::mm", 201, 2, "k", 203, 2, corr=3, ext=3)])
    assert s.names == ["3", "4"]
    assert [n.code for n in s.notes] == ["repeated_steps"]
    assert s.notes[0].text.startswith("1 ProfilerStep (#3) started again after the step")


def test_first_step_without_device_work_is_not_moved_by_later_unlaunched_work():
    # SPEC §2.1.3 seeds prev_end with work that ends before *the first step's* device
    # start; step 1 launched nothing, so an activity whose launch is missing (it ran during
    # step 2) must not move steps 1 and 2 (it made them 0 and 40 µs)
    s = steps_of([step(1, 0, 100), step(2, 100, 100), step(3, 200, 100),
                  op("aten::add", 1, 3), op("aten::add", 101, 3),
                  kernel("orphan", 150, 10, corr=777),
                  *launch("aten::mm", 210, 2, "k", 220, 30, corr=1, ext=1)])
    assert us(s.start) == [0, 100, 200] and us(s.end) == [100, 200, 300]


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
def test_shared_trace_alexnet_without_steps_is_one_step():
    views = shared_views("hta_a100_alexnet_nosteps")
    rows = views.get("overview", {})["steps"]["rows"]
    assert [r[0] for r in rows] == ["0"]
    assert "no_steps" in [n["code"] for n in views.notes()]


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
def test_shared_trace_golden_steps():
    s = shared_views("kineto_resnet50_w0").analysis.steps
    assert s.names == ["5", "6", "7", "8", "9", "10"] and s.dropped == 0
