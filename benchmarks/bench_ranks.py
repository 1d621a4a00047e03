"""Many ranks (issue 21): time to the distributed view and the server's peak memory, with
the analyses on a Dask ``LocalCluster`` (``--scheduler``) and, as the baseline in the same
run, on the server's local worker processes.

The ranks are re-ranked copies of the 8 DLRM rank traces (``distributedInfo.rank`` and
``world_size`` rewritten; rank r is a copy of rank r mod 8). The server is a real
``stepscope DIR`` process (``--no-cache``: every rank analysed); its peak RSS is its
``VmHWM`` (the workers and the cluster are other processes). The server holds only
compact per-rank payloads, so its memory grows with the number of ranks by a few hundred
KB each, not with the ranks' event counts.

    python3 benchmarks/bench_ranks.py                 # 32 ranks (short)
    python3 benchmarks/bench_ranks.py --ranks 256 --workers 2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

DLRM = Path(__file__).resolve().parents[2] / "shared" / "traces" / "param_v100_dlrm_8rank"
INFO = re.compile(rb'"distributedInfo": \{[^}]*\}')


def make_ranks(root: Path, ranks: int) -> tuple[Path, int]:
    """``root/dlrm/worker{r}.pt.trace.json`` for r < ranks; returns (run folder, events)."""
    from make_big_trace import need  # benchmarks/ is on sys.path when run as a script

    sources = sorted(Path(need(str(DLRM))).glob("*.pt.trace.json"))
    run = root / "dlrm"
    run.mkdir(parents=True)
    events = 0
    for r in range(ranks):
        data = sources[r % len(sources)].read_bytes()
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {ranks}}}'
        data, n = INFO.subn(info.encode(), data, count=1)
        assert n == 1, "no distributedInfo in the DLRM trace"
        (run / f"worker{r}.pt.trace.json").write_bytes(data)
        events += data.count(b'"ph"')
    return run, events


def serve(logdir: Path, extra: list[str]) -> dict:
    """Start ``stepscope logdir``, wait for the distributed view; its figures."""
    env = dict(os.environ)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", str(logdir), "--port", "0",
                             "--no-cache", "--reload-interval", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://[^/]+/", line)
        assert m, f"no 'Serving on' line: {line!r}"
        url = m.group(0) + "data/plugin/stepscope/distributed/ranks?run=dlrm"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=60) as resp:
                    if resp.status == 200:
                        body = json.loads(resp.read())
                        break
            except urllib.error.HTTPError as e:
                if e.code != 404:  # 404: not discovered yet
                    raise
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm_kb = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))
        return {"seconds": round(elapsed, 1), "server_peak_rss_mb": round(hwm_kb / 1024, 1),
                "ranks_in_view": len(body["ranks"]), "world_size": body["world_size"]}
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    p.add_argument("--no-baseline", action="store_true", help="skip the local-pool run")
    args = p.parse_args()
    from distributed import LocalCluster

    with tempfile.TemporaryDirectory(prefix="stepscope-ranks-") as tmp:
        run, events = make_ranks(Path(tmp), args.ranks)
        size = sum(f.stat().st_size for f in run.iterdir())
        print(f"{args.ranks} ranks: {events:,} events, {size / 1e6:.0f} MB of JSON", flush=True)
        results = {}
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=logging.ERROR) as cluster:
            results["dask"] = serve(Path(tmp), ["--scheduler", cluster.scheduler_address])
            print("dask ", results["dask"], flush=True)
        if not args.no_baseline:
            results["local"] = serve(Path(tmp), ["--jobs", str(args.workers)])
            print("local", results["local"], flush=True)
        print(json.dumps({"ranks": args.ranks, "events": events, "json_bytes": size,
                          **results}))


if __name__ == "__main__":
    main()
