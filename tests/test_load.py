"""Bounded load on loopback (issue 7): 40 concurrent clients for 20 s against a mix of
endpoints of a real standalone server, while a big trace is still being analysed.

Pass: zero errors (every answer is the expected status: 200, 202 only for the run still
being analysed, 304 for revalidation), the server keeps answering, and its memory stays
bounded. p50/p95 latency, throughput and the server's peak RSS are printed and written to
``$STEPSCOPE_TEST_OUTPUT/load_test.json``.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from browser import output_dir
from conftest import PREFIX, ROOT, SHARED
from tracebuild import NO_SHARED

pytestmark = pytest.mark.slow

KINETO = SHARED / "kineto_resnet50"
CLIENTS = 40
DURATION_S = 20.0
REQUEST_TIMEOUT_S = 30.0
BIG_TIMES = 8  # copies of the ResNet-50 trace in a big one (~185 MB of JSON, 540k events)
#: runs holding that big trace (file copies: free to make), analysed two at a time, so that
#: analysis goes on for most of the load
BIG_RUNS = tuple(f"zz_big_{i}" for i in range(6))
#: the server process alone (analysis runs in worker processes, results are memory-mapped)
SERVER_RSS_LIMIT = 1536 << 20
#: the server and its analysis workers together
TREE_RSS_LIMIT = 6 << 30


def _routes(run: str, worker: str = "worker0") -> list[tuple[str, int]]:
    """``(path, weight)`` of the requests a dashboard makes for a span."""
    q = f"run={run}&worker={worker}"
    return [
        (f"{PREFIX}/runs", 4), (f"{PREFIX}/workers?run={run}", 2),
        (f"{PREFIX}/spans?{q}", 2), (f"{PREFIX}/views?{q}", 3), (f"{PREFIX}/notes?{q}", 1),
        (f"{PREFIX}/overview?{q}", 6), (f"{PREFIX}/operation?{q}&group_by=Operation", 3),
        (f"{PREFIX}/operation/table?{q}&group_by=OperationAndInputShape", 3),
        (f"{PREFIX}/operation/stack?{q}&group_by=Operation&op_name=aten::conv2d", 1),
        (f"{PREFIX}/kernel/table?{q}&group_by=Kernel", 3), (f"{PREFIX}/kernel?{q}", 2),
        (f"{PREFIX}/kernel/tc_pie?{q}", 1), (f"{PREFIX}/trace/timeline?{q}&width=1200", 4),
        (f"{PREFIX}/trace/timeline?{q}&start=100000&end=101000&width=800", 4),
        (f"{PREFIX}/trace/event?{q}&id=100", 2), (f"{PREFIX}/trace/download?{q}", 1),
    ]


STATIC = [(f"{PREFIX}/index.html", 2), (f"{PREFIX}/main.js", 2), (f"{PREFIX}/style.css", 1),
          (f"{PREFIX}/vendor/plotly.min.js", 1), ("/", 1)]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    if not KINETO.is_dir():
        pytest.skip(NO_SHARED)
    root = tmp_path_factory.mktemp("load")
    for run in ("resnet50_num_workers_0", "resnet50_num_workers_4"):
        (root / run).mkdir()
        shutil.copyfile(KINETO / run / "worker0.pt.trace.json.gz",
                        root / run / "worker0.pt.trace.json.gz")
    for run in BIG_RUNS:
        (root / run).mkdir()
    big = root / BIG_RUNS[0] / "worker0.pt.trace.json.gz"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_big_trace.py"),
                    str(KINETO / "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"),
                    str(big), "--times", str(BIG_TIMES)],
                   check=True, capture_output=True, timeout=120)
    for run in BIG_RUNS[1:]:
        shutil.copyfile(big, root / run / big.name)
    return root


class Server:
    """``python -m stepscope DIR --port 0`` with its pid, its URL and an RSS sampler."""

    def __init__(self, logdir: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stepscope", str(logdir), "--port", "0", "--no-cache"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stdout.readline()
        m = re.match(r"Serving on http://([^/:]+):(\d+)/", line)
        assert m, (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.host, self.port = m.group(1), int(m.group(2))
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        self.peak_server = self.peak_tree = 0
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        me = psutil.Process(self.proc.pid)
        t0 = time.monotonic()
        while not self._stop.wait(0.1):
            try:
                rss = me.memory_info().rss
                tree = rss + sum(c.memory_info().rss for c in me.children(recursive=True))
            except psutil.Error:
                continue
            self.samples.append((time.monotonic() - t0, rss))
            self.peak_server, self.peak_tree = max(self.peak_server, rss), max(self.peak_tree, tree)

    def high_water_mark(self) -> int:
        """VmHWM: the kernel's record of the server process's peak RSS (Linux)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        m = re.search(r"VmHWM:\s+(\d+) kB", status)
        return int(m.group(1)) * 1024 if m else self.peak_server

    def get(self, conn: http.client.HTTPConnection | None, path: str, headers: dict):
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return conn, resp, data

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_ready(server: Server, run: str, timeout: float = 90) -> None:
    """Until every route of ``run`` answers: its timeline comes last (the Overview first)."""
    deadline = time.monotonic() + timeout
    while True:
        _, resp, _ = server.get(None, f"{PREFIX}/trace/timeline?run={run}&worker=worker0&"
                                "width=100", {})
        if resp.status == 200:
            return
        assert resp.status == 202 and time.monotonic() < deadline, (run, resp.status)
        time.sleep(0.2)


def test_forty_clients_while_a_big_trace_is_analysed(logdir):
    server = Server(logdir)
    try:
        healthy = ["resnet50_num_workers_0", "resnet50_num_workers_4"]
        for run in healthy:
            wait_ready(server, run)
        _, resp, _ = server.get(None, f"{PREFIX}/views?run={BIG_RUNS[0]}&worker=worker0", {})
        big_loading_at_start = resp.status == 202
        mix = [p for run in healthy for p in _routes(run)] + STATIC + \
            [(f"{PREFIX}/overview?run={run}&worker=worker0", 2) for run in BIG_RUNS] + \
            [(f"{PREFIX}/trace/timeline?run={run}&worker=worker0&width=1000", 1)
             for run in BIG_RUNS]
        paths = [p for p, w in mix for _ in range(w)]
        latencies: list[float] = []
        errors: list[str] = []
        statuses: dict[int, int] = {}
        big_202, last_202 = [0], [0.0]
        lock = threading.Lock()
        started = time.monotonic()
        deadline = started + DURATION_S

        def client(seed: int) -> None:
            rng = random.Random(seed)
            conn = None
            etags: dict[str, str] = {}
            while time.monotonic() < deadline:
                path = rng.choice(paths)
                headers = {"Accept-Encoding": "gzip"} if rng.random() < 0.7 else {}
                if path in etags and rng.random() < 0.5:
                    headers["If-None-Match"] = etags[path]
                t = time.perf_counter()
                try:
                    conn, resp, _ = server.get(conn, path, headers)
                except (OSError, http.client.HTTPException) as e:
                    with lock:
                        errors.append(f"{path}: {type(e).__name__}: {e}")
                    conn = None
                    continue
                dt = time.perf_counter() - t
                ok = resp.status == 200 or (resp.status == 304 and "If-None-Match" in headers) \
                    or (resp.status == 302 and path == "/") \
                    or (resp.status == 202 and "zz_big" in path)
                if resp.getheader("ETag"):
                    etags[path] = resp.getheader("ETag")
                with lock:
                    latencies.append(dt)
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status == 202:
                        big_202[0] += 1
                        last_202[0] = max(last_202[0], time.monotonic() - started)
                    if not ok:
                        errors.append(f"{path}: {resp.status}")
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            if conn is not None:
                conn.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DURATION_S + REQUEST_TIMEOUT_S + 10)
        hung = [t for t in threads if t.is_alive()]
        elapsed = time.monotonic() - started
        # the server still answers, and finishes the big trace
        _, resp, _ = server.get(None, f"{PREFIX}/runs", {})
        assert resp.status == 200
        for run in BIG_RUNS:
            wait_ready(server, run, timeout=120)
        hwm = server.high_water_mark()
    finally:
        server.stop()

    lat = sorted(latencies)
    q = statistics.quantiles(lat, n=100) if len(lat) >= 100 else [lat[-1]] * 99
    report = {
        "clients": CLIENTS, "duration_s": round(elapsed, 1), "requests": len(lat),
        "throughput_rps": round(len(lat) / elapsed, 1), "errors": len(errors),
        "statuses": statuses, "big_trace_202_answers": big_202[0],
        "big_loading_at_start": big_loading_at_start,
        "big_traces_analysed_during_first_s": round(last_202[0], 1),
        "p50_ms": round(1000 * statistics.median(lat), 1), "p95_ms": round(1000 * q[94], 1),
        "p99_ms": round(1000 * q[98], 1), "max_ms": round(1000 * lat[-1], 1),
        "server_peak_rss_mb": round(hwm / 2**20), "server_sampled_peak_rss_mb":
            round(server.peak_server / 2**20),
        "server_and_workers_peak_rss_mb": round(server.peak_tree / 2**20),
    }
    (output_dir() / "load_test.json").write_text(json.dumps(report, indent=2))
    print("\nload test:", json.dumps(report))
    assert not hung, f"{len(hung)} clients hung"
    assert not errors, errors[:20]
    assert len(lat) > CLIENTS * 10, report
    assert big_loading_at_start and big_202[0] > 0, "the big trace was not analysed during the load"
    assert hwm < SERVER_RSS_LIMIT, report
    assert server.peak_tree < TREE_RSS_LIMIT, report
