"""Time analysing many small traces through the worker processes (issue 12: a process
start each cost ~0.4 s; issue 19: 1,000 small traces, each < 1 MB, within 30 s). Not a
pass/fail test.

    python benchmarks/bench_tiny.py [N] [JOBS] [--source TRACE]

Writes N (default 1000) traces to a temporary folder, analyses them all with an
``Analyser`` (JOBS analyses at once, default 2, as the store's threads call it), waits for
their timelines and prints the seconds taken, the worker processes started and the CPU
seconds of all the processes (comparable on a shared machine). The traces
are two-event ones, or with ``--source`` copies of a real small trace (for instance
``../shared/traces/param_v100_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json``,
0.9 MB: each copy is a distinct file, so none is a cache hit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from stepscope.store.pool import Analyser


def tiny_trace(path: str, i: int) -> None:
    """A step with one operator (``i`` makes every file different)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
               "dur": 100 + i, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50,
               "pid": 1, "tid": 1}]
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)


def _tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and all its descendants alive now."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=1000, help="traces (default 1000)")
    ap.add_argument("jobs", nargs="?", type=int, default=2, help="analyses at once (2)")
    ap.add_argument("--source", default="", help="copy this trace instead of tiny ones")
    args = ap.parse_args(argv)
    n, jobs = args.n, args.jobs
    suffix = ".pt.trace.json" + (".gz" if args.source.endswith(".gz") else "")
    with tempfile.TemporaryDirectory(prefix="stepscope-tiny-") as tmp:
        paths = [os.path.join(tmp, f"w{i}{suffix}") for i in range(n)]
        for i, path in enumerate(paths):
            if args.source:
                shutil.copyfile(args.source, path)
            else:
                tiny_trace(path, i)
        analyser = Analyser(cache_dir=os.path.join(tmp, "cache"), jobs=jobs)
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(jobs) as pool:
                views = list(pool.map(lambda p: analyser(p, lambda phase, f: None), paths))
            for v in views:
                v.timeline.wait()
            took = time.perf_counter() - t0
            cpu = _tree_cpu_s()  # before the workers end: the machine may be shared
        finally:
            analyser.close()
    starts = getattr(analyser, "process_starts", "?")
    what = os.path.basename(args.source) if args.source else "tiny"
    print(f"{n} traces ({what}), {jobs} jobs: {took:.1f} s ({1000 * took / n:.1f} ms each), "
          f"{starts} worker processes started, {cpu:.1f} CPU s in all processes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
