"""Memory view cost (issue 14): on a ResNet-50 replica with ``[memory]`` events added as
``profile_memory=True`` writes them (make_big_trace.py --memory), the share the memory
analysis adds to the analysis worker's time to overview (read + analyse + every payload),
and the time of every ``memory/*`` answer after analysis (encoded with orjson, as the app
serves it; gzip not included). ``memory/events`` is timed whole (every row: the API's plain
form) and as the dashboard asks for it (one sorted / searched page of a window).

    python benchmarks/bench_memory.py [--times 10] [TRACE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import orjson
from make_big_trace import replica  # benchmarks/ is on sys.path when run as a script

from stepscope.analysis.gpu_metrics import device_props
from stepscope.analysis.memory import analyze_memory
from stepscope.read.reader import read_trace
from stepscope.views import ViewSet
from stepscope.views.memory import memory_payloads

HERE = os.path.dirname(os.path.abspath(__file__))


def best(fn, repeat: int = 3) -> tuple[float, object]:
    """Fastest of ``repeat`` runs (s) and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--times", type=int, default=10)
    args = ap.parse_args()
    path = args.trace or replica(args.times, os.path.join(HERE, "data", f"mem_x{args.times}",
                                                          "worker0.pt.trace.json.gz"), memory=True)
    t_read, trace = best(lambda: read_trace(path), 1)
    from stepscope.analysis import analyze
    t_an, a = best(lambda: analyze(trace), 2)
    t_views, views = best(lambda: ViewSet(a), 2)
    t_mem, mem = best(lambda: analyze_memory(
        trace, a.tree, a.nodes, lambda d: device_props(trace, d).get("totalGlobalMem")))
    t_pay, _ = best(lambda: memory_payloads(a))
    total = t_read + t_an + t_views
    n = len(trace.memory["ts"])
    print(f"{os.path.basename(path)}: {len(trace):,} events, {n:,} memory events")
    print(f"time to overview (read {t_read:.2f} s + analyse {t_an:.2f} s + payloads "
          f"{t_views:.2f} s) = {total:.2f} s")
    print(f"memory analysis {t_mem * 1000:.0f} ms + memory payloads {t_pay * 1000:.0f} ms = "
          f"{(t_mem + t_pay) * 1000:.0f} ms: {100 * (t_mem + t_pay) / (total - t_mem - t_pay):.1f} % "
          "added to the time to overview")
    for d in mem.devices:
        for route, params in (("memory/devices", {}),
                              ("memory/curve", {"device": d.label, "width": "1200"}),
                              ("memory/curve", {"device": d.label, "width": "1200",
                                                "start": str(d.ts[len(d.ts) // 3] / 1000),
                                                "end": str(d.ts[len(d.ts) // 2] / 1000)}),
                              ("memory/events", {"device": d.label}),
                              ("memory/events", {"device": d.label, "sort": "size",
                                                 "limit": "25"}),
                              ("memory/events", {"device": d.label, "search": "never",
                                                 "sort": "duration", "limit": "25",
                                                 "start": str(d.ts[len(d.ts) // 3] / 1000),
                                                 "end": str(d.ts[len(d.ts) // 2] / 1000)}),
                              ("memory/stats", {"device": d.label, "group_by": "Operation"})):
            def answer(route=route, params=params):
                return orjson.dumps(views.get(route, params), option=orjson.OPT_SERIALIZE_NUMPY)
            first, _ = best(answer, 1)
            t, body = best(answer)
            form = ("window" if "start" in params else "") + (" page" if "limit" in params else "")
            print(f"  {route:15} {d.label:5} {form:11} "
                  f"first {first * 1000:6.1f} ms, then {t * 1000:6.1f} ms, {len(body):,} bytes")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
