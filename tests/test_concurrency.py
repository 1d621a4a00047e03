"""Files that change under the server (issue 7): replaced, rewritten or deleted while they
are read, run folders deleted while they are served.

The rule: a read gives a clean error or one whole version of the file (old or new), never
a mix; the server never crashes; a run that disappears answers 404 afterwards while the
other runs keep answering with their own numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest
from conftest import query, until, wait_ready
from damaged import SOURCE, base_bytes
from tracebuild import NO_SHARED

from stepscope.errors import TraceError
from stepscope.read.reader import read_trace

pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason=NO_SHARED)


def same_trace(a, b) -> bool:
    if len(a) != len(b) or a.origin_ns != b.origin_ns:
        return False
    for col in a.events:
        if col in ("name", "cat"):
            if [a.strings[i] for i in a.events[col]] != [b.strings[i] for i in b.events[col]]:
                return False
        elif not np.array_equal(a.events[col], b.events[col], equal_nan=True):
            return False
    return True


def other_version() -> bytes:
    """The healthy slice with every duration doubled: same shape, other numbers and size."""
    doc = json.loads(base_bytes())
    for e in doc["traceEvents"]:
        if isinstance(e.get("dur"), int):
            e["dur"] = e["dur"] * 2 + 1
    return json.dumps(doc).encode()


def read_while(path, change, monkeypatch):
    """read_trace(path), running ``change()`` after its first piece of the file was read;
    returns the Trace or the TraceError."""
    from stepscope.read import rawfile

    monkeypatch.setattr(rawfile, "CHUNK", 256 << 10)
    first = threading.Event()
    go = threading.Event()

    def progress(_fraction: float) -> None:
        if not first.is_set():
            first.set()
            assert go.wait(30)

    box: list = []

    def run() -> None:
        try:
            box.append(read_trace(str(path), progress=progress))
        except TraceError as e:
            box.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert first.wait(30)
    change()
    go.set()
    t.join(60)
    assert not t.is_alive() and box, "the read hung"
    return box[0]


@pytest.fixture
def versions(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_bytes(base_bytes())
    new.write_bytes(other_version())
    return read_trace(str(old)), read_trace(str(new)), old.read_bytes(), new.read_bytes()


def test_replaced_by_rename_while_read_gives_the_old_version_whole(tmp_path, versions, monkeypatch):
    old_trace, _, old, new = versions
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(old)
    tmp = tmp_path / "w.tmp"
    tmp.write_bytes(new)
    got = read_while(path, lambda: os.replace(tmp, path), monkeypatch)
    assert not isinstance(got, Exception), got.body()
    assert same_trace(got, old_trace)  # the open handle kept the old file


def test_rewritten_in_place_while_read_is_a_clean_error_or_the_new_version(tmp_path, versions,
                                                                           monkeypatch):
    _, new_trace, old, new = versions
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(old)

    def rewrite() -> None:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(new)

    got = read_while(path, rewrite, monkeypatch)
    if isinstance(got, TraceError):
        assert got.status == 422 and got.error == "file changed while it was read", got.body()
        assert got.file == "w.pt.trace.json"
    else:
        assert same_trace(got, new_trace), "a mix of two versions"


def test_truncated_in_place_while_read_is_a_clean_error_or_a_repair(tmp_path, versions, monkeypatch):
    _, _, old, _ = versions
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(old)
    got = read_while(path, lambda: os.truncate(path, len(old) // 3), monkeypatch)
    if isinstance(got, TraceError):
        assert got.status == 422
    else:  # read again from the start: the cut file, repaired and said so
        assert "truncated" in {n.code for n in got.notes}


def test_deleted_while_read_gives_the_old_version_whole(tmp_path, versions, monkeypatch):
    old_trace, _, old, _ = versions
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(old)
    got = read_while(path, path.unlink, monkeypatch)
    assert not isinstance(got, Exception) and same_trace(got, old_trace)


def test_deleted_before_analysis_is_422_not_500(tmp_path):
    from stepscope.store.pool import Analyser

    gone = tmp_path / "gone.pt.trace.json"
    with pytest.raises(TraceError) as e:
        Analyser(cache_dir=str(tmp_path / "cache"))(str(gone), lambda *_: None)
    assert e.value.status == 422 and e.value.file == "gone.pt.trace.json"
    with pytest.raises(TraceError) as e:
        read_trace(str(gone))
    assert e.value.error == "cannot read file"


# -- through the app -----------------------------------------------------------------------------
def hammer(client, urls, stop: threading.Event, seen: list) -> None:
    """GET ``urls`` in a loop until ``stop``; record ``(url, status, json)``."""
    while not stop.is_set():
        for url in urls:
            resp = client.get(url)
            seen.append((url, resp.status_code, resp.get_json(silent=True)))


def test_replacing_a_file_under_load_serves_one_whole_version(client_for, tmp_path, versions):
    _, _, old, new = versions
    run = tmp_path / "r"
    run.mkdir()
    path = run / "worker0.pt.trace.json"
    path.write_bytes(old)
    os.utime(path, (1e9, 1e9))
    client = client_for(tmp_path, reload_interval=0.1, cache_dir=str(tmp_path / "cache"))
    first = wait_ready(client, "r", "worker0", route="overview").json
    stop, seen = threading.Event(), []
    url = query("overview", run="r", worker="worker0")
    threads = [threading.Thread(target=hammer, args=(client, [url], stop, seen)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for k in range(4):
            tmp = run / "next.tmp"
            tmp.write_bytes(new if k % 2 == 0 else old)
            os.replace(tmp, path)
            want = first if k % 2 else None
            until(lambda w=want: (b := client.get(url).json) and "steps" in b
                  and ((b == w) if w else (b != first)), timeout=60, what="the new version")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    second = client.get(url).json
    assert second == first  # the last version written was the old one
    versions_seen = {json.dumps(body, sort_keys=True) for _, status, body in seen if status == 200}
    assert statuses_ok(seen, {200, 202})
    assert 1 <= len(versions_seen) <= 2  # each answer is one whole version


def statuses_ok(seen: list, allowed: set) -> bool:
    bad = [(u, s) for u, s, _ in seen if s not in allowed]
    assert not bad, bad[:10]
    return True


def test_run_folder_deleted_while_served(client_for, tmp_path):
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "worker0.pt.trace.json").write_bytes(base_bytes())
        os.utime(tmp_path / run / "worker0.pt.trace.json", (1e9, 1e9))
    client = client_for(tmp_path, reload_interval=0.1, cache_dir=str(tmp_path / "cache"))
    before = {run: wait_ready(client, run, "worker0", route="overview").json for run in ("a", "b")}
    urls = [query(r, run=run, worker="worker0", **p) for run in ("a", "b")
            for r, p in (("overview", {}), ("kernel/table", {}), ("trace/timeline", {}),
                         ("trace/download", {}))]
    stop, seen = threading.Event(), []
    threads = [threading.Thread(target=hammer, args=(client, urls, stop, seen)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        shutil.rmtree(tmp_path / "a")
        until(lambda: client.get(query("runs")).json["runs"] == ["b"], timeout=30,
              what="the deleted run to disappear")
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert all(s < 500 for _, s, _ in seen), [x[:2] for x in seen if x[1] >= 500][:5]
    assert all(s == 200 for u, s, _ in seen if "run=b" in u)
    for route in ("workers", "spans", "views", "overview", "trace/download", "trace/timeline"):
        resp = client.get(query(route, run="a", worker="worker0"))
        assert resp.status_code == 404 and resp.json["error"].startswith("unknown run")
    assert client.get(query("overview", run="b", worker="worker0")).json == before["b"]


@pytest.mark.slow
def test_a_killed_server_leaves_no_processes_behind(tmp_path):
    """SIGKILL (or the OOM killer) runs no cleanup: the analysis workers notice and exit,
    and with them the forkserver and the resource tracker."""
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    import psutil
    from conftest import ROOT

    from stepscope.processes import ORPHAN_POLL_S

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "worker0.pt.trace.json").write_bytes(base_bytes())
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", str(tmp_path), "--port", "0",
                             "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT)
    try:
        base = re.match(r"Serving on (http://\S+?)/?$", proc.stdout.readline().strip()).group(1)

        def ready() -> bool:
            url = f"{base}/data/plugin/stepscope/views?run=r&worker=worker0"
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status == 200

        until(ready, timeout=60, what="the analysis")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "no worker processes"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    gone, alive = psutil.wait_procs(children, timeout=3 * ORPHAN_POLL_S + 10)
    assert not alive, [(p.pid, p.cmdline()[:4]) for p in alive]
