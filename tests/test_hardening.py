"""Damaged and hostile traces through the real app (issue 7, SPEC §1.4, §3).

One app (worker processes, disk cache: exactly what users run) serves a log directory
holding every case of the corpus in :mod:`damaged` next to a healthy run. For every case,
every endpoint answers 200 (repaired: the notes say what was repaired) or 404/422 with the
JSON error body naming the file; never a 5xx, never a hang: each request has a deadline.
The healthy run keeps the exact numbers it has when analysed alone.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from conftest import query
from damaged import CASES, HOSTILE_RUN, SOURCE, XSS, Case, write_corpus, write_healthy
from tracebuild import NO_SHARED

pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason=NO_SHARED)

#: Every endpoint of a span, with valid parameters (a 400 would be a test bug).
ENDPOINTS: list[tuple[str, dict]] = [
    ("views", {}), ("notes", {}), ("overview", {}),
    ("operation", {"group_by": "Operation"}),
    ("operation/table", {"group_by": "OperationAndInputShape"}),
    ("operation/stack", {"group_by": "Operation", "op_name": "aten::conv2d"}),
    ("kernel/table", {"group_by": "KernelNameAndOpName"}),
    ("kernel", {"group_by": "Kernel"}), ("kernel/tc_pie", {}),
    ("trace/timeline", {}), ("trace/timeline", {"start": "1000", "end": "90000", "width": "640"}),
    ("trace/event", {"id": "0"}), ("trace/download", {}), ("trace/search", {"q": "conv"}),
]
#: Payloads compared number for number with the healthy slice analysed alone.
COMPARED: list[tuple[str, dict]] = [
    ("overview", {}), ("operation", {"group_by": "Operation"}),
    ("operation", {"group_by": "OperationAndInputShape"}),
    ("operation/table", {"group_by": "Operation"}),
    ("operation/table", {"group_by": "OperationAndInputShape"}),
    ("kernel/table", {"group_by": "Kernel"}), ("kernel/table", {"group_by": "KernelNameAndOpName"}),
    ("kernel", {"group_by": "Kernel"}), ("kernel/tc_pie", {}), ("trace/timeline", {}),
]
REQUEST_DEADLINE_S = 30  # one request; longer is a hang
READY_DEADLINE_S = 300  # the whole corpus analysed (2 cores, slow CI)


@dataclass
class Corpus:
    client: object
    logdir: Path
    healthy: Path
    pool: concurrent.futures.ThreadPoolExecutor

    def ready(self, route: str, **params):
        """GET, asking again while it answers 202 (a timeline is built after the views)."""
        deadline = time.monotonic() + READY_DEADLINE_S
        while (resp := self.get(route, **params)).status_code == 202 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        return resp

    def get(self, route: str, **params):
        """GET with a deadline: a request that does not answer in time fails the test."""
        fut = self.pool.submit(self.client.get, query(route, **params))
        try:
            return fut.result(REQUEST_DEADLINE_S)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"{route} {params} did not answer within {REQUEST_DEADLINE_S} s")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, views_module):
    from stepscope.web.app import app_store, create_app

    logdir = tmp_path_factory.mktemp("corpus")
    healthy = write_healthy(logdir)
    write_corpus(logdir)
    app = create_app(str(logdir), reload_interval=0, jobs=2,
                     cache_dir=str(tmp_path_factory.mktemp("cache")))
    pool = concurrent.futures.ThreadPoolExecutor(4)
    c = Corpus(app.test_client(), logdir, healthy, pool)
    deadline = time.monotonic() + READY_DEADLINE_S
    while (body := c.get("runs").json)["loading"]:
        assert time.monotonic() < deadline, f"corpus still loading: {body['status']}"
        time.sleep(0.1)
    yield c
    pool.shutdown(wait=False)
    app_store(app).close(timeout=5)


def test_corpus_is_big_enough():
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def test_every_case_is_listed(corpus):
    body = corpus.get("runs").json
    assert body["runs"] == sorted(["healthy", *(c.folder for c in CASES)])
    assert HOSTILE_RUN in body["runs"]
    for case in CASES:
        want = {"ready": 0, "loading": 0, "failed": 0}
        want["failed" if case.expect == "422" else "ready"] = 1
        if case.expect == "either":
            assert body["status"][case.folder]["loading"] == 0
        else:
            assert body["status"][case.folder] == want, case.name


def _json(resp) -> object:
    assert resp.mimetype == "application/json", (resp.status_code, resp.mimetype)
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    return orjson.loads(resp.get_data())


def _check_error(case: Case, route: str, resp) -> None:
    body = _json(resp)
    assert set(body) <= {"error", "detail", "file", "position"}, body
    assert body["error"] and body["detail"], body
    assert body["file"] == case.filename, (route, body)
    if case.reason:
        assert case.reason in body["error"], (route, body)
    if "position" in body:
        assert set(body["position"]) == {"byte", "line"}


def _answers(corpus: Corpus, case: Case) -> dict[tuple[str, str], object]:
    out = {}
    for route, params in ENDPOINTS:
        resp = corpus.get(route, run=case.folder, worker=case.worker, **params)
        assert resp.status_code < 500, (case.name, route, resp.status_code, resp.get_data()[:500])
        out[(route, str(params))] = resp
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_endpoint_answers_cleanly(corpus, case):
    assert corpus.get("workers", run=case.folder).json == [case.worker]
    assert corpus.get("spans", run=case.folder, worker=case.worker).json == ["default"]
    answers = _answers(corpus, case)
    statuses = {r.status_code for r in answers.values()}
    if case.expect == "either":
        assert statuses in ({200}, {422}), (case.name, statuses)
    else:
        assert statuses == {200 if case.expect == "ok" else 422}, (case.name, statuses)
    if statuses == {422}:
        for (route, _), resp in answers.items():
            _check_error(case, route, resp)
        return
    notes = _json(answers[("notes", "{}")])
    assert all(set(n) == {"level", "code", "text"} and n["level"] in ("info", "warning")
               and n["text"] for n in notes), notes
    codes = {n["code"] for n in notes}
    assert case.codes <= codes, (case.name, codes)
    assert _json(answers[("overview", "{}")])["notes"] == notes
    views = _json(answers[("views", "{}")])
    assert "Trace" in views and views[-1] == "Diff"  # the corpus has many spans
    download = answers[("trace/download", "{}")]
    assert download.get_data() == (corpus.logdir / case.folder / case.filename).read_bytes()
    download.close()


@pytest.mark.parametrize("case", [c for c in CASES if c.same_as_healthy], ids=lambda c: c.name)
def test_harmless_damage_hides_nothing(corpus, case):
    for route, params in COMPARED:
        if route == "trace/timeline" and case.name == "shuffled":
            continue  # event ids are file rows (SPEC: the model keeps file order)
        got = corpus.get(route, run=case.folder, worker=case.worker, **params).json
        want = corpus.get(route, run="healthy", worker="worker0", **params).json
        if route == "overview":
            got.pop("notes"), want.pop("notes")
        assert got == want, (case.name, route, params)


def test_repair_notes_name_the_file(corpus):
    for case in CASES:
        if case.expect != "ok" or not case.codes:
            continue
        notes = corpus.get("notes", run=case.folder, worker=case.worker).json
        repaired = [n for n in notes if n["code"] in case.codes]
        assert all(case.filename in n["text"] for n in repaired), (case.name, repaired)


def test_hostile_names_come_back_verbatim_as_json(corpus):
    case = next(c for c in CASES if c.name == "html-file-name-damaged")
    resp = corpus.get("overview", run=case.folder, worker=case.worker)
    assert resp.status_code == 422
    body = _json(resp)
    assert body["file"] == case.filename and XSS in body["detail"]
    names = {row["name"] for row in corpus.get("operation/table", run="case-html-names",
                                               worker="worker0").json}
    assert any(XSS in n for n in names) and any("<script>" in n for n in names)
    unknown = corpus.get("overview", run=f"no such {XSS}", worker="worker0")
    assert unknown.status_code == 404 and XSS in _json(unknown)["error"]


def test_healthy_run_keeps_its_exact_numbers(corpus):
    """After every damaged case was analysed beside it, the healthy run's payloads equal
    those of the same file analysed alone, in this process."""
    from stepscope.read.reader import read_trace
    from stepscope.views import build_views
    from stepscope.web.app import json_response

    alone = build_views(read_trace(str(corpus.healthy)))
    for route, params in COMPARED:
        resp = corpus.get(route, run="healthy", worker="worker0", **params)
        assert resp.status_code == 200, (route, resp.json)
        want = orjson.loads(json_response(alone.get(route, params)).get_data())
        assert resp.json == want, (route, params)
    assert corpus.get("notes", run="healthy", worker="worker0").json == alone.notes()


def test_server_still_answers_after_the_corpus(corpus):
    body = corpus.get("runs").json
    assert not body["loading"]
    assert corpus.get("version").status_code == 200
    assert corpus.get("overview", run="healthy", worker="worker0").status_code == 200


# --- issue 12: whole files that used to answer 500 / 422 ----------------------------------------

BIG = 2**64


def _kernels(n: int) -> list[dict]:
    """A step with ``n`` ops, each launching one kernel on GPU 0 (valid Kineto shapes)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 20 * n + 10}]
    for i in range(n):
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1,
             "ts": 20 * i + 1, "dur": 10, "args": {"External id": i}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 20 * i + 2, "dur": 5, "args": {"External id": i, "correlation": i}},
            {"ph": "X", "cat": "kernel", "name": f"kernel{i % 5}", "pid": 0, "tid": 7,
             "ts": 20 * i + 5, "dur": 8, "args": {"device": 0, "stream": 7, "correlation": i,
                                                 "grid": [4, 1, 1], "block": [128, 1, 1]}}]
    return events


def _overflow_doc() -> bytes:
    events = _kernels(50)
    events[7]["pid"] = BIG
    data = json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BIG,
                       "deviceProperties": [{"id": 0, "name": "A100", "numSms": 108,
                                             "totalGlobalMem": BIG}],
                       "distributedInfo": {"rank": BIG, "world_size": 2},
                       "traceEvents": events}, separators=(",", ":")).encode()  # orjson: 64 bits
    data = data.replace(b'"ts":61,', b'"ts":1e999999,', 1)
    return data.replace(b'"dur":8,', b'"dur":"1e999999",', 1)


def _bad_props_doc() -> bytes:
    return orjson.dumps({"deviceProperties": [{"id": "0", "name": ["A100"], "numSms": {"n": 1},
                                               "totalGlobalMem": [80]}],
                         "distributedInfo": {"rank": [0], "world_size": {"n": 2},
                                             "backend": ["nccl"]},
                         "traceEvents": _kernels(50)})


def _ill_typed_doc() -> bytes:
    events = _kernels(50)
    events[3]["args"]["grid"] = [4, 1]  # the kernel of op 0
    events[4]["dur"] = "soon"  # op 1
    return orjson.dumps({"traceEvents": events})


def _nul_tail_doc(ops: int) -> bytes:
    return orjson.dumps({"traceEvents": _kernels(ops)}) + bytes(1 << 20)


#: file name -> (bytes, note codes required); the plain NUL-tail file is > 4 MB, so the
#: worker decodes it with a helper process (worker.HELPER_MIN_BYTES)
ISSUE12 = {
    "overflow.pt.trace.json": (_overflow_doc, {"bad_metadata", "dropped_events",
                                               "ill_typed_values"}),
    "props.pt.trace.json": (_bad_props_doc, {"bad_metadata"}),
    "typed.pt.trace.json": (_ill_typed_doc, {"ill_typed_values", "dropped_events"}),
    "nul.pt.trace.json": (lambda: _nul_tail_doc(12_000), {"nul_tail"}),
    "nulgz.pt.trace.json.gz": (lambda: gzip.compress(_nul_tail_doc(2_000), 1), {"nul_tail"}),
}


@pytest.fixture(scope="module")
def issue12(tmp_path_factory, views_module):
    from stepscope.web.app import app_store, create_app

    logdir = tmp_path_factory.mktemp("issue12")
    for name, (make, _) in ISSUE12.items():
        (logdir / name.split(".")[0]).mkdir()
        (logdir / name.split(".")[0] / name).write_bytes(make())
    assert (logdir / "nul" / "nul.pt.trace.json").stat().st_size > 4 << 20
    cache = str(tmp_path_factory.mktemp("cache12"))
    app = create_app(str(logdir), reload_interval=0, jobs=2, cache_dir=cache)
    c = Corpus(app.test_client(), logdir, logdir, concurrent.futures.ThreadPoolExecutor(2))
    deadline = time.monotonic() + READY_DEADLINE_S
    while (body := c.get("runs").json)["loading"]:
        assert time.monotonic() < deadline, f"still loading: {body['status']}"
        time.sleep(0.1)
    yield c, cache
    c.pool.shutdown(wait=False)
    app_store(app).close(timeout=5)


@pytest.mark.parametrize("name", ISSUE12)
def test_issue12_files_load_with_notes_and_are_cached(issue12, name):
    """Each file answers 200 with its notes (before: 500 or 422 for the whole file), its
    kernels are all there but the damaged ones, and its analysis was written to the cache."""
    from stepscope.store.cache import DiskCache

    corpus, cache = issue12
    run, worker = name.split(".")[0], name.split(".")[0]
    table = _json(corpus.ready("operation/table", run=run, worker=worker, group_by="Operation"))
    for route, params in ENDPOINTS:
        if route == "operation/stack":  # an operator of this file (404 for one it lacks)
            params = {**params, "op_name": table[0]["name"]}
        resp = corpus.ready(route, run=run, worker=worker, **params)
        assert resp.status_code == 200, (name, route, resp.status_code, resp.get_data()[:300])
    overview = _json(corpus.get("overview", run=run, worker=worker))
    codes = {n["code"] for n in overview["notes"]}
    assert ISSUE12[name][1] <= codes, (name, codes)
    table = corpus.get("kernel/table", run=run, worker=worker, group_by="Kernel").json["data"]
    calls = [c["name"] for c in table["columns"]].index("Calls")
    want = {"overflow": 49, "typed": 50, "props": 50, "nul": 12_000, "nulgz": 2_000}[run]
    assert sum(row[calls] for row in table["rows"]) == want, table
    assert DiskCache(cache).get(str(corpus.logdir / run / name)) is not None
