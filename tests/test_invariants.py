"""SPEC §2.7 invariants of the overview and kernel views: every percentage (utilization,
efficiency, occupancy, shares) lies in [0, 100] and each step's categories sum to its total,
over hand-built, random and all real shared traces."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from tracebuild import (
    NO_SHARED,
    SHARED,
    build,
    have_shared,
    kernel,
    memcpy,
    op,
    py,
    runtime,
    step,
    user,
)

from stepscope.read.reader import read_trace
from stepscope.views import build_views

_TOOLTIP_SHARE = re.compile(r"Percentage: ([-\d.e+]+)%")


def percentages(views) -> dict[str, list[float]]:
    """Every percentage the overview, kernel and operator payloads show, by where."""
    out: dict[str, list[float]] = {}

    def add(where, value):
        if value is not None:
            out.setdefault(where, []).append(float(value))

    names = views.names()
    if "Overview" in names:
        o = views.get("overview", {})
        for perf in o["performance"]:
            for c in perf["children"]:
                add(f"share {c['name']}", c["extra"])
        for row in o["steps"]["rows"]:
            for cell in row[2::2]:
                for share in _TOOLTIP_SHARE.findall(cell):
                    add("step share", share)
        for g in o["gpu_metrics"]["gpus"]:
            for m in g["metrics"]:
                add(m["name"], m["value"])
        for e in o["environments"]:
            if e["title"].startswith("GPU Utilization"):
                add("environments", e["value"].rstrip(" %"))
    if "Kernel" in names:
        table = views.get("kernel/table", {"group_by": "Kernel"})["data"]
        cols = [c["name"] for c in table["columns"]]
        if "Mean Est. Achieved Occupancy (%)" in cols:
            i = cols.index("Mean Est. Achieved Occupancy (%)")
            for r in table["rows"]:
                add("kernel occupancy", r[i])
    if "Operator" in names:
        for r in views.get("operation/table", {"group_by": "Operation"}):
            add("operator tc_self_ratio", r.get("tc_self_ratio"))
            add("operator tc_total_ratio", r.get("tc_total_ratio"))
    f = views.analysis.facts
    for k in ("dataloader_share", "communication_share", "short_kernel_time_share",
              "tc_eligible_share", "tc_used_share"):
        add(k, getattr(f, k))
    return out


def assert_invariants(views) -> None:
    a = views.analysis
    a.check()   # steps never overlap, categories >= 0 and sum to each step's total, ...
    bd = a.breakdown
    assert (bd.values.sum(axis=1) == bd.totals).all()
    assert (bd.totals == a.steps.end - a.steps.start).all()
    for where, values in percentages(views).items():
        assert all(0 <= v <= 100 for v in values), (where, values)


V100 = {"id": 0, "name": "Tesla V100", "totalGlobalMem": 1 << 34, "computeMajor": 7,
        "computeMinor": 0, "numSms": 8}


def test_concurrent_kernels_keep_every_percentage_in_range():
    # four streams each filling all SMs at once, two overlapping steps
    events = [step(1, 0, 40), step(2, 30, 40, tid=2),
              op("aten::mm", 1, 10, ext=1), runtime("cudaLaunchKernel", 2, 1, corr=1, ext=1)]
    events += [kernel(f"volta_h884gemm_{s}", 3, 30, corr=1 if s == 0 else None, stream=s,
                      grid=[64, 1, 1], occupancy=100) for s in range(4)]
    views = build_views(build(events, device_properties=[V100]))
    assert_invariants(views)
    m = {x["name"]: x["value"] for x in views.get("overview", {})["gpu_metrics"]["gpus"][0]["metrics"]}
    assert m["Est. SM Efficiency"] == m["GPU Utilization"]


def _random_events(rng) -> list[dict]:
    events = []
    for k in range(int(rng.integers(0, 25))):
        t0, dur, tid = int(rng.integers(0, 200)), int(rng.integers(0, 60)), int(rng.integers(1, 3))
        maker = rng.choice(["op", "user", "py", "step", "coll"])
        if maker == "op":
            events.append(op(f"aten::o{k % 5}", t0, dur, tid=tid, ext=int(rng.integers(0, 30))))
        elif maker == "user":
            events.append(user(f"r{k % 3}", t0, dur, tid=tid))
        elif maker == "py":
            events.append(py(f"f{k % 3}", t0, dur, tid=tid))
        elif maker == "coll":
            events.append(user("gloo:all_reduce", t0, dur, tid=tid))
        else:
            events.append(step(k, t0, dur, tid=tid))
    for _ in range(int(rng.integers(0, 30)) if rng.random() < 0.8 else 0):
        t0 = int(rng.integers(0, 250))
        corr = int(rng.integers(0, 20))
        events.append(runtime(str(rng.choice(["cudaLaunchKernel", "cudaGraphLaunch"])), t0,
                              int(rng.integers(0, 20)), corr=corr, ext=int(rng.integers(0, 30)),
                              tid=int(rng.integers(1, 3))))
        if rng.random() < 0.15:
            events.append(memcpy(t0 + int(rng.integers(0, 20)), int(rng.integers(0, 10)),
                                 corr=corr))
        grid = [int(rng.integers(1, 40)), 1, 1] if rng.random() < 0.8 else None
        events.append(kernel(str(rng.choice(["k0", "nvjet_tst_1", "ncclDevKernel_x"])),
                             t0 + int(rng.integers(-5, 30)), int(rng.integers(0, 15)),
                             corr=int(rng.integers(0, 25)), stream=int(rng.integers(1, 4)),
                             device_id=int(rng.integers(0, 2)), grid=grid,
                             occupancy=float(rng.uniform(0, 100)) if rng.random() < 0.5 else None))
    return events


def test_invariants_hold_on_random_traces():
    rng = np.random.default_rng(11)
    props = [dict(V100, id=0), dict(V100, id=1)]
    for _ in range(150):
        events = _random_events(rng)
        if not events:
            continue
        assert_invariants(build_views(build(events, device_properties=props)))


REAL_TRACES = sorted(str(p.relative_to(SHARED)) for p in Path(SHARED).rglob("*.json*")
                     if p.name.endswith((".json", ".json.gz"))) if have_shared() else []


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
@pytest.mark.parametrize("rel", REAL_TRACES)
def test_invariants_hold_on_real_traces(rel):
    assert_invariants(build_views(read_trace(os.path.join(SHARED, rel))))


def test_occupancy_outside_0_100_is_unknown(tmp_path):
    import json

    evs = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 40,
            "pid": 1, "tid": 1},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 10, "pid": 0, "tid": 7,
            "args": {"device": 0, "stream": 7, "est. achieved occupancy %": 150}},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 10, "pid": 0, "tid": 7,
            "args": {"device": 0, "stream": 7, "est. achieved occupancy %": 40}}]
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    views = build_views(read_trace(str(path)))
    assert_invariants(views)
    g = views.get("overview", {})["gpu_metrics"]["gpus"][0]
    assert {m["name"]: m["value"] for m in g["metrics"]}["Est. Achieved Occupancy"] == 40.0
    assert any("occupancy" in n["text"] for n in views.notes())
