"""Big traces end to end: time to overview through the HTTP API, against stdlib json.loads.

What it measures, per trace family and size (``k`` copies of a real trace, made once by
make_big_trace.py with unique ids and consistent correlations/flows, and kept in ``--out``):

- events, JSON bytes and steps of the scaled trace;
- the baseline: a fresh ``python3`` doing gzip decompression + stdlib ``json.loads`` of the
  same file (under a memory limit), measured in the same run;
- ``cold s``: time to overview on a cold standalone server (``python -m stepscope``, from
  process start to the first 200 of ``overview``) and its ratio to the baseline;
- ``+views s``: how much later the other views answer (the Overview is served first);
- ``+timeline s``: how much later the trace view's timeline answers (built after the views);
- peak RSS of the server's process tree (server + analysis workers) until then;
- the cache's size on disk, the cached re-open time (a new server over the same cache), and
  the slowest view endpoint once analysed (median of 5).

Families: ``2021`` (kineto_resnet50: integer µs) and ``2024`` (hta_v100_resnet_ns_2024: epoch
µs with ns fractions), both from ``../shared/traces`` beside the checkout, or ``--source``.
``--code LABEL=PYTHONPATH`` (repeatable) times other code trees in the same run (e.g.
``main=/work/main``); the default is the ``stepscope`` this interpreter imports.

    python benchmarks/bench_big.py [--family 2021|2024|both] [--sizes 1,10,50,200]
        [--source TRACE] [--out DIR] [--code LABEL=PYTHONPATH ...] [--skip-baseline]
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
from make_big_trace import SOURCE, SOURCE_2024, events_of, replica  # benchmarks/ is on sys.path

#: scaled traces are kept here between runs (GBs: outside the checkout)
DEFAULT_OUT = os.path.join(os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir(),
                           "stepscope-bench")
FAMILIES = {"2021": SOURCE, "2024": SOURCE_2024}

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


def trace_for(k: int, family: str = "2021", source: str = "", out: str = DEFAULT_OUT) -> str:
    """The ``k``-fold copy of ``source`` (default: the family's shared trace), made on first
    use under ``out``; its folder (``<family>-x<k>``) is the run's name."""
    return replica(k, os.path.join(out, f"{family}-x{k}", "worker0.pt.trace.json.gz"),
                   source=source or FAMILIES[family])


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


def serve(logdir: str, cache: str, pythonpath: str | None = None
          ) -> tuple[subprocess.Popen, str, float]:
    """A standalone server over ``logdir`` (importing stepscope from ``pythonpath`` if set)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", logdir, "--port", "0",
                             "--cache-dir", cache, "--reload-interval", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
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


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def measure(path: str, pythonpath: str | None) -> dict:
    """Cold analysis, timeline, RSS, cache size, slowest route and cached re-open of ``path``."""
    logdir = os.path.dirname(path)
    run = os.path.basename(logdir)
    out = {}
    cache = tempfile.mkdtemp(prefix="stepscope-bench-cache-")
    try:
        proc, base, t0 = serve(logdir, cache, pythonpath)
        rss = TreeRss(proc.pid)
        try:
            out["cold_s"] = until_ready(base, run, t0)
            # the other views' payloads are stored after the Overview's parts came
            out["views_s"] = until_ready(base, run, t0, "operation?group_by=Operation")
            # the worker stores the timeline after the payloads: the trace view comes later
            out["timeline_s"] = until_ready(base, run, t0, "trace/timeline?width=2000")
        finally:
            out["peak_rss"] = rss.stop()
        status, body = get(f"{base}{PREFIX}/overview?run={run}&worker=worker0")
        out["steps"] = len(json.loads(body)["steps"]["rows"])
        out["slowest"] = slowest_route(base, run)
        stop(proc)
        out["cache_bytes"] = dir_bytes(cache)
        proc, base, t0 = serve(logdir, cache, pythonpath)
        out["cached_s"] = until_ready(base, run, t0)
        stop(proc)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=("2021", "2024", "both"), default="both",
                    help="which shared trace to scale (default: both)")
    ap.add_argument("--sizes", default="1,10,50,200", help="copies, comma-separated")
    ap.add_argument("--source", default="", help="scale this trace instead (one family)")
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help=f"folder for the scaled traces (default {DEFAULT_OUT})")
    ap.add_argument("--code", action="append", default=[], metavar="LABEL=PYTHONPATH",
                    help="also time the stepscope found on PYTHONPATH (repeatable)")
    ap.add_argument("--baseline-limit-gib", type=float, default=16)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    limit = int(args.baseline_limit_gib * 2**30)
    families = ["custom"] if args.source else (
        ["2021", "2024"] if args.family == "both" else [args.family])
    codes = [("this", None)] + [tuple(c.split("=", 1)) for c in args.code]
    print(f"{'family':>6} {'size':>5} {'code':>6} {'events':>10} {'JSON MB':>8} {'steps':>5} "
          f"{'baseline s':>10} {'cold s':>7} {'ratio':>6} {'+views s':>8} {'+timeline s':>11} "
          f"{'peak RSS MiB':>12} {'cache MB':>8} {'cached s':>8} {'slowest route (ms)':>28}",
          flush=True)
    for family in families:
        for k in (int(s) for s in args.sizes.split(",")):
            path = trace_for(k, family, args.source, args.out)
            mb = json_bytes(path) / 1e6
            b = {"seconds": None, "error": "skipped"} if args.skip_baseline else \
                baseline(path, limit)
            base = f"{b['seconds']:.2f}" if b.get("seconds") else b.get("error", "?")
            n = b.get("events") or events_of(path)  # (none when the baseline ran out of memory)
            events = f"{n:,}" if n else "-"
            for label, pythonpath in codes:
                r = measure(path, pythonpath)
                ratio = f"{r['cold_s'] / b['seconds']:.2f}" if b.get("seconds") else "-"
                route, t = r["slowest"]
                print(f"{family:>6} {'x' + str(k):>5} {label:>6} {events:>10} "
                      f"{mb:8.0f} {r['steps']:5d} {base:>10} {r['cold_s']:7.2f} {ratio:>6} "
                      f"{r['views_s'] - r['cold_s']:8.2f} "
                      f"{r['timeline_s'] - r['cold_s']:11.2f} {r['peak_rss'] / 2**20:12.0f} "
                      f"{r['cache_bytes'] / 1e6:8.0f} {r['cached_s']:8.2f} "
                      f"{route.split('?')[0]:>20} {t * 1000:6.1f}", flush=True)


if __name__ == "__main__":
    main()
