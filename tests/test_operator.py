"""Operator view: nesting, same-name collapse, self/total, grouping, stacks (SPEC §2.4)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    SHARED,
    build,
    ev,
    have_shared,
    kernel,
    launch,
    memcpy,
    op,
    py,
    runtime,
    shared_views,
    step,
    user,
)

from stepscope.analysis import analyze
from stepscope.analysis import tree as T
from stepscope.errors import BadParameter, NotFound
from stepscope.read.reader import read_trace
from stepscope.taxonomy import Kind
from stepscope.views import build_views


def table(events, group_by="Operation"):
    views = build_views(build(events))
    views.analysis.check()
    return {(r["name"], r.get("input_shape")) if group_by != "Operation" else r["name"]: r
            for r in views.get("operation/table", {"group_by": group_by})}


def times(row):
    return (row["calls"], row["host_self_duration"], row["host_total_duration"],
            row["device_self_duration"], row["device_total_duration"])


def test_self_and_total_with_runtime_subtraction_and_device_time():
    rows = table([
        op("aten::conv2d", 0, 10, ext=1),
        op("aten::cudnn_convolution", 2, 6, ext=2),
        runtime("cudaLaunchKernel", 3, 1, corr=7, ext=2),
        kernel("implicit_gemm", 5, 5, corr=7),
        runtime("cudaMemcpyAsync", 6, 1, corr=8, ext=2),
        memcpy(20, 3, corr=8),
    ])
    assert times(rows["aten::conv2d"]) == (1, 4, 10, 0, 8)
    assert times(rows["aten::cudnn_convolution"]) == (1, 4, 6, 8, 8)


def test_same_name_child_is_collapsed_into_its_parent():
    rows = table([
        op("aten::add_", 0, 10, ext=1),
        op("aten::add_", 1, 8, ext=2),                 # only child, same name: merged
        op("aten::copy_", 2, 2, ext=3),
        *launch("aten::fill_", 5, 1, "fill", 20, 4, corr=1, ext=4),
        runtime("cudaLaunchKernel", 7, 1, corr=2, ext=2),  # the merged child's call
        kernel("add_kernel", 30, 3, corr=2),
    ])
    # parent keeps [0, 10), takes the child's children (copy_, fill_) and runtime call
    assert times(rows["aten::add_"]) == (1, 10 - 2 - 1 - 1, 10, 3, 7)
    assert times(rows["aten::copy_"]) == (1, 2, 2, 0, 0)


def test_collapse_repeats_down_a_chain_but_not_past_two_children():
    rows = table([
        op("aten::to", 0, 10), op("aten::to", 1, 8), op("aten::to", 2, 6),   # chain: 1 call
        op("aten::add", 20, 10), op("aten::add", 21, 3), op("aten::mul", 25, 3),
    ])
    assert times(rows["aten::to"])[:3] == (1, 10, 10)        # no children left
    assert times(rows["aten::add"])[:3] == (2, 3 + 4, 13)   # two children: no collapse


def test_user_ranges_and_python_frames_are_children_but_not_rows():
    rows = table([
        op("aten::linear", 0, 10),
        user("my_range", 1, 2),
        py("model.py(12): forward", 4, 1),
        step(1, 0, 20),
        op("Optimizer.step#SGD.step", 11, 2),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 14, 2),
    ])
    assert set(rows) == {"aten::linear"}
    assert times(rows["aten::linear"])[:3] == (1, 7, 10)


def test_2021_operator_category_makes_user_ranges_rows():
    rows = table([
        op("my_range", 0, 10, cat="Operator"),
        op("CudnnConvolutionBackward", 1, 5, cat="Operator"),
        op("ProfilerStep#3", 0, 20, cat="Operator"),
    ])
    assert set(rows) == {"my_range", "CudnnConvolutionBackward"}
    assert times(rows["my_range"])[:3] == (1, 5, 10)


def test_group_by_input_shape():
    rows = table([
        op("aten::mm", 0, 2, shape=[[2, 3], [3, 4]]),
        op("aten::mm", 3, 2, shape=[[2, 3], [3, 4]]),
        op("aten::mm", 6, 5, shape=[[5, 6], [6, 7]]),
        op("aten::relu", 12, 1),
    ], group_by="OperationAndInputShape")
    assert rows[("aten::mm", "[[2, 3], [3, 4]]")]["calls"] == 2
    assert rows[("aten::mm", "[[5, 6], [6, 7]]")]["host_total_duration"] == 5
    assert rows[("aten::relu", "")]["calls"] == 1


def test_rows_sorted_by_device_self_then_host_self_without_gpu():
    cpu = list(table([op("a", 0, 1), op("b", 2, 5), op("c", 10, 3)]))
    assert cpu == ["b", "c", "a"]
    gpu = list(table([
        op("a", 0, 9),
        *launch("b", 10, 2, "kb", 20, 3, corr=1, ext=1),
        *launch("c", 13, 2, "kc", 30, 8, corr=2, ext=2),
    ]))
    assert gpu == ["c", "b", "a"]


def test_runtime_call_without_external_id_belongs_to_no_op():
    rows = table([
        op("aten::mm", 0, 10, ext=5),
        runtime("cudaLaunchKernel", 2, 1, corr=1),     # id missing: no op
        kernel("k", 3, 4, corr=1),
    ])
    assert times(rows["aten::mm"]) == (1, 10, 10, 0, 0)


def test_external_id_naming_no_enclosing_op_falls_back_to_time():
    views = build_views(build([
        op("aten::mm", 0, 10, ext=1),
        op("aten::add", 20, 10, ext=3),
        runtime("cudaLaunchKernel", 2, 1, corr=3, ext=3),  # id == correlation (Kineto bug)
        kernel("k", 3, 4, corr=3),
    ]))
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["aten::mm"]) == (1, 9, 10, 4, 4)
    assert times(rows["aten::add"]) == (1, 10, 10, 0, 0)
    assert "external_id_mismatch" in [n["code"] for n in views.notes()]


def test_partial_overlap_is_clipped_and_noted():
    views = build_views(build([
        op("outer", 0, 10), op("inner", 5, 10),
        op("other", "0.000", "3.000", tid=2), op("late", "2.999", "1.000", tid=2),
    ]))
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["outer"])[:3] == (1, 5, 10)
    assert times(rows["inner"])[:3] == (1, 5, 5)      # clipped to [5, 10)
    notes = [n for n in views.notes() if n["code"] == "partial_overlaps"]
    assert notes and notes[0]["text"].startswith("2 ")


def test_deep_nesting_without_recursion():
    depth = 100_000
    events = [op("aten::f", k, 2 * (depth - k), tid=1) for k in range(depth)]
    events += [op("aten::g", k, 2 * (depth - k), tid=2) for k in range(0, depth, 2)]
    events += [op("aten::h", k, 2 * (depth - k), tid=2) for k in range(1, depth, 2)]
    a = analyze(build(events))
    a.check()
    rows = {r["name"]: r for r in build_views(build(events)).get("operation/table", {})}
    # tid 1: one chain of same-name ops collapses into one call with no children
    assert times(rows["aten::f"])[:3] == (1, 2 * depth, 2 * depth)
    # tid 2: alternating names: every op's self time is 2 µs (1 µs on each side)
    assert rows["aten::g"]["calls"] == depth // 2
    assert rows["aten::g"]["host_self_duration"] == depth
    assert rows["aten::h"]["host_self_duration"] == depth


def test_deep_python_chain_gives_a_call_stack_without_recursion():
    depth = 100_000
    events = [py(f"f{k % 7}.py(1): g", k, 2 * (depth - k)) for k in range(depth)]
    events.append(op("aten::add", depth + 1, 1))
    views = build_views(build(events))
    (row,) = views.get("operation/stack", {"op_name": "aten::add"})
    frames = row["call_stack"].split(";")
    assert len(frames) == depth - 1 and frames[-1] == "f0.py(1): g"   # frames 0 .. d-2


def test_call_stacks_from_args_and_from_python_frames():
    views = build_views(build([
        op("aten::mm", 0, 2, stack="model.py(3): f;train.py(9): main"),
        op("aten::mm", 3, 2, stack="model.py(3): f;train.py(9): main"),
        op("aten::mm", 6, 2, stack="model.py(7): g;train.py(9): main"),
        py("train.py(9): main", 10, 20),
        py("nn.Module: Linear_0", 11, 10),
        op("aten::linear", 12, 5),
        op("aten::relu", 40, 1),
    ]))
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert rows["aten::mm"]["has_call_stack"] and rows["aten::linear"]["has_call_stack"]
    assert not rows["aten::relu"]["has_call_stack"]
    stacks = views.get("operation/stack", {"group_by": "Operation", "op_name": "aten::mm"})
    assert [(r["call_stack"], r["calls"]) for r in stacks] == [
        ("model.py(3): f;train.py(9): main", 2), ("model.py(7): g;train.py(9): main", 1)]
    lin = views.get("operation/stack", {"op_name": "aten::linear"})
    assert [r["call_stack"] for r in lin] == ["nn.Module: Linear_0;train.py(9): main"]
    assert views.get("operation/stack", {"op_name": "aten::relu"}) == []  # no stacks
    for params in ({"op_name": "aten::nope"},  # an operator the span lacks: 404, not []
                   {"op_name": "aten::mm", "group_by": "OperationAndInputShape",
                    "input_shape": "[[9]]"}):
        with pytest.raises(NotFound, match="unknown operator 'aten::") as e:
            views.get("operation/stack", params)
        assert "operation/table?group_by=" in e.value.detail


def test_stack_rows_by_input_shape():
    views = build_views(build([
        op("aten::mm", 0, 2, shape=[[1]], stack="a.py(1): f"),
        op("aten::mm", 3, 2, shape=[[2]], stack="a.py(1): f"),
    ]))
    rows = views.get("operation/stack", {"group_by": "OperationAndInputShape",
                                         "op_name": "aten::mm", "input_shape": "[[2]]"})
    assert [(r["input_shape"], r["call_stack"], r["calls"]) for r in rows] == [
        ("[[2]]", "a.py(1): f", 1)]


def test_bad_parameters():
    views = build_views(build([op("aten::mm", 0, 2)]))
    with pytest.raises(BadParameter):
        views.get("operation", {"group_by": "Nope"})
    with pytest.raises(BadParameter):
        views.get("operation/stack", {"group_by": "Operation"})
    assert views.get("operation/table", {}) == views.get("operation/table",
                                                         {"group_by": "Operation"})


def test_pies_list_every_positive_operator_descending():
    views = build_views(build([
        op("a", 0, 1), op("b", 2, 5), op("c", 10, 3), op("zero", 20, 0),
        *launch("d", 30, 2, "k", 40, 6, corr=1, ext=1),
    ]))
    pies = views.get("operation", {"group_by": "Operation"})
    assert pies["host_total_time"]["rows"] == [["b", 5], ["c", 3], ["d", 2], ["a", 1]]
    assert pies["device_self_time"]["rows"] == [["d", 6]]
    assert pies["device_total_time"]["title"] == "Device Total Time (us)"
    cpu = build_views(build([op("a", 0, 1)])).get("operation", {})
    assert cpu["device_self_time"] is None and cpu["host_self_time"]["rows"] == [["a", 1]]


def test_the_cached_operator_payload_holds_each_table_row_once():
    """The table rows are stored once in the cache (and unpacked once in the server), not
    again beside the pies (100,000 names: 107 -> 62 MB of JSON per trace)."""
    import orjson

    from stepscope.store.packing import pack, unpack

    views = build_views(build([op("a", 0, 1), op("b", 2, 5, stack="x.py(1): f"),
                               *launch("d", 30, 2, "k", 40, 6, corr=1, ext=1)]))
    state = pack(views.payload("Operator"))[0]
    rows = {g: views.get("operation/table", {"group_by": g}) for g in ("Operation",
                                                                       "OperationAndInputShape")}
    stacks = views.get("operation/stack", {"group_by": "Operation", "op_name": "b"})
    assert len(stacks) == 1 and all(len(r) == 3 for r in rows.values())
    # a row's field appears once per table row and per stack row (both groupings)
    assert orjson.dumps(state).count(b'"host_self_duration"') == 3 + 3 + 2 * len(stacks)
    again = unpack(orjson.loads(orjson.dumps(state)), {})
    assert again["groups"]["Operation"].rows == rows["Operation"]
    assert again["pies"]["Operation"] == views.get("operation", {"group_by": "Operation"})


def test_tensor_core_fields_on_gpu_traces():
    rows = table([
        *launch("aten::mm", 0, 5, "volta_h884gemm_128x128", 10, 6, corr=1, ext=1),
        *launch("aten::mm", 6, 5, "volta_sgemm_128x64", 20, 2, corr=2, ext=2),
        *launch("aten::add", 12, 2, "add", 30, 2, corr=3, ext=3),
    ])
    assert rows["aten::mm"]["tc_eligible"] and not rows["aten::add"]["tc_eligible"]
    assert rows["aten::mm"]["tc_self_ratio"] == 75.0
    assert "tc_eligible" not in table([op("aten::mm", 0, 1)])["aten::mm"]


needs_shared = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)


@needs_shared
def test_shared_ns_2024_operators_have_device_time():
    rows = shared_views("hta_v100_resnet_ns_2024").get("operation/table", {})
    assert sum(r["device_self_duration"] for r in rows) > 0
    conv = {r["name"]: r for r in rows}["aten::cudnn_convolution"]
    assert conv["device_self_duration"] > 0 and conv["calls"] > 0


@needs_shared
@pytest.mark.parametrize("key", ["param_v100_dlrm_rank0", "hta_v100_profile_memory",
                                 "hta_a100_alexnet_nosteps"])
def test_shared_traces_with_correlation_as_external_id_still_link_ops(key):
    rows = shared_views(key).get("operation/table", {})
    assert sum(r["device_self_duration"] for r in rows) > 0
    assert all(r["host_self_duration"] >= 0 for r in rows)


# --- the nesting itself (stepscope.analysis.tree) -----------------------------------------------


def _sorted(s, e):
    o = np.lexsort((np.arange(len(s)), -e, s))
    return s[o], e[o]


def test_vectorised_nesting_equals_the_stack_reference_on_random_intervals():
    rng = np.random.default_rng(7)
    for _ in range(1500):
        n = int(rng.integers(1, 40))
        s = rng.integers(0, 50, n)
        e = s + rng.integers(0, 20, n) * (rng.random(n) < 0.85)   # some zero-length
        s, e = _sorted(s, e)
        p1, e1, c1 = T.nest(s, e)
        p2, e2, c2 = T.nest_stack(s, e)
        assert (p1 == p2).all() and (e1 == e2).all() and c1 == int(c2.sum())


def test_laminar_parents_is_the_last_earlier_event_one_level_up_even_on_overlaps():
    # the rule the callers verify against (partial overlaps included): for an event of
    # positive length, the last earlier one with one ancestor fewer
    rng = np.random.default_rng(9)
    for _ in range(500):
        n = int(rng.integers(1, 30))
        s = rng.integers(0, 40, n)
        e = s + rng.integers(1, 25, n)
        s, e = _sorted(s, e)
        depth = [sum(e[j] > s[i] for j in range(i)) for i in range(n)]
        want = [max((j for j in range(i) if depth[j] == depth[i] - 1), default=-1)
                for i in range(n)]
        assert T._laminar_parents(s, e).tolist() == want


def test_nesting_follows_torch_rule_for_touching_and_zero_length_events():
    s = np.array([0, 0, 5, 10, 10])
    e = np.array([10, 5, 5, 10, 12])
    s, e = _sorted(s, e)          # [0,10) [0,5) [5,5) [10,12) [10,10)
    parent, _, clipped = T.nest(s, e)
    # [5,5) lies in [0,10) but not in [0,5) (it starts at its end); [10,12) starts where
    # [0,10) ends: a root; the instant [10,10) lies inside [10,12)
    assert parent.tolist() == [-1, 0, 0, -1, 3] and clipped == 0


def test_tree_helpers_use_pointer_doubling():
    parent = np.array([-1, 0, 1, 2, 0, 4])
    flag = np.array([False, True, False, False, False, False])
    assert T.any_ancestor_or_self(parent, flag).tolist() == [False, True, True, True, False,
                                                             False]
    marked = np.array([True, False, True, False, False, False])
    assert T.nearest_marked_ancestor(parent, marked).tolist() == [-1, 0, 0, 2, 0, 0]
    is_op = np.ones(6, dtype=bool)
    name = np.array([1, 1, 1, 2, 3, 3])
    # 0 has two children (1, 4): nothing merges into 0; 2 is the only child of 1 and has
    # its name: merged; 5 is the only child of 4 and has its name: merged
    assert T.collapse_same_name(parent, is_op, name).tolist() == [0, 1, 1, 3, 4, 4]


@pytest.mark.parametrize("big", [False, True])  # True: the packed key would not fit
def test_tree_order_equals_the_five_key_lexsort(big):
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        rows = rng.permutation(1000)[:n]  # distinct, not sorted
        th = rng.integers(0, 3, n).astype(np.int32)
        s = rng.integers(0, 2**61 if big else 20, n)
        e = s + rng.integers(0, 5, n)
        is_rt = rng.random(n) < 0.3
        want = np.lexsort((rows, is_rt, -e, s, th))
        assert T._tree_order(rows, th, s, e, is_rt).tolist() == want.tolist()


def test_within_and_nearest_marked_at_equal_pointer_doubling_on_random_trees():
    rng = np.random.default_rng(3)
    clipped = 0
    for _ in range(200):
        events = []
        for k in range(int(rng.integers(1, 30))):
            t0, dur = int(rng.integers(0, 100)), int(rng.integers(0, 40))
            tid = int(rng.integers(1, 3))
            events.append(op(f"aten::o{k % 4}", t0, dur, tid=tid) if rng.random() < 0.7
                          else runtime("cudaLaunchKernel", t0, dur, corr=k, tid=tid))
        tree = T.build_tree(build(events))
        clipped += tree.clipped
        for density in (0.05, 0.3, 1.0):
            flag = rng.random(len(tree)) < density
            assert (tree.within(flag) == T.any_ancestor_or_self(tree.parent, flag)).all()
            pos = rng.integers(-1, len(tree), 10)
            want = np.where(pos >= 0, T.nearest_marked_ancestor(tree.parent, flag)[pos], -1)
            for climb in (0, 1, 16):  # the table lookup after ``climb`` levels, or none
                got = T.nearest_marked_ancestor_at(tree.parent, flag, pos, climb=climb)
                assert got.tolist() == want.tolist()
    assert clipped  # the partial overlaps (stack fallback) were among them


def test_tree_nested_in_two_threads_equals_the_serial_one():
    """With a pool, about half of the threads are nested in its thread (issue 19: x200); the
    tree is the same, partial overlaps (clipped) included."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    events = []
    for k in range(3000):
        t0, dur = int(rng.integers(0, 2000)), int(rng.integers(0, 60))
        tid = int(rng.integers(1, 6)) if k % 3 else 1  # one thread holds more than the rest
        events.append(op(f"aten::o{k % 7}", t0, dur, tid=tid) if rng.random() < 0.7
                      else runtime("cudaLaunchKernel", t0, dur, corr=k, tid=tid))
    trace = build(events)
    serial = T.build_tree(trace)
    with ThreadPoolExecutor(1) as pool:
        threaded = T.build_tree(trace, pool=pool)
    assert serial.clipped == threaded.clipped > 0
    for f in ("rows", "start", "end", "parent", "subtree_end", "pos_of_row"):
        a, b = getattr(serial, f), getattr(threaded, f)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f
    here, aside = T._halves([(0, 10), (10, 13), (13, 20), (20, 21)])
    assert here == [(0, 10), (20, 21)] and aside == [(13, 20), (10, 13)]


def test_tree_and_link_indices_are_int32_and_times_int64():
    """The host tree's and the launch links' row, position and count arrays are int32
    (issue 19: 0.3 GB less at x200); ns times and sums stay int64."""
    a = analyze(build([op("aten::conv", 0, 10, ext=1),
                       runtime("cudaLaunchKernel", 2, 3, corr=7, ext=1),
                       kernel("k", 6, 5, corr=7)]))
    for arr in (a.tree.rows, a.tree.parent, a.tree.subtree_end, a.tree.pos_of_row,
                a.links.launcher, a.links.owner, a.links.device_count):
        assert arr.dtype == T.INDEX == np.int32
    for arr in (a.tree.start, a.tree.end, a.links.device_ns, a.nodes.device_self,
                a.nodes.host_self):
        assert arr.dtype == np.int64
    conv = int(a.tree.pos_of_row[0])
    assert a.nodes.device_total[conv] == 5_000 and a.nodes.host_self[conv] == 7_000


@pytest.mark.parametrize("groups", [1, 50, 2**15 + 3])  # sorted and reduced, or .at
def test_group_min_max_equals_ufunc_at(groups):
    from stepscope.analysis.operators import group_min_max

    rng = np.random.default_rng(groups)
    index = np.concatenate((np.arange(groups), rng.integers(0, groups, 3000)))  # none empty
    values = rng.integers(0, 10**12, len(index))
    lo = np.full(groups, np.iinfo(np.int64).max)
    hi = np.zeros(groups, dtype=np.int64)
    np.minimum.at(lo, index, values)
    np.maximum.at(hi, index, values)
    got_lo, got_hi = group_min_max(index, values, groups)
    assert got_lo.tolist() == lo.tolist() and got_hi.tolist() == hi.tolist()


def test_link_lookup_by_table_equals_the_sorted_search():
    from stepscope.analysis.links import _lookup

    rng = np.random.default_rng(4)
    for _ in range(200):
        n, q = int(rng.integers(0, 40)), int(rng.integers(0, 40))
        keys = rng.integers(0, 30, n)          # repeated ids: the first in order wins
        rows = rng.permutation(1000)[:n]
        queries = rng.integers(-3, 35, q)
        want = [int(rows[np.flatnonzero(keys == k)[0]]) if (keys == k).any() else -1
                for k in queries.tolist()]
        assert _lookup(keys, rows, queries).tolist() == want                 # table
        assert _lookup(keys + 2**40, rows, queries + 2**40).tolist() == want  # sort


@pytest.mark.parametrize("n", [0, 1, 7, 5000])
@pytest.mark.parametrize("hi", [3, 60, 10**8])  # small ranges are counted, wide ones sorted
def test_group_ids_equals_unique_rows(n, hi):
    from stepscope.analysis.operators import group_ids

    rng = np.random.default_rng(n + hi)
    cols = [rng.integers(-1, hi, n), rng.integers(0, 7, n), rng.integers(-5, hi, n)]
    first, ids = group_ids(*cols)
    keys = np.stack(cols, axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    assert ids.tolist() == inverse.reshape(-1).tolist()  # groups in ascending key order
    assert keys[first].tolist() == unique.tolist()  # a row of each group


# --- device time outside any operator, notes, host self >= 0 (SPEC §2.4.4, 8; §2.7) ---------


def _notes(views):
    return {n["code"]: n["text"] for n in views.notes()}


def test_device_time_launched_outside_any_operator_gets_range_rows():
    views = build_views(build([
        step(1, 0, 100),
        user("triton_block", 10, 30),
        ev("cuda_driver", "cuLaunchKernel", 12, 2, args={"correlation": 1}),  # no id: by time
        kernel("triton_k", 20, 8, corr=1),
        py("model.py(7): fn", 50, 20),
        runtime("cudaLaunchKernel", 55, 1, corr=2, ext=9),  # id names nothing: by time
        kernel("k2", 60, 5, corr=2),
        *launch("aten::mm", 80, 10, "gemm", 85, 4, corr=3, ext=3),
        runtime("cudaMemcpyAsync", 95, 1, corr=4),           # directly under the step
        memcpy(96, 2, corr=4),
        step(2, 100, 50),
        runtime("cudaLaunchKernel", 110, 1, corr=5),
        kernel("k5", 112, 3, corr=5),
        runtime("cudaLaunchKernel", 200, 1, corr=6),         # enclosed by no host event
        kernel("late", 202, 6, corr=6),
        kernel("early", 0, 7, corr=99),                      # launched before the profiler
    ]))
    views.analysis.check()
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert set(rows) == {"aten::mm", "triton_block", "model.py(7): fn", "ProfilerStep#*"}
    assert "kind" not in rows["aten::mm"] and times(rows["aten::mm"]) == (1, 9, 10, 4, 4)
    assert rows["triton_block"]["kind"] == "range"
    assert times(rows["triton_block"]) == (1, 28, 30, 8, 8)
    assert times(rows["model.py(7): fn"]) == (1, 19, 20, 5, 5)
    # step 1: 100 - 30 - 20 - 10 - 1 (its memcpy call); step 2: 50 - 1
    assert times(rows["ProfilerStep#*"]) == (2, 88, 150, 5, 5)
    acc = views.analysis.accounts
    assert (acc.total_ns, acc.operator_ns, acc.range_ns) == (35_000, 4_000, 18_000)
    assert (acc.unattributed_calls, acc.unattributed_ns, acc.orphans, acc.orphan_ns) == (
        1, 6_000, 1, 7_000)
    notes = _notes(views)
    assert notes["unattributed_launches"].startswith("1 runtime calls")
    assert "the 6 µs of device time" in notes["unattributed_launches"]
    assert notes["unlaunched_device_activity"].startswith("1 device activities (7 µs)")
    pies = views.get("operation", {})
    assert dict(pies["device_self_time"]["rows"])["ProfilerStep#*"] == 5
    assert "ProfilerStep#*" not in dict(pies["host_self_time"]["rows"])


def test_launch_without_captured_device_activity_is_noted():
    views = build_views(build([
        *launch("aten::mm", 0, 10, "gemm", 5, 4, corr=1, ext=1),
        op("aten::add", 20, 10, ext=2),
        runtime("cudaLaunchKernel", 21, 1, corr=2, ext=2),     # its kernel was never captured
        runtime("cudaStreamSynchronize", 23, 1, corr=3, ext=2),  # launches nothing
    ]))
    views.analysis.check()
    assert views.analysis.accounts.idle_launches == 1
    assert _notes(views)["launches_without_activity"].startswith("1 launch calls")
    clean = build_views(build(launch("aten::mm", 0, 10, "gemm", 5, 4, corr=1, ext=1)))
    assert "launches_without_activity" not in _notes(clean)


def test_runtime_call_attached_by_time_through_a_user_range_is_subtracted_once():
    rows = table([
        op("aten::linear", 0, 20, ext=1),
        user("inner", 2, 15),
        runtime("cudaLaunchKernel", 3, 14, corr=1, ext=77),  # id names nothing: to the op
        kernel("k", 30, 4, corr=1),
    ])
    assert times(rows["aten::linear"]) == (1, 5, 20, 4, 4)   # was 20 - 15 - 14 = -9


def test_runtime_call_under_a_python_frame_child_is_subtracted_once():
    rows = table([
        op("vllm::moe_forward", 0, 20, ext=1),
        py("fused_moe.py(10): run", 1, 18),
        runtime("cudaLaunchKernel", 2, 15, corr=1, ext=1),
        kernel("moe", 30, 4, corr=1),
    ])
    assert times(rows["vllm::moe_forward"]) == (1, 2, 20, 4, 4)   # was -13


def test_driver_call_nested_in_its_runtime_call_is_subtracted_once():
    rows = table([
        op("aten::mm", 0, 10, ext=1),
        runtime("cudaLaunchKernel", 1, 8, corr=1, ext=1),
        ev("cuda_driver", "cuLaunchKernel", 2, 6, args={"correlation": 2, "External id": 1}),
        kernel("gemm", 20, 3, corr=1),
    ])
    assert times(rows["aten::mm"]) == (1, 2, 10, 3, 3)   # was 10 - 8 - 6 = -4


def test_runtime_call_overhanging_its_op_is_subtracted_clipped():
    views = build_views(build([
        op("aten::mm", 0, 10, ext=1),
        runtime("cudaLaunchKernel", 8, 6, corr=1, ext=1),    # ends 4 µs after the op
        kernel("gemm", 20, 3, corr=1),
    ]))
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["aten::mm"]) == (1, 8, 10, 3, 3)   # was 10 - 6 = 4
    assert "partial_overlaps" in _notes(views)


def test_correlation_ids_repeating_across_processes_link_to_their_own_process():
    views = build_views(build([
        ev("cpu_op", "a", 0, 10, pid=100, args={"External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 1, 1, pid=100,
           args={"correlation": 1, "External id": 1}),
        ev("cpu_op", "b", 50, 10, pid=200, args={"External id": 2}),
        ev("cuda_runtime", "cudaLaunchKernel", 51, 1, pid=200,
           args={"correlation": 1, "External id": 2}),
        kernel("ka", 2, 3, corr=1, device_id=0),
        kernel("kb", 52, 7, corr=1, device_id=1),
    ]))
    views.analysis.check()
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert rows["a"]["device_self_duration"] == 3 and rows["b"]["device_self_duration"] == 7


def test_legacy_autograd_export_links_ops_to_kernels_by_flows(tmp_path):
    def x(name, ts, dur, pid):
        return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": 0, "pid": pid, "args": {}}

    def flow(ph, name, ts, pid, fid):
        return {"name": name, "ph": ph, "ts": ts, "tid": 0, "pid": pid, "id": fid,
                "cat": "cpu_to_cuda", "args": {}}

    cpu, cuda = "CPU functions", "CUDA functions"
    events = [
        x("aten::conv2d", 100, 20, cpu), x("aten::mm", 100, 10, cpu),
        flow("s", "aten::mm", 100, cpu, 1), flow("f", "gemm", 105, cuda, 1),
        x("gemm", 105, 7, cuda),
        flow("s", "aten::mm", 100, cpu, 2), flow("f", "gemm2", 115, cuda, 2),
        x("gemm2", 115, 3, cuda),
        x("orphan", 130, 2, cuda),
    ]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(events))
    views = build_views(read_trace(str(path)))
    views.analysis.check()
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["aten::mm"]) == (1, 10, 10, 10, 10)
    assert times(rows["aten::conv2d"]) == (1, 10, 20, 0, 10)
    assert views.analysis.accounts.orphans == 1
    # torch 1.x writes the device index as the kernels' tid: GPU0 gets its summary
    gpus = views.get("overview", {})["gpu_metrics"]["gpus"]
    assert [g["id"] for g in gpus] == [0]
    assert "kernels_without_device" not in [n["code"] for n in views.notes()]


def test_kernels_without_a_device_id_are_noted(tmp_path):
    # no args.device and no number in the pid: in the breakdown, in no GPU summary, noted
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": "GPU", "tid": "stream 7",
               "ts": 1, "dur": 5, "args": {}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7",
               "ts": 10, "dur": 5, "args": {}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    views = build_views(read_trace(str(path)))
    assert [g["id"] for g in views.get("overview", {})["gpu_metrics"]["gpus"]] == [0]
    notes = {n["code"]: n["text"] for n in views.notes()}
    assert notes["kernels_without_device"].startswith("1 kernels carry no device id")


def test_invariants_hold_on_random_traces():
    rng = np.random.default_rng(7)
    for _ in range(200):
        events = []
        for k in range(int(rng.integers(1, 40))):
            t0 = int(rng.integers(0, 200))
            dur = int(rng.integers(0, 60))
            tid = int(rng.integers(1, 3))
            maker = rng.choice(["op", "user", "py", "step"])
            if maker == "op":
                events.append(op(f"aten::o{k % 5}", t0, dur, tid=tid,
                                 ext=int(rng.integers(0, 30))))
            elif maker == "user":
                events.append(user(f"r{k % 3}", t0, dur, tid=tid))
            elif maker == "py":
                events.append(py(f"f{k % 3}", t0, dur, tid=tid))
            else:
                events.append(step(k, t0, dur, tid=tid))
        for c in range(int(rng.integers(0, 30))):
            t0 = int(rng.integers(0, 250))
            events.append(runtime("cudaLaunchKernel", t0, int(rng.integers(0, 20)),
                                  corr=int(rng.integers(0, 20)), ext=int(rng.integers(0, 30)),
                                  tid=int(rng.integers(1, 3))))
            events.append(kernel(f"k{c % 4}", t0 + int(rng.integers(-5, 30)),
                                 int(rng.integers(0, 15)), corr=int(rng.integers(0, 25))))
        a = analyze(build(events))
        a.tree.check()
        a.nodes.check()     # host/device self >= 0 (SPEC §2.7)
        a.accounts.check()  # device time accounted for


#: every real trace file of the shared folder (all runs, including those discovery may not list)
REAL_TRACES = sorted(str(p.relative_to(SHARED)) for p in Path(SHARED).rglob("*.json*")
                     if p.name.endswith((".json", ".json.gz"))) if have_shared() else []


@needs_shared
@pytest.mark.parametrize("rel", REAL_TRACES)
def test_real_traces_keep_the_operator_invariants(rel):
    views = build_views(read_trace(os.path.join(SHARED, rel)))
    views.analysis.check()   # host/device self >= 0, device time accounted for (SPEC §2.7)
    rows = views.get("operation/table", {})
    assert all(r["host_self_duration"] >= 0 for r in rows)
    acc = views.analysis.accounts
    shown = sum(r["device_self_duration"] for r in rows)
    assert abs(shown - (acc.operator_ns + acc.range_ns) / 1000) <= len(rows) / 2 + 1
    kernels = views.get("kernel/table", {"group_by": "Kernel"})["data"]
    col = [c["name"] for c in kernels["columns"]].index("Total Duration (us)")
    kernel_ns = views.analysis.trace.dur[views.analysis.trace.kind == Kind.KERNEL].sum()
    assert abs(sum(r[col] for r in kernels["rows"]) - kernel_ns / 1000) <= len(kernels["rows"])


def test_runtime_call_nested_in_another_is_attached_to_the_host_event_around_both():
    views = build_views(build([
        user("region", 0, 10),
        runtime("cudaLaunchKernel", 1, 8, corr=1, ext=5),   # ids name no event: by time
        runtime("cudaLaunchKernel", 2, 2, corr=2, ext=6),   # nested in the call above
        kernel("k1", 20, 3, corr=1),
        kernel("k2", 30, 4, corr=2),
    ]))
    views.analysis.check()
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["region"]) == (1, 2, 10, 7, 7)   # k2 was lost (owner: the outer call)


def test_correlation_lookup_picks_the_last_launch_before_the_activity():
    from stepscope.analysis.links import _lookup_before

    rng = np.random.default_rng(1)
    for _ in range(300):
        n, m = int(rng.integers(1, 30)), int(rng.integers(1, 20))
        keys, starts = rng.integers(0, 6, n), rng.integers(0, 20, n)
        rows = np.arange(n) + 100
        q, at = rng.integers(0, 8, m), rng.integers(-2, 25, m)
        got = _lookup_before(keys, starts, rows, q, at)
        for i in range(m):
            same = sorted((int(starts[j]), j) for j in range(n) if keys[j] == q[i])
            before = [j for s, j in same if s <= at[i]]
            want = -1 if not same else rows[before[-1] if before else same[0][1]]
            assert got[i] == want


def test_legacy_flows_survive_chunks_built_in_other_processes():
    import msgspec

    from stepscope.read.builder import ColumnBuilder
    from stepscope.read.decode import Event, TraceObject
    from stepscope.read.reader import build_local

    cpu, cuda = "CPU functions", "CUDA functions"
    first = [Event(ph="X", name="aten::mm", pid=cpu, tid=0, ts=100, dur=10),
             Event(ph="X", name="gemm", pid=cuda, tid=0, ts=105, dur=7)]
    # the flows come in a later chunk whose own thread table starts with the CUDA lane
    second = [Event(ph="f", cat="cpu_to_cuda", name="gemm", pid=cuda, tid=0, ts=105, id=4),
              Event(ph="s", cat="cpu_to_cuda", name="aten::mm", pid=cpu, tid=0, ts=100, id=4)]
    builder = ColumnBuilder("legacy.json")
    builder.merge(build_local(msgspec.json.encode(first)))  # as a helper process builds them
    builder.merge(build_local(msgspec.json.encode(second)))
    views = build_views(builder.finish(TraceObject(), []))
    rows = {r["name"]: r for r in views.get("operation/table", {})}
    assert times(rows["aten::mm"]) == (1, 10, 10, 7, 7)


def test_tensor_list_shapes_group_as_torch_prints_them_and_events_keep_theirs():
    """key_averages(group_by_input_shape=True) prints a tensor-list argument as []: two
    aten::cat of lists of different shapes are one row; the event itself keeps its dims."""
    from stepscope.timeline import build_timeline

    t = build([op("aten::cat", 0, 10, shape=[[[2, 3], [4, 3]], []]),
               op("aten::cat", 20, 10, shape=[[[1, 3], [1, 3]], []]),
               op("aten::mm", 40, 10, shape=[[2, 3], [3, 5]])])
    views = build_views(t)
    rows = {(r["name"], r["input_shape"]): r["calls"]
            for r in views.get("operation/table", {"group_by": "OperationAndInputShape"})}
    assert rows == {("aten::cat", "[[], []]"): 2, ("aten::mm", "[[2, 3], [3, 5]]"): 1}
    assert build_timeline(t).event(0)["input_shape"] == "[[[2, 3], [4, 3]], []]"
