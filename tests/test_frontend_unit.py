"""Unit tests of the frontend's pure modules (formatting, table search/sort/paging, URL
state, pie folding), written for node's built-in test runner in ``tests/frontend/`` and
run here so that pytest (and so CI) runs them. Skipped when node is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")
TEST_FILES = sorted((HERE / "frontend").glob("*.test.mjs"))


def _node_version() -> tuple[int, int]:
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = out.strip().lstrip("v").split(".")[:2]
    return int(major), int(minor)


def _node_flags() -> list[str]:
    """Flags so node loads frontend/*.js (ES modules without a package.json) as modules.

    Module syntax detection is on by default from node 20.19 / 22.7; 20.10+ has it behind
    a flag; older nodes cannot run these tests.
    """
    version = _node_version()
    if version >= (22, 7) or (20, 19) <= version < (21, 0):
        return []
    if version >= (20, 10):
        return ["--experimental-detect-module"]
    pytest.skip(f"node >= 20.10 is needed for these tests (found {version[0]}.{version[1]})")


@pytest.mark.skipif(NODE is None, reason="node is not installed (needed for the frontend unit tests)")
@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_frontend_module(test_file: Path) -> None:
    proc = subprocess.run([NODE, *_node_flags(), "--test", str(test_file)], capture_output=True,
                          text=True, cwd=HERE.parent, timeout=120)
    assert proc.returncode == 0, f"node --test {test_file.name} failed:\n{proc.stdout}\n{proc.stderr}"


def test_frontend_has_no_remote_urls() -> None:
    """Offline and safe: nothing loaded from another host, no innerHTML anywhere."""
    frontend = HERE.parent / "frontend"
    for path in [*frontend.rglob("*.html"), *frontend.rglob("*.css"), *frontend.rglob("*.js")]:
        text = path.read_text(encoding="utf-8")
        for needle in ('src="http', "src='http", 'href="http', "@import", "url(http", "//cdn"):
            assert needle not in text, f"{path.relative_to(frontend)} loads from outside: {needle}"
        for needle in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
            assert needle not in text, f"{path.relative_to(frontend)} uses {needle}"
