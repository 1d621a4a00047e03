"""Per-rank analysis on a Dask distributed cluster (issue 21, ``--scheduler``), against a
``LocalCluster`` of 2 worker processes that the tests start.

The blobs a Dask task brings back equal those made in this process byte for byte, and a
server analysing on the cluster answers every route (views, distributed view, trace view)
with the same bytes as one using its local worker processes. A worker killed mid-task: the
scheduler runs the task again elsewhere. A scheduler that goes away: the trace answers 503
with the reason, and what was analysed before is still served.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import SHARED, query, wait_ready
from tracebuild import NO_SHARED

distributed = pytest.importorskip("distributed",
                                  reason="needs distributed (pip install 'stepscope[dask]')")

from stepscope.store.dask_pool import DaskExecutor, SchedulerUnavailable  # noqa: E402
from stepscope.store.remote import analyse_to_bytes, decode  # noqa: E402
from stepscope.web.app import app_store  # noqa: E402

DLRM = SHARED / "param_v100_dlrm_8rank"
BIG = SHARED / "hta_v100_profile_memory" / "df_index_resolver.json.gz"


def _cluster():
    return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                    dashboard_address=None, silence_logs=logging.ERROR)


@pytest.fixture(scope="module")
def cluster():
    with _cluster() as c:
        yield c


@pytest.fixture(scope="module")
def dlrm_dir(tmp_path_factory):
    """Two DLRM ranks (a 2-rank run: the distributed view qualifies)."""
    root = tmp_path_factory.mktemp("dask-logs")
    run = root / "dlrm"
    run.mkdir()
    for f in sorted(os.listdir(DLRM))[:2]:
        shutil.copy(DLRM / f, run / f)
    return root


def test_a_task_brings_back_the_local_bytes(cluster, dlrm_dir):
    path = str(next((dlrm_dir / "dlrm").iterdir()))
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as client:
        for what in ("views", "timeline"):
            here = analyse_to_bytes(path, what)
            there = client.submit(analyse_to_bytes, path, what, pure=False).result()
            assert there == here, what
            state, arrays = decode(there)
            assert state["@"].startswith("stepscope.") and (arrays or what == "views")
    bad = decode(analyse_to_bytes(str(dlrm_dir / "missing.pt.trace.json")))
    assert bad["status"] == 422 and bad["error"] == "cannot read file"


def _bodies(client, run: str, workers: list[str]) -> dict:
    out = {}
    for r in ("distributed/ranks", "distributed/collectives", "distributed/straggler"):
        deadline = time.monotonic() + 120
        while (resp := client.get(query(r, run=run))).status_code == 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        out[r] = (resp.status_code, resp.data)
    for w in workers:
        for view in wait_ready(client, run, w, timeout=120).json:
            for route in _routes(client, run, w, view):
                resp = client.get(query(route, run=run, worker=w))
                out[(w, route)] = (resp.status_code, resp.data)
        resp = wait_ready(client, run, w, route="trace/timeline", timeout=120)
        out[(w, "trace/timeline")] = (resp.status_code, resp.data)
    return out


def _routes(client, run, worker, view) -> list[str]:
    from stepscope.views import ROUTES

    simple = {"Overview": ["overview"], "Operator": ["operation", "operation/table"],
              "Kernel": ["kernel", "kernel/table"], "Memory": ["memory/devices"]}
    return [r for r in simple.get(view, []) if r in ROUTES]


def test_payloads_on_the_cluster_equal_the_local_pool(cluster, dlrm_dir, client_for, tmp_path):
    local = client_for(str(dlrm_dir), cache_dir=str(tmp_path / "local"), reload_interval=0)
    dask = client_for(str(dlrm_dir), cache_dir=str(tmp_path / "dask"), reload_interval=0,
                      scheduler=cluster.scheduler_address)
    analyser = app_store(dask.application)._analyse
    assert isinstance(analyser.executor, DaskExecutor)
    workers = local.get(query("workers", run="dlrm")).json
    assert len(workers) == 2
    a, b = _bodies(local, "dlrm", workers), _bodies(dask, "dlrm", workers)
    assert set(a) == set(b) and len(a) >= 3 + 2 * 4
    for key in a:
        assert a[key][0] == 200, (key, a[key])
        assert a[key] == b[key], key
    assert b["distributed/ranks"][1].count(b'"rank"') >= 2
    assert analyser.process_starts == 0  # nothing analysed in a local worker process
    # the cache entries themselves are the same bytes
    for name in ("meta.json",):
        mine = sorted(p.read_bytes() for p in (tmp_path / "dask").rglob(name))
        theirs = sorted(p.read_bytes() for p in (tmp_path / "local").rglob(name))
        assert mine == theirs and len(mine) == 4  # 2 ranks x (payloads, timeline)


def test_a_killed_worker_is_replaced_and_the_task_runs_again(cluster, tmp_path):
    """SIGKILL the worker running the analysis: Dask runs it again on the other."""
    if not BIG.exists():
        pytest.skip(NO_SHARED)
    executor = DaskExecutor(cluster.scheduler_address)
    client = executor.client
    pids = client.run(os.getpid)
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(blob=executor.run(
        str(BIG), "views", lambda *a: None)))
    thread.start()
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline:
        for addr, keys in client.processing().items():
            if any(str(k).startswith("stepscope-views-") for k in keys):
                killed = addr
                os.kill(pids[addr], signal.SIGKILL)
                break
        time.sleep(0.01)
    thread.join(300)
    executor.close()
    assert killed is not None, "the task never ran"
    assert isinstance(answer["blob"], bytes), answer["blob"]
    assert answer["blob"] == analyse_to_bytes(str(BIG), "views")
    story = [t[1:3] for t in cluster.scheduler.transition_log  # (the scheduler is local)
             if str(t[0]).startswith("stepscope-views-")]
    assert sum(1 for _start, finish in story if finish == "processing") >= 2, story


def test_a_scheduler_gone_answers_503_and_keeps_serving(dlrm_dir, client_for, tmp_path,
                                                        monkeypatch):
    from stepscope.store import dask_pool

    monkeypatch.setattr(dask_pool, "RECONNECT_GRACE_S", 1.0)
    logdir = tmp_path / "logs"
    (logdir / "first").mkdir(parents=True)
    rank0 = sorted((dlrm_dir / "dlrm").iterdir())[0]
    shutil.copy(rank0, logdir / "first" / rank0.name)
    cluster = _cluster()
    client = client_for(str(logdir), cache_dir=str(tmp_path / "c"), reload_interval=0.2,
                        scheduler=cluster.scheduler_address)
    deadline = time.monotonic() + 30
    while (resp := client.get(query("workers", run="first"))).status_code != 200:
        assert time.monotonic() < deadline, resp.json
        time.sleep(0.05)
    (worker,) = resp.json
    assert wait_ready(client, "first", worker, timeout=120).status_code == 200
    before = client.get(query("overview", run="first", worker=worker)).data
    cluster.close()
    (logdir / "second").mkdir()
    shutil.copy(rank0, logdir / "second" / rank0.name)
    while (resp := client.get(query("workers", run="second"))).status_code != 200:
        assert time.monotonic() < deadline + 30, resp.json
        time.sleep(0.05)
    resp = wait_ready(client, "second", worker, timeout=120)
    assert resp.status_code == 503, resp.json
    assert resp.json["error"] == "Dask scheduler unavailable"
    assert "Traces analysed before are still served" in resp.json["detail"]
    again = client.get(query("overview", run="first", worker=worker))
    assert again.status_code == 200 and again.data == before


def test_an_unreachable_scheduler_is_refused_at_start(subprocess_env, tmp_path):
    with pytest.raises(SchedulerUnavailable, match="cannot reach the Dask scheduler at "
                       "tcp://127.0.0.1:9"):
        DaskExecutor("tcp://127.0.0.1:9", timeout=2)
    done = subprocess.run([sys.executable, "-m", "stepscope", str(tmp_path), "--port", "0",
                           "--scheduler", "tcp://127.0.0.1:9"], env=subprocess_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in done.stderr
    # a malformed address: refused at once, one line (a half-built Client took 20 s to
    # close at exit and printed a traceback), no password shown
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stepscope", str(tmp_path), "--port", "0",
                           "--scheduler", "tcp://user:pw-SECRET@127.0.0.1:7699"],
                          env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and time.monotonic() - t < 15, done.stderr
    assert "Traceback" not in done.stderr and "pw-SECRET" not in done.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:7699" in done.stderr
