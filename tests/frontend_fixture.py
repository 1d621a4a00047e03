"""A stand-in backend for frontend tests: serves ``frontend/`` and canned answers built
from the golden file, plus runs that exercise the loading (202), error (422) and empty
states that the real server only shows on rare inputs.

Runs: the two golden ones (``resnet50_num_workers_0``/``_4``, worker ``worker0``),
``slow`` (answers 202 with a growing fraction for ``SLOW_POLLS`` polls, then workers_0's
data), ``broken`` (422 naming a file and a byte position), ``cpu_only`` (no kernels).
"""

from __future__ import annotations

import copy
import threading

from browser import FRONTEND, PREFIX, golden_payloads
from flask import Flask, Response, jsonify, request, send_from_directory

SLOW_POLLS = 3
GOLDEN_RUNS = ["resnet50_num_workers_0", "resnet50_num_workers_4"]


def _enrich(overview: dict) -> dict:
    """Golden overview + the keys newer servers add (items, gpu_metrics, notes)."""
    out = copy.deepcopy(overview)
    share = out["performance"][0]["children"][5]["extra"]
    items = []
    if share > 5:
        items.append({"id": "dataloader", "text": f"This run spends {share:.1f}% of the step time in the "
                      "DataLoader. Set num_workers on the DataLoader to load data in parallel.",
                      "evidence": f"DataLoader: {share:.1f}% of step time",
                      "doc_url": "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading"})
    out["recommendation_items"] = items
    util = next(e["value"] for e in out["environments"] if e["title"].startswith("GPU Utilization"))
    out["gpu_metrics"] = {"gpus": [{"id": 0, "name": "Tesla V100-SXM2-16GB", "memory_bytes": 16945512448,
                                    "compute_capability": "7.0", "metrics": [
        {"name": "GPU Utilization", "value": float(util.split()[0]), "unit": "%",
         "definition": "Share of the steps' time in which at least one kernel ran on this GPU."},
        {"name": "Est. SM Efficiency", "value": 61.2, "unit": "%",
         "definition": "Kernel time weighted by min(blocks / SMs, 1), over the steps' time."}]}]}
    out["notes"] = [{"level": "info", "code": "steps_dropped",
                     "text": "1 trailing step was dropped: its kernels were not fully captured."}]
    return out


def fixture_app() -> Flask:
    app = Flask("stepscope-fixture", static_folder=None)
    golden = golden_payloads()
    polls: dict[str, int] = {}
    lock = threading.Lock()

    def err(status, error, detail, **extra):
        return jsonify({"error": error, "detail": detail, **extra}), status

    def payload(run: str, route: str):
        if run == "broken":
            return err(422, "not a trace: the file is not JSON",
                       "Re-export the trace with torch.profiler; the file may have been cut short.",
                       file="worker0.pt.trace.json.gz", position={"byte": 1204113, "line": 1})
        if run == "slow":
            with lock:
                n = polls[route] = polls.get(route, 0) + 1
            if n <= SLOW_POLLS:
                body = {"loading": True, "phase": "read" if n == 1 else "analyse",
                        "fraction": round(n / (SLOW_POLLS + 1), 2), "elapsed_s": 0.5 * n}
                return Response(_json(body), 202, {"Retry-After": "1"}, mimetype="application/json")
            run = GOLDEN_RUNS[0]
        if run == "cpu_only":
            table = {"columns": [{"type": "string", "name": "Name"}, {"type": "number", "name": "Calls"}], "rows": []}
            data = {"views": ["Overview", "Operator", "Kernel"],
                    "kernel/table": {"data": table}, "kernel": {"total": table}, "kernel/tc_pie": {"total": table},
                    "operation/table": [], "operation": {k: None for k in (
                        "device_total_time", "device_self_time", "host_total_time", "host_self_time")},
                    "overview": {"steps": {"columns": [], "rows": []}, "performance": [],
                                 "recommendation_items": [], "environments": [], "notes": []}}
            return jsonify(data[route]) if route in data else err(404, "no such route", "")
        if run not in golden:
            return err(404, f"unknown run {run!r}", "Pick a run from the list.")
        if route == "views":
            return jsonify(["Overview", "Operator", "Kernel", "Trace"])
        if route == "overview":
            return jsonify(_enrich(golden[run]["overview"]))
        if route == "kernel/tc_pie":
            return jsonify({"total": {"columns": [{"type": "string", "name": "name"}, {"type": "number", "name": "value"}],
                                      "rows": [["Using Tensor Cores", 0], ["Not Using Tensor Cores", 100]]}})
        if route == "operation/stack":
            return jsonify([{"name": request.args.get("op_name"), "calls": 3, "device_self_duration": 10,
                             "host_self_duration": 20, "host_total_duration": 30,
                             "call_stack": "train.py(12): step;model.py(40): forward;<built-in method conv2d>"}])
        if route == "operation/table":
            rows = copy.deepcopy(golden[run][route])
            rows[0]["has_call_stack"] = True
            if request.args.get("group_by") == "OperationAndInputShape":
                for r in rows:
                    r["input_shape"] = "[[32, 3, 224, 224], [64, 3, 7, 7], []]"
            return jsonify(rows)
        if route in golden[run]:
            return jsonify(golden[run][route])
        return err(404, f"no route {route}", "")

    @app.route(f"{PREFIX}/runs")
    def runs():
        names = [*GOLDEN_RUNS, "broken", "cpu_only", "slow"]
        return jsonify({"runs": names, "loading": False,
                        "status": {n: {"ready": 1, "loading": 0, "failed": int(n == "broken")} for n in names}})

    @app.route(f"{PREFIX}/workers")
    def workers():
        return jsonify(["worker0"])

    @app.route(f"{PREFIX}/spans")
    def spans():
        return jsonify(["default"])

    @app.route(f"{PREFIX}/vendor/plotly.min.js")
    def plotly_js():
        from stepscope.web.assets import plotly_js as path
        p = path()
        return send_from_directory(p.parent, p.name, mimetype="text/javascript")

    @app.route(f"{PREFIX}/<path:route>")
    def any_route(route):
        if (FRONTEND / route).is_file():
            return send_from_directory(FRONTEND, route)
        if request.args.get("worker") not in (None, "worker0") or request.args.get("span") not in (None, "default"):
            return err(404, "unknown worker or span", "")
        return payload(request.args.get("run", ""), route)

    @app.route("/")
    def root():
        from flask import redirect
        qs = request.query_string.decode()
        return redirect(f"{PREFIX}/index.html" + (f"?{qs}" if qs else ""))

    return app


def _json(body) -> str:
    import json
    return json.dumps(body)
