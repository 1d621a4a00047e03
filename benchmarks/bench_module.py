"""Module view cost (SPEC §4.2): what the module analysis adds to the time to overview, and
how fast its routes answer once analysed.

For each size (copies of the shared ResNet-50 trace made by make_big_trace.py), in one
process: read + analyze + every other view's payloads (the worker's work before the
overview can answer) against the Module view's build (phases, ranges, modules, flame);
then each Module route's answer time (best of 3; stacks/collapsed first call and cached).

    python benchmarks/bench_module.py [--sizes 1,10]
"""

from __future__ import annotations

import argparse
import os
import time

from make_big_trace import replica  # benchmarks/ is on sys.path when run as a script

from stepscope.analysis import analyze
from stepscope.read.reader import read_trace
from stepscope.views import VIEWS, ViewSet

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = (("module/summary", {}), ("module/phases", {}), ("module/ranges", {}),
          ("module/ranges", {"flat": "1"}), ("module/tree", {}),
          ("module/flame", {"metric": "host_self"}), ("module/flame", {"metric": "device"}),
          ("stacks/collapsed", {"metric": "host_self"}), ("stacks/collapsed", {"metric": "host_self"}))


def measure(k: int) -> None:
    path = replica(k, os.path.join(HERE, "data", f"x{k}", "worker0.pt.trace.json.gz"))
    t0 = time.perf_counter()
    trace = read_trace(path)
    a = analyze(trace)
    t1 = time.perf_counter()
    others = {}
    for v in VIEWS:
        s = time.perf_counter()
        v.build(a)
        others[v.name] = time.perf_counter() - s
    base = t1 - t0 + sum(t for n, t in others.items() if n != "Module")
    mod = others["Module"]
    print(f"x{k}: {len(trace):,} events; read+analyze+other views {base:.2f} s; "
          f"module build {mod:.3f} s = +{100 * mod / base:.1f} % of the time to overview")
    views = ViewSet(a)
    for route, params in ROUTES:
        best = float("inf")
        for _ in range(1 if route == "stacks/collapsed" else 3):
            s = time.perf_counter()
            out = views.get(route, params)
            best = min(best, time.perf_counter() - s)
        size = len(out) if isinstance(out, (str, list)) else len(out.get("name", out))
        print(f"  {route}{'?' + '&'.join(f'{a}={b}' for a, b in params.items()) if params else ''}"
              f": {1000 * best:.1f} ms (size {size:,})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,10", help="comma-separated copies, e.g. 1,10,50")
    args = ap.parse_args(argv)
    for k in (int(x) for x in args.sizes.split(",")):
        measure(k)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
