"""Where an analysis worker's time and memory go, phase by phase, on one trace (prints
figures; not a pass/fail test).

    python benchmarks/bench_phases.py TRACE [--code LABEL=PYTHONPATH ...] [--runs N] [--top N]

Each run is a fresh process doing exactly what a server's analysis worker does
(:func:`stepscope.store.child.analyse_to_cache`, with the worker's heap settings, into a
temporary cache), timed at the messages the worker sends the server:

- ``read``: from the start to the ``analyse`` progress message (the trace read, with the
  worker's helper process);
- ``analysis+overview``: to the ``first`` message (the analysis, then the Overview's parts);
- ``views+store``: to the timeline's first progress message (the other views, then storing
  their payloads: from here on the server serves every tab but the timeline);
- ``timeline build``: to its second one (the lanes and the timeline's index);
- ``timeline store``: until the worker returns;
- ``timeline load``: the stored timeline read back and its first window drawn
  (``trace/timeline`` at 2,000 px), as a server does when the trace view first asks; in
  the same process, so the cache's files are in the page cache.

Per phase: seconds, and the process's peak RSS during it (MiB, sampled every 5 ms; that of
the read's helper processes together on a line of its own). ``--code LABEL=PYTHONPATH`` (repeatable)
compares code trees in the same invocation, their runs alternating (this machine's noise
then hits them alike); the default is the ``stepscope`` this interpreter imports. Figures
are the median of ``--runs`` runs, with their range. ``--top N`` also prints, per phase, the
N functions with the most time of their own (cProfile of the worker's main thread: the
read's helper process and the views' second thread are not in it).

Example (a checkout against the one in /work/main)::

    python benchmarks/bench_phases.py /tmp/stepscope-bench/2021-x50/worker0.pt.trace.json.gz \\
        --code main=/work/main --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PHASES = ("read", "analysis+overview", "views+store", "timeline build", "timeline store",
          "timeline load")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="a trace file (.json or .json.gz)")
    ap.add_argument("--code", action="append", default=[], metavar="LABEL=PYTHONPATH",
                    help="also run the stepscope found on PYTHONPATH (repeatable)")
    ap.add_argument("--runs", type=int, default=3, help="runs per code tree (default 3)")
    ap.add_argument("--top", type=int, default=0, help="top functions per phase (cProfile)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_one_run(args.trace, args.top)))
        return
    trees = [("this", None)] + [tuple(c.split("=", 1)) for c in args.code]
    results: dict[str, list[dict]] = {label: [] for label, _ in trees}
    for i in range(args.runs):
        for label, path in trees:
            results[label].append(_run_child(args.trace, path, args.top))
            print(f"run {i + 1}/{args.runs} {label}: {results[label][-1]['total']:.2f} s",
                  file=sys.stderr, flush=True)
    _print(results, args.top)


def _run_child(trace: str, pythonpath: str | None, top: int) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, os.path.abspath(__file__), trace, "--child",
                          "--top", str(top)], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"a run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _print(results: dict[str, list[dict]], top: int) -> None:
    labels = list(results)

    def cell(label: str, field: str, phase: str | None = None, fmt: str = "{:.2f}") -> str:
        vals = [r[field][phase] if phase else r[field] for r in results[label]]
        mid = fmt.format(statistics.median(vals))
        return mid if len(vals) < 2 else f"{mid} [{fmt.format(min(vals))}-{fmt.format(max(vals))}]"

    width = 24
    print(f"{'phase':<18}" + "".join(f"{lb + ' s':>{width}}{lb + ' peak MiB':>{width}}"
                                     for lb in labels))
    for ph in PHASES:
        print(f"{ph:<18}" + "".join(f"{cell(lb, 'seconds', ph):>{width}}"
                                    f"{cell(lb, 'peak_mib', ph, '{:.0f}'):>{width}}"
                                    for lb in labels))
    print(f"{'total':<18}" + "".join(f"{cell(lb, 'total'):>{width}}{'':>{width}}" for lb in labels))
    print(f"{'helper peak':<18}" + "".join(
        f"{'':>{width}}{cell(lb, 'helper_peak_mib', None, '{:.0f}'):>{width}}" for lb in labels))
    if top:
        for lb in labels:
            for ph in PHASES:
                print(f"\n{lb}, {ph} (last run): top functions by own time")
                for row in results[lb][-1]["top"].get(ph, []):
                    print(f"  {row[1]:8.3f} s {row[2]:>9,} calls  {row[0]}")


# -- one run, in a fresh process -----------------------------------------------------------
def _one_run(trace: str, top: int) -> dict:
    from stepscope.store import child
    from stepscope.store.cache import DiskCache
    from stepscope.store.lazy import timeline_key
    from stepscope.store.packing import unpack

    child.heap_settings()  # as the worker does, before any thread
    clock = _PhaseClock(top)
    child._conn = clock  # the worker's pipe to the server: its messages mark the phases
    child._PROGRESS_EVERY_S = 0.0  # every progress message is sent
    with tempfile.TemporaryDirectory(prefix="stepscope-phases-") as root:
        cache = DiskCache(root, 1 << 40)
        key = cache.key(trace)
        clock.start()
        answer = child.analyse_to_cache(trace, root, 1 << 40, key)
        if answer != {"ok": True}:
            sys.exit(f"the analysis failed: {answer}")
        clock.mark("timeline store")
        entry = cache.get(trace, timeline_key(key))
        entry.hold_files()
        unpack(entry.meta["state"], entry).query(None, None, 2000)
        clock.mark("timeline load")
        clock.stop()
    return {"seconds": clock.seconds, "peak_mib": clock.peak_mib, "top": clock.top,
            "total": sum(clock.seconds.values()), "helper_peak_mib": clock.helper_peak_mib}


class _PhaseClock:
    """Stands for the worker's pipe: ends a phase at each message that marks one, and
    samples this process's RSS meanwhile."""

    def __init__(self, top: int):
        self.top_n = top
        self.seconds: dict[str, float] = {}
        self.peak_mib: dict[str, float] = {}
        self.top: dict[str, list] = {}
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._peak = 0.0
        self._stop = threading.Event()
        self._profile = None
        self.helper_peak_mib = 0.0

    def start(self) -> None:
        self._peak = self._rss()
        threading.Thread(target=self._sample, daemon=True).start()
        self._t = time.perf_counter()
        self._begin_profile()

    def send(self, message: tuple) -> None:
        if message[0] == "first":
            self.mark("analysis+overview")
        elif message[0] == "progress":
            phase, fraction = message[1], message[2]
            if phase == "analyse" and "read" not in self.seconds:
                self.mark("read")
            elif phase == "timeline" and fraction == 0.0 and "views+store" not in self.seconds:
                self.mark("views+store")
            elif phase == "timeline" and fraction > 0.0 and "timeline build" not in self.seconds:
                self.mark("timeline build")

    def mark(self, phase: str) -> None:
        """End ``phase`` now; the next one begins."""
        t = time.perf_counter()
        self._end_profile(phase)
        self.seconds[phase] = t - self._t
        self.peak_mib[phase] = max(self._peak, self._rss())
        self._peak = self._rss()
        self._t = time.perf_counter()
        self._begin_profile()

    def stop(self) -> None:
        self._stop.set()
        self._end_profile(None)

    def _begin_profile(self) -> None:
        if self.top_n:
            import cProfile
            self._profile = cProfile.Profile()
            self._profile.enable()

    def _end_profile(self, phase: str | None) -> None:
        if self._profile is None:
            return
        self._profile.disable()
        if phase is not None:
            import pstats
            stats = pstats.Stats(self._profile).stats
            rows = sorted(((f"{os.path.basename(f)}:{line}({fn})", tt, nc)
                           for (f, line, fn), (_cc, nc, tt, _ct, _callers) in stats.items()),
                          key=lambda r: -r[1])
            self.top[phase] = [(name, round(tt, 3), nc) for name, tt, nc in rows[:self.top_n]]
        self._profile = None

    def _rss(self) -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page / 2**20

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self._rss())
            self.helper_peak_mib = max(self.helper_peak_mib, self._children_rss())
            time.sleep(0.005)

    def _children_rss(self) -> float:
        """RSS of this process's child processes together (MiB): the read's helpers."""
        total = 0
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/children") as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(f"/proc/{pid}/statm") as f:
                        total += int(f.read().split()[1])
            except OSError:  # a thread or process that just ended
                continue
        return total * self._page / 2**20


if __name__ == "__main__":
    main()
