"""Kernel view: table, grouping by launching op, pies (SPEC §2.5)."""

from __future__ import annotations

import pytest
from tracebuild import (
    NO_SHARED,
    build,
    have_shared,
    kernel,
    launch,
    memcpy,
    op,
    runtime,
    shared_views,
)

from stepscope.errors import BadParameter
from stepscope.views import build_views

V100 = [{"id": 0, "name": "V100", "computeMajor": 7, "computeMinor": 0, "numSms": 80}]


def kt(events, group_by="Kernel", props=V100):
    views = build_views(build(events, device_properties=props))
    data = views.get("kernel/table", {"group_by": group_by})["data"]
    names = [c["name"] for c in data["columns"]]
    return names, [dict(zip(names, r)) for r in data["rows"]]


def test_table_calls_total_mean_max_min_rounded_half_even():
    names, rows = kt([
        kernel("a", 0, "1.000"), kernel("a", 2, "2.000"),     # total 3, mean 1.5 -> 2
        kernel("b", 10, "2.5"),                               # 2.5 -> 2
        kernel("c", 20, "0.5"), kernel("c", 21, "2.0"),       # total 2.5 -> 2, mean 1.25 -> 1
        memcpy(30, 100),                                       # not a kernel
    ])
    assert names == ["Name", "Calls", "Total Duration (us)", "Mean Duration (us)",
                     "Max Duration (us)", "Min Duration (us)", "Tensor Cores Used"]
    got = {r["Name"]: (r["Calls"], r["Total Duration (us)"], r["Mean Duration (us)"],
                       r["Max Duration (us)"], r["Min Duration (us)"]) for r in rows}
    assert got == {"a": (2, 3, 2, 2, 1), "b": (1, 2, 2, 2, 2), "c": (2, 2, 1, 2, 0)}
    assert [r["Name"] for r in rows][0] == "a"              # sorted by total descending


def test_blocks_per_sm_and_occupancy_are_duration_weighted_when_present():
    names, rows = kt([
        kernel("a", 0, 10, blocks_per_sm=1.0, occupancy=20),
        kernel("a", 20, 30, blocks_per_sm=3.0, occupancy=60),
        kernel("b", 60, 5),
    ])
    assert "Mean Blocks Per SM" in names and "Mean Est. Achieved Occupancy (%)" in names
    a = next(r for r in rows if r["Name"] == "a")
    assert a["Mean Blocks Per SM"] == 2.5 and a["Mean Est. Achieved Occupancy (%)"] == 50.0
    b = next(r for r in rows if r["Name"] == "b")
    assert b["Mean Blocks Per SM"] is None
    names, _ = kt([kernel("a", 0, 10)])
    assert "Mean Blocks Per SM" not in names


def test_weighted_means_do_not_depend_on_the_events_order():
    """50 kernels of 0.025 blocks per SM: summed in event order, the mean rounded to 0.03 or
    0.02 by the order of the events (a shuffled real trace showed both)."""
    import numpy as np

    from stepscope.views.kernel import _weighted_mean

    rng = np.random.default_rng(3)
    values, weights = np.full(50, 0.025), rng.integers(1000, 99999, 50)
    means = {tuple(_weighted_mean(np.zeros(50, np.int64), 1, values[p], weights[p]))
             for p in (rng.permutation(50) for _ in range(200))}
    assert means == {(0.03,)}


def test_tensor_cores_used_column():
    _, rows = kt([kernel("sm80_xmma_gemm_f16f16_f16f32", 0, 5), kernel("elementwise", 6, 5)])
    assert {r["Name"]: r["Tensor Cores Used"] for r in rows} == {
        "sm80_xmma_gemm_f16f16_f16f32": "Yes", "elementwise": "No"}


def test_group_by_kernel_and_launching_operator():
    names, rows = kt([
        *launch("aten::mm", 0, 5, "gemm", 10, 4, corr=1, ext=1),
        *launch("aten::addmm", 6, 5, "gemm", 20, 6, corr=2, ext=2),
        runtime("cudaLaunchKernel", 12, 1, corr=3),                 # no op
        kernel("gemm", 30, 1, corr=3),
    ], group_by="KernelNameAndOpName")
    assert names[:3] == ["Name", "Operator", "Calls"]
    got = {(r["Name"], r["Operator"]): r["Total Duration (us)"] for r in rows}
    assert got == {("gemm", "aten::addmm"): 6, ("gemm", "aten::mm"): 4, ("gemm", "N/A"): 1}


def test_kernel_pies():
    views = build_views(build([
        kernel("volta_h884gemm", 0, 6), kernel("add", 10, 3), kernel("add", 20, 1),
        op("aten::add", 0, 1),
    ], device_properties=V100))
    pie = views.get("kernel", {"group_by": "Kernel"})["total"]
    assert [c["name"] for c in pie["columns"]] == ["name", "value"]
    assert pie["rows"] == [["volta_h884gemm", 6], ["add", 4]]
    tc = views.get("kernel/tc_pie", {})["total"]["rows"]
    assert tc == [["Using Tensor Cores", 6], ["Not Using Tensor Cores", 4]]
    with pytest.raises(BadParameter):
        views.get("kernel/table", {"group_by": "Operation"})
    assert views.names() == ["Overview", "Operator", "Kernel", "Trace", "Module"]


def test_every_kernel_counts_even_outside_steps():
    _, rows = kt([op("ProfilerStep#1", 0, 10, cat="user_annotation"), kernel("k", 50, 5)])
    assert rows[0]["Calls"] == 1


def test_no_kernels_no_kernel_view():
    views = build_views(build([op("aten::add", 0, 1)]))
    assert views.names() == ["Overview", "Operator", "Trace", "Module"]
    assert views.get("kernel/table", {})["data"]["rows"] == []
    assert views.get("kernel", {})["total"]["rows"] == []


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
def test_shared_kernel_table_by_op_names_launching_ops():
    data = shared_views("hta_v100_resnet_ns_2024").get(
        "kernel/table", {"group_by": "KernelNameAndOpName"})["data"]
    ops = {r[1] for r in data["rows"]}
    assert "aten::cudnn_convolution" in ops
    total = sum(r[3] for r in data["rows"])
    plain = shared_views("hta_v100_resnet_ns_2024").get("kernel/table", {})["data"]["rows"]
    assert abs(total - sum(r[2] for r in plain)) <= len(data["rows"])   # rounding only
