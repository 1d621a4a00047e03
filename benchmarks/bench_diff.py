"""Time the Diff routes once both sides are analysed (not a pass/fail test).

    python benchmarks/bench_diff.py [LOGDIR]

Default: ``../shared/traces/kineto_resnet50`` (the two golden runs). Serves LOGDIR the way
``stepscope`` does (worker processes, disk cache in a temporary folder), waits for the
analysis, then times each ``diff/*`` answer through the Flask test client (median and
worst of 30, ms) next to ``operation/table`` of one side, the baseline measured in the
same run. SPEC target: a diff answer within 300 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from urllib.parse import urlencode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PREFIX = "/data/plugin/stepscope"
DEFAULT = os.path.join(ROOT, "..", "shared", "traces", "kineto_resnet50")
REPEAT = 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logdir", nargs="?", default=DEFAULT,
                    help="a log directory with two runs (default: the golden kineto_resnet50)")
    logdir = ap.parse_args().logdir
    from make_big_trace import need  # benchmarks/ is on sys.path when run as a script

    from stepscope.web.app import app_store, create_app

    need(logdir)
    app = create_app(logdir, reload_interval=0, cache_dir=tempfile.mkdtemp(prefix="bench-diff-"))
    client = app.test_client()
    try:
        t0 = time.perf_counter()
        while client.get(f"{PREFIX}/runs").json["loading"]:
            time.sleep(0.05)
        print(f"analysis of every span: {time.perf_counter() - t0:.2f} s")
        runs = client.get(f"{PREFIX}/runs").json["runs"]
        (base_run, exp_run) = runs[:2]
        base_w = client.get(f"{PREFIX}/workers?run={base_run}").json[0]
        exp_w = client.get(f"{PREFIX}/workers?run={exp_run}").json[0]
        pair = {"run": base_run, "worker": base_w, "diff_run": exp_run, "diff_worker": exp_w}
        routes = [("operation/table (one side)", "operation/table",
                   {"run": base_run, "worker": base_w})]
        routes += [(r, r, pair) for r in ("diff/overview", "diff/operators", "diff/kernels")]
        for label, route, params in routes:
            url = f"{PREFIX}/{route}?{urlencode(params)}"
            first = time.perf_counter()
            assert client.get(url).status_code == 200
            first = time.perf_counter() - first
            times = []
            for _ in range(REPEAT):
                t = time.perf_counter()
                resp = client.get(url)
                times.append(time.perf_counter() - t)
            print(f"{label:28s} first {first * 1e3:6.1f} ms  median {statistics.median(times) * 1e3:6.1f} ms"
                  f"  worst {max(times) * 1e3:6.1f} ms  ({len(resp.data):,} bytes)")
    finally:
        app_store(app).close()


if __name__ == "__main__":
    main()
