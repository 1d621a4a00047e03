"""GPU summary: utilization, est. SM efficiency, est. occupancy, tensor cores (SPEC §2.3)."""

from __future__ import annotations

import pytest
from tracebuild import (
    NO_SHARED,
    build,
    device,
    have_shared,
    kernel,
    launch,
    op,
    runtime,
    shared_views,
    step,
)

from stepscope.views import build_views

V100 = {"id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34079637504,
        "computeMajor": 7, "computeMinor": 0, "numSms": 10}


def gpus(events, props=(V100,)):
    o = build_views(build(events, device_properties=list(props))).get("overview", {})
    return o, {g["id"]: {m["name"]: m["value"] for m in g["metrics"]}
               for g in o["gpu_metrics"]["gpus"]}


def test_utilization_is_the_union_of_kernels_inside_the_window():
    o, m = gpus([
        step(1, 0, 40),
        kernel("a", 0, 10), kernel("b", 5, 10),       # union [0, 15)
        kernel("c", 30, 20),                          # clipped at the step end: [30, 40)
        kernel("d", 100, 10, device_id=1),            # other GPU, outside the window
        kernel("e", 45, 10),                          # outside (after the last step)
    ])
    assert m[0]["GPU Utilization"] == 62.5            # 25 / 40
    assert m[1]["GPU Utilization"] == 0.0
    assert {"title": "GPU Utilization of GPU0", "value": "62.50 %"} in o["environments"]
    g0 = o["gpu_metrics"]["gpus"][0]
    assert (g0["name"], g0["memory_bytes"], g0["compute_capability"]) == \
        ("Tesla V100-SXM2-32GB", 34079637504, "7.0")
    assert g0["metrics"][0]["unit"] == "%" and g0["metrics"][0]["definition"]


def test_est_sm_efficiency_weights_min_blocks_over_sms():
    _, m = gpus([
        step(1, 0, 40),
        kernel("a", 0, 10, grid=[5, 1, 1]),           # 5/10 SMs x 10
        kernel("b", 10, 10, grid=[4, 5, 1]),          # 20 blocks: capped at 1 x 10
    ])
    assert m[0]["Est. SM Efficiency"] == 37.5         # (5 + 10) / 40


def test_est_sm_efficiency_caps_concurrent_kernels_at_all_sms():
    # SPEC §2.3: the per-instant sum is capped at 1 before integrating
    _, m = gpus([
        step(1, 0, 20),
        kernel("a", 0, 10, grid=[10, 1, 1], stream=7),   # all 10 SMs
        kernel("b", 0, 10, grid=[10, 1, 1], stream=8),   # concurrently: still 10 SMs
    ])
    assert m[0]["Est. SM Efficiency"] == 50.0          # 10 / 20, not 20 / 20
    _, m = gpus([
        step(1, 0, 20),
        kernel("a", 0, 10, grid=[5, 1, 1], stream=7),    # 0.5 on [0, 10)
        kernel("b", 5, 10, grid=[8, 1, 1], stream=8),    # 0.8 on [5, 15)
        kernel("c", 18, 4, grid=[10, 1, 1]),             # clipped at the step end: 1 x 2
    ])
    assert m[0]["Est. SM Efficiency"] == 67.5          # (2.5 + 5 + 4 + 2) / 20


def test_rocm_launches_that_record_work_items_count_workgroups():
    """hipExtModuleLaunchKernel records the grid in work-items: 8192 work-items in groups of
    256 are 32 workgroups (0.32 of 100 CUs), not 8192 blocks (a full GPU);
    hipLaunchKernel records workgroups, as CUDA does."""
    mi = {"id": 0, "name": "AMD Instinct MI210", "numSms": 100, "gcnArchName": "gfx90a"}

    def hip(api, name, ts, grid, corr):
        return [runtime(api, ts, 1, corr=corr),
                device("kernel", name, ts + 1, 10, corr=corr, grid=grid, block=[256, 1, 1])]
    _, m = gpus([step(1, 0, 40), *hip("hipExtModuleLaunchKernel", "Cijk_a", 0, [8192, 1, 1], 1),
                 *hip("hipLaunchKernel", "b", 20, [32, 1, 1], 2)], props=[mi])
    assert m[0]["Est. SM Efficiency"] == 16.0         # (0.32 x 10 + 0.32 x 10) / 40
    _, m = gpus([step(1, 0, 40), *hip("hipExtModuleLaunchKernel", "Cijk_a", 0, [8000, 1, 1], 1)],
                props=[mi])
    assert m[0]["Est. SM Efficiency"] == 8.0          # ceil(8000 / 256) = 32 workgroups


def test_an_empty_gpu_name_is_left_out():
    o, _ = gpus([step(1, 0, 40), kernel("a", 0, 10)], props=[{"id": 0, "name": "  "}])
    assert o["gpu_metrics"]["gpus"][0]["name"] is None  # (vLLM's deviceProperties: "")


def test_est_sm_efficiency_omitted_without_num_sms_or_grid():
    _, m = gpus([step(1, 0, 40), kernel("a", 0, 10, grid=[5, 1, 1])],
                props=[{"id": 0, "name": "x"}])
    assert "Est. SM Efficiency" not in m[0]
    _, m = gpus([step(1, 0, 40), kernel("a", 0, 10)])
    assert "Est. SM Efficiency" not in m[0]
    # a kernel in the window without grid (graph-replayed on ROCm) would count as 0 SMs
    _, m = gpus([step(1, 0, 40), kernel("a", 0, 10, grid=[5, 1, 1]), kernel("b", 10, 20)])
    assert "Est. SM Efficiency" not in m[0]
    # one outside the window does not matter
    _, m = gpus([step(1, 0, 40), kernel("a", 0, 10, grid=[5, 1, 1]), kernel("b", 50, 20)])
    assert m[0]["Est. SM Efficiency"] == 12.5


def test_est_achieved_occupancy_is_duration_weighted():
    _, m = gpus([
        step(1, 0, 40),
        kernel("a", 0, 10, occupancy=20), kernel("b", 10, 30, occupancy=50),
        kernel("c", 5, 1),                             # no occupancy arg: not counted
    ])
    assert m[0]["Est. Achieved Occupancy"] == 42.5    # (200 + 1500) / 40
    _, m = gpus([step(1, 0, 40), kernel("a", 0, 10)])
    assert "Est. Achieved Occupancy" not in m[0]


def test_tensor_core_share_of_kernel_time():
    _, m = gpus([
        step(1, 0, 40),
        kernel("volta_h884gemm_64x64_ldg8_nn", 0, 30),
        kernel("vectorized_elementwise_kernel", 30, 10),
    ])
    assert m[0]["Kernel time using Tensor Cores"] == 75.0


def test_rocm_omits_what_it_cannot_compute_and_names_matrix_cores():
    amd = {"id": 0, "name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0}
    events = [
        step(1, 0, 40),
        runtime("hipLaunchKernel", 1, 1, corr=1),
        kernel("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", 2, 30, corr=1),
        runtime("hipLaunchKernel", 3, 1, corr=2),
        kernel("triton_poi_fused_add_0", 32, 8, corr=2),
    ]
    o, m = gpus(events, props=[amd])
    # no grid, no occupancy: only utilization and the MFMA share (SPEC §2.3 "matrix cores")
    assert m[0] == {"GPU Utilization": 95.0, "Kernel time using Matrix Cores": 78.95}  # 30 / 38
    views = build_views(build(events, device_properties=[amd]))
    cols = [c["name"] for c in views.get("kernel/table", {})["data"]["columns"]]
    assert cols[-1] == "Matrix Cores Used" and "Tensor Cores Used" not in cols
    assert views.get("kernel/tc_pie", {})["total"]["rows"] == [
        ["Using Matrix Cores", 30], ["Not Using Matrix Cores", 8]]


def test_metric_order_and_rounding():
    o, _ = gpus([step(1, 0, 30), kernel("a", 0, 10, grid=[1, 1, 1], occupancy=33.333)])
    metrics = o["gpu_metrics"]["gpus"][0]["metrics"]
    assert [x["name"] for x in metrics] == ["GPU Utilization", "Est. SM Efficiency",
                                            "Est. Achieved Occupancy",
                                            "Kernel time using Tensor Cores"]
    assert [x["value"] for x in metrics] == [33.33, 3.33, 33.33, 0.0]


def test_cpu_trace_has_no_gpus():
    o, m = gpus([step(1, 0, 10), op("aten::add", 0, 5)], props=[])
    assert m == {} and {"title": "Device Type", "value": "CPU"} in o["environments"]


def test_device_type_gpu_with_runtime_only():
    o, _ = gpus([step(1, 0, 10), runtime("cudaGetDevice", 1, 1)], props=[])
    assert {"title": "Device Type", "value": "GPU"} in o["environments"]


def test_lone_device_properties_entry_stands_for_the_ranks_gpu():
    _, m = gpus([step(1, 0, 10), *launch("aten::mm", 0, 2, "k", 1, 5, corr=1, ext=1,
                                         device_id=3, grid=[10, 1, 1])])
    assert m[3]["Est. SM Efficiency"] == 50.0


needs_shared = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)


@needs_shared
def test_shared_golden_utilization():
    for key, value in (("kineto_resnet50_w0", "67.82 %"), ("kineto_resnet50_w4", "83.63 %")):
        env = shared_views(key).get("overview", {})["environments"]
        assert {"title": "GPU Utilization of GPU0", "value": value} in env


@needs_shared
def test_shared_rocm_trace_omits_metrics_it_cannot_compute():
    g = shared_views("hta_mi250_rocm62").get("overview", {})["gpu_metrics"]["gpus"]
    assert len(g) == 1 and g[0]["name"] == "AMD Radeon Graphics"
    assert [m["name"] for m in g[0]["metrics"]] == ["GPU Utilization",
                                                    "Kernel time using Matrix Cores"]
    cols = [c["name"] for c in shared_views("hta_mi250_rocm62").get(
        "kernel/table", {})["data"]["columns"]]
    assert "Tensor Cores Used" not in cols and "Matrix Cores Used" in cols


@needs_shared
def test_shared_v100_trace_has_every_metric():
    g = shared_views("hta_v100_resnet_ns_2024").get("overview", {})["gpu_metrics"]["gpus"]
    names = [m["name"] for m in g[0]["metrics"]]
    assert names == ["GPU Utilization", "Est. SM Efficiency", "Est. Achieved Occupancy",
                     "Kernel time using Tensor Cores"]
    assert g[0]["compute_capability"] == "7.0"


def test_device_only_trace_gets_an_overview():
    # runtime calls and kernels, no host op: the whole trace is one step
    views = build_views(build([
        runtime("hipLaunchKernel", 0, 2, corr=1),
        kernel("Cijk_Ailk_Bljk_BBS_MT64x64x32_MI32x32x1_SN", 5, 10, corr=1, grid=[2, 1, 1]),
        kernel("triton_poi_fused_add_0", 15, 5, grid=[1, 1, 1]),
    ], device_properties=[{"id": 0, "name": "AMD Instinct MI210", "numSms": 4,
                           "computeMajor": 9, "computeMinor": 0}]))
    assert "Overview" in views.names()
    o = views.get("overview", {})
    perf = {c["name"]: c["value"] for c in o["performance"][0]["children"]}
    assert o["performance"][0]["value"] == 20 and perf["Kernel"] == 15 and perf["Runtime"] == 2
    m = {x["name"]: x["value"] for x in o["gpu_metrics"]["gpus"][0]["metrics"]}
    assert m == {"GPU Utilization": 75.0, "Est. SM Efficiency": 31.25,  # (5 + 1.25) / 20
                 "Kernel time using Matrix Cores": 66.67}


def test_rocm_architecture_from_device_properties_or_tensile_kernels():
    amd = {"id": 0, "name": "AMD Instinct MI210", "computeMajor": 9, "computeMinor": 0}
    events = [step(1, 0, 40), runtime("hipLaunchKernel", 1, 1, corr=1),
              kernel("Cijk_Ailk_Bjlk_BBS_BH_MT128x64x32_MI32x32x1_SN_ISA90a_IU1_K1", 2, 10, corr=1)]
    o, _ = gpus(events, props=[amd])
    assert o["gpu_metrics"]["gpus"][0]["arch"] == "gfx90a"
    o, _ = gpus(events, props=[dict(amd, gcnArchName="gfx942:sramecc+:xnack-")])
    assert o["gpu_metrics"]["gpus"][0]["arch"] == "gfx942"
    o, _ = gpus([step(1, 0, 40), kernel("a", 0, 10)])     # NVIDIA: no arch key
    assert "arch" not in o["gpu_metrics"]["gpus"][0]


@needs_shared
def test_shared_rocm_traces_name_their_architecture():
    for key, arch in (("hta_mi250_rocm62", "gfx90a"), ("tracelens_mi300x_compile_triton", "gfx942")):
        g = shared_views(key).get("overview", {})["gpu_metrics"]["gpus"]
        assert [x["arch"] for x in g] == [arch]
