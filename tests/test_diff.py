"""Diff view (SPEC §4.4, issue 17): baseline vs experiment from the sides' own payloads.

Every delta must equal the difference of the two sides' own view values (``overview``,
``operation/table``, ``kernel/table``), checked route by route on the golden kineto runs,
across trace generations (2021 ``Operator`` vs 2024 ``cpu_op``), between a CPU-only and a
GPU run (device values null on the CPU side, not 0) and between two spans of one worker
(hand-built, exact numbers). Bad input: 400 without the experiment, 404 / 422 / 202 naming
the side.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from conftest import PREFIX, ROOT, SHARED, query, until, wait_idle
from tracebuild import launch, op, step, user

from stepscope.views.diff import OP_FIELDS, diff_overview

OLD = 1_700_000_000  # an mtime long ago: the file counts as stable at start-up
KINETO = SHARED / "kineto_resnet50"
HTA_2024 = SHARED / "hta_v100_resnet_ns_2024" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
CPU_ONLY = SHARED / "hta_cpu_only_gloo" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
W0, W4 = "resnet50_num_workers_0", "resnet50_num_workers_4"
DEVICE_OP_FIELDS = ("device_self_us", "device_total_us")
KERNEL_COLUMNS = {"calls": "Calls", "total_us": "Total Duration (us)",
                  "mean_us": "Mean Duration (us)"}


def write_trace(path, events):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    os.utime(path, (OLD, OLD))


#: span 1 of worker w: one mm (kernel 30 µs), one add; span 2: two mm (30 + 50 µs), a relu
SPAN1 = [step(1, 0, 100), *launch("aten::mm", 10, 20, "sgemm", 15, 30, corr=1, ext=1),
         op("aten::add", 40, 10)]
SPAN2 = [step(1, 0, 150), *launch("aten::mm", 10, 20, "sgemm", 15, 30, corr=1, ext=1),
         *launch("aten::mm", 40, 20, "sgemm", 45, 50, corr=2, ext=2), op("aten::relu", 70, 5)]
#: a CPU-only worker: the same ops without runtime calls or kernels
CPU = [step(1, 0, 100), op("aten::mm", 10, 20), op("aten::add", 40, 10)]
#: a gloo rank waiting 600 µs in an all_reduce, then 100 µs (its collective op only enqueues)
GLOO1 = [step(1, 0, 1000), op("aten::mul", 10, 20), op("c10d::allreduce_", 50, 5),
         user("gloo:all_reduce", 100, 600)]
GLOO2 = [step(1, 0, 900), op("aten::mul", 10, 30), op("c10d::allreduce_", 50, 5),
         user("gloo:all_reduce", 100, 100)]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("difflogs")
    for run, src in (("g2021", KINETO / W0 / "worker0.pt.trace.json.gz"),
                     ("g2024", HTA_2024), ("cpu_gloo", CPU_ONLY)):
        (root / run).mkdir()
        (root / run / src.name).symlink_to(src)
    write_trace(root / "hand" / "w.1.pt.trace.json", SPAN1)
    write_trace(root / "hand" / "w.2.pt.trace.json", SPAN2)
    write_trace(root / "handcpu" / "w.pt.trace.json", CPU)
    write_trace(root / "gloo" / "w.1.pt.trace.json", GLOO1)
    write_trace(root / "gloo" / "w.2.pt.trace.json", GLOO2)
    return root


@pytest.fixture(scope="module")
def client(logdir):
    """A server (worker processes + disk cache, as deployed) over ``logdir``."""
    from stepscope.web.app import app_store, create_app

    app = create_app(str(logdir), reload_interval=0, jobs=2)
    c = app.test_client()
    wait_idle(c, timeout=120)
    yield c
    app_store(app).close(timeout=2)


@pytest.fixture(scope="module")
def kineto(views_module):
    """A server over the two golden runs."""
    from stepscope.web.app import app_store, create_app

    app = create_app(str(KINETO), reload_interval=0, jobs=2)
    c = app.test_client()
    wait_idle(c, timeout=120)
    yield c
    app_store(app).close(timeout=2)


def pair(base, exp):
    """Query parameters of a diff: ``base``/``exp`` are (run, worker, span)."""
    return {"run": base[0], "worker": base[1], "span": base[2],
            "diff_run": exp[0], "diff_worker": exp[1], "diff_span": exp[2]}


def get(client, route, **params):
    resp = client.get(query(route, **params))
    assert resp.status_code == 200, (route, params, resp.json)
    assert resp.mimetype == "application/json"
    return resp.json


def own(client, side, route, **params):
    run, worker, span = side
    return get(client, route, run=run, worker=worker, span=span, **params)


def device_type(client, side):
    envs = own(client, side, "overview")["environments"]
    return next(e["value"] for e in envs if e["title"] == "Device Type")


def max_abs_delta(row, fields):
    """The largest change of ``fields``; a side's null (CPU-only device time) counts as 0."""
    return max((abs((row["experiment"][f] or 0) - (row["baseline"][f] or 0)) for f in fields),
               default=0)


def check_deltas(rows, fields):
    for r in rows:
        for f in fields:
            b, e = r["baseline"][f], r["experiment"][f]
            assert r["delta"][f] == (None if b is None or e is None else e - b), (r, f)
    time_fields = [f for f in fields if f != "calls"]
    keys = [max_abs_delta(r, time_fields) for r in rows]
    assert keys == sorted(keys, reverse=True), "sorted by the largest |delta|"


def check_operators(client, base, exp):
    """diff/operators == both sides' own operation/table (0 where absent, null device
    values on a CPU side), delta == experiment - baseline."""
    rows = get(client, "diff/operators", **pair(base, exp))
    keys = set()
    for side, name in ((base, "baseline"), (exp, "experiment")):
        table = own(client, side, "operation/table")
        gpu = device_type(client, side) == "GPU"
        by_key = {(r["name"], r.get("kind", "")): r for r in table}
        keys |= set(by_key)
        for row in rows:
            o = by_key.get((row["name"], row.get("kind", "")))
            for f, src in OP_FIELDS.items():
                want = None if f in DEVICE_OP_FIELDS and not gpu else (o[src] if o else 0)
                assert row[name][f] == want, (name, row, f)
    assert {(r["name"], r.get("kind", "")) for r in rows} == keys
    assert len(rows) == len(keys)
    check_deltas(rows, tuple(OP_FIELDS))
    return rows


def check_kernels(client, base, exp):
    rows = get(client, "diff/kernels", **pair(base, exp))
    names = set()
    for side, name in ((base, "baseline"), (exp, "experiment")):
        table = own(client, side, "kernel/table")["data"]
        gpu = device_type(client, side) == "GPU"
        cols = [c["name"] for c in table["columns"]]
        by_name = {r[0]: r for r in table["rows"]}
        names |= set(by_name)
        for row in rows:
            k = by_name.get(row["name"])
            for f, col in KERNEL_COLUMNS.items():
                want = None if not gpu else (k[cols.index(col)] if k else 0)
                assert row[name][f] == want, (name, row, f)
    assert {r["name"] for r in rows} == names and len(rows) == len(names)
    check_deltas(rows, tuple(KERNEL_COLUMNS))
    return rows


def check_overview(client, base, exp):
    body = get(client, "diff/overview", **pair(base, exp))
    for side, name in ((base, "baseline"), (exp, "experiment")):
        perf = own(client, side, "overview")["performance"][0]
        values = {c["name"]: c["value"] for c in perf["children"]}
        assert body[name]["Total"] == perf["value"]
        for cat in body["categories"]:
            assert body[name][cat] == values.get(cat, body[name][cat]), (name, cat)
            if cat in values:
                assert body["share"][name][cat] == next(c["extra"] for c in perf["children"]
                                                        if c["name"] == cat)
        assert set(values) <= set(body["categories"])
    for cat in [*body["categories"], "Total"]:
        b, e = body["baseline"][cat], body["experiment"][cat]
        assert body["delta"][cat] == (None if b is None or e is None else e - b)
        assert body["delta_pct"][cat] == (None if b is None or e is None or not b
                                          else round(100 * (e - b) / b, 2))
    return body


# -- the golden runs -----------------------------------------------------------------------------
GOLDEN = ((W0, "worker0", None), (W4, "worker0", None))


@pytest.mark.parametrize("order", [GOLDEN, GOLDEN[::-1]], ids=["w0-w4", "w4-w0"])
def test_golden_runs_every_delta_is_the_difference_of_the_sides_own_views(kineto, order):
    base, exp = order
    body = check_overview(kineto, base, exp)
    ops = check_operators(kineto, base, exp)
    kernels = check_kernels(kineto, base, exp)
    w0 = body["baseline" if base[0] == W0 else "experiment"]
    # SPEC §2.2 (golden): resnet50_num_workers_0's averages
    assert (w0["Total"], w0["Kernel"], w0["DataLoader"], w0["CPU Exec"]) == (148736, 100868, 31232, 10451)
    assert body["device"] == {"baseline": "GPU", "experiment": "GPU"}
    assert body["steps"] == {"baseline": 6, "experiment": 6}
    assert len(ops) > 50 and len(kernels) > 20
    assert all(r["baseline"]["device_self_us"] is not None for r in ops)


def test_golden_summary_names_what_changed_most_with_evidence(kineto):
    body = get(kineto, "diff/overview", **pair(*GOLDEN))
    s = body["summary"]
    d = body["delta"]["Total"]
    assert d == 120976 - 148736  # workers_4 is faster: no DataLoader wait
    assert s["text"].startswith("Step time -27.8 ms per step (faster, -18.66 %, 148.7 ms -> 121.0 ms)")
    assert "mostly DataLoader -31.2 ms" in s["text"]
    assert s["evidence"] and all(e["delta_per_step_us"] < 0 for e in s["evidence"])
    ops = {r["name"]: r for r in get(kineto, "diff/operators", **pair(*GOLDEN))}
    for e in s["evidence"]:
        r = ops[e["name"]]
        per_step = (r["experiment"][e["metric"]] - r["baseline"][e["metric"]]) / 6
        assert e["delta_per_step_us"] == round(per_step, 1)
        assert e["calls_delta_per_step"] == round((r["experiment"]["calls"] - r["baseline"]["calls"]) / 6, 1)
        assert e["name"] in e["text"] and "per step" in e["text"]
    # the largest host-self drop per step comes first
    drops = sorted((r["experiment"]["host_self_us"] - r["baseline"]["host_self_us"], n)
                   for n, r in ops.items())
    assert s["evidence"][0]["name"] == drops[0][1]


def test_answer_time_once_both_sides_are_analysed(kineto):
    """SPEC target: a diff answer within 300 ms once both sides are analysed."""
    params = pair(*GOLDEN)
    for route in ("diff/overview", "diff/operators", "diff/kernels"):
        get(kineto, route, **params)  # payloads unpacked once
        t0 = time.perf_counter()
        get(kineto, route, **params)
        assert time.perf_counter() - t0 < 0.3, route


def test_views_lists_diff_with_two_spans(kineto, client_for, tmp_path):
    assert get(kineto, "views", run=W0, worker="worker0")[-1] == "Diff"
    write_trace(tmp_path / "only" / "w.pt.trace.json", SPAN1)
    one = client_for(tmp_path)
    wait_idle(one)
    assert "Diff" not in get(one, "views", run="only", worker="w")
    (tmp_path / "only" / "broken.pt.trace.json").write_text("{not json")  # fails: not usable
    two = client_for(tmp_path)
    wait_idle(two)
    assert "Diff" not in get(two, "views", run="only", worker="w")


# -- generations, CPU vs GPU, two spans --------------------------------------------------------
def test_across_trace_generations(client):
    base, exp = ("g2021", "worker0", None), ("g2024", "rank-0.Apr_03_18_51_38", "1102")
    check_overview(client, base, exp)
    ops = check_operators(client, base, exp)
    check_kernels(client, base, exp)
    common = [r for r in ops if r["baseline"]["calls"] and r["experiment"]["calls"]]
    assert {"aten::conv2d", "aten::copy_"} <= {r["name"] for r in common}


def test_cpu_only_vs_gpu_real_traces_device_values_are_null_not_zero(client):
    base, exp = ("cpu_gloo", "rank-34.Jul_15_10_52_41", "1074"), ("g2021", "worker0", None)
    body = check_overview(client, base, exp)
    assert body["device"] == {"baseline": "CPU", "experiment": "GPU"}
    assert body["baseline"]["Kernel"] is None and body["delta"]["Kernel"] is None
    assert body["experiment"]["Kernel"] == 100868
    ops = check_operators(client, base, exp)
    assert all(r["baseline"]["device_self_us"] is None and r["delta"]["device_total_us"] is None
               for r in ops)
    kernels = check_kernels(client, base, exp)
    assert kernels and all(r["baseline"]["total_us"] is None for r in kernels)
    assert all(r["experiment"]["calls"] > 0 for r in kernels)
    # the kernels the GPU side ran, heaviest first (by name alone they were alphabetical)
    totals = [r["experiment"]["total_us"] for r in kernels]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    # the summary weighs the device time only the GPU side has (it left Kernel out): here
    # it offsets the host collectives' drop
    assert "offset by Kernel +100.9 ms" in body["summary"]["text"], body["summary"]["text"]


def test_cpu_only_vs_gpu_hand_built(client):
    base, exp = ("handcpu", "w", "default"), ("hand", "w", "1")
    ops = {r["name"]: r for r in get(client, "diff/operators", **pair(base, exp))}
    assert ops["aten::mm"] == {
        "name": "aten::mm",
        "baseline": {"calls": 1, "host_self_us": 20, "host_total_us": 20,
                     "device_self_us": None, "device_total_us": None},
        "experiment": {"calls": 1, "host_self_us": 19, "host_total_us": 20,
                       "device_self_us": 30, "device_total_us": 30},
        "delta": {"calls": 0, "host_self_us": -1, "host_total_us": 0,
                  "device_self_us": None, "device_total_us": None}}
    assert get(client, "diff/kernels", **pair(base, exp)) == [
        {"name": "sgemm", "baseline": {"calls": None, "total_us": None, "mean_us": None},
         "experiment": {"calls": 1, "total_us": 30, "mean_us": 30},
         "delta": {"calls": None, "total_us": None, "mean_us": None}}]
    body = get(client, "diff/overview", **pair(base, exp))
    assert body["baseline"]["Runtime"] is None and body["experiment"]["Runtime"] == 1


def test_two_spans_of_one_worker_exact(client):
    base, exp = ("hand", "w", "1"), ("hand", "w", "2")
    check_operators(client, base, exp)
    check_kernels(client, base, exp)
    body = check_overview(client, base, exp)
    assert (body["baseline"]["Total"], body["experiment"]["Total"], body["delta"]["Total"]) == (100, 150, 50)
    assert (body["baseline"]["Kernel"], body["experiment"]["Kernel"], body["delta"]["Kernel"]) == (30, 80, 50)
    rows = get(client, "diff/operators", **pair(base, exp))
    assert [r["name"] for r in rows] == ["aten::mm", "aten::add", "aten::relu"]
    assert rows[0]["delta"] == {"calls": 1, "host_self_us": 19, "host_total_us": 20,
                                "device_self_us": 50, "device_total_us": 50}
    assert rows[1]["experiment"] == {"calls": 0, "host_self_us": 0, "host_total_us": 0,
                                     "device_self_us": 0, "device_total_us": 0}
    assert rows[1]["delta"]["host_self_us"] == -10 and rows[2]["delta"]["host_total_us"] == 5
    assert get(client, "diff/kernels", **pair(base, exp)) == [
        {"name": "sgemm", "baseline": {"calls": 1, "total_us": 30, "mean_us": 30},
         "experiment": {"calls": 2, "total_us": 80, "mean_us": 40},
         "delta": {"calls": 1, "total_us": 50, "mean_us": 10}}]
    s = body["summary"]
    assert s["text"] == "Step time +50 µs per step (slower, +50.00 %, 100 µs -> 150 µs), mostly Kernel +50 µs, Other +5 µs."
    assert s["evidence"][0]["text"] == "aten::mm: device self +50 µs per step (+1 call per step)"
    assert s["evidence"][-1]["text"] == "sgemm: total +50 µs per step (+1 call per step)"


def test_cpu_collective_change_is_shown_by_its_ranges_and_what_offset_it(client):
    """gloo: the wait lies in ``gloo:*`` ranges, not in operator rows; Communication -500 µs
    of which Other took back 390 (aten::mul grew by 10)."""
    s = get(client, "diff/overview", **pair(("gloo", "w", "1"), ("gloo", "w", "2")))["summary"]
    assert s["text"] == ("Step time -100 µs per step (faster, -10.00 %, 1.0 ms -> 900 µs), "
                         "mostly Communication -500 µs, offset by Other +390 µs.")
    assert [e["text"] for e in s["evidence"]][:1] == ["gloo:all_reduce: host total -500 µs per step"]
    assert s["evidence"][0]["kind"] == "range" and s["evidence"][-1]["kind"] == "operator"


def test_same_span_on_both_sides_is_all_zero(client):
    side = ("hand", "w", "2")
    rows = get(client, "diff/operators", **pair(side, side))
    assert rows and all(set(r["delta"].values()) == {0} for r in rows)
    body = get(client, "diff/overview", **pair(side, side))
    assert body["summary"]["text"] == "Step time unchanged (150 µs per step)."


# -- bad input ---------------------------------------------------------------------------------
def test_missing_and_unknown_sides(client):
    p = pair(("hand", "w", "1"), ("hand", "w", "2"))
    for missing in ("diff_run", "diff_worker", "run"):
        resp = client.get(query("diff/operators", **{**p, missing: None}))
        assert resp.status_code == 400 and missing in resp.json["error"], resp.json
    resp = client.get(query("diff/kernels", **{**p, "diff_run": "nope"}))
    assert resp.status_code == 404 and resp.json["side"] == "experiment"
    assert resp.json["error"] == "experiment: unknown run 'nope'"
    resp = client.get(query("diff/overview", **{**p, "span": "9"}))
    assert resp.status_code == 404 and resp.json["side"] == "baseline"
    # diff_span left out: the worker's latest span, like span
    assert get(client, "diff/kernels", **{**p, "diff_span": None}) == get(client, "diff/kernels", **p)


def test_failed_and_loading_sides_name_the_side(client_for, tmp_path):
    from stepscope.store.child import analyse_file

    write_trace(tmp_path / "a" / "w.pt.trace.json", SPAN1)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.pt.trace.json").write_text('{"traceEvents": []}')
    os.utime(tmp_path / "bad" / "w.pt.trace.json", (OLD, OLD))
    write_trace(tmp_path / "slow" / "w.pt.trace.json", SPAN2)
    gate = threading.Event()

    def analyse(path, progress):
        if "slow" in path:
            progress("analyse", 0.5)
            gate.wait(30)
        return analyse_file(path, progress)

    c = client_for(tmp_path, analyse=analyse, jobs=3)
    a, bad, slow = ("a", "w", None), ("bad", "w", None), ("slow", "w", None)
    until(lambda: c.get(query("overview", run="a", worker="w")).status_code == 200)
    until(lambda: c.get(query("overview", run="bad", worker="w")).status_code == 422)
    for route in ("diff/overview", "diff/operators", "diff/kernels"):
        resp = c.get(query(route, **pair(a, bad)))
        assert resp.status_code == 422 and resp.json["side"] == "experiment", resp.json
        assert resp.json["error"].startswith("experiment: ") and resp.json["file"] == "w.pt.trace.json"
        resp = c.get(query(route, **pair(bad, a)))
        assert resp.status_code == 422 and resp.json["side"] == "baseline"
        resp = c.get(query(route, **pair(a, slow)))
        assert resp.status_code == 202 and resp.headers["Retry-After"] == "1"
        assert resp.json["loading"] is True and resp.json["side"] == "experiment"
        assert resp.json["sides"] == ["experiment"] and "categories" not in resp.json
        resp = c.get(query(route, **pair(slow, slow)))
        assert resp.status_code == 202 and resp.json["sides"] == ["baseline", "experiment"]
        # a failed side wins over a loading one: nothing half-done either way
        assert c.get(query(route, **pair(slow, bad))).status_code == 422
    gate.set()
    until(lambda: c.get(query("diff/overview", **pair(a, slow))).status_code == 200)


# -- pure functions and registration ---------------------------------------------------------------
def test_overview_device_categories_of_a_cpu_side_are_null_communication_zero():
    gpu = {"environments": [{"title": "Device Type", "value": "GPU"}], "step_summary": {"kept": 2},
           "performance": [{"value": 100, "children": [
               {"name": c, "value": v, "extra": 0} for c, v in
               (("Kernel", 50), ("Memcpy", 0), ("Memset", 0), ("Communication", 0),
                ("Runtime", 5), ("CPU Exec", 40), ("Other", 5))]}]}
    cpu = {"environments": [{"title": "Device Type", "value": "CPU"}], "step_summary": {"kept": 3},
           "performance": [{"value": 80, "children": [
               {"name": "DataLoader", "value": 30, "extra": 0},
               {"name": "CPU Exec", "value": 50, "extra": 0}]}]}
    out = diff_overview(cpu, gpu)
    assert out["categories"] == ["Kernel", "Memcpy", "Memset", "Communication", "Runtime",
                                 "DataLoader", "CPU Exec", "Other"]
    assert out["baseline"] == {"Kernel": None, "Memcpy": None, "Memset": None, "Communication": 0,
                               "Runtime": None, "DataLoader": 30, "CPU Exec": 50, "Other": 0,
                               "Total": 80}
    assert out["experiment"]["DataLoader"] == 0
    assert out["delta"]["DataLoader"] == -30 and out["delta"]["Kernel"] is None
    assert out["delta_pct"]["Total"] == 25.0 and out["delta_pct"]["Communication"] is None


def test_pair_views_are_registered_documented_and_have_a_frontend_module(tmp_path):
    from stepscope.views import PAIR_VIEWS
    from stepscope.web.app import app_store, create_app

    app = create_app(str(tmp_path), start=False)
    app_store(app).close()
    rules = {r.rule for r in app.url_map.iter_rules()}
    api = (ROOT / "plugin" / "api.md").read_text(encoding="utf-8")
    for view in PAIR_VIEWS:
        assert (ROOT / "frontend" / "views" / f"{view.frontend}.js").is_file()
        assert view.frontend == view.name.lower()
        for r in view.routes:
            assert f"{PREFIX}/{r.path}" in rules
            assert f"### `/{r.path}`" in api
