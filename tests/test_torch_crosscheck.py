"""Cross-check against torch itself (SPEC §2.4.9): on CPU traces written by torch.profiler,
calls, host total and host self per operator name (and per name + input shape) equal
``prof.key_averages()`` within 1 µs, both ways: every operator of ours is in key_averages,
and every key_averages entry is an operator of ours, or an event SPEC §2.4.5 keeps out of
the table (user ranges, python frames, ProfilerStep, DataLoader ``__next__``, Optimizer.*).

The traces are generated in a subprocess (pinned CPU torch, ``pip install torch==2.13.0``):
a training loop with a DataLoader and record_function ranges, a transformer with
record_shapes (and ``aten::cat`` of tensor lists), with_stack + with_modules, and profile_memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from stepscope.read.reader import read_trace
from stepscope.views import build_views

pytestmark = [pytest.mark.torch, pytest.mark.slow]

GENERATE = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    out = sys.argv[1]
    torch.manual_seed(0)

    def handler(name):
        def ready(prof):
            prof.export_chrome_trace(os.path.join(out, name + ".pt.trace.json"))
            by_name = {e.key: {"calls": e.count, "total": e.cpu_time_total,
                               "self": e.self_cpu_time_total, "mem": e.cpu_memory_usage,
                               "self_mem": e.self_cpu_memory_usage}
                       for e in prof.key_averages()}
            by_shape = [{"name": e.key, "shape": str(e.input_shapes), "calls": e.count,
                         "total": e.cpu_time_total, "self": e.self_cpu_time_total,
                         "mem": e.cpu_memory_usage, "self_mem": e.self_cpu_memory_usage}
                        for e in prof.key_averages(group_by_input_shape=True)]
            with open(os.path.join(out, name + ".ka.json"), "w") as f:
                json.dump({"by_name": by_name, "by_shape": by_shape}, f)
        return ready

    def run(name, step_fn, steps=5, **kw):
        with profile(activities=[ProfilerActivity.CPU], on_trace_ready=handler(name),
                     schedule=schedule(wait=1, warmup=1, active=3, repeat=1), **kw) as prof:
            for i in range(steps):
                step_fn(i)
                prof.step()

    # 1. training loop with a DataLoader and record_function ranges
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(40, 3, 16, 16), torch.randint(0, 10, (40,)))

    def make_train_step():
        batches = iter(torch.utils.data.DataLoader(data, batch_size=8))

        def train_step(i):
            x, y = next(batches)
            with record_function("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return train_step

    run("train", make_train_step())

    # 2. a transformer with record_shapes
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    tokens = torch.randn(4, 10, 32)

    def transformer_step(i):
        layer(tokens).sum().backward()
        # tensor-list arguments of shapes that differ between calls (torch prints them [])
        torch.cat([tokens[: 1 + i % 2], tokens]).sum()
        torch.stack([tokens[i % 2], tokens[0]]).sum()

    run("transformer", transformer_step, record_shapes=True)

    # 3. with_stack + with_modules (python frames, nn.Module frames)
    run("stack", make_train_step(), with_stack=True, with_modules=True)

    # 4. profile_memory
    run("memory", transformer_step, profile_memory=True, record_shapes=True)
''')

SCENARIOS = ("train", "transformer", "stack", "memory")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("torch_traces")
    script = out / "generate.py"
    script.write_text(GENERATE)
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _load(out, name):
    views = build_views(read_trace(os.path.join(out, name + ".pt.trace.json")))
    with open(os.path.join(out, name + ".ka.json"), encoding="utf-8") as f:
        return views, json.load(f)


def _ns(views, by_shape):
    """Unrounded (calls, host total ns, host self ns) per table group."""
    from stepscope.analysis.operators import grouping_shapes, table_mask

    a = views.analysis
    t = a.trace
    ids, shapes = grouping_shapes(t)  # (a tensor list printed [] as torch prints it)
    sel = table_mask(t, a.tree, a.nodes).nonzero()[0]
    out: dict = {}
    for p in sel.tolist():
        row = int(a.tree.rows[p])
        name = t.strings[t.name[row]]
        key = (name, shapes[ids[t.shape[row]]] if t.shape[row] >= 0 else "[]") if by_shape else name
        g = out.setdefault(key, [0, 0, 0])
        g[0] += 1
        g[1] += int(a.nodes.host_total[p])
        g[2] += int(a.nodes.host_self[p])
    return out


def _compare(ours: dict, theirs: dict) -> list[str]:
    bad = []
    for key, (calls, total, self_) in ours.items():
        k = theirs.get(key)
        if k is None:
            bad.append(f"{key}: not in key_averages")
        elif (k["calls"] != calls or abs(k["total"] - total / 1000) > 1
              or abs(k["self"] - self_ / 1000) > 1):
            bad.append(f"{key}: torch {k} ours calls={calls} total={total / 1000} "
                       f"self={self_ / 1000}")
    return bad


@pytest.mark.parametrize("name", SCENARIOS)
def test_calls_host_total_and_self_equal_key_averages(generated, name):
    views, ka = _load(generated, name)
    ours = _ns(views, by_shape=False)
    assert len(ours) > 10
    bad = _compare(ours, ka["by_name"])
    assert not bad, "\n".join(bad[:20])
    # the rounded table agrees with the unrounded sums
    rows = {r["name"]: r for r in views.get("operation/table", {"group_by": "Operation"})}
    for key, (calls, total, _) in ours.items():
        assert rows[key]["calls"] == calls
        assert abs(rows[key]["host_total_duration"] - total / 1000) <= 0.5


def _not_table_rows(views) -> set[str]:
    """Names of the trace's host events that SPEC §2.4.5 keeps out of the operator table."""
    from stepscope.taxonomy import OPERATOR_EXCLUDED_NAME, Kind

    t = views.analysis.trace
    host = (t.kind == Kind.USER_RANGE) | (t.kind == Kind.PYTHON) | (t.kind == Kind.STEP)
    names = {t.strings[i] for i in set(t.name[host].tolist())}
    if (t.kind == Kind.STEP).any():
        names.add("ProfilerStep*")  # key_averages' one entry for every ProfilerStep#N
    return names | {s for s in t.strings if OPERATOR_EXCLUDED_NAME.match(s)}


def _missing(ours: dict, theirs: dict, not_rows: set, by_shape: bool) -> list[str]:
    """key_averages entries that are neither our operators nor SPEC-excluded events."""
    return [f"{key}: {k} not in our table" for key, k in theirs.items()
            if key not in ours and (key[0] if by_shape else key) not in not_rows]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_key_averages_operator_is_in_our_table(generated, name):
    views, ka = _load(generated, name)
    not_rows = _not_table_rows(views)
    bad = _missing(_ns(views, by_shape=False), ka["by_name"], not_rows, by_shape=False)
    assert not bad, "\n".join(bad[:20])
    assert any(k in not_rows for k in ka["by_name"])   # the exclusions are exercised
    assert len(_missing({}, ka["by_name"], not_rows, by_shape=False)) > 10  # and can fail
    if name in ("transformer", "memory"):
        theirs = {(e["name"], e["shape"]): e for e in ka["by_shape"]}
        bad = _missing(_ns(views, by_shape=True), theirs, not_rows, by_shape=True)
        assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("name", ["transformer", "memory"])
def test_group_by_input_shape_equals_key_averages(generated, name):
    views, ka = _load(generated, name)
    theirs = {}
    for e in ka["by_shape"]:
        theirs[(e["name"], e["shape"])] = e
    ours = _ns(views, by_shape=True)
    bad = _compare(ours, theirs)
    assert not bad, "\n".join(bad[:20])
    shapes = {r["input_shape"] for r in views.get("operation/table",
                                                  {"group_by": "OperationAndInputShape"})}
    assert any(s.startswith("[[4, 10, 32]") for s in shapes)
    assert "[[], []]" in shapes  # aten::cat / aten::stack of lists of tensors


def test_stack_trace_has_python_call_stacks(generated):
    views, _ = _load(generated, "stack")
    rows = views.get("operation/table", {})
    with_stack = [r for r in rows if r["has_call_stack"]]
    assert with_stack
    stacks = views.get("operation/stack", {"op_name": with_stack[0]["name"]})
    assert stacks and all(s["call_stack"] for s in stacks)
    assert any("nn.Module: " in s["call_stack"] for r in with_stack
               for s in views.get("operation/stack", {"op_name": r["name"]}))


def test_memory_trace_reads_memory_events(generated):
    views, _ = _load(generated, "memory")
    assert len(views.analysis.trace.memory["ts"]) > 0
    assert views.get("overview", {})["environments"][1] == {"title": "Device Type",
                                                            "value": "CPU"}


@pytest.mark.parametrize("group_by", ["Operation", "OperationAndInputShape"])
def test_memory_stats_equal_key_averages_byte_for_byte(generated, group_by):
    """SPEC §4.1: every row of memory/stats (CPU) has torch's calls, cpu_memory_usage and
    self_cpu_memory_usage exactly."""
    views, ka = _load(generated, "memory")
    assert "Memory" in views.names()
    table = views.get("memory/stats", {"device": "CPU", "group_by": group_by})
    cols = [c["name"] for c in table["columns"]]
    by_shape = group_by == "OperationAndInputShape"
    theirs = ({(e["name"], e["shape"]): e for e in ka["by_shape"]} if by_shape
              else ka["by_name"])
    bad, nonzero = [], 0
    for row in table["rows"]:
        r = dict(zip(cols, row))
        key = (r["Name"], r["Input Shape"] or "[]") if by_shape else r["Name"]
        k = theirs.get(key)
        got = (r["Calls"], r["Size Increase"], r["Self Size Increase"])
        nonzero += bool(r["Size Increase"] or r["Self Size Increase"])
        if k is None or (k["calls"], k["mem"], k["self_mem"]) != got:
            bad.append(f"{key}: torch {k} ours {got}")
    assert not bad, "\n".join(bad[:20])
    assert nonzero >= 5 and len(table["rows"]) > 10
