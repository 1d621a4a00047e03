"""Time analysing many tiny traces through the worker processes (issue 12: a process
start each cost ~0.4 s; target: 1,000 tiny runs within 30 s). Not a pass/fail test.

    python benchmarks/bench_tiny.py [N] [JOBS]

Writes N (default 1000) two-event traces to a temporary folder, analyses them all with an
``Analyser`` (JOBS analyses at once, default 2, as the store's threads call it) and prints
the seconds taken and the worker processes started.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from stepscope.store.pool import Analyser


def tiny_trace(path: str, i: int) -> None:
    """A step with one operator (``i`` makes every file different)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
               "dur": 100 + i, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50,
               "pid": 1, "tid": 1}]
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 1000
    jobs = int(argv[1]) if len(argv) > 1 else 2
    with tempfile.TemporaryDirectory(prefix="stepscope-tiny-") as tmp:
        paths = [os.path.join(tmp, f"w{i}.pt.trace.json") for i in range(n)]
        for i, path in enumerate(paths):
            tiny_trace(path, i)
        analyser = Analyser(cache_dir=os.path.join(tmp, "cache"), jobs=jobs)
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(jobs) as pool:
                views = list(pool.map(lambda p: analyser(p, lambda phase, f: None), paths))
            for v in views:
                v.timeline.wait()
            took = time.perf_counter() - t0
        finally:
            analyser.close()
    starts = getattr(analyser, "process_starts", "?")
    print(f"{n} tiny traces, {jobs} jobs: {took:.1f} s ({1000 * took / n:.1f} ms each), "
          f"{starts} worker processes started")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
