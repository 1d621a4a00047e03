"""Side by side with the old plugin: time to overview and peak RSS, Stepscope vs
``torch-tb-profiler==0.4.3`` inside TensorBoard, on the same replica traces (issue 5).

The old plugin must live in its own virtual environment (it must not see Stepscope, whose
workers would otherwise analyse the same traces inside that TensorBoard)::

    python -m venv /tmp/old && /tmp/old/bin/pip install torch-tb-profiler==0.4.3
    python benchmarks/bench_old_plugin.py --old-python /tmp/old/bin/python --sizes 10

Both servers start cold in the same invocation (Stepscope with an empty cache); each is
timed from process start to the first 200 of its ``overview`` endpoint, and its process
tree's RSS is sampled every 50 ms until then (for Stepscope, until its trace view's
timeline is built too: the old plugin has loaded every view by then). Ratios are
Stepscope / old plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse

from bench_big import TreeRss, get, serve, stop, trace_for, until_ready

OLD_PREFIX = "/data/plugin/pytorch_profiler"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll_json(url: str, deadline: float, proc: subprocess.Popen):
    """GET ``url`` until it answers 200 with JSON (TensorBoard starts slowly)."""
    while time.perf_counter() < deadline and proc.poll() is None:
        try:
            status, body = get(url)
        except OSError:  # not listening yet
            status, body = 0, b""
        if status == 200:
            return json.loads(body)
        if status == 400:  # a wrong request, not a slow server
            raise RuntimeError(f"{url}: {body[:200]!r}")
        time.sleep(0.05)
    raise TimeoutError(url)


def old_plugin(python: str, logdir: str, timeout: float = 3600) -> dict:
    """Cold TensorBoard + torch-tb-profiler over ``logdir``: seconds to overview, peak RSS."""
    port = free_port()
    t0 = time.perf_counter()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([python, "-m", "tensorboard.main", "--logdir", os.path.abspath(logdir),
                             "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=log,
                            cwd=tempfile.gettempdir())  # not beside a stepscope egg-info
    rss = TreeRss(proc.pid)
    base = f"http://127.0.0.1:{port}{OLD_PREFIX}"
    deadline = t0 + timeout
    try:
        while True:  # the old plugin lists a run once it is loaded
            runs = poll_json(f"{base}/runs", deadline, proc)
            runs = runs.get("runs", runs) if isinstance(runs, dict) else runs
            if runs:
                break
            if proc.poll() is not None:
                return {"error": f"TensorBoard exited ({proc.returncode})"}
            time.sleep(0.2)
        run = runs[0]
        q = urllib.parse.urlencode
        workers = poll_json(f"{base}/workers?{q({'run': run, 'view': 'Overview'})}", deadline, proc)
        spans = poll_json(f"{base}/spans?{q({'run': run, 'worker': workers[0]})}", deadline, proc)
        params = {"run": run, "worker": workers[0], "span": spans[0] if spans else ""}
        poll_json(f"{base}/overview?{q(params)}", deadline, proc)
        return {"seconds": time.perf_counter() - t0, "peak_rss": rss.stop()}
    except TimeoutError as e:
        log.seek(0)
        tail = log.read().decode(errors="replace").strip().splitlines()[-1:]
        return {"error": f"no answer from {e} {tail}"}
    finally:
        rss.stop()
        stop(proc)


def stepscope(logdir: str) -> dict:
    cache = tempfile.mkdtemp(prefix="stepscope-bench-cache-")
    try:
        proc, base, t0 = serve(logdir, cache)
        rss = TreeRss(proc.pid)
        try:
            seconds = until_ready(base, os.path.basename(logdir), t0)
            # the old plugin has every view loaded at its overview: count Stepscope's
            # memory until its timeline is built too
            until_ready(base, os.path.basename(logdir), t0, "trace/timeline?width=2000")
        finally:
            peak = rss.stop()
            stop(proc)
        return {"seconds": seconds, "peak_rss": peak}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-python", required=True,
                    help="python of a venv with torch-tb-profiler==0.4.3 (and no stepscope)")
    ap.add_argument("--sizes", default="1,10")
    args = ap.parse_args()
    print(f"{'size':>5} {'old s':>8} {'old MiB':>8} {'new s':>7} {'new MiB':>8} "
          f"{'time ratio':>10} {'RSS ratio':>9}")
    for k in (int(s) for s in args.sizes.split(",")):
        logdir = os.path.dirname(trace_for(k))
        old = old_plugin(args.old_python, logdir)
        new = stepscope(logdir)
        if "error" in old:
            print(f"{'x' + str(k):>5} {old['error']:>17} {new['seconds']:7.2f} "
                  f"{new['peak_rss'] / 2**20:8.0f}", flush=True)
            continue
        print(f"{'x' + str(k):>5} {old['seconds']:8.2f} {old['peak_rss'] / 2**20:8.0f} "
              f"{new['seconds']:7.2f} {new['peak_rss'] / 2**20:8.0f} "
              f"{new['seconds'] / old['seconds']:10.3f} {new['peak_rss'] / old['peak_rss']:9.3f}",
              flush=True)


if __name__ == "__main__":
    main()
