"""Time ``build_views`` and each route's ``get`` on a real trace (not a pass/fail test).

    python benchmarks/bench_views.py [TRACE ...]

Default trace: the 74k-event ``kineto_resnet50/resnet50_num_workers_0`` sample (target:
build_views < 1 s once read). Prints the best of several runs, and the analysis stages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stepscope.analysis import analyze  # noqa: E402
from stepscope.analysis.breakdown import step_breakdown  # noqa: E402
from stepscope.analysis.links import attach_by_time, link  # noqa: E402
from stepscope.analysis.steps import find_steps  # noqa: E402
from stepscope.analysis.tree import build_tree  # noqa: E402
from stepscope.read.reader import read_trace  # noqa: E402
from stepscope.views import ViewSet, build_views  # noqa: E402

DEFAULT = os.path.join(ROOT, "..", "shared", "traces", "kineto_resnet50",
                       "resnet50_num_workers_0", "worker0.pt.trace.json.gz")
QUERIES = [
    ("overview", {}),
    ("operation", {"group_by": "Operation"}),
    ("operation", {"group_by": "OperationAndInputShape"}),
    ("operation/table", {"group_by": "Operation"}),
    ("operation/table", {"group_by": "OperationAndInputShape"}),
    ("operation/stack", {"group_by": "Operation", "op_name": "aten::conv2d"}),
    ("kernel/table", {"group_by": "Kernel"}),
    ("kernel/table", {"group_by": "KernelNameAndOpName"}),
    ("kernel", {"group_by": "Kernel"}),
    ("kernel/tc_pie", {}),
]


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench(path: str) -> None:
    t = time.perf_counter()
    trace = read_trace(path)
    read_s = time.perf_counter() - t
    print(f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}: "
          f"{sum(trace.phase_counts.values()):,} events in the file, {len(trace):,} kept; "
          f"read {read_s:.3f} s")
    print(f"  build_views          {best(lambda: build_views(trace)) * 1000:8.1f} ms")
    tree = build_tree(trace)
    links = attach_by_time(trace, link(trace), tree)
    steps = find_steps(trace, links)
    a = analyze(trace)
    for label, fn in (
        ("  .. build_tree", lambda: build_tree(trace)),
        ("  .. link", lambda: attach_by_time(trace, link(trace), tree)),
        ("  .. find_steps", lambda: find_steps(trace, links)),
        ("  .. step_breakdown", lambda: step_breakdown(trace, steps, a.comm_kernel)),
        ("  .. analyze (all)", lambda: analyze(trace)),
        ("  .. payloads", lambda: ViewSet(a)),
    ):
        print(f"{label:<22} {best(fn) * 1000:8.1f} ms")
    views = build_views(trace)
    for route, params in QUERIES:
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            views.get(route, params)
        per = (time.perf_counter() - t) / n
        label = route + (f"?group_by={params['group_by']}" if "group_by" in params else "")
        print(f"  get {label:<46} {per * 1e6:8.2f} µs")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help="trace files (default: the 74k-event golden sample)")
    from make_big_trace import need  # benchmarks/ is on sys.path when run as a script

    for p in ap.parse_args().traces or [need(DEFAULT)]:
        bench(p)
