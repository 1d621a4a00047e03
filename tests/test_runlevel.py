"""Run-level analyses (plugin/runlevel): combined per run from each trace's summary only.

A toy analysis stands in for the distributed and diff views: its summary is one number per
trace (the trace's host event count) and its combination lists them; the test checks the
combination sees summaries only, waits (202) for every trace of the run, names failed
traces, is kept until a trace changes, and is recomputed after.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from test_app import OLD, make_run

from stepscope import runlevel
from stepscope.errors import TraceError
from stepscope.runlevel import RunAnalysis, RunRoute, TraceSummary


class Summaries:
    """What a job returns: a ViewSet stand-in carrying only run-level summaries."""

    def __init__(self, path):
        self.summaries = {"toy": {"bytes": os.path.getsize(path)}}

    def names(self):
        return []

    def notes(self):
        return []


@pytest.fixture
def toy(monkeypatch):
    calls = []

    def combine(summaries: list[TraceSummary], failed):
        calls.append((summaries, failed))
        return {"traces": [[s.worker, s.span, s.summary["bytes"]] for s in summaries],
                "failed": [[w, s, e] for w, s, e in failed]}

    analysis = RunAnalysis(
        name="toy", summarise=lambda a: {"bytes": 0}, combine=combine,
        routes=(RunRoute("toy/sizes", lambda combined, p: combined),))
    monkeypatch.setattr(runlevel, "RUNLEVEL", (analysis,))
    return calls


def test_run_level_route_combines_the_summaries_of_every_trace(client_for, tmp_path, toy):
    gate = threading.Event()

    def analyse(path, progress):
        if "worker1" in path:
            gate.wait(10)
        if "broken" in path:
            raise TraceError("not a trace", "fix it", file=os.path.basename(path))
        return Summaries(path)

    run = make_run(tmp_path / "job", ["worker0.1.pt.trace.json", "worker1.1.pt.trace.json",
                                      "broken.1.pt.trace.json"])
    (run / "worker1.1.pt.trace.json").write_bytes(b"x" * 100)
    os.utime(run / "worker1.1.pt.trace.json", (OLD, OLD))
    client = client_for(tmp_path, analyse=analyse)
    url = "/data/plugin/stepscope/toy/sizes?run=job"
    resp = client.get(url)
    assert resp.status_code == 202 and resp.json["loading"]  # worker1 is not analysed yet
    assert not toy
    gate.set()
    for _ in range(100):
        resp = client.get(url)
        if resp.status_code == 200:
            break
        time.sleep(0.05)
    assert resp.status_code == 200, resp.data
    body = resp.json
    assert body["traces"] == [["worker0", "1", 19], ["worker1", "1", 100]]
    assert [f[:2] for f in body["failed"]] == [["broken", "1"]] and "not a trace" in body["failed"][0][2]
    assert client.get(url).json == body and len(toy) == 1  # kept, not combined again
    # a changed trace: combined again from the new summary
    (run / "worker0.1.pt.trace.json").write_bytes(b"y" * 7)
    os.utime(run / "worker0.1.pt.trace.json", (OLD + 10, OLD + 10))
    for _ in range(200):
        resp = client.get(url)
        if resp.status_code == 200 and resp.json["traces"][0][2] == 7:
            break
        time.sleep(0.05)
    assert resp.json["traces"][0] == ["worker0", "1", 7] and len(toy) == 2


def test_run_level_route_errors(client_for, tmp_path, toy):
    make_run(tmp_path / "job", ["worker0.pt.trace.json"])
    client = client_for(tmp_path, analyse=lambda p, _: Summaries(p))
    assert client.get("/data/plugin/stepscope/toy/sizes").status_code == 400  # no run
    assert client.get("/data/plugin/stepscope/toy/sizes?run=nope").status_code == 404


def test_viewset_carries_summaries_of_every_run_level_analysis(monkeypatch):
    from tracebuild import build, op

    from stepscope.views import build_views

    toy = RunAnalysis(name="toy", summarise=lambda a: {"ops": len(a.tree)},
                      combine=lambda s, f: None, routes=())
    monkeypatch.setattr(runlevel, "RUNLEVEL", (toy,))
    views = build_views(build([op("aten::mm", 0, 2), op("aten::add", 3, 4)]))
    assert views.summaries == {"toy": {"ops": 2}}
