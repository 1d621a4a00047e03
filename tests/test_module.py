"""Module view (SPEC §4.2): phases, user ranges, nn.Module tree, flame graph and collapsed
stacks. Hand-built traces with known answers, bad input, the real CUDA traces, and CPU
traces written by torch.profiler in a subprocess (checked against key_averages)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    build,
    have_shared,
    kernel,
    launch,
    op,
    py,
    runtime,
    shared_views,
    step,
    user,
)

from stepscope.analysis import analyze
from stepscope.analysis.module import analyze_module, phase_of_name
from stepscope.analysis.stacks import cap_children, flame
from stepscope.errors import BadParameter
from stepscope.read.reader import read_trace
from stepscope.views import build_views


def hand_built():
    """Step [0, 100): forward [10, 40) > Linear_0 [11, 31) > mm [12, 22) launching a 7 µs
    kernel; backward [40, 90) > evaluate_function [45, 55); Linear_1 [14, 19) inside mm."""
    return [
        step(1, 0, 100), user("forward", 10, 30), py("nn.Module: Linear_0", 11, 20),
        op("aten::mm", 12, 10, ext=1), runtime("cudaLaunchKernel", 13, 1, corr=1, ext=1),
        kernel("k", 20, 7, corr=1), py("nn.Module: Linear_1", 14, 5),
        user("## Backward ##", 40, 50),
        op("autograd::engine::evaluate_function: MmBackward0", 45, 10),
    ]


@pytest.fixture(scope="module")
def views():
    return build_views(build(hand_built()))


def test_phase_names_normalised():
    assert phase_of_name("## forward ##") == "Forward"
    assert phase_of_name("Optimizer_Step") == "Optimizer"
    assert phase_of_name("zero_grad") == "Optimizer"
    assert phase_of_name("DataLoader") == "DataLoader"
    assert phase_of_name("forward_pass") is None
    # surrounding #, spaces and _ are ignored; a name spelled apart letter by letter is not
    # a phase name
    assert phase_of_name(" _Backward_ ") == "Backward" and phase_of_name("#dataloader#") == "DataLoader"
    assert phase_of_name("f_o_r_w_a_r_d") is None and phase_of_name("b a c k w a r d") is None


def test_phases_follow_the_marked_ranges(views):
    body = views.get("module/phases", {})
    assert body["phases"] == ["DataLoader", "Forward", "Backward", "Optimizer", "Other"]
    s = body["steps"][0]
    assert s["step"] == "1"
    assert s["host_us"] == {"DataLoader": 0.0, "Forward": 30.0, "Backward": 50.0,
                            "Optimizer": 0.0, "Other": 20.0}
    assert s["device_us"] == {"DataLoader": 0.0, "Forward": 7.0, "Backward": 0.0,
                              "Optimizer": 0.0, "Other": 0.0}
    assert s["host_total_us"] == 100.0 and s["host_pct"]["Backward"] == 50.0
    assert body["average"]["host_us"] == s["host_us"]
    assert body["source"]["Forward"] == "record_function"
    assert body["source"]["Optimizer"] == "inferred"


def test_inferred_phases_and_exact_partition():
    """No marked ranges: DataLoader op, Optimizer range, autograd op, the rest of the main
    thread's work Forward; an autograd thread's span (tid 2) is Backward."""
    t = build([
        step(1, 0, 100), step(2, 100, 50),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10),
        op("aten::linear", 10, 20), op("autograd::engine::evaluate_function: AddmmBackward0", 30, 5),
        user("Optimizer.step#SGD.step", 80, 10), op("aten::add_", 82, 2),
        op("autograd::engine::evaluate_function: X", 40, 5, tid=2),
        op("aten::mul", 50, 10, tid=2),   # autograd thread: its whole span [40, 60)
        op("aten::linear", 110, 10),       # step 2: no backward, no optimizer
    ])
    a = analyze(t)
    m = analyze_module(t, a.tree, a.links, a.steps)
    m.check()
    host = m.phases.host.tolist()
    assert host[0] == [10_000, 20_000, 25_000, 10_000, 35_000]
    assert host[1] == [0, 10_000, 0, 0, 40_000]
    assert not any(m.phases.marked.values())
    assert {n.code for n in m.notes} >= {"phases_inferred", "no_module_frames"}
    # the flag that records module frames in eager mode (with_modules=True alone: none)
    (text,) = [n.text for n in m.notes if n.code == "no_module_frames"]
    assert "profile(with_stack=True) to see the module tree" in text


def test_without_steps_the_main_thread_is_the_one_whose_tid_is_the_pid():
    """Kineto writes system thread ids: the main thread's tid is the pid. A busier worker
    thread was taken for the main one (Forward was its time)."""
    from stepscope.analysis.module import main_thread
    t = build([op("aten::mm", 0, 50, tid=7), op("aten::relu", 0, 20, tid=100),
               op("aten::relu", 60, 5, tid="100")])
    a = analyze(t)
    assert t.threads[main_thread(t, a.tree)] == (100, 100)
    t = build([op("aten::mm", 0, 50, tid=7), op("aten::relu", 0, 20, tid=8)])
    a = analyze(t)
    assert t.threads[main_thread(t, a.tree)] == (100, 7)  # no such thread: the busiest


def test_steps_with_no_forward_and_no_profiler_step_get_notes_not_errors():
    t = build([op("aten::relu", 0, 5, tid=3), op("aten::relu", 10, 5, tid=4)])
    v = build_views(t)
    body = v.get("module/phases", {})
    assert body["steps"][0]["host_us"]["Forward"] == 5.0   # the busiest thread is the main one
    assert body["steps"][0]["host_total_us"] == 15.0
    # (step 2 runs an op on another thread only: a CPU step with no operator at all is
    # the profiler's exit, dropped)
    t = build([step(1, 0, 10), step(2, 10, 10), op("aten::relu", 1, 5),
               op("aten::relu", 12, 3, tid=9)])
    codes = {n["code"] for n in build_views(t).get("module/summary", {})["notes"]}
    assert "steps_without_forward" in codes


def test_ranges_tree_and_flat(views):
    tree = views.get("module/ranges", {})
    assert [(r["name"], r["calls"], r["host_total_us"], r["device_us"]) for r in tree] == [
        ("## Backward ##", 1, 50, 0), ("forward", 1, 30, 7)]
    flat = views.get("module/ranges", {"flat": "1"})
    assert flat[0] == {"name": "## Backward ##", "calls": 1, "host_total_us": 50,
                       "host_avg_us": 50.0, "host_min_us": 50, "host_max_us": 50, "device_us": 0}
    with pytest.raises(BadParameter):
        views.get("module/ranges", {"flat": "yes"})


def test_nested_ranges_merge_by_path_and_overlaps_are_clipped():
    t = build([user("outer", 0, 10), user("inner", 1, 2), user("inner", 5, 4),
               user("outer", 20, 10), user("inner", 21, 3),
               user("a", 40, 10), user("b", 45, 10)])   # b overlaps a without nesting
    v = build_views(t)
    tree = v.get("module/ranges", {})
    outer = next(r for r in tree if r["name"] == "outer")
    assert (outer["calls"], outer["host_total_us"]) == (2, 20)
    inner = outer["children"][0]
    assert (inner["name"], inner["calls"], inner["host_total_us"], inner["host_min_us"],
            inner["host_max_us"]) == ("inner", 3, 9, 2, 4)
    flat = {r["name"]: r for r in v.get("module/ranges", {"flat": "1"})}
    assert flat["b"]["host_total_us"] == 10          # the file's duration, as key_averages
    a = next(r for r in tree if r["name"] == "a")
    assert a["children"][0]["name"] == "b"


def test_module_tree_paths_self_and_device(views):
    tree = views.get("module/tree", {})
    assert len(tree) == 1
    root = tree[0]
    assert (root["name"], root["path"], root["occurrences"], root["host_total_us"],
            root["host_self_us"], root["device_total_us"]) == (
        "nn.Module: Linear_0", ["nn.Module: Linear_0"], 1, 20, 15, 7)
    child = root["children"][0]
    assert child["path"] == ["nn.Module: Linear_0", "nn.Module: Linear_1"]
    assert views.get("module/summary", {})["has_modules"] is True


def test_module_frames_missing_their_parent_are_roots_and_absent_modules_say_the_flag():
    t = build([py("nn.Module: Block_0", 0, 10), py("nn.Module: Linear_3", 20, 5)])
    tree = build_views(t).get("module/tree", {})
    assert sorted(n["name"] for n in tree) == ["nn.Module: Block_0", "nn.Module: Linear_3"]
    v = build_views(build([op("aten::relu", 0, 5)]))
    assert v.get("module/tree", {}) == []
    notes = v.get("module/summary", {})["notes"]
    assert any("with_modules=True" in n["text"] for n in notes)


def test_flame_host_self_and_device(views):
    fl = views.get("module/flame", {})
    label = {i: fl["labels"][k] for i, k in enumerate(fl["name"])}
    by = {label[i]: (fl["self"][i], fl["total"][i]) for i in range(len(fl["name"]))}
    # the ProfilerStep is left out; the thread root holds the top-level frames and the
    # step's own 20 µs (the graph adds up to the step's 100 µs of host time)
    assert by["thread 1 (pid 100)"] == (20.0, 100.0)
    assert by["forward"] == (10.0, 30.0)
    assert by["aten::mm"] == (4.0, 10.0)
    assert by["cudaLaunchKernel"] == (1.0, 1.0)
    assert sum(fl["self"]) == fl["total_us"] == 100.0
    dev = views.get("module/flame", {"metric": "device"})
    assert [dev["labels"][k] for k in dev["name"]] == [
        "thread 1 (pid 100)", "forward", "nn.Module: Linear_0", "aten::mm", "cudaLaunchKernel"]
    assert dev["self"][-1] == 7.0 and dev["total"][0] == 7.0


def test_collapsed_stacks_text(views):
    text = views.get("stacks/collapsed", {})
    lines = text.splitlines()
    assert "thread 1 (pid 100);forward;nn.Module: Linear_0;aten::mm 4" in lines
    assert "thread 1 (pid 100);## Backward ## 40" in lines
    assert "thread 1 (pid 100) 20" in lines  # the step's own time
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == 100
    dev = views.get("stacks/collapsed", {"metric": "device"})
    assert dev == ("thread 1 (pid 100);forward;nn.Module: Linear_0;aten::mm;cudaLaunchKernel 7\n")


def test_flame_adds_up_to_the_steps_host_time():
    """A step's time outside its frames goes to the frame enclosing the step (with_stack:
    python frames around the training loop), or to the thread root; steps on a second
    thread and time outside steps too. Host self over the graph = the threads' busy time."""
    events = [
        step(1, 0, 100), op("a", 10, 20), op("b", 50, 10),          # step self 70 -> root
        py("train.py(9): loop", 200, 300), step(2, 210, 100),       # step under a frame:
        op("a", 220, 30),                                           # its own 70 stays there
        op("c", 600, 40),                                           # outside any step
        step(3, 0, 50, tid=2), op("d", 5, 10, tid=2),               # thread 2: self 40
    ]
    v = build_views(build(events))
    fl = flame(v.analysis.trace, v.analysis.tree, v.analysis.links)
    fl.check()
    label = {k: fl.labels[fl.name[k]] for k in range(len(fl))}
    roots = {label[k]: (int(fl.host_self[k]), int(fl.host_total[k]))
             for k in range(len(fl)) if fl.parent[k] < 0}
    assert roots == {"thread 1 (pid 100)": (70_000, 100_000 + 300_000 + 40_000),
                     "thread 2 (pid 100)": (40_000, 50_000)}
    frame = next(k for k in range(len(fl)) if label[k] == "train.py(9): loop")
    assert fl.host_self[frame] == 270_000  # 300 - a's 30: the step's own 70 included
    body = v.get("module/flame", {})
    assert sum(body["self"]) == body["total_us"] == 100 + 300 + 40 + 50
    text = v.get("stacks/collapsed", {})
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()) == 490


def test_cap_children_keeps_the_heaviest_and_sums_the_rest():
    kept, lost_parent, lost_total, lost_count = cap_children(
        np.array([-1, 0, 0, 0, 3]), np.array([6, 3, 2, 1, 1]), np.ones(5, bool), cap=2)
    assert kept.tolist() == [True, True, True, False, False]
    assert (lost_parent.tolist(), lost_total.tolist(), lost_count.tolist()) == ([0], [1], [1])


def test_big_fan_out_is_cut_to_1000_children_plus_a_remainder():
    events = [user("root", 0, 100_000)] + [user(f"r{i}", i * 10, 5) for i in range(1500)]
    v = build_views(build(events))
    root = v.get("module/ranges", {})[0]
    assert len(root["children"]) == 1001
    rem = root["children"][-1]
    assert rem["remainder"] == 500 and rem["calls"] == 500 and rem["name"] == "(500 more)"
    fl = v.get("module/flame", {})
    assert fl["capped"] == 500 and "(500 more)" in fl["labels"]
    assert abs(sum(fl["self"]) - fl["total_us"]) < 1e-6


def test_deep_nesting_is_iterative():
    n = 3000
    events = [op(f"f{i}", i, 2 * (n - i)) for i in range(n)]
    v = build_views(build(events))
    fl = flame(v.analysis.trace, v.analysis.tree, v.analysis.links)
    fl.check()
    assert fl.folded == n - 512
    body = v.get("module/flame", {})
    assert abs(sum(body["self"]) - body["total_us"]) < 1e-6
    assert v.get("stacks/collapsed", {}).count("\n") == 512


def test_flame_totals_are_the_time_of_their_calls():
    """A merged frame's host total is the time of its calls (the sum of their durations), on
    every thread and at the depth where deeper frames are folded in: the totals come from
    the merged paths (issue 19: no per-event subtree sums), checked here against the
    events themselves, not against the flame graph's own sums."""
    n = 600  # nested 600 deep: f512.. are folded into f511
    chain = [op(f"f{i}", i, 2 * (n - i)) for i in range(n)]
    calls = [op("a", 0, 100, tid=2), op("b", 10, 30, tid=2), op("c", 12, 5, tid=2),
             op("a", 200, 50, tid=2), op("b", 210, 20, tid=2), op("b", 300, 7, tid=2)]
    v = build_views(build(chain + calls))
    fl = flame(v.analysis.trace, v.analysis.tree, v.analysis.links)
    assert fl.folded == n - 512
    total = {}
    for k in range(len(fl)):
        path, j = [], k
        while j >= 0:
            path.append(fl.labels[fl.name[j]])
            j = int(fl.parent[j])
        total[tuple(reversed(path[:-1]))] = int(fl.host_total[k])  # without the thread root
    us = 1000
    assert total[("a",)] == 150 * us and total[("a", "b")] == 50 * us
    assert total[("a", "b", "c")] == 5 * us and total[("b",)] == 7 * us
    for k in (0, 1, 300, 510, 511):
        assert total[tuple(f"f{i}" for i in range(k + 1))] == 2 * (n - k) * us
    assert len([p for p in total if p and p[0] == "f0"]) == 512


# --- real traces --------------------------------------------------------------------------

CUDA = ["hta_v100_resnet_ns_2024", "kineto_resnet50_w0"]


@pytest.mark.parametrize("rel", CUDA)
def test_real_cuda_traces_partition_steps_and_account_device_time(rel):
    if not have_shared():
        pytest.skip(NO_SHARED)
    v = shared_views(rel)
    a = v.analysis
    m = analyze_module(a.trace, a.tree, a.links, a.steps)
    m.check()
    ph = m.phases
    assert (ph.host.sum(axis=1) == a.steps.host_end - a.steps.host_start).all()
    # backward runs on its own autograd thread: Backward gets most of the device time
    k = {p: i for i, p in enumerate(("DataLoader", "Forward", "Backward", "Optimizer", "Other"))}
    assert (ph.host[:, k["Backward"]] > 0).all() and (ph.host[:, k["Forward"]] > 0).all()
    assert ph.device[:, k["Backward"]].sum() > ph.device[:, k["Forward"]].sum()
    fl = flame(a.trace, a.tree, a.links)
    fl.check()
    launched = int(a.links.device_ns[a.links.launch_rows].sum())
    assert int(fl.device_total[fl.parent < 0].sum()) == launched
    assert v.get("stacks/collapsed", {"metric": "device"}).count("\n") > 10


def test_real_marked_phases_equal_their_ranges():
    if not have_shared():
        pytest.skip(NO_SHARED)
    v = shared_views(CUDA[0])
    body = v.get("module/phases", {})
    flat = {r["name"]: r for r in v.get("module/ranges", {"flat": "1"})}
    total_fwd = sum(s["host_us"]["Forward"] for s in body["steps"])
    # every step's '## forward ##' range lies in its step and nothing outranks it there
    assert abs(total_fwd - flat["## forward ##"]["host_total_us"]) <= 5


# --- torch.profiler traces ------------------------------------------------------------------

GENERATE = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    out = sys.argv[1]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Sequential(nn.Linear(128, 64), nn.ReLU()),
                          nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def ready(prof):
        prof.export_chrome_trace(os.path.join(out, "train.pt.trace.json"))
        ka = {e.key: {"calls": e.count, "total": e.cpu_time_total, "user": e.is_user_annotation}
              for e in prof.key_averages()}
        with open(os.path.join(out, "ka.json"), "w") as f:
            json.dump(ka, f)

    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready, with_modules=True,
                 with_stack=True, schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for i in range(5):
            with record_function("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            with record_function("bookkeeping"):
                with record_function("inner"):
                    float(loss)
            prof.step()
''')


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("module_torch")
    script = out / "generate.py"
    script.write_text(GENERATE)
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    views = build_views(read_trace(str(out / "train.pt.trace.json")))
    with open(out / "ka.json", encoding="utf-8") as f:
        return views, json.load(f), out


@pytest.mark.torch
def test_torch_phases_agree_with_the_ranges(generated):
    views, _, _ = generated
    a = views.analysis
    m = analyze_module(a.trace, a.tree, a.links, a.steps)
    m.check()
    t = a.trace
    body = views.get("module/phases", {})
    assert len(body["steps"]) == 3
    for s, hs, he in zip(body["steps"], a.steps.host_start, a.steps.host_end):
        for name, phase in (("forward", "Forward"), ("backward", "Backward"),
                            ("optimizer", "Optimizer")):
            rows = np.flatnonzero(t.name == t.strings.index(name))
            inside = rows[(t.start[rows] >= hs) & (t.start[rows] < he)]
            assert len(inside) == 1
            assert round(s["host_us"][phase] * 1000) == int(t.dur[inside[0]]), (name, s)
        assert abs(sum(s["host_us"].values()) - s["host_total_us"]) < 1e-6
    assert all(v == "record_function" for k, v in body["source"].items() if k != "DataLoader")


@pytest.mark.torch
def test_torch_ranges_equal_key_averages(generated):
    views, ka, _ = generated
    flat = {r["name"]: r for r in views.get("module/ranges", {"flat": "1"})}
    users = {k: v for k, v in ka.items() if v["user"] and not k.startswith("ProfilerStep")}
    assert set(users) == set(flat), (set(users), set(flat))
    for name, k in users.items():
        assert flat[name]["calls"] == k["calls"], name
        assert abs(flat[name]["host_total_us"] - k["total"]) <= 1, (name, flat[name], k)
    tree = views.get("module/ranges", {})
    book = next(r for r in tree if r["name"] == "bookkeeping")
    assert [c["name"] for c in book["children"]] == ["inner"]


@pytest.mark.torch
def test_torch_module_tree_and_stacks(generated):
    views, _, _ = generated
    tree = views.get("module/tree", {})
    names = {n["name"] for n in tree}
    assert any(n.startswith("nn.Module: Sequential_") for n in names), names
    root = next(n for n in tree if n["name"].startswith("nn.Module: Sequential_"))
    assert root["occurrences"] == 3
    kids = {c["name"].split("_")[0] for c in root["children"]}
    assert {"nn.Module: Linear", "nn.Module: ReLU", "nn.Module: Sequential"} <= kids
    for c in root["children"]:
        assert c["host_total_us"] <= root["host_total_us"]
    assert root["host_self_us"] <= root["host_total_us"] - sum(
        c["host_total_us"] for c in root["children"]) + len(root["children"])
    text = views.get("stacks/collapsed", {})
    lines = text.splitlines()
    values = [int(ln.rsplit(" ", 1)[1]) for ln in lines]    # flamegraph.pl's format
    assert all(v > 0 for v in values) and len(set(ln.rsplit(" ", 1)[0] for ln in lines)) == len(lines)
    total = views.get("module/flame", {})["total_us"]
    assert abs(sum(values) - total) <= len(lines)             # each line rounded once
    assert any(re.search(r";nn\.Module: Sequential_0;(.*;)?nn\.Module: Linear_0;", ln)
               for ln in lines)


def _wide_tree(cap: int):
    """Root 0 with ``cap + 1`` children 1..cap+1 (heaviest first); the lightest, ``cap + 1``,
    is cut by the cap, and it has ``cap + 1`` children of its own (one more cut)."""
    n_kids = cap + 1
    parent = [-1] + [0] * n_kids + [n_kids] * n_kids
    total = [0] + [10 * n_kids - i for i in range(n_kids - 1)] + [n_kids] + [1] * n_kids
    total[0] = sum(total[1:n_kids + 1])
    return np.array(parent, dtype=np.int64), np.array(total, dtype=np.int64)


def test_cap_children_reports_no_remainder_under_a_node_that_was_cut():
    """A node cut by the cap takes its subtree along: its own cut children are already in
    its parent's remainder, so they must not come back as a remainder of their own (which
    became a stray root in module/flame and crashed module/ranges, module/tree)."""
    from stepscope.analysis.module import PathTable
    from stepscope.analysis.stacks import MAX_CHILDREN, Flame, cap_children
    from stepscope.views.module import flame_payload, nested

    parent, total = _wide_tree(2)
    kept, lost_parent, lost_total, lost_count = cap_children(parent, total, total > 0, cap=2)
    assert kept.tolist() == [True, True, True] + [False] * 4
    assert (lost_parent.tolist(), lost_total.tolist(), lost_count.tolist()) == ([0], [3], [1])

    parent, total = _wide_tree(MAX_CHILDREN)
    n = len(parent)
    depth = np.where(parent < 0, 0, np.where(parent == 0, 1, 2))
    t = PathTable(name=np.arange(n) % 3, parent=parent, depth=depth, calls=np.ones(n, np.int64),
                  host_total=total, host_self=total, host_min=total, host_max=total,
                  device=np.zeros(n, np.int64))
    for kind in ("ranges", "tree"):
        roots, _, folded = nested(t, ["a", "b", "c"], kind)
        assert len(roots) == 1 and folded == 1
        assert roots[0]["children"][-1]["name"] == "(1 more)"
    self_ = total.copy()
    self_[: MAX_CHILDREN + 2] -= np.bincount(parent[parent >= 0], total[parent >= 0],
                                             minlength=n).astype(np.int64)[: MAX_CHILDREN + 2]
    fl = Flame(labels=["a", "b", "c"], name=np.arange(n) % 3, parent=parent, host_self=self_,
               host_total=total, device_self=self_, device_total=total, folded=0)
    fp = flame_payload(fl, "host_self")
    assert [i for i, p in enumerate(fp["parent"]) if p == -1] == [0]
    assert fp["total_us"] == int(total[0]) / 1000


def test_range_left_open_across_a_step_is_noted_and_kept_whole_in_the_ranges():
    """record_function entered in one step and left in the next: the host tree clips it at
    its step's end (SPEC §2.4.1), so the flame graph gives it only that part; the note says
    why, and the user ranges table (its own nesting of the ranges) keeps its whole span."""
    v = build_views(build([step(1, 0, 100), step(2, 100, 100), user("cross", 60, 90),
                           op("a", 70, 10), op("b", 120, 20)]))
    note = next(n for n in v.notes() if n["code"] == "partial_overlaps")
    assert "record_function range left open across prof.step()" in note["text"]
    ranges = {r["name"]: r for r in v.get("module/ranges", {"flat": "1"})}
    assert ranges["cross"]["host_total_us"] == 90
    fl = v.get("module/flame", {})
    by = {fl["labels"][k]: (s, t) for k, s, t in zip(fl["name"], fl["self"], fl["total"])}
    assert by["cross"] == (30.0, 40.0) and sum(fl["self"]) == fl["total_us"] == 200.0


def test_device_time_launched_beside_a_range_is_noted():
    """A ``backward`` range on the main thread counts the kernels launched on its own thread
    (SPEC §4.2: 0 here), while the autograd thread launched 3 ms of kernels during it (the
    Phases tab's Backward holds them): a real 2024 trace showed 115 µs against 316 ms."""
    v = build_views(build([
        step(1, 0, 10_000), user("backward", 100, 9_000),
        op("autograd::engine::evaluate_function: MmBackward0", 200, 5_000, tid=2),
        *launch("aten::mm", 300, 100, "k", 400, 3_000, corr=1, ext=1, tid=2)]))
    (bwd,) = [r for r in v.get("module/ranges", {"flat": "1"}) if r["name"] == "backward"]
    assert bwd["device_us"] == 0
    assert v.get("module/phases", {})["average"]["device_us"]["Backward"] == 3000
    (note,) = [n for n in v.payload("Module")["notes"]
               if n["code"] == "ranges_device_time_own_thread"]
    assert "3.0 ms more was launched from other threads" in note["text"]
    # a range of the other thread around that launch owns it: nothing missing, no note
    v = build_views(build([
        step(1, 0, 10_000), user("backward", 100, 9_000), user("bucket", 250, 1_000, tid=2),
        op("autograd::engine::evaluate_function: MmBackward0", 200, 5_000, tid=2),
        *launch("aten::mm", 300, 100, "k", 400, 3_000, corr=1, ext=1, tid=2)]))
    assert "ranges_device_time_own_thread" not in {n["code"] for n in v.payload("Module")["notes"]}


def test_phase_averages_are_exact_to_the_ns():
    """An average of 3 steps printed 10.000333333333334 µs; the API's times are to the ns."""
    v = build_views(build([step(1, 0, 10), op("aten::mm", 0, 10), step(2, 20, 10),
                           op("aten::mm", 20, 10), step(3, 40, "10.001"),
                           op("aten::mm", 40, "10.001")]))
    avg = v.get("module/phases", {})["average"]
    assert avg["host_us"]["Forward"] == avg["host_total_us"] == 10.0
    assert [s["host_us"]["Forward"] for s in v.get("module/phases", {})["steps"]] == [10, 10, 10.001]


def test_a_range_the_tree_clips_against_its_python_frame_keeps_its_device_time():
    """with_stack=True: a record_function range begins inside the python frame entering it
    and outlives it; the host tree clips it there (SPEC §2.4.1), but its kernels (5 + 7 µs,
    launched by ops inside its span) are still its device time."""
    events = [step(1, 0, 200), py("<module>", 0, 200), py("__enter__", 10, 3),
              op("profiler::_record_function_enter_new", 11, 1.5), user("forward", 11.5, 80),
              *launch("aten::mm", 20, 10, "k1", 30, 5, corr=1, ext=1),
              *launch("aten::add", 40, 10, "k2", 50, 7, corr=2, ext=2)]
    v = build_views(build(events))
    (fwd,) = [r for r in v.get("module/ranges", {"flat": "1"}) if r["name"] == "forward"]
    assert (fwd["host_total_us"], fwd["device_us"]) == (80, 12)
    phases = v.get("module/phases", {})
    assert phases["average"]["device_us"]["Forward"] == 12
    # how torch records every range with with_stack: an info note, not the warning
    notes = {n["code"]: n for n in v.notes()}
    assert "partial_overlaps" not in notes
    note = notes["ranges_clipped_to_python_frames"]
    assert note["level"] == "info" and note["text"].startswith("1 record_function ranges")
    # the flame graph draws the range whole, around the ops it wraps; the frames entering it
    # end where it starts (clipped, it was a 1.5 µs leaf under the entering op, its ops beside)
    lines = v.get("stacks/collapsed", {}).splitlines()
    root = "thread 1 (pid 100);<module>"
    assert f"{root};forward;aten::mm;cudaLaunchKernel 1" in lines
    assert f"{root};forward;aten::add 9" in lines
    assert f"{root};__enter__ 1" in lines  # [10, 11.5): its 1 µs before the op
    assert f"{root};forward 60" in lines  # 80 - 2 x 10 of its ops
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == 200 - 1  # (each line rounds)
    flame = v.get("module/flame", {"metric": "host_self"})
    totals = {flame["labels"][n]: t for n, t in zip(flame["name"], flame["total"])}
    assert (totals["forward"], totals["__enter__"]) == (80, 1.5)
    # only python frames (and the enter op) entering a range end early: a range B entered
    # inside range A, overhanging it, is clipped to A as before (A was cut to B's start)
    lines = build_views(build([
        step(1, 0, 300), py("<module>", 0, 300), user("A", 10, 90), op("aten::mm", 20, 10),
        op("aten::add", 60, 20), py("__enter__", 50, 3), user("B", 51, 99),
        op("aten::mul", 110, 10)])).get("stacks/collapsed", {}).splitlines()
    assert {ln for ln in lines if ";A" in ln} == {
        f"{root};A 30", f"{root};A;aten::mm 10", f"{root};A;__enter__ 1", f"{root};A;B 29",
        f"{root};A;B;aten::add 20"}
