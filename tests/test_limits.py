"""Memory stays bounded under hostile input (issue 7): gzip bombs, a multi-GB single line,
a huge sparse file, damage too big to repair in memory.

The guards (``stepscope.read.rawfile``, ``stepscope.read.decode``): a trace's JSON may not exceed
``STEPSCOPE_MAX_TRACE_BYTES`` (default: half the machine's memory), one entry of the event
list may not exceed ``decode.MAX_EVENT_BYTES`` (64 MiB), and the in-memory repair path takes
at most ``STEPSCOPE_MAX_REPAIR_BYTES`` (default 1 GiB). Each is a 422 with a reason, reached
after reading little more than the limit. The test files are cheap: a gzip member of 64 MiB
of one byte is ~64 KB, and a gzip stream may hold any number of members back to back.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import PREFIX, ROOT
from damaged import SOURCE, base_bytes
from tracebuild import NO_SHARED

from stepscope.errors import TraceError
from stepscope.read.reader import read_trace

GiB = 1 << 30
MiB = 1 << 20
EVENT = b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":1},'


def gzip_bomb(path: Path, head: bytes, block: bytes, copies: int, tail: bytes = b"") -> int:
    """``head + block * copies + tail`` as a multi-member gzip; returns the JSON size."""
    member = gzip.compress(block, 9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(head, 1, mtime=0))
        for _ in range(copies):
            f.write(member)
        f.write(gzip.compress(tail, 1, mtime=0))
    return len(head) + len(block) * copies + len(tail)


def single_line_bomb(path: Path) -> int:
    """One event whose name is 3 GiB of 'A' (a multi-GB single line)."""
    return gzip_bomb(path, b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "',
                     b"A" * (64 * MiB), 48, b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}')


def events_bomb(path: Path, gib: int = 1) -> int:
    """``gib`` GiB of small valid events."""
    block = EVENT * (16 * MiB // len(EVENT))
    return gzip_bomb(path, b'{"traceEvents": [', block, gib * GiB // len(block) + 1,
                     EVENT[:-1] + b"]}")


PROBE = r"""
import json, resource, sys, time
from stepscope.errors import TraceError
from stepscope.read.reader import read_trace
t0 = time.monotonic()
try:
    trace = read_trace(sys.argv[1])
    out = {"events": len(trace)}
except TraceError as e:
    out = {"status": e.status, **e.body()}
out["seconds"] = time.monotonic() - t0
out["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def probe(path: Path, env: dict | None = None) -> dict:
    """read_trace(path) in a fresh process: its answer and its peak RSS (bytes)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    path = tmp_path_factory.mktemp("base") / "tiny.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [' + EVENT[:-1] + b"]}")
    out = probe(path)
    assert out["events"] == 1
    return out["maxrss"]


@pytest.mark.slow
def test_multi_gb_single_line_is_refused_in_bounded_memory(tmp_path, baseline_rss):
    path = tmp_path / "line.pt.trace.json.gz"
    size = single_line_bomb(path)
    assert size > 3 * GiB and path.stat().st_size < 8 * MiB
    out = probe(path)
    assert out["status"] == 422 and out["error"] == "event too large", out
    assert out["file"] == path.name and "64" in out["detail"]
    assert out["maxrss"] - baseline_rss < 512 * MiB, out
    assert out["seconds"] < 60, out


@pytest.mark.slow
def test_gzip_bomb_of_events_stops_at_the_trace_limit(tmp_path, baseline_rss, subprocess_env):
    path = tmp_path / "events.pt.trace.json.gz"
    assert events_bomb(path) > GiB and path.stat().st_size < 4 * MiB
    out = probe(path, {**subprocess_env, "STEPSCOPE_MAX_TRACE_BYTES": str(128 * MiB)})
    assert out["status"] == 422 and out["error"] == "trace too large", out
    assert "STEPSCOPE_MAX_TRACE_BYTES" in out["detail"]
    assert out["maxrss"] - baseline_rss < 768 * MiB, out


def test_huge_sparse_non_json_file_is_refused_at_once(tmp_path, baseline_rss):
    path = tmp_path / "sparse.pt.trace.json"
    with open(path, "wb") as f:
        f.truncate(4 * GiB)  # 4 GiB of NUL bytes, no disk used
    out = probe(path)
    assert out["status"] == 422 and out["error"] == "not JSON", out
    assert out["position"]["byte"] == 0
    assert out["maxrss"] - baseline_rss < 256 * MiB, out
    assert out["seconds"] < 20, out


def test_huge_whitespace_is_empty_not_a_memory_hog(tmp_path, monkeypatch):
    from stepscope.read import rawfile

    monkeypatch.setattr(rawfile, "CHUNK", 1 * MiB)
    monkeypatch.setattr(rawfile, "MAX_REPAIR_BYTES", 2 * MiB)
    path = tmp_path / "blank.pt.trace.json"
    path.write_bytes(b" \n" * (4 * MiB))
    with pytest.raises(TraceError) as e:
        read_trace(str(path))
    assert e.value.error == "empty file"


def test_damage_too_big_to_repair_in_memory(tmp_path, monkeypatch):
    from stepscope.read import rawfile

    data = base_bytes()
    i = data.index(b'"dur":', 5000)
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(data[:i] + b'"dur":N/A' + data[data.index(b",", i):])
    assert len(read_trace(str(path))) > 1000  # repaired under the default limit
    monkeypatch.setattr(rawfile, "MAX_REPAIR_BYTES", len(data) // 2)
    with pytest.raises(TraceError) as e:
        read_trace(str(path))
    assert e.value.error == "too large to repair" and "STEPSCOPE_MAX_REPAIR_BYTES" in e.value.detail


def test_trace_limit_in_process(tmp_path, monkeypatch):
    from stepscope.read import rawfile

    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(base_bytes())
    monkeypatch.setattr(rawfile, "MAX_TRACE_BYTES", len(base_bytes()) - 1)
    with pytest.raises(TraceError) as e:
        read_trace(str(path))
    assert e.value.error == "trace too large" and e.value.file == path.name
    monkeypatch.setattr(rawfile, "MAX_TRACE_BYTES", len(base_bytes()))
    assert len(read_trace(str(path))) > 1000


def test_event_limit_in_process(tmp_path, monkeypatch):
    from stepscope.read import decode, rawfile

    monkeypatch.setattr(rawfile, "CHUNK", 256 << 10)
    monkeypatch.setattr(decode, "CHUNK_BYTES", 1 * MiB)
    monkeypatch.setattr(decode, "MAX_EVENT_BYTES", 2 * MiB)
    path = tmp_path / "w.pt.trace.json"
    doc = json.loads(base_bytes())
    doc["traceEvents"][100]["name"] = "x" * (3 * MiB)
    path.write_bytes(json.dumps(doc).encode())
    with pytest.raises(TraceError) as e:
        read_trace(str(path))
    assert e.value.error == "event too large"
    doc["traceEvents"][100]["name"] = "x" * MiB  # under the limit: fine
    path.write_bytes(json.dumps(doc).encode())
    assert len(read_trace(str(path))) > 1000


# -- the real server ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not SOURCE.is_file(), reason=NO_SHARED)
def test_server_memory_stays_bounded_under_bombs(tmp_path, subprocess_env):
    logdir = tmp_path / "logdir"
    for run in ("line", "events", "sparse", "healthy"):
        (logdir / run).mkdir(parents=True)
    single_line_bomb(logdir / "line" / "worker0.pt.trace.json.gz")
    events_bomb(logdir / "events" / "worker0.pt.trace.json.gz")
    with open(logdir / "sparse" / "worker0.pt.trace.json", "wb") as f:
        f.truncate(4 * GiB)
    (logdir / "healthy" / "worker0.pt.trace.json").write_bytes(base_bytes())
    env = {**subprocess_env, "STEPSCOPE_MAX_TRACE_BYTES": str(128 * MiB)}
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", str(logdir), "--port", "0",
                             "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT, env=env)
    peak = {"server": 0, "tree": 0}
    stop = threading.Event()

    def sample() -> None:
        me = psutil.Process(proc.pid)
        while not stop.wait(0.05):
            try:
                rss = me.memory_info().rss
                tree = rss + sum(c.memory_info().rss for c in me.children(recursive=True))
            except psutil.Error:
                continue
            peak["server"], peak["tree"] = max(peak["server"], rss), max(peak["tree"], tree)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        m = re.match(r"Serving on (http://\S+?)/?$", proc.stdout.readline().strip())
        assert m
        import urllib.error
        import urllib.request

        def get(run: str) -> tuple[int, dict]:
            url = f"{m.group(1)}{PREFIX}/overview?run={run}&worker=worker0"
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        want = {"line": (422, "event too large"), "events": (422, "trace too large"),
                "sparse": (422, "not JSON"), "healthy": (200, None)}
        got = {}
        deadline = time.monotonic() + 180
        while len(got) < len(want):
            assert time.monotonic() < deadline, f"still loading: {set(want) - set(got)}"
            for run in set(want) - set(got):
                status, body = get(run)
                if status != 202:
                    got[run] = (status, body.get("error"))
            time.sleep(0.2)
        assert got == want
    finally:
        stop.set()
        proc.terminate()
        proc.wait(15)
    assert peak["server"] < 512 * MiB, peak
    assert peak["tree"] < 2 * GiB, peak


# -- gzip streams -----------------------------------------------------------------------------------
def _gunzip(data: bytes, piece: int, monkeypatch) -> tuple[bytes, list[str]]:
    from stepscope.read import rawfile

    monkeypatch.setattr(rawfile, "GZIP_IN_PIECE", piece)
    notes: list = []
    out = b"".join(rawfile._gunzip(iter([data]), "x.json.gz", notes))
    return out, [n.code for n in notes]


def test_gzip_member_ending_where_the_output_is_capped(monkeypatch):
    """A member whose output ends exactly at an output cap (here 2 x 16 MiB) used to make
    the reader loop forever, growing a buffer."""
    data = gzip.compress(b"head", mtime=0) + gzip.compress(b"A" * (32 * MiB), 9, mtime=0) * 3
    for piece in (1000, 256 << 10, 16 * MiB):
        out, notes = _gunzip(data, piece, monkeypatch)
        assert len(out) == 4 + 96 * MiB and notes == [], piece


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 4096])
def test_gzip_member_boundaries_anywhere_in_the_input(monkeypatch, piece):
    import random

    rng = random.Random(piece)
    data = b"".join(gzip.compress(rng.randbytes(rng.randrange(0, 2000)) + b"A" * rng.randrange(0, 50_000),
                                  mtime=0) for _ in range(5))
    want = gzip.decompress(data)
    assert _gunzip(data, piece, monkeypatch) == (want, [])
    assert _gunzip(data + b"trailing garbage", piece, monkeypatch) == (want, ["trailing_garbage"])
    assert _gunzip(data + b"\x1f", piece, monkeypatch) == (want, [])  # half a magic: garbage
    out, notes = _gunzip(data[:-5], piece, monkeypatch)
    assert notes == ["gzip_truncated"] and want.startswith(out) and len(out) > len(want) - 60_000
