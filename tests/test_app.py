"""The HTTP API through the Flask test client (SPEC §1.4, §3).

Loader behaviour (202 contract, priorities, reloading) uses an injected job function
(``create_app(..., analyse=...)``) so its timing is under the test's control; the real
traces exercise the real reader end to end.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import threading
import time

import pytest
from conftest import (
    PREFIX,
    SHARED,
    SHARED_RUNS,
    VIEW_ROUTES,
    query,
    until,
    wait_idle,
    wait_ready,
)

from stepscope.errors import BadParameter, Loading, NotReady
from stepscope.store.lazy import FirstViews
from stepscope.views import FirstParts

OLD = 1_700_000_000  # an mtime long ago: the file counts as stable at start-up
DLRM = SHARED / "param_v100_dlrm_8rank"
DLRM0 = DLRM / "worker0_step_12.1694128201545.pt.trace.json"


class FakeViews:
    """What a job returns in these tests: answers name the analysed file."""

    def __init__(self, path: str, pad: int = 0):
        self.path = path
        self.pad = pad

    def names(self):
        return ["Overview", "Kernel"]

    def notes(self):
        return [{"level": "info", "code": "fake", "text": "from the analysis"}]

    def get(self, route, params):
        if params.get("group_by") == "bad":
            raise BadParameter("bad group_by 'bad'", "use Operation or OperationAndInputShape")
        return {"route": route, "file": os.path.basename(self.path), "pad": "x" * self.pad,
                "notes": self.notes()}


def fake_analyse(path, progress):
    progress("read", 0.5)
    return FakeViews(path)


class Gate:
    """A job function that stops at each step until the test calls :meth:`step`."""

    def __init__(self):
        self.started: list[str] = []
        self.threads: list[str] = []
        self._sem = threading.Semaphore(0)

    def __call__(self, path, progress):
        self.started.append(os.path.basename(path))
        self.threads.append(threading.current_thread().name)
        progress("read", 0.0)
        self._sem.acquire()
        progress("read", 0.4)
        self._sem.acquire()
        progress("analyse", 0.8)
        self._sem.acquire()
        return FakeViews(path)

    def step(self, n: int = 1):
        for _ in range(n):
            self._sem.release()


def make_run(folder, names, mtime=OLD, data=b'{"traceEvents": []}'):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(data)
        if mtime is not None:
            os.utime(folder / name, (mtime, mtime))
    return folder


def error_body(resp, status):
    assert resp.status_code == status, resp.data
    assert resp.mimetype == "application/json"
    body = resp.json
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["detail"], str)
    assert set(body) <= {"error", "detail", "file", "position"}
    return body


# -- discovery endpoints on the real traces ------------------------------------------
def test_runs_lists_every_shared_run(shared_client):
    resp = shared_client.get(query("runs"))
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    body = resp.json
    assert body["runs"] == SHARED_RUNS
    assert set(body["status"]) == set(SHARED_RUNS)
    assert body["skipped"] == []  # every *.json[.gz] there is a trace
    assert sum(body["status"]["param_v100_dlrm_8rank"].values()) == 8


def test_workers_and_spans(shared_client):
    workers = shared_client.get(query("workers", run="param_v100_dlrm_8rank")).json
    assert workers == [f"worker{i}_step_12" for i in range(8)]
    spans = shared_client.get(query("spans", run="param_v100_dlrm_8rank",
                                    worker="worker3_step_12"))
    assert spans.status_code == 200 and spans.json == ["1694128201557"]
    assert shared_client.get(query("workers", run="kineto_resnet50/resnet50_num_workers_0")
                             ).json == ["worker0"]


def test_every_shared_trace_is_analysed(shared_client):
    body = wait_idle(shared_client, timeout=120)
    for run, counts in body["status"].items():
        assert counts["failed"] == 0 and counts["loading"] == 0, (run, counts)


@pytest.mark.parametrize("route", ["views", "notes", *[r for r in VIEW_ROUTES
                                                        if r not in ("operation/stack",
                                                                     "trace/event",
                                                                     "trace/search")]])
@pytest.mark.parametrize("run", SHARED_RUNS)
def test_every_view_of_every_shared_trace(shared_client, run, route):
    worker = shared_client.get(query("workers", run=run)).json[0]
    resp = wait_ready(shared_client, run, worker, route=route, timeout=120)
    assert resp.status_code == 200, (resp.status_code, resp.data[:300])
    if route == "stacks/collapsed":   # the one text/plain view route (export_stacks format)
        assert resp.mimetype == "text/plain"
        assert all(ln.rsplit(" ", 1)[1].isdigit() for ln in resp.data.decode().splitlines())
        return
    assert resp.mimetype == "application/json"
    json.loads(resp.data)


@pytest.mark.parametrize("path, status", [
    (query("workers"), 400),
    (query("spans", run="param_v100_dlrm_8rank"), 400),
    (query("overview", run="param_v100_dlrm_8rank"), 400),
    (query("views", worker="worker0"), 400),
    (query("workers", run="nope"), 404),
    (query("spans", run="param_v100_dlrm_8rank", worker="nope"), 404),
    (query("overview", run="nope", worker="worker0"), 404),
    (query("overview", run="param_v100_dlrm_8rank", worker="worker0_step_12", span="7"), 404),
    (f"{PREFIX}/no/such/route", 404),
    ("/elsewhere", 404),
])
def test_error_bodies(shared_client, path, status):
    body = error_body(shared_client.get(path), status)
    if status == 400:
        assert "missing parameter" in body["error"]


def test_method_not_allowed_is_json(shared_client):
    resp = shared_client.post(query("runs"))
    error_body(resp, 405)
    assert "GET" in resp.headers["Allow"]


def test_version(shared_client):
    import stepscope
    body = shared_client.get(query("version")).json
    assert body["version"] == stepscope.__version__
    assert body["python"].count(".") == 2 and "tensorboard" in body


# -- static files, redirects, compression ---------------------------------------------
def test_root_redirects_keeping_the_query(shared_client):
    resp = shared_client.get("/?run=a%2Fb&view=Kernel")
    assert resp.status_code == 302
    assert resp.headers["Location"] == f"{PREFIX}/index.html?run=a%2Fb&view=Kernel"
    resp = shared_client.get(f"{PREFIX}/?run=x")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("index.html?run=x")


def test_index_page(shared_client):
    resp = shared_client.get(f"{PREFIX}/index.html")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    page = resp.get_data(as_text=True)
    assert "<title>Stepscope</title>" in page
    for src in [s.split('"')[0] for s in page.split('src="')[1:]]:  # assets resolve
        assert not src.startswith("/"), "the frontend must use relative URLs"
        assert shared_client.get(f"{PREFIX}/{src}").status_code == 200, src


@pytest.mark.parametrize("path", [
    "../setup.py", "..%2fsetup.py", "%2e%2e/setup.py", "%2e%2e%2fplugin%2fapp.py",
    "/etc/passwd", "..%5csetup.py", "index.html/../../setup.py",
])
def test_static_never_leaves_the_frontend_dir(shared_client, path):
    resp = shared_client.get(f"{PREFIX}/{path}")
    assert resp.status_code in (404, 308), resp.status_code
    assert b"setuptools" not in resp.data and b"root:" not in resp.data


def test_plotly_vendor_gzip_and_etag(shared_client):
    resp = shared_client.get(f"{PREFIX}/vendor/plotly.min.js",
                             headers={"Accept-Encoding": "gzip, deflate"})
    assert resp.status_code == 200 and resp.mimetype == "text/javascript"
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(resp.data)[:200].lstrip().startswith(b"/**")
    again = shared_client.get(f"{PREFIX}/vendor/plotly.min.js",
                              headers={"Accept-Encoding": "gzip",
                                       "If-None-Match": resp.headers["ETag"]})
    assert again.status_code == 304
    plain = shared_client.get(f"{PREFIX}/vendor/plotly.min.js")
    assert "Content-Encoding" not in plain.headers and len(plain.data) > len(resp.data)


def test_json_gzip_only_when_accepted_and_large(client_for, tmp_path):
    make_run(tmp_path / "r", ["w.pt.trace.json"])
    client = client_for(tmp_path, analyse=lambda p, _: FakeViews(p, pad=5000))
    wait_ready(client, "r", "w")
    big = client.get(query("overview", run="r", worker="w"), headers={"Accept-Encoding": "gzip"})
    assert big.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in big.headers["Vary"]
    assert json.loads(gzip.decompress(big.data))["route"] == "overview"
    plain = client.get(query("overview", run="r", worker="w"))
    assert "Content-Encoding" not in plain.headers and plain.json["route"] == "overview"
    small = client.get(query("workers", run="r"), headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in small.headers and small.json == ["w"]


# -- bad input (SPEC §1.4) ------------------------------------------------------------
def test_unusable_files_answer_422_and_others_still_work(client_for, tmp_path):
    run = tmp_path / "mixed"
    run.mkdir()
    (run / "good.pt.trace.json").symlink_to(DLRM0)
    (run / "empty.pt.trace.json").write_bytes(b"")
    (run / "garbage.pt.trace.json").write_bytes(b"this is not JSON at all\n")
    for f in run.iterdir():
        os.utime(f, (OLD, OLD), follow_symlinks=False)
    client = client_for(tmp_path)
    assert client.get(query("workers", run="mixed")).json == ["empty", "garbage", "good"]
    for worker in ("empty", "garbage"):
        for route in ("views", "overview", "notes"):
            resp = wait_ready(client, "mixed", worker, route=route)
            body = error_body(resp, 422)
            assert body["file"] == f"{worker}.pt.trace.json"
    assert wait_ready(client, "mixed", "good").status_code == 200
    status = client.get(query("runs")).json["status"]["mixed"]
    assert status == {"ready": 1, "loading": 0, "failed": 2}
    # A failed file keeps its 422 until it changes; then it is analysed again. Answering
    # it does not grow the stored error's traceback (each raise added 5 frames: a leak).
    from stepscope.web.app import app_store
    job = app_store(client.application)._jobs[("mixed", "empty", "default")]
    depth = []
    for _ in range(3):
        assert client.get(query("overview", run="mixed", worker="empty")).status_code == 422
        tb, n = job.error.__traceback__, 0
        while tb is not None:
            tb, n = tb.tb_next, n + 1
        depth.append(n)
    assert depth[0] == depth[-1], depth
    shutil.copyfile(DLRM0, run / "empty.pt.trace.json")
    until(lambda: client.get(query("overview", run="mixed", worker="empty")).status_code
          == 200, what="re-analysis of the repaired file")


def test_a_slow_first_scan_answers_202_not_404(client_for, tmp_path, monkeypatch):
    """A log directory whose first scan outlasts the request's wait (many folders, remote):
    the views answer 202 (loading), the listings 503 (try again), never 404 "unknown run"."""
    import threading

    from stepscope import discovery
    from stepscope.store import scheduler
    make_run(tmp_path / "r", ["worker0.pt.trace.json"])
    gate = threading.Event()
    real = discovery.Scanner.snapshot

    def slow(self):
        gate.wait(10)
        return real(self)
    monkeypatch.setattr(discovery.Scanner, "snapshot", slow)
    monkeypatch.setattr(scheduler, "FIRST_SCAN_WAIT_S", 0.05)
    client = client_for(tmp_path, analyse=lambda path, progress: FakeViews(path))
    assert client.get(query("overview", run="r", worker="worker0")).status_code == 202
    assert client.get(query("distributed/ranks", run="r")).status_code == 202
    assert error_body(client.get(query("workers", run="r")), 503)["error"] == \
        "still scanning the log directory"
    gate.set()
    until(lambda: client.get(query("overview", run="r", worker="worker0")).status_code == 200,
          what="the analysis after the scan")
    assert client.get(query("overview", run="nope", worker="worker0")).status_code == 404


def test_a_bug_in_analysis_is_a_json_500_for_that_file_only(client_for, tmp_path, caplog):
    make_run(tmp_path / "r", ["ok.pt.trace.json", "boom.pt.trace.json"])

    def analyse(path, progress):
        if "boom" in path:
            raise ZeroDivisionError("oops")
        return FakeViews(path)

    client = client_for(tmp_path, analyse=analyse)
    with caplog.at_level(logging.ERROR):
        body = error_body(wait_ready(client, "r", "boom"), 500)
    assert body["file"] == "boom.pt.trace.json" and "bug" in body["detail"]
    assert "ZeroDivisionError" in caplog.text
    assert wait_ready(client, "r", "ok").status_code == 200
    assert client.get(query("runs")).status_code == 200


def test_bad_view_parameter_is_400(client_for, tmp_path):
    make_run(tmp_path / "r", ["w.pt.trace.json"])
    client = client_for(tmp_path, analyse=fake_analyse)
    wait_ready(client, "r", "w")
    body = error_body(client.get(query("operation", run="r", worker="w", group_by="bad")), 400)
    assert "group_by" in body["error"]


# -- loading: the 202 contract, priorities ---------------------------------------------
def test_202_contract(client_for, tmp_path):
    make_run(tmp_path / "r", ["a.pt.trace.json", "b.pt.trace.json"])
    gate = Gate()
    client = client_for(tmp_path, analyse=gate, jobs=1)
    until(lambda: gate.started, what="first job")
    assert gate.started == ["a.pt.trace.json"]

    queued = client.get(query("overview", run="r", worker="b"))
    assert queued.status_code == 202 and queued.headers["Retry-After"] == "1"
    assert queued.json["loading"] is True and queued.json["phase"] == "queued"
    assert queued.json["fraction"] == 0.0

    seen = []

    def poll():
        resp = client.get(query("views", run="r", worker="a"))
        assert resp.status_code == 202 and resp.headers["Retry-After"] == "1"
        body = resp.json
        assert set(body) == {"loading", "phase", "fraction", "elapsed_s"}
        seen.append(body)
        return body

    assert poll()["phase"] == "read"
    for phase, fraction in (("read", 0.4), ("analyse", 0.8)):
        gate.step()
        until(lambda f=fraction: poll()["fraction"] >= f, what=f"fraction {fraction}")
        assert seen[-1]["phase"] == phase
    fractions = [b["fraction"] for b in seen]
    assert fractions == sorted(fractions) and 0 <= fractions[0] and fractions[-1] <= 1
    elapsed = [b["elapsed_s"] for b in seen]
    assert elapsed == sorted(elapsed) and isinstance(elapsed[0], float)

    for route in ("runs", "workers?run=r", "spans?run=r&worker=a"):
        assert client.get(f"{PREFIX}/{route}").status_code == 200  # never 202
    runs = client.get(query("runs")).json
    assert runs["loading"] is True and runs["status"]["r"] == {"ready": 0, "loading": 2,
                                                                 "failed": 0}
    gate.step()
    assert wait_ready(client, "r", "a", route="overview").json["file"] == "a.pt.trace.json"
    gate.step(3)
    assert wait_ready(client, "r", "b").json == ["Overview", "Kernel", "Diff"]  # 2 spans
    assert all(name.startswith("stepscope-analyse") for name in gate.threads)
    assert wait_idle(client)["status"]["r"] == {"ready": 2, "loading": 0, "failed": 0}


class TimelinePending(FakeViews):
    """Views whose timeline a worker is still building."""

    def get(self, route, params):
        if route.startswith("trace/"):
            raise NotReady(Loading("analyse", 0.97, 2.25))
        return super().get(route, params)


def test_timeline_202_while_the_other_views_answer(client_for, tmp_path):
    make_run(tmp_path / "r", ["a.pt.trace.json"])
    client = client_for(tmp_path, analyse=lambda path, progress: TimelinePending(path))
    assert wait_ready(client, "r", "a", route="overview").json["route"] == "overview"
    for route, extra in (("trace/timeline", {}), ("trace/event", {"id": "3"})):
        resp = client.get(query(route, run="r", worker="a", **extra))
        assert resp.status_code == 202 and resp.headers["Retry-After"] == "1"
        assert resp.json == {"loading": True, "phase": "analyse", "fraction": 0.97,
                             "elapsed_s": 2.25}
    assert client.get(query("kernel", run="r", worker="a")).status_code == 200


def test_the_overview_answers_while_the_other_views_are_built(client_for, tmp_path):
    """Issue 19: a job hands the Overview tab's parts over first (``progress.first``). Until
    it ends, ``overview``, ``views`` and ``notes`` answer from them (with the file's own
    notes); every other view route, the timeline and a diff with the span answer 202 at the
    job's progress; the span still counts as loading. Then the complete views answer."""
    run = make_run(tmp_path / "r", ["a.pt.trace.json", "b.pt.trace.json"])
    make_run(run, ["a.pt.trace.json.gz"], mtime=OLD + 10, data=gzip.compress(b"{}"))
    done = threading.Event()
    parts = FirstParts({"Overview": {"steps": "early"}}, ["Overview", "Kernel"],
                       [{"level": "info", "code": "early", "text": "from the worker"}], {})

    def analyse(path, progress):
        progress("analyse", 0.8)
        progress.first(FirstViews(parts, [], progress.loading))
        if os.path.basename(path).startswith("a."):
            done.wait(30)
        return FakeViews(path)

    client = client_for(tmp_path, analyse=analyse)
    a = {"run": "r", "worker": "a"}
    assert wait_ready(client, **a, route="overview", early=True).json == {"steps": "early"}
    assert client.get(query("views", **a)).json == ["Overview", "Kernel", "Diff"]
    assert [n["code"] for n in client.get(query("notes", **a)).json] == ["duplicate_file",
                                                                          "early"]
    for route in ("operation", "kernel/table", "module/tree", "trace/timeline"):
        resp = client.get(query(route, **a))
        assert resp.status_code == 202 and resp.headers["Retry-After"] == "1", route
        assert resp.json["phase"] == "analyse" and resp.json["fraction"] == 0.8
    wait_ready(client, "r", "b", route="kernel")
    diff = client.get(query("diff/overview", **a, diff_run="r", diff_worker="b"))
    assert diff.status_code == 202 and diff.json["sides"] == ["baseline"]
    assert client.get(query("runs")).json["status"]["r"] == {"ready": 1, "loading": 1,
                                                             "failed": 0}
    done.set()
    assert wait_ready(client, **a, route="kernel").json["route"] == "kernel"
    assert client.get(query("overview", **a)).json["route"] == "overview"  # the complete views


def test_a_job_that_just_ended_reports_phase_cache():
    """A request that took a job's early views just before the job ended gets a 202 from
    them: its phase stays one of SPEC §3's (``cache``), never ``ready`` or ``failed``."""
    from stepscope.store.scheduler import Job

    job = Job(("r", "w", "1"), None)
    job("analyse", 0.8)
    assert job.loading().phase == "analyse" and job.loading().fraction == 0.8
    job.phase, job.fraction = "ready", 1.0  # as Store._run ends it
    assert job.loading().phase == "cache" and job.loading().fraction == 1.0
    job.phase = "failed"
    assert job.loading().phase == "cache"


def test_most_recently_requested_worker_first(client_for, tmp_path):
    make_run(tmp_path / "r", [f"w{i}.pt.trace.json" for i in range(5)])
    gate = Gate()
    client = client_for(tmp_path, analyse=gate, jobs=1)
    until(lambda: gate.started, what="first job")
    assert client.get(query("overview", run="r", worker="w2")).status_code == 202
    assert client.get(query("overview", run="r", worker="w4")).status_code == 202
    for n in range(2, 6):
        gate.step(3)
        until(lambda n=n: len(gate.started) >= n or len(gate.started) == 5, what="next job")
    gate.step(3)
    assert gate.started[:3] == ["w0.pt.trace.json", "w4.pt.trace.json", "w2.pt.trace.json"]
    assert sorted(gate.started) == [f"w{i}.pt.trace.json" for i in range(5)]


def test_requested_span_before_its_siblings(client_for, tmp_path):
    make_run(tmp_path / "r", ["a.pt.trace.json", "w.1.pt.trace.json", "w.2.pt.trace.json",
                              "w.3.pt.trace.json"])
    gate = Gate()
    client = client_for(tmp_path, analyse=gate, jobs=1)
    until(lambda: gate.started, what="first job")
    assert client.get(query("overview", run="r", worker="w", span="2")).status_code == 202
    for n in range(2, 5):
        gate.step(3)
        until(lambda n=n: len(gate.started) >= n, what="next job")
    gate.step(3)
    assert gate.started == ["a.pt.trace.json", "w.2.pt.trace.json", "w.1.pt.trace.json",
                            "w.3.pt.trace.json"]


def test_span_omitted_means_latest(client_for, tmp_path):
    make_run(tmp_path / "r", ["w.9.pt.trace.json", "w.10.pt.trace.json"])
    client = client_for(tmp_path, analyse=fake_analyse)
    assert client.get(query("spans", run="r", worker="w")).json == ["9", "10"]
    assert wait_ready(client, "r", "w", route="overview").json["file"] == "w.10.pt.trace.json"
    assert wait_ready(client, "r", "w", "9", route="overview").json["file"] == "w.9.pt.trace.json"


def test_duplicate_file_note(client_for, tmp_path):
    run = make_run(tmp_path / "r", ["w.pt.trace.json"])
    make_run(run, ["w.pt.trace.json.gz"], mtime=OLD + 10, data=gzip.compress(b"{}"))
    client = client_for(tmp_path, analyse=fake_analyse)
    notes = wait_ready(client, "r", "w", route="notes").json
    assert [n["code"] for n in notes] == ["duplicate_file", "fake"]
    assert "w.pt.trace.json.gz" in notes[0]["text"]
    overview = client.get(query("overview", run="r", worker="w")).json
    assert overview["file"] == "w.pt.trace.json.gz"
    assert [n["code"] for n in overview["notes"]] == ["duplicate_file", "fake"]
    # the older file deleted: the note goes with it (the analysis is kept)
    (run / "w.pt.trace.json").unlink()
    until(lambda: [n["code"] for n in client.get(query("notes", run="r", worker="w")).json]
          == ["fake"], what="the duplicate's note to go")
    assert [n["code"] for n in client.get(query("overview", run="r", worker="w")).json["notes"]] == ["fake"]


# -- reloading --------------------------------------------------------------------------
def test_new_changed_and_deleted_files(client_for, tmp_path):
    run = make_run(tmp_path / "r", ["a.pt.trace.json"])
    calls: list[str] = []

    def analyse(path, progress):
        calls.append(os.path.basename(path))
        return FakeViews(path)

    client = client_for(tmp_path, analyse=analyse, reload_interval=0.05)
    assert wait_ready(client, "r", "a").status_code == 200
    make_run(run, ["b.pt.trace.json"], mtime=None)  # new file, written now
    until(lambda: "b" in client.get(query("workers", run="r")).json, what="new worker")
    assert wait_ready(client, "r", "b").status_code == 200
    (run / "a.pt.trace.json").write_bytes(b'{"traceEvents": [1]}')  # changed
    until(lambda: calls.count("a.pt.trace.json") == 2, what="re-analysis")
    (run / "b.pt.trace.json").unlink()
    until(lambda: client.get(query("workers", run="r")).json == ["a"], what="deletion")
    error_body(client.get(query("overview", run="r", worker="b")), 404)
    shutil.rmtree(run)
    until(lambda: client.get(query("runs")).json["runs"] == [], what="run removal")


def test_file_being_written_waits_until_stable(client_for, tmp_path):
    run = make_run(tmp_path / "r", ["a.pt.trace.json"])
    gate_calls: list[str] = []

    def analyse(path, progress):
        gate_calls.append(os.path.basename(path))
        return FakeViews(path)

    client = client_for(tmp_path, analyse=analyse, reload_interval=0.25)
    wait_ready(client, "r", "a")
    growing = run / "g.pt.trace.json"
    end = time.monotonic() + 0.8
    with open(growing, "ab") as f:
        while time.monotonic() < end:  # grows on every poll
            f.write(b" " * 100)
            f.flush()
            time.sleep(0.02)
            assert "g.pt.trace.json" not in gate_calls
    resp = client.get(query("overview", run="r", worker="g"))
    assert resp.status_code in (200, 202)
    until(lambda: "g.pt.trace.json" in gate_calls, what="analysis once stable")


def test_fresh_file_at_startup_waits_one_interval(client_for, tmp_path):
    make_run(tmp_path / "r", ["old.pt.trace.json"])
    make_run(tmp_path / "r", ["fresh.pt.trace.json"], mtime=None)
    calls: list[str] = []

    def analyse(path, progress):
        calls.append(os.path.basename(path))
        return FakeViews(path)

    client = client_for(tmp_path, analyse=analyse, reload_interval=1.0)
    assert wait_ready(client, "r", "old").status_code == 200
    assert calls == ["old.pt.trace.json"]
    assert client.get(query("overview", run="r", worker="fresh")).json["phase"] == "queued"
    assert wait_ready(client, "r", "fresh", timeout=5).status_code == 200


def test_trace_routes(shared_client):
    run = "kineto_resnet50/resnet50_num_workers_0"
    resp = wait_ready(shared_client, run, "worker0", route="trace/timeline", timeout=120)
    whole = resp.json
    assert whole["start"] == 0 and whole["end"] == whole["range"][1] > 0
    mid = whole["end"] / 2
    window = shared_client.get(query("trace/timeline", run=run, worker="worker0",
                                     start=mid, end=mid + 2000, width=1000)).json
    singles = [b for lane in window["lanes"] for b in lane.get("blocks", []) if len(b) == 6]
    assert singles
    event = shared_client.get(query("trace/event", run=run, worker="worker0",
                                    id=singles[0][5]))
    assert event.status_code == 200 and event.json["id"] == singles[0][5]
    huge = "9" * 5000  # beyond int()'s 4,300-digit limit (issue 12): 400, not 500
    for params, status in (({"id": "x"}, 400), ({"id": "999999999"}, 404),
                           ({"start": "5", "end": "5"}, 400), ({"width": "0"}, 400),
                           ({"id": huge}, 400), ({"id": "0" * 5000 + "1"}, 400),
                           ({"width": huge}, 400), ({"start": huge}, 400),
                           ({"end": "1e999"}, 400),
                           # what float() and int() take but a URL's number is not (fuzzing)
                           ({"width": "+5"}, 400), ({"width": "1_000"}, 400),
                           ({"width": "\u0663"}, 400), ({"start": "1_000"}, 400),
                           ({"start": " 5"}, 400), ({"end": "nan"}, 400),
                           ({"start": "-5", "end": "2.5e3", "width": "640"}, 200)):
        route = "trace/event" if "id" in params else "trace/timeline"
        resp = shared_client.get(query(route, run=run, worker="worker0", **params))
        assert resp.status_code == status, (params, resp.data)
        if status == 400:
            assert resp.json["error"] and len(resp.json["detail"]) < 300, (params, resp.data)
    # search covers the whole trace, not the window: every ProfilerStep, paged by start
    found = shared_client.get(query("trace/search", run=run, worker="worker0", q="profilerstep",
                                    limit=4)).json
    assert found["total"] == 6 and [m["name"] for m in found["matches"]] == \
        [f"ProfilerStep#{n}" for n in range(5, 9)]
    rest = shared_client.get(query("trace/search", run=run, worker="worker0", q="ProfilerStep",
                                   offset=4)).json
    assert [m["name"] for m in rest["matches"]] == ["ProfilerStep#9", "ProfilerStep#10"]
    for params in ({}, {"q": " "}, {"q": "a", "limit": "0"}, {"q": "a", "limit": "1001"},
                   {"q": "a", "offset": "-1"}, {"q": "a", "offset": "x"}, {"q": "x" * 501}):
        bad = shared_client.get(query("trace/search", run=run, worker="worker0", **params))
        assert bad.status_code == 400 and bad.json["detail"], (params, bad.data)
    dl = shared_client.get(query("trace/download", run=run, worker="worker0"))
    assert dl.status_code == 200 and dl.mimetype == "application/gzip"
    assert "attachment" in dl.headers["Content-Disposition"]
    assert "worker0.pt.trace.json.gz" in dl.headers["Content-Disposition"]
    original = SHARED / run / "worker0.pt.trace.json.gz"
    assert dl.get_data() == original.read_bytes()
    dl.close()


def test_errors_quote_at_most_a_short_piece_of_what_was_asked(client_for, tmp_path):
    """A 100,000-character run name came back whole in the 404 (fuzzing): errors quote 40
    characters of a value and say how long it was."""
    from stepscope.errors import echo

    assert echo("abc") == "'abc'" and echo(7) == "7"
    assert echo("x" * 100) == repr("x" * 40 + "... (100 chars)")
    client = client_for(tmp_path)
    long = "A" * 100_000
    for route, params in (("overview", {"run": long, "worker": "w"}),
                          ("nope" + long, {})):
        resp = client.get(query(route, **params))
        assert resp.status_code == 404 and len(resp.data) < 400, (route[:10], resp.data[:200])
        assert "100,000 chars" in resp.json["error"] or "100,004 chars" in resp.json["error"]


def test_download_name_is_sanitized():
    from stepscope.web.app import download_name

    assert download_name('a b/<c>"\r\n.json') == "a_b__c____.json"
    assert download_name("..") == "trace.json"


def test_names_that_are_not_utf8_are_served(client_for, tmp_path):
    """Issue 12: a Latin-1 run folder or file name made ``runs`` / ``workers`` answer 500.
    Names show U+FFFD, collisions get " (2)", and the real bytes open the files."""
    from stepscope.store.child import analyse_file

    root = os.fsencode(tmp_path)
    for folder, name, data in ((b"caf\xe9", b"w\xe9.pt.trace.json", DLRM0.read_bytes()),
                               (b"caf\xe9", b"bad\xe9.pt.trace.json", b"not JSON"),
                               (b"caf\xe8", b"w.pt.trace.json", DLRM0.read_bytes()),
                               (b"caf\xe8", b"conf\xe9.json", b'{"lr": 1}')):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        path = os.path.join(root, folder, name)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (OLD, OLD))
    client = client_for(tmp_path, analyse=analyse_file)
    body = client.get(query("runs")).json
    assert body["runs"] == ["caf\ufffd", "caf\ufffd (2)"]
    assert body["skipped"] == [{"file": "caf\ufffd/conf\ufffd.json",
                                "reason": 'a JSON object without a top-level "traceEvents" list'}]
    assert client.get(query("workers", run="caf\ufffd (2)")).json == ["bad\ufffd", "w\ufffd"]
    assert client.get(query("workers", run="caf\ufffd")).json == ["w"]
    ok = wait_ready(client, "caf\ufffd (2)", "w\ufffd", route="overview")
    assert ok.status_code == 200 and ok.json["steps"]["rows"]
    bad = error_body(wait_ready(client, "caf\ufffd (2)", "bad\ufffd"), 422)
    assert bad["file"] == "bad\ufffd.pt.trace.json"
    dl = client.get(query("trace/download", run="caf\ufffd (2)", worker="w\ufffd"))
    assert dl.status_code == 200 and dl.get_data() == DLRM0.read_bytes()
    dl.close()


def test_root_run_and_same_named_sub_folder_both_listed(client_for, tmp_path):
    """Issue 12: a sub-folder named like the log directory hid the root run."""
    make_run(tmp_path / "logs", ["a.pt.trace.json"])
    make_run(tmp_path / "logs" / "logs", ["b.pt.trace.json"])
    client = client_for(tmp_path / "logs", analyse=fake_analyse)
    assert client.get(query("runs")).json["runs"] == [".", "logs"]
    assert client.get(query("workers", run=".")).json == ["a"]
    assert client.get(query("workers", run="logs")).json == ["b"]
    assert wait_ready(client, ".", "a", route="overview").json["file"] == "a.pt.trace.json"
