"""Big traces end to end: time to overview through the HTTP API, peak RSS, cached re-open.

For each size (copies of the shared ResNet-50 trace made by make_big_trace.py) it prints:
events, JSON bytes, the baseline (a fresh ``python3``, default settings: gzip decompression +
stdlib ``json.loads`` of the same file, under a memory limit), time to overview on a cold
standalone server (from process start to the first 200 of ``overview``), the time until the
trace view's timeline answers too (the worker builds it after the other views), the peak
RSS of the server's process tree (server + analysis workers) until then, the cached
re-open time (a new server
over the same cache), and the slowest view endpoint once analysed. Ratios are against the
baseline measured in the same run.

    python benchmarks/bench_big.py [--sizes 1,10,50,200] [--baseline-limit-gib 16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psutil
from make_big_trace import replica  # benchmarks/ is on sys.path when run as a script

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "/data/plugin/stepscope"
ROUTES = ("overview", "operation?group_by=Operation", "operation/table?group_by=Operation",
          "kernel/table?group_by=Kernel", "kernel?group_by=Kernel", "kernel/tc_pie",
          "trace/timeline?width=2000")

BASELINE = r"""
import gzip, json, resource, sys, time
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
t = time.perf_counter()
try:
    with open(sys.argv[1], "rb") as f:
        data = gzip.decompress(f.read())
    doc = json.loads(data)
    out = {"seconds": time.perf_counter() - t, "events": len(doc["traceEvents"])}
except MemoryError:
    out = {"seconds": None, "error": "out of memory"}
out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def trace_for(k: int) -> str:
    return replica(k, os.path.join(HERE, "data", f"x{k}", "worker0.pt.trace.json.gz"))


def json_bytes(path: str) -> int:
    with gzip.open(path, "rb") as f:
        return sum(len(c) for c in iter(lambda: f.read(1 << 24), b""))


def baseline(path: str, limit: int) -> dict:
    try:
        out = subprocess.run([sys.executable, "-c", BASELINE, path, str(limit)],
                             capture_output=True, text=True, timeout=1800)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError):
        return {"seconds": None, "error": "failed (killed?)"}


class TreeRss:
    """Samples the summed RSS of a process and its children every 50 ms."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def serve(logdir: str, cache: str) -> tuple[subprocess.Popen, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", logdir, "--port", "0",
                             "--cache-dir", cache, "--reload-interval", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("Serving on "):
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, line.split()[-1].rstrip("/"), t0


def until_ready(base: str, run: str, t0: float, route: str = "overview",
                timeout: float = 3600) -> float:
    """Seconds from ``t0`` until ``route`` answers 200 (polling every 50 ms)."""
    sep = "&" if "?" in route else "?"
    url = f"{base}{PREFIX}/{route}{sep}run={run}&worker=worker0"
    while True:
        status, body = get(url)
        if status == 200:
            return time.perf_counter() - t0
        if status != 202 or time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{route} answered {status}: {body[:300]!r}")
        time.sleep(0.05)


def slowest_route(base: str, run: str) -> tuple[str, float]:
    worst = ("", 0.0)
    for route in ROUTES:
        sep = "&" if "?" in route else "?"
        url = f"{base}{PREFIX}/{route}{sep}run={run}&worker=worker0"
        times = []
        for _ in range(5):
            t = time.perf_counter()
            status, _ = get(url)
            times.append(time.perf_counter() - t)
            assert status == 200, (route, status)
        worst = max(worst, (route, sorted(times)[2]), key=lambda x: x[1])
    return worst


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure(k: int, limit: int, skip_baseline: bool) -> dict:
    path = trace_for(k)
    logdir = os.path.dirname(path)
    run = os.path.basename(logdir)
    out = {"size": f"x{k}", "json_mb": json_bytes(path) / 1e6}
    out["baseline"] = {"seconds": None, "error": "skipped"} if skip_baseline else \
        baseline(path, limit)
    cache = tempfile.mkdtemp(prefix="stepscope-bench-cache-")
    try:
        proc, base, t0 = serve(logdir, cache)
        rss = TreeRss(proc.pid)
        try:
            out["cold_s"] = until_ready(base, run, t0)
            # the worker stores the timeline after the payloads: the trace view comes later
            out["timeline_s"] = until_ready(base, run, t0, "trace/timeline?width=2000")
        finally:
            out["peak_rss"] = rss.stop()
        status, body = get(f"{base}{PREFIX}/overview?run={run}&worker=worker0")
        out["steps"] = len(json.loads(body)["steps"]["rows"])
        out["slowest"] = slowest_route(base, run)
        stop(proc)
        proc, base, t0 = serve(logdir, cache)
        out["cached_s"] = until_ready(base, run, t0)
        stop(proc)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,50,200")
    ap.add_argument("--baseline-limit-gib", type=float, default=16)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    limit = int(args.baseline_limit_gib * 2**30)
    print(f"{'size':>5} {'JSON MB':>8} {'steps':>6} {'baseline s':>11} {'cold s':>7} "
          f"{'ratio':>6} {'timeline s':>10} {'peak RSS MiB':>12} {'cached s':>9} "
          f"{'slowest route (ms)':>28}")
    for k in (int(s) for s in args.sizes.split(",")):
        r = measure(k, limit, args.skip_baseline)
        b = r["baseline"]
        base = f"{b['seconds']:.2f}" if b.get("seconds") else b.get("error", "?")
        ratio = f"{r['cold_s'] / b['seconds']:.2f}" if b.get("seconds") else "-"
        route, t = r["slowest"]
        print(f"{r['size']:>5} {r['json_mb']:8.0f} {r['steps']:6d} {base:>11} "
              f"{r['cold_s']:7.2f} {ratio:>6} {r['timeline_s']:10.2f} "
              f"{r['peak_rss'] / 2**20:12.0f} "
              f"{r['cached_s']:9.2f} {route.split('?')[0]:>20} {t * 1000:6.1f}", flush=True)


if __name__ == "__main__":
    main()
