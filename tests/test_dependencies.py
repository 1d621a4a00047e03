"""The dependency floors setup.py declares are the versions tests/run.sh tests against.

tests/run.sh runs the suite once more in a venv pinned to ``tests/floor-requirements.txt``;
this test keeps that file and setup.py's ``install_requires`` floors in agreement, so a
declared floor is always one the suite has passed on.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _install_requires() -> list[str]:
    """The string literals of setup.py's ``install_requires=[...]`` keyword."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [ast.literal_eval(elt) for elt in node.value.elts]
    raise AssertionError("setup.py has no install_requires")


def _floors_file() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "tests" / "floor-requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            if "==" in line:  # other lines constrain tools the floors need (setuptools)
                name, version = line.split("==")
                pins[name.strip().lower()] = version.strip()
    return pins


def _floor(spec: str) -> tuple[str, str]:
    m = re.match(r"^([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)", spec)
    assert m, f"{spec!r} declares no '>=' floor"
    return m.group(1).lower(), m.group(2)


def _same_version(a: str, b: str) -> bool:
    """'2.1' and '2.1.0' name the same release."""
    pa, pb = [int(x) for x in a.split(".")], [int(x) for x in b.split(".")]
    n = max(len(pa), len(pb))
    return pa + [0] * (n - len(pa)) == pb + [0] * (n - len(pb))


def test_every_runtime_dependency_has_a_tested_floor():
    floors = dict(_floor(spec) for spec in _install_requires())
    pins = _floors_file()
    assert set(floors) == set(pins), "floor-requirements.txt must pin exactly setup.py's deps"
    wrong = {n: (floors[n], pins[n]) for n in floors if not _same_version(floors[n], pins[n])}
    assert not wrong, f"setup.py floor vs tested floor differ: {wrong}"


def test_plotly_has_an_upper_bound():
    (spec,) = [s for s in _install_requires() if s.lower().startswith("plotly")]
    assert "<" in spec, "plotly.min.js is taken from the package: bound its major version"


def test_python_floor_matches_numpy():
    text = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert 'python_requires=">=3.10"' in text
