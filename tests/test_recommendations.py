"""Recommendations: each rule of SPEC §2.6 fires on a built trace and not on another; every
trace-derived name is escaped in the HTML."""

from __future__ import annotations

import html

import pytest
from tracebuild import (
    NO_SHARED,
    build,
    have_shared,
    kernel,
    launch,
    memory,
    op,
    py,
    runtime,
    shared_views,
    step,
)

from stepscope.analysis.recommendations import RULES, Facts, Item, recommend
from stepscope.views import build_views
from stepscope.views.overview import to_html

V100 = {"id": 0, "name": "Tesla V100", "totalGlobalMem": 1000, "computeMajor": 7,
        "computeMinor": 0, "numSms": 80}


def advice(events, props=(V100,)):
    o = build_views(build(events, device_properties=[dict(p) for p in props])).get(
        "overview", {})
    return {it["id"]: it for it in o["recommendation_items"]}, o["recommendations"]


def busy_gpu(extra=(), until=100):
    """A step with its GPU busy all the time (no other rule fires)."""
    return [step(1, 0, until), *launch("aten::add", 0, 1, "add_kernel", 0, until, corr=999,
                                       ext=999, grid=[800, 1, 1], occupancy=80), *extra]


def test_a_healthy_trace_gets_no_advice():
    items, page = advice(busy_gpu())
    assert items == {} and page == "<ul><li>N/A</li></ul>"


@pytest.mark.parametrize("share,fires", [(10, True), (4, False)])
def test_dataloader(share, fires):
    events = [step(1, 0, 100),
              op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, share),
              *launch("aten::add", share, 1, "add_kernel", share, 100 - share, corr=1, ext=1,
                      grid=[800, 1, 1], occupancy=80)]
    items, _ = advice(events)
    assert ("dataloader" in items) is fires
    if fires:
        assert "10.0% of the step time is in DataLoader" in items["dataloader"]["text"]
        assert items["dataloader"]["doc_url"].startswith("https://pytorch.org/docs/")
        # it loads in worker processes already: not "set num_workers" (the golden text, for
        # the single-process iterator: test_golden)
        assert "already loads in worker processes: try more num_workers" in \
            items["dataloader"]["text"]
        single = events[:1] + [dict(events[1], name="enumerate(DataLoader)#_SingleProcess"
                                    "DataLoaderIter.__next__")] + events[2:]
        assert "set num_workers on DataLoader's construction" in \
            advice(single)[0]["dataloader"]["text"]


@pytest.mark.parametrize("busy,fires", [(40, True), (60, False)])
def test_low_utilization(busy, fires):
    events = [step(1, 0, 100), *launch("aten::add", 0, 1, "k", 0, busy, corr=1, ext=1,
                                       grid=[800, 1, 1], occupancy=80)]
    items, _ = advice(events)
    assert ("low_utilization" in items) is fires


def _launches(n_short, n_long, long_us):
    events = [step(1, 0, 10_000)]
    t, corr = 0, 0
    for k in range(n_short + n_long):
        corr += 1
        dur = 2 if k < n_short else long_us       # launch calls take 5 µs
        events += launch("aten::add", t, 6, "k", t + 1, dur, corr=corr, ext=corr, rt_dur=5,
                         grid=[800, 1, 1], occupancy=80)
        t += max(dur, 6) + 1
    return events


def test_launch_bound_fires_when_short_kernels_are_many_and_take_time():
    items, _ = advice(_launches(n_short=60, n_long=40, long_us=6))
    assert "launch_bound" in items and "60.0% of the kernels" in items["launch_bound"]["text"]


def test_launch_bound_quiet_when_short_kernels_take_little_time():
    # like golden workers_4: most kernels short, but a sliver of kernel time
    items, _ = advice(_launches(n_short=60, n_long=40, long_us=200))
    assert "launch_bound" not in items


def test_graph_replay_is_not_launch_bound():
    # one 50 µs hipGraphLaunch runs 20 kernels of 4 µs: each costs 2.5 µs of launch, so none
    # is shorter than its launch (SPEC §2.6; comparing each to the whole call said "100 %")
    events = [step(1, 0, 200), op("vllm::decode", 0, 60, ext=1),
              runtime("hipGraphLaunch", 1, 50, corr=1, ext=1)]
    events += [kernel(f"k{i}", 60 + 5 * i, 4, corr=1, grid=[800, 1, 1], occupancy=80)
               for i in range(20)]
    items, _ = advice(events)
    assert "launch_bound" not in items
    f = build_views(build(events, device_properties=[V100])).analysis.facts
    assert (f.kernels, f.kernels_shorter_than_launch) == (20, 0)
    # the same kernels behind one 5 µs launch each are launch-bound
    events = [step(1, 0, 200)]
    for i in range(20):
        events += launch("aten::add", 6 * i, 6, f"k{i}", 130 + 4 * i, 4, corr=i + 1,
                         ext=i + 1, rt_dur=5, grid=[800, 1, 1], occupancy=80)
    items, _ = advice(events)
    assert "launch_bound" in items


@pytest.mark.parametrize("grid,fires", [([1, 1, 1], True), ([160, 1, 1], False)])
def test_low_sm_efficiency(grid, fires):
    events = [step(1, 0, 100), *launch("aten::add", 0, 1, "k", 0, 100, corr=1, ext=1,
                                       grid=grid, occupancy=80)]
    items, _ = advice(events)
    assert ("low_sm_efficiency" in items) is fires


@pytest.mark.parametrize("occ,fires", [(30, True), (70, False)])
def test_low_occupancy(occ, fires):
    events = [step(1, 0, 100), *launch("aten::add", 0, 1, "k", 0, 100, corr=1, ext=1,
                                       grid=[800, 1, 1], occupancy=occ)]
    items, _ = advice(events)
    assert ("low_occupancy" in items) is fires


@pytest.mark.parametrize("comm,fires", [(20, True), (5, False)])
def test_communication(comm, fires):
    events = busy_gpu(until=100)[:1] + [
        *launch("aten::add", 0, 1, "k", 0, 100 - comm, corr=1, ext=1, grid=[800, 1, 1],
                occupancy=80),
        runtime("cudaLaunchKernel", 2, 1, corr=2),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 100 - comm, comm,
               corr=2, grid=[800, 1, 1], occupancy=80),
    ]
    items, _ = advice(events)
    assert ("communication" in items) is fires


@pytest.mark.parametrize("gpus,fires", [(2, True), (1, False)])
def test_data_parallel(gpus, fires):
    events = busy_gpu([
        py("nn.Module: DataParallel_0", 0, 50),
        kernel("k1", 0, 100, device_id=gpus - 1, grid=[800, 1, 1], occupancy=80),
    ])
    items, _ = advice(events, props=[V100, dict(V100, id=1)])
    assert ("data_parallel" in items) is fires


def test_data_parallel_autograd_functions():
    events = busy_gpu([op("Broadcast", 0, 5), kernel("k1", 0, 100, device_id=1,
                                                     grid=[800, 1, 1], occupancy=80)])
    items, _ = advice(events, props=[V100, dict(V100, id=1)])
    assert "Broadcast" in items["data_parallel"]["text"]


@pytest.mark.parametrize("kernel_name,props,fires", [
    ("volta_sgemm_128x64_nn", (V100,), True),
    ("volta_h884gemm_64x64_nn", (V100,), False),                     # already tensor cores
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", (V100,), False),  # AMP on a V100
    ("ampere_sgemm_128x64_nn", (dict(V100, computeMajor=8),), True),
    ("volta_sgemm_128x64_nn", ({"id": 0, "numSms": 80},), True),     # capability unknown
    ("volta_sgemm_128x64_nn", (), True),                              # no deviceProperties
    ("volta_sgemm_128x64_nn", (dict(V100, computeMajor=6),), False),  # no tensor cores
])
def test_amp(kernel_name, props, fires):
    events = [step(1, 0, 100),
              op("aten::linear", 0, 10, ext=1),
              *launch("aten::mm", 1, 5, kernel_name, 0, 60, corr=1, ext=2, grid=[800, 1, 1],
                      occupancy=80),
              *launch("aten::add", 6, 2, "add", 60, 40, corr=2, ext=3, grid=[800, 1, 1],
                      occupancy=80)]
    items, _ = advice(events, props=props)
    assert ("amp" in items) is fires
    if fires:
        assert "Tensor Cores" in items["amp"]["text"]
        assert ("does not say which GPU" in items["amp"]["text"]) is ("computeMajor" not in
                                                                       str(props))
        # TF32 needs Ampere: not offered on a V100 (compute 7.0), only "on Ampere or newer"
        # when the GPU is not known
        tf32 = {7: None, 8: "(torch.autocast) or TF32."}.get(
            props[0].get("computeMajor") if props else None, ", or TF32 on Ampere or newer")
        assert ("TF32" in items["amp"]["text"]) is (tf32 is not None)
        if tf32:
            assert tf32 in items["amp"]["text"]


@pytest.mark.parametrize("peak,fires", [(950, True), (500, False)])
def test_memory_near_capacity(peak, fires):
    items, _ = advice(busy_gpu([memory(1, 100), memory(2, peak), memory(3, 10)]))
    assert ("memory" in items) is fires


@pytest.mark.parametrize("reserved,fires", [(1501, True), (1500, False)])
def test_memory_fragmentation_at_the_allocated_peak(reserved, fires):
    # reserved > 1.5 x allocated at the allocated peak (1000 @2), not elsewhere (@1: 10x)
    items, _ = advice(busy_gpu([memory(1, 100, reserved=1000), memory(2, 1000, reserved=reserved),
                                memory(3, 10, reserved=reserved)]))
    assert ("memory_fragmentation" in items) is fires
    if fires:
        assert "GPU0: 1.47 KiB reserved for 1000 B allocated (1.5x)" in \
            items["memory_fragmentation"]["evidence"]
        assert "expandable_segments:True" in items["memory_fragmentation"]["text"]


def test_memory_advice_prints_readable_sizes_and_ratios():
    """9 GB reserved for 100 B allocated printed "0.00 GiB allocated (90000000.0x)"."""
    items, _ = advice(busy_gpu([memory(1, 100, reserved=9 * 10**9)]))
    assert "GPU0: 8.38 GiB reserved for 100 B allocated (over 100x)" in \
        items["memory_fragmentation"]["evidence"]


def test_names_from_the_trace_are_escaped_in_html():
    evil = 'nn.Module: DataParallel<img src=x onerror="alert(1)">'
    events = busy_gpu([py(evil, 0, 50), kernel("k1", 0, 100, device_id=1, grid=[800, 1, 1],
                                                occupancy=80)])
    items, page = advice(events, props=[V100, dict(V100, id=1)])
    assert evil in items["data_parallel"]["text"]          # plain text keeps the name
    assert html.escape(evil) in page and "<img" not in page


def test_to_html_escapes_item_text():
    page = to_html([Item("dataloader", "a <b> & 'c'", "e", "u")])
    assert "a &lt;b&gt; &amp; &#x27;c&#x27;" in page and page.startswith("<ul><li>")


def test_rules_are_pure_functions_of_facts():
    assert recommend(Facts()) == []
    assert len(RULES) == 14


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
def test_shared_golden_launch_bound_quiet_on_workers_4():
    f = shared_views("kineto_resnet50_w4").analysis.facts
    assert round(100 * f.kernels_shorter_than_launch / f.kernels) == 58
    assert round(f.short_kernel_time_share, 1) == 1.6
    items = shared_views("kineto_resnet50_w4").get("overview", {})["recommendation_items"]
    assert [it["id"] for it in items] == ["amp"]     # fp32 convolutions only


# --- ranking and covering the dominant category (SPEC §2.6) ------------------------------------


def test_runtime_dominant_names_the_top_runtime_calls():
    # 10 µs of kernel, then 80 µs in cudaDeviceSynchronize and 5 µs in cudaMalloc
    events = [step(1, 0, 100),
              *launch("aten::add", 0, 2, "k", 1, 10, corr=1, ext=1, grid=[800, 1, 1],
                      occupancy=80),
              runtime("cudaMalloc", 12, 5), runtime("cudaDeviceSynchronize", 20, 80)]
    items, _ = advice(events)
    rt = items["runtime_bound"]
    assert rt["share"] == 86.0          # 1 (launch) + 5 + 80 µs of 100
    assert "86.0% of the step time" in rt["text"]
    assert "cudaDeviceSynchronize (80 µs), cudaMalloc (5 µs), cudaLaunchKernel (1 µs)" in \
        rt["evidence"]
    # ranked first: the generic low-utilization item only keeps the idle time nothing else
    # explains (90 % idle - 86 % Runtime = 4 %)
    assert list(items) == ["runtime_bound", "low_utilization"]
    assert items["low_utilization"]["share"] == 4.0


def test_runtime_advice_speaks_hip_on_rocm_and_names_a_one_time_call():
    """ROCm: the HIP names of the synchronising calls and of graphs; one hipMalloc call of
    70 µs out of 72 in 3 calls is a one-time cost, and the advice says so."""
    mi = {"id": 0, "name": "AMD Instinct MI250X", "numSms": 110, "gcnArchName": "gfx90a"}
    events = [step(1, 0, 100), op("aten::add", 0, 2, ext=1),
              runtime("hipLaunchKernel", 0, 1, corr=1, ext=1), kernel("k", 1, 10, corr=1),
              runtime("hipMalloc", 12, 70), runtime("hipMalloc", 85, 1), runtime("hipMalloc", 90, 1)]
    items, _ = advice(events, props=(mi,))
    rt = items["runtime_bound"]
    assert "hipMalloc (72 µs in 3 calls, one of 70 µs)" in rt["evidence"]
    assert "One hipMalloc call takes 70 µs of its 72: most likely a one-time cost" in rt["text"]
    assert "hipDeviceSynchronize, hipStreamSynchronize" in rt["text"] and "cudaDevice" not in rt["text"]
    assert "HIP graphs (torch.cuda.graphs)" in rt["text"]
    nvidia, _ = advice([step(1, 0, 100), runtime("cudaDeviceSynchronize", 10, 80)])
    assert "cudaDeviceSynchronize, cudaStreamSynchronize" in nvidia["runtime_bound"]["text"]
    assert "one-time" not in nvidia["runtime_bound"]["text"]


def test_other_spent_waiting_for_launched_gpu_work_is_not_blamed_on_the_host():
    """The launch ends at 6 µs, its kernel starts at 60 (the GPU still ran work queued
    before the trace): 54 of the 84 µs of Other wait for it."""
    items, _ = advice([step(1, 0, 100), *launch("aten::add", 0, 6, "k", 60, 10, corr=1, ext=1,
                                                 rt_dur=6, grid=[800, 1, 1], occupancy=80)])
    other = items["other"]
    assert other["share"] == 84.0
    assert "in 54.0% of the step time the CPU had launched GPU work that had not started yet" in other["text"]
    assert "54.0% waiting for launched GPU work to start" in other["evidence"]
    idle, _ = advice([step(1, 0, 100), *launch("aten::add", 0, 6, "k", 6, 10, corr=1, ext=1,
                                                rt_dur=6, grid=[800, 1, 1], occupancy=80)])
    assert "record_function ranges" in idle["other"]["text"]  # nothing pending: the host idles


def test_cpu_exec_dominant_names_the_top_host_self_operators():
    # a CPU-only step: 60 µs aten::conv2d (50 µs of it self), 10 µs in its child aten::add
    events = [step(1, 0, 100), op("aten::conv2d", 0, 60), op("aten::add", 10, 10),
              op("aten::relu", 70, 5)]
    items, _ = advice(events, props=())
    cpu = items["cpu_bound"]
    assert cpu["share"] == 65.0
    assert "aten::conv2d (50 µs), aten::add (10 µs), aten::relu (5 µs)" in cpu["text"]
    # a CPU-only trace has no GPU to wait: the advice must not speak of one
    assert "GPU" not in cpu["text"]


def test_cpu_exec_on_a_gpu_trace_says_the_gpu_waits():
    events = [step(1, 0, 100), op("aten::conv2d", 0, 60),
              *launch("aten::add", 70, 2, "k", 80, 5, corr=1, ext=1, grid=[800, 1, 1],
                      occupancy=80)]
    items, _ = advice(events)
    assert "while the GPU waits" in items["cpu_bound"]["text"]


def test_cpu_exec_quiet_when_small():
    items, _ = advice(busy_gpu([op("aten::relu", 1, 5)]))
    assert "cpu_bound" not in items


def test_other_dominant_says_nothing_was_recorded():
    items, _ = advice([step(1, 0, 100), op("aten::add", 0, 10)], props=())
    assert items["other"]["share"] == 90.0 and "no recorded activity" in items["other"]["text"]


def test_memcpy_dominant():
    events = [step(1, 0, 100), op("aten::copy_", 0, 2, ext=1),
              runtime("cudaMemcpyAsync", 0, 1, corr=1, ext=1),
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
               "ts": 2, "dur": 90, "pid": 0, "tid": 7, "args": {"correlation": 1,
                                                                "device": 0}}]
    items, _ = advice(events)
    assert items["memcpy"]["share"] == 90.0 and "pin_memory=True" in items["memcpy"]["text"]


def test_recommend_ranks_by_share_largest_first():
    # DLRM-like: DataLoader 7.5 %, Communication 38.3 %: communication leads
    f = Facts(dataloader_share=7.5, communication_share=38.3,
              shares={"DataLoader": 7.5, "Communication": 38.3, "Kernel": 50.0})
    assert [it.id for it in recommend(f)] == ["communication", "dataloader"]


def test_amp_on_rocm_says_matrix_cores():
    mi = {"id": 0, "name": "AMD Instinct MI250X", "totalGlobalMem": 1000, "numSms": 110}
    events = [step(1, 0, 100), op("aten::linear", 0, 10, ext=1),
              op("aten::mm", 1, 5, ext=2), runtime("hipLaunchKernel", 1, 1, corr=1, ext=2),
              kernel("Cijk_Ailk_Bljk_SB_MT64x64x8_SN", 0, 90, corr=1, grid=[800, 1, 1])]
    items, _ = advice(events, props=(mi,))
    assert "Matrix Cores" in items["amp"]["text"] and "Tensor" not in items["amp"]["text"]


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
@pytest.mark.parametrize("key,first,covers", [
    ("param_v100_dlrm_rank0", "communication", {"cpu_bound", "dataloader"}),
    ("hta_a100_alexnet_nosteps", "runtime_bound", {"low_utilization"}),
    ("hta_v100_profile_memory", "low_sm_efficiency", {"cpu_bound", "communication"}),
])
def test_shared_traces_rank_and_cover(key, first, covers):
    items = shared_views(key).get("overview", {})["recommendation_items"]
    shares = [it["share"] for it in items]
    assert items[0]["id"] == first and shares == sorted(shares, reverse=True)
    assert covers <= {it["id"] for it in items}
