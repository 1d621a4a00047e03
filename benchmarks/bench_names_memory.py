"""Server memory per distinct operator name (issue 12 item 9).

Writes a trace with ``N`` operators of distinct names (one launch + kernel each), analyses
it through :class:`~stepscope.store.pool.Analyser` (the analysis runs in a worker process; the
server keeps what it loads back from the cache) and prints the server's resident memory
before and after, and per name.

    python benchmarks/bench_names_memory.py 300000
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time

import orjson


def rss_bytes() -> int:
    """This process's resident set size (bytes), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim() -> None:
    """Give freed heap memory back to the OS (glibc), so RSS shows what is still held."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def write_trace(path: str, n: int) -> None:
    """``n`` distinct ``aten::op_<i>`` operators in one step, each launching one kernel."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
               "dur": 10 * n + 10, "pid": 1, "tid": 1}]
    for i in range(n):
        ts = 10 * i + 1
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op_{i}", "ts": ts, "dur": 8,
             "pid": 1, "tid": 1, "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 1,
             "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": i + 1, "External id": i + 1}},
            {"ph": "X", "cat": "kernel", "name": f"kernel_{i}", "ts": ts + 3, "dur": 4,
             "pid": 0, "tid": 7, "args": {"correlation": i + 1, "device": 0}},
        ]
    with open(path, "wb") as f:
        f.write(orjson.dumps({"traceEvents": events,
                              "deviceProperties": [{"id": 0, "numSms": 80}]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="?", type=int, default=30_000,
                    help="distinct operator names in the trace written (default 30,000)")
    n = ap.parse_args().names
    from stepscope.store.pool import Analyser

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w.pt.trace.json")
        write_trace(path, n)
        a = Analyser(cache_dir=os.path.join(tmp, "cache"), jobs=1)
        try:
            gc.collect()
            before = rss_bytes()
            t0 = time.perf_counter()
            views = a(path, lambda phase, f: None)
            views.timeline.wait()
            views.get("operation/table", {})
            gc.collect()
            trim()
            hot = rss_bytes()
            t1 = time.perf_counter()
            print(f"{n} names: server RSS {before / 2**20:.0f} MiB -> {hot / 2**20:.0f} MiB "
                  f"with the operator payload in use (+{(hot - before) / n:.0f} B per name), "
                  f"{t1 - t0:.1f} s")
            # the trace goes cold: other traces' payloads push it out of the LRU
            a.payloads.max_bytes = 0
            views.get("overview", {})
            gc.collect()
            trim()
            cold = rss_bytes()
            packed = getattr(views, "packed_bytes", lambda: 0)()
            print(f"  cold (payloads compressed, {packed / 2**20:.1f} MiB): RSS "
                  f"{cold / 2**20:.0f} MiB (+{(cold - before) / n:.0f} B per name)")
            t2 = time.perf_counter()
            views.get("operation/table", {})
            print(f"  operation/table of the cold trace: {time.perf_counter() - t2:.2f} s")
        finally:
            a.close()


if __name__ == "__main__":
    main()
