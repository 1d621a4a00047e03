"""Smoke test: the wheel installs in a fresh venv and serves the shared traces and samples.

A new virtual environment (no system site-packages), ``pip install .`` from a copy of the
repo, then ``stepscope DIR --port 0``: the first line is the Serving line, ``runs`` lists
every run, and the dashboard page and plotly.js are served from the installed package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
import venv
from pathlib import Path

import pytest
from conftest import PREFIX, ROOT, SHARED, SHARED_RUNS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with stepscope installed from a clean copy of the repo (no egg-info)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "*.egg-info", "build", "test-output", "benchmarks", "__pycache__", ".*cache"))
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(src)], check=True,
                   timeout=900)
    return env_dir


def _serve(env_dir: Path, logdir: Path):
    proc = subprocess.Popen([str(env_dir / "bin" / "stepscope"), str(logdir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("Serving on http://127.0.0.1:"), (line, proc.stderr.read())
    return proc, line.split()[-1].rstrip("/")


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read()


def test_fresh_venv_serves_all_shared_runs(installed):
    proc, base = _serve(installed, SHARED)
    try:
        status, body = _get(f"{base}{PREFIX}/runs")
        assert status == 200 and json.loads(body)["runs"] == SHARED_RUNS
        status, page = _get(f"{base}{PREFIX}/index.html")
        assert status == 200 and b"<html" in page.lower()
        status, js = _get(f"{base}{PREFIX}/vendor/plotly.min.js")
        assert status == 200 and len(js) > 1_000_000
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fresh_venv_has_no_torch_and_serves_samples(installed):
    py = installed / "bin" / "python"
    no_torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True)
    assert no_torch.returncode != 0, "torch must not be a runtime dependency"
    proc, base = _serve(installed, ROOT / "samples" / "logs")
    try:
        runs = json.loads(_get(f"{base}{PREFIX}/runs")[1])["runs"]
        assert runs == sorted(p.name for p in (ROOT / "samples" / "logs").iterdir() if p.is_dir())
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_wheel_ships_frontend(installed):
    site = next((installed / "lib").glob("python3*/site-packages"))
    assert (site / "stepscope" / "frontend" / "index.html").is_file()
    assert (site / "stepscope" / "api.md").is_file()
    info = next(site.glob("stepscope-*.dist-info"))
    assert any("BSD 3-Clause License" in p.read_text() for p in info.rglob("LICENSE*"))
    assert sys.version_info >= (3, 9)
