"""``benchmarks/bench_phases.py`` runs from a checkout and reports every phase of a worker's
analysis (a benchmark prints figures; this only checks that it still works)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = next((ROOT / "samples" / "logs" / "cpu_ddp_2_workers").glob("worker0.*.json.gz"))


def test_phase_benchmark_reports_each_phase_of_a_worker_run():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_phases.py"),
                          str(SAMPLE), "--runs", "1", "--top", "2"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = {line[:18].strip(): line[18:].split() for line in out.stdout.splitlines()}
    for phase in ("read", "analysis+overview", "views+store", "timeline build",
                  "timeline store", "timeline load"):
        seconds, peak = (float(x) for x in rows[phase])
        assert 0 <= seconds < 60 and 10 < peak < 10_000, (phase, rows[phase])
    assert re.search(r"this, read \(last run\): top functions by own time\n +[0-9.]+ s", out.stdout)
