"""The bundled sample traces in ``samples/logs`` are valid, record everything a CPU-only
profiler can (memory, modules, stacks, user ranges, several spans, two workers), show every
view that needs no GPU, and ``make_samples.py`` recreates them."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest
from conftest import query, wait_idle, wait_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples", "logs")
SCRIPT = os.path.join(ROOT, "samples", "make_samples.py")
# SPEC §1.1: file name -> worker and span.
NAME_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?(?:\.pt\.trace)?\.json(?:\.gz)?$")
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
RANGES = {"forward", "backward", "optimizer"}
STRUCTURE = {
    "cpu_ddp_2_workers": {"worker0": 1, "worker1": 1},
    "cpu_train_num_workers_0": {"worker0": 1},
    "cpu_train_num_workers_2": {"worker0": 2},
}
#: Views every sample span shows (Kernel needs GPU activity; SPEC §3).
CPU_VIEWS = {"Overview", "Operator", "Trace", "Memory", "Module"}


def _trace_files(log_dir: str) -> list[str]:
    found = []
    for root, _dirs, files in os.walk(log_dir):
        found += [os.path.join(root, f) for f in files if f.endswith(".pt.trace.json.gz")]
    return sorted(found)


def _structure(log_dir: str) -> dict[str, dict[str, int]]:
    """``{run: {worker: span count}}`` of the trace files under ``log_dir``."""
    runs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in _trace_files(log_dir):
        m = NAME_RE.match(os.path.basename(path))
        assert m and m.group("span"), (
            f"{path}: name does not match <worker>.<span>.pt.trace.json.gz"
        )
        runs[os.path.relpath(os.path.dirname(path), log_dir)][m.group("worker")] += 1
    return {run: dict(workers) for run, workers in runs.items()}


def _load(path: str) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _names(trace: dict, cats: set[str]) -> set[str]:
    return {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats}


def _check_trace(path: str) -> None:
    trace = _load(path)
    assert isinstance(trace.get("traceEvents"), list), f"{path}: no traceEvents list"
    host = _names(trace, {"cpu_op", "user_annotation"})
    steps = {n for n in host if STEP_RE.match(n)}
    assert len(steps) == 3, f"{path}: expected 3 active ProfilerStep#N, got {sorted(steps)}"
    assert any(n.startswith("enumerate(DataLoader)#") and n.endswith("__next__") for n in host), (
        f"{path}: no DataLoader __next__ op"
    )
    assert RANGES <= _names(trace, {"user_annotation"}), f"{path}: record_function ranges missing"
    cpu_ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    assert len(cpu_ops) > 100, f"{path}: only {len(cpu_ops)} cpu_op events"
    assert any("Input Dims" in e.get("args", {}) for e in cpu_ops), f"{path}: no input shapes"
    # profile_memory: allocation instants; with_modules / with_stack: python_function events
    events = trace["traceEvents"]
    assert sum(e.get("name") == "[memory]" for e in events) > 100, f"{path}: no memory events"
    python = _names(trace, {"python_function"})
    assert {"nn.Module: Conv2d_0", "nn.Module: Linear_1"} <= python, f"{path}: no module scopes"
    assert any(n.startswith("make_samples.py(") for n in python), f"{path}: no call stacks"


def test_committed_samples_exist_and_are_small():
    files = _trace_files(SAMPLES)
    assert files, f"no sample traces under {SAMPLES}: run python samples/make_samples.py"
    total = sum(os.path.getsize(p) for p in files)
    assert total < 2_000_000, f"samples take {total:,} bytes; keep them under 2 MB"


def test_committed_samples_structure():
    """One run with two spans, one with two workers (each a rank of a gloo DDP job)."""
    assert _structure(SAMPLES) == STRUCTURE
    ranks = {}
    for path in _trace_files(os.path.join(SAMPLES, "cpu_ddp_2_workers")):
        info = _load(path)["distributedInfo"]
        assert info["backend"] == "gloo" and info["world_size"] == 2
        ranks[os.path.basename(path).split(".")[0]] = info["rank"]
        assert "gloo:all_reduce" in _names(_load(path), {"cpu_op", "user_annotation"})
    assert ranks == {"worker0": 0, "worker1": 1}


def test_samples_show_every_cpu_view(client_for, views_module):
    """Each sample span lists Overview, Operator, Trace, Memory and Module (Module once the
    registry has it), never Kernel; the two-worker run adds Distributed."""
    registry = {v.name for v in views_module.VIEWS}
    expected = CPU_VIEWS & registry
    assert expected >= {"Overview", "Operator", "Trace", "Memory"}
    client = client_for(SAMPLES, reload_interval=0)
    assert wait_idle(client)["runs"] == sorted(STRUCTURE)
    seen = {}
    for run, workers in STRUCTURE.items():
        assert client.get(query("workers", run=run)).json == sorted(workers)
        for worker, count in workers.items():
            spans = client.get(query("spans", run=run, worker=worker)).json
            assert len(spans) == count
            for span in spans:
                resp = wait_ready(client, run, worker, span)
                assert resp.status_code == 200, resp.json
                seen[(run, worker, span)] = resp.json
    for key, names in seen.items():
        assert expected <= set(names) and "Kernel" not in names, (key, names)
        assert ("Distributed" in names) == (key[0] == "cpu_ddp_2_workers"), (key, names)


@pytest.mark.parametrize("path", _trace_files(SAMPLES), ids=lambda p: os.path.relpath(p, SAMPLES))
def test_committed_sample_is_valid_trace(path):
    _check_trace(path)


@pytest.mark.torch
@pytest.mark.slow
def test_make_samples_recreates_structure(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "logs"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote " in proc.stdout
    assert _structure(str(out)) == STRUCTURE
    for path in _trace_files(str(out)):
        _check_trace(path)
