"""Timeline speed and answer size on a big trace (issue 6 targets; figures, not pass/fail).

Reads the trace, builds the timeline (lanes + level-of-detail index + links), then times
``trace/timeline`` answers: the whole range at width 2000 (target: <= 2 MB of JSON within
1.5 s), a pan across the trace at 1/20 of the range, and 2 ms windows. "answer" is
``Timeline.query`` plus ``json.dumps``; the size is the compact JSON (and gzipped, as served).

    python benchmarks/bench_timeline.py [TRACE]   # default: the x50 ResNet-50 replica (3.7M events)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time

from make_big_trace import replica  # benchmarks/ is on sys.path when run as a script

HERE = os.path.dirname(os.path.abspath(__file__))


def default_trace() -> str:
    return replica(50, os.path.join(HERE, "data", "x50.pt.trace.json.gz"))


def answer(tl, start, end, width) -> tuple[float, float, int, int, int]:
    """(query s, json s, JSON bytes, gzip bytes, blocks)."""
    t0 = time.perf_counter()
    ans = tl.query(start, end, width)
    t1 = time.perf_counter()
    text = json.dumps(ans, separators=(",", ":")).encode()
    t2 = time.perf_counter()
    blocks = sum(len(ln.get("blocks", ())) for ln in ans["lanes"])
    return t1 - t0, t2 - t1, len(text), len(gzip.compress(text, 6)), blocks


def report(label: str, runs: list[tuple[float, float, int, int, int]]) -> None:
    total = [q + j for q, j, *_ in runs]
    print(f"{label:34} n={len(runs):3}  answer median {statistics.median(total) * 1000:7.1f} ms"
          f"  max {max(total) * 1000:7.1f} ms  (query max {max(r[0] for r in runs) * 1000:6.1f})"
          f"  JSON max {max(r[2] for r in runs) / 1e6:5.2f} MB"
          f"  gz {max(r[3] for r in runs) / 1e6:5.2f} MB  blocks max {max(r[4] for r in runs):,}")


def main(argv: list[str]) -> None:
    from stepscope.read.reader import read_trace
    from stepscope.timeline import build_timeline

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="a trace file (default: the x50 ResNet-50 replica)")
    path = ap.parse_args(argv).trace or default_trace()
    t = time.perf_counter()
    trace = read_trace(path)
    print(f"{os.path.basename(path)}: {len(trace):,} duration events, read "
          f"{time.perf_counter() - t:.1f} s")
    builds = []
    for _ in range(3):
        t = time.perf_counter()
        tl = build_timeline(trace)
        builds.append(time.perf_counter() - t)
    print(f"build_timeline: {' / '.join(f'{b:.2f}' for b in builds)} s (3 runs); "
          f"{len(tl.layout.lanes)} lanes, {sum(ln.rows for ln in tl.layout.lanes)} rows; "
          f"LOD {len(tl.lod.levels)} levels, {tl.lod.nbytes() / 2**20:.0f} MiB")
    end = tl.end_ns / 1000
    report("whole range, width 2000", [answer(tl, None, None, 2000) for _ in range(5)])
    report("whole range, width 10000", [answer(tl, None, None, 10000) for _ in range(3)])
    span = end / 20
    pans = [answer(tl, k * span / 4, k * span / 4 + span, 2000) for k in range(77)]
    report("pan 1/20 of range by 1/4, w 2000", pans)
    pans = [answer(tl, a, a + end / 3, 2000) for a in (0, end / 9, end / 3, end / 2, end * 2 / 3)]
    report("pan 1/3 of range, w 2000", pans)
    steps = tl.steps[:: max(len(tl.steps) // 10, 1)]
    mids = [answer(tl, (a + b) / 2000 - 1000, (a + b) / 2000 + 1000, 1000) for _, a, b in steps]
    report("2 ms windows mid-step, w 1000", mids)


if __name__ == "__main__":
    main(sys.argv[1:])
