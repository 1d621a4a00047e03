"""Step-time breakdown: priority, communication, rounding, averages (SPEC §2.2)."""

from __future__ import annotations

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    build,
    have_shared,
    kernel,
    launch,
    memcpy,
    memset,
    op,
    runtime,
    shared_views,
    step,
    user,
)

from stepscope.analysis import analyze
from stepscope.analysis.intervals import covered, sorted_unique, union
from stepscope.taxonomy import Kind
from stepscope.units import div_round, pct, us
from stepscope.views import build_views


def perf(trace):
    p = build_views(trace).get("overview", {})["performance"][0]
    return p, {c["name"]: (c["value"], c["extra"]) for c in p["children"]}


def test_priority_order_charges_each_instant_once():
    t = build([
        step(1, 0, 12),
        op("cpu work", 0, 10),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 9),
        runtime("cudaEventRecord", 1, 7),             # no device work: still Runtime
        memset(5, 2),
        memcpy(2, 4),
        kernel("k", 0, 4),
    ])
    a = analyze(t)
    a.check()
    values = dict(zip(a.breakdown.categories, (a.breakdown.values[0] // 1000).tolist()))
    # kernel [0,4) memcpy [4,6) memset [6,7) runtime [7,8) loader [8,9) cpu [9,10) other 2
    assert values == {"Kernel": 4, "Memcpy": 2, "Memset": 1, "Communication": 0,
                      "Runtime": 1, "DataLoader": 1, "CPU Exec": 1, "Other": 2}


def test_runtime_and_host_ops_on_any_thread_count():
    t = build([
        step(1, 0, 10),
        runtime("cudaStreamSynchronize", 2, 3, tid=9),
        op("aten::add", 6, 2, tid=5),
        kernel("k", 20, 1),   # makes the trace a GPU trace, outside the step
    ])
    _, v = perf(t)
    assert v["Runtime"] == (3, 30.0) and v["CPU Exec"] == (2, 20.0) and v["Other"] == (5, 50.0)


def test_communication_by_kernel_name_and_by_collective_ancestor():
    t = build([
        step(1, 0, 100),
        runtime("cudaLaunchKernel", 1, 1, corr=1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 10, 10, corr=1),
        user("nccl:all_reduce", 30, 10, ext=50),
        *launch("c10d::allreduce_", 31, 5, "void reduce_kernel<float>()", 40, 20, corr=2,
                ext=51),
        *launch("aten::add", 50, 2, "add_kernel", 70, 5, corr=3, ext=52),
    ])
    _, v = perf(t)
    assert v["Communication"][0] == 30 and v["Kernel"][0] == 5


def test_values_round_half_to_even_and_percentages_to_two_decimals():
    t = build([
        step(1, 0, "10.000"), step(2, "10.000", "10.000"),
        op("a", 0, "2.5"), op("b", "10", "3.5"), kernel("k", 30, 1),
    ])
    rows = build_views(t).get("overview", {})["steps"]["rows"]
    cols = build_views(t).get("overview", {})["steps"]["columns"]
    i = [c.get("name") for c in cols].index("CPU Exec")
    assert [r[i] for r in rows] == [2, 4]        # 2.5 -> 2, 3.5 -> 4
    assert "Percentage: 25.0%" in rows[0][i + 1] and "Total: 10us" in rows[0][i + 1]


def test_averages_come_from_unrounded_means():
    # per-step CPU Exec 0.4, 0.4, 0.8 µs: rounded values 0, 0, 1 average to 0, the true
    # mean 0.533 rounds to 1
    t = build([
        step(1, 0, 10), step(2, 10, 10), step(3, 20, 10),
        op("a", 0, "0.4"), op("b", 10, "0.4"), op("c", 20, "0.8"),
    ])
    p, v = perf(t)
    assert v["CPU Exec"] == (1, 5.33) and p["value"] == 10 and p["extra"] == 100


def test_cpu_only_trace_has_only_host_categories():
    t = build([step(1, 0, 10), op("aten::add", 1, 4)])
    a = analyze(t)
    assert a.breakdown.categories == ("DataLoader", "CPU Exec", "Other")
    names = [c.get("name") for c in build_views(t).get("overview", {})["steps"]["columns"]]
    assert names == ["Step", "DataLoader", None, "CPU Exec", None, "Other", None]


def test_cpu_trace_host_collectives_are_communication():
    # SPEC §2.2: a gloo job waiting for its peers is Communication, not CPU Exec
    t = build([
        step(1, 0, 100),
        op("aten::mm", 0, 10),
        op("c10d::allreduce_", 10, 2),
        user("gloo:all_reduce", 12, 80),
        op("aten::copy_", 20, 5),               # nested in the collective: Communication
        op("aten::add", 95, 3),
    ])
    a = analyze(t)
    a.check()
    assert a.breakdown.categories == ("Communication", "DataLoader", "CPU Exec", "Other")
    assert a.breakdown.values[0].tolist() == [82_000, 0, 13_000, 5_000]
    assert [it.id for it in a.items] == ["communication"]


def test_gpu_trace_collective_ranges_stay_host_time():
    # in a GPU trace the gloo/c10d ranges only launch the collective kernels
    t = build([step(1, 0, 100), op("c10d::allreduce_", 10, 50, ext=1),
               *launch("nccl:all_reduce", 20, 10, "ncclDevKernel_AllReduce", 30, 20,
                       corr=1, ext=2)])
    a = analyze(t)
    v = dict(zip(a.breakdown.categories, a.breakdown.values[0].tolist()))
    assert (v["Communication"], v["Runtime"], v["CPU Exec"]) == (20_000, 1_000, 29_000)


def test_categories_sum_to_the_step():
    t = build([step(1, 0, 50), op("x", 0, 30), *launch("aten::mm", 5, 10, "k", 12, 60,
                                                       corr=1, ext=1)])
    a = analyze(t)
    a.check()
    assert (a.breakdown.values.sum(axis=1) == a.breakdown.totals).all()


needs_shared = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)


@needs_shared
def test_shared_cpu_only_overview_has_no_gpu_categories():
    o = shared_views("hta_cpu_only_gloo").get("overview", {})
    names = [c["name"] for c in o["steps"]["columns"] if "name" in c]
    assert names == ["Step", "Communication", "DataLoader", "CPU Exec", "Other"]
    shares = {c["name"]: c["extra"] for c in o["performance"][0]["children"]}
    # two concurrent gloo:all_reduce ranges of ~170 ms (their union ~180 ms) per ~210 ms step
    assert shares["Communication"] > 80 and shares["CPU Exec"] < 20
    assert {"title": "Device Type", "value": "CPU"} in o["environments"]
    assert o["gpu_metrics"] == {"gpus": []}


@needs_shared
@pytest.mark.parametrize("key", ["param_v100_dlrm_rank0", "param_v100_dlrm_rank3",
                                 "hta_v100_profile_memory"])
def test_shared_nccl_kernels_land_in_communication(key):
    a = shared_views(key).analysis
    k = a.breakdown.categories.index("Communication")
    assert a.breakdown.values[:, k].sum() > 0
    nccl = [i for i, s in enumerate(a.trace.strings) if s.startswith("ncclKernel")]
    rows = a.trace.kind == Kind.KERNEL
    is_nccl = rows & np.isin(a.trace.name, nccl)
    assert is_nccl.any() and a.comm_kernel[is_nccl].all()
    assert not a.comm_kernel[rows & ~is_nccl].all()


# --- interval arithmetic and rounding helpers ---------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sorted_unique_equals_np_unique(dtype):
    rng = np.random.default_rng(2)
    for n, hi in ((0, 5), (1, 5), (1000, 3), (1000, 10**9)):
        v = rng.integers(-2, hi, n).astype(dtype)
        got, want = sorted_unique(v), np.unique(v)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_union_and_coverage_in_windows():
    s, e = union(np.array([0, 5, 20, 30, 12]), np.array([10, 12, 30, 30, 12]))
    assert s.tolist() == [0, 20] and e.tolist() == [12, 30]        # empty ones dropped
    assert covered(s, e, np.array([0, 11, 50, 25]), np.array([25, 40, 60, 25])).tolist() == \
        [17, 11, 0, 0]


def test_round_half_to_even_exactly():
    assert [us(x) for x in (1500, 2500, 2501, -1500, 499, 500)] == [2, 2, 3, -2, 0, 0]
    assert us(np.array([1500, 2500, 3500])).tolist() == [2, 2, 4]
    assert div_round(10**18 + 1, 2) == 5 * 10**17 and div_round(7, 2) == 4
    assert pct(1, 3) == 33.33 and pct(5, 0) == 0.0
