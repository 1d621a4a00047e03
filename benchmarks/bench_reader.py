"""Reader speed vs the stdlib baseline, in one invocation (ratios; machines are noisy).

Each measurement runs in a fresh ``python3`` (default settings, GC on):
- baseline: ``gzip`` decompression + stdlib ``json.loads`` of the file;
- stepscope: ``stepscope.read.reader.read_trace`` of the same file (file -> columnar model).
Prints seconds, the ratio stepscope/baseline and each child's peak RSS.

    python benchmarks/bench_reader.py [TRACE ...]   # default: a x12 ResNet-50 replica (~280 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from make_big_trace import replica  # benchmarks/ is on sys.path when run as a script

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import gzip, json, resource, sys, time
path, mode = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if mode == "baseline":
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    doc = json.loads(data)
    n = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
else:
    from stepscope.read.reader import read_trace
    n = len(read_trace(path))
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": dt, "events": n, "rss": rss}))
"""


def measure(path: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, path, mode], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def default_trace() -> str:
    return replica(12, os.path.join(HERE, "data", "x12.pt.trace.json.gz"))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help="trace files (default: a x12 ResNet-50 replica)")
    paths = ap.parse_args(argv).traces or [default_trace()]
    print(f"{'trace':32} {'JSON MB':>8} {'baseline s':>10} {'stepscope s':>11} {'ratio':>6} "
          f"{'base RSS MB':>11} {'ours RSS MB':>11}")
    for path in paths:
        import gzip

        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            size = sum(len(c) for c in iter(lambda: f.read(1 << 24), b""))
        base = measure(path, "baseline")
        ours = measure(path, "stepscope")
        print(f"{os.path.basename(path)[:32]:32} {size / 1e6:8.0f} {base['seconds']:10.2f} "
              f"{ours['seconds']:11.2f} {ours['seconds'] / base['seconds']:6.2f} "
              f"{base['rss'] / 2**20:11.0f} {ours['rss'] / 2**20:11.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
