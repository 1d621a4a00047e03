"""Shared helpers for the browser tests: servers as subprocesses or threads, a headless
Chromium (Debian's, never a downloaded one) and a page watcher that records console
errors, dialogs and requests to other hosts.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parent.parent
FRONTEND = REPO / "frontend"
SHARED_TRACES = REPO.parent / "shared" / "traces"
KINETO = SHARED_TRACES / "kineto_resnet50"
CHROMIUM = os.environ.get("STEPSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PREFIX = "/data/plugin/stepscope"
#: markup that would run script if a page ever parsed a trace name as HTML
XSS = "<img src=x onerror=alert(1)>"


def output_dir() -> Path:
    """Where screenshots go: $STEPSCOPE_TEST_OUTPUT, default ./test-output."""
    out = Path(os.environ.get("STEPSCOPE_TEST_OUTPUT", "test-output"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def have_chromium() -> bool:
    return os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drain(pipe, sink: list[str]) -> None:
    for line in iter(pipe.readline, ""):
        sink.append(line)


@contextlib.contextmanager
def stepscope_server(logdir: Path | str, *extra: str, timeout: float = 60) -> Iterator[str]:
    """``python -m stepscope LOGDIR --port 0``; yields ``http://HOST:PORT`` (no slash)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepscope", str(logdir), "--port", "0", "--no-cache", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    err: list[str] = []
    threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True).start()
    try:
        line = _readline(proc, timeout)
        m = re.match(r"Serving on (http://\S+?)/?\s*$", line or "")
        if not m:
            raise RuntimeError(f"stepscope did not start: {line!r}\n{''.join(err)[-3000:]}")
        threading.Thread(target=_drain, args=(proc.stdout, []), daemon=True).start()
        yield m.group(1)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Terminate a server subprocess; kill it when it does not exit within ``timeout`` s."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else ""


@contextlib.contextmanager
def tensorboard_server(logdir: Path | str, *, path_prefix: str = "",
                       timeout: float = 90) -> Iterator[str]:
    """``tensorboard --logdir LOGDIR`` on a free port; yields ``http://127.0.0.1:PORT``
    (without the ``path_prefix``)."""
    exe = shutil.which("tensorboard")
    cmd = [exe] if exe else [sys.executable, "-m", "tensorboard.main"]
    port = free_port()
    log = output_dir() / f"tensorboard{path_prefix.replace('/', '_')}.log"
    with open(log, "w") as fh:
        prefix = ["--path_prefix", path_prefix] if path_prefix else []
        proc = subprocess.Popen([*cmd, "--logdir", str(logdir), "--host", "127.0.0.1",
                                 "--port", str(port), *prefix], stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "STEPSCOPE_NO_CACHE": "1"})
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_http(f"{base}{path_prefix}/data/plugins_listing", timeout, proc)
            yield base
        finally:
            stop(proc)


def _wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def wsgi_server(app) -> Iterator[str]:
    """Serve a WSGI app in a thread on a free port; yields ``http://127.0.0.1:PORT``."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)


def golden_payloads() -> dict[str, dict[str, object]]:
    """The golden responses per run: {run: {route: payload}} (SPEC §3.3); skips the test
    without the shared traces."""
    if not (KINETO / "expected.jsonl").is_file():
        import pytest
        from conftest import NO_SHARED

        pytest.skip(NO_SHARED)
    lines = [json.loads(x) for x in (KINETO / "expected.jsonl").read_text().splitlines() if x.strip()]
    routes = ["overview", "operation", "operation/table", "kernel/table", "kernel"]
    runs = ["resnet50_num_workers_0", "resnet50_num_workers_4"]
    return {run: dict(zip(routes, lines[i * 5:(i + 1) * 5])) for i, run in enumerate(runs)}


@dataclass
class PageWatch:
    """What a page did: console errors, uncaught exceptions, dialogs, off-server requests."""

    host: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def attach(self, context, page) -> PageWatch:
        """Block and count every request to another host; record errors and dialogs."""
        def route(r):
            url = r.request.url
            if urlsplit(url).netloc == self.host or url.startswith(("data:", "blob:", "about:")):
                r.continue_()
            else:
                self.external.append(url)
                r.abort()

        context.route("**/*", route)
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

        def dialog(d):
            self.dialogs.append(f"{d.type}: {d.message}")
            d.dismiss()

        page.on("dialog", dialog)
        return self

    def assert_clean(self) -> None:
        assert not self.dialogs, f"dialogs fired: {self.dialogs}"
        assert not self.page_errors, f"uncaught page errors: {self.page_errors}"
        assert not self.console_errors, f"console errors: {self.console_errors}"
        assert not self.external, f"requests to other hosts: {self.external}"


def open_page(browser, base: str, *, width: int = 1400, height: int = 900):
    """A fresh page on a fresh context, watched (external hosts blocked and counted)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    watch = PageWatch(urlsplit(base).netloc).attach(context, page)
    return context, page, watch


def query(page) -> dict[str, str]:
    """The page's query string as the page itself sees it (history writes included)."""
    search = page.evaluate("() => location.search")
    return {k: v[0] for k, v in parse_qs(search.lstrip("?")).items()}


def screenshot(page, name: str) -> Path:
    """A full-page screenshot ``<output dir>/<name>.png`` (scrolled to the top first)."""
    path = output_dir() / f"{name}.png"
    page.evaluate("() => window.scrollTo(0, 0)")  # the sticky header stays on top
    page.screenshot(path=str(path), full_page=True)
    return path


def download_chart_png(page, chart: str) -> tuple[str, bytes]:
    """Click the ``chart``'s "Download plot as a PNG" button: the file's name and bytes."""
    page.hover(chart)
    button = page.locator(f"{chart} .modebar-btn[data-title='Download plot as a PNG']")
    with page.expect_download(timeout=30_000) as download:
        button.click(force=True)
    return download.value.suggested_filename, Path(download.value.path()).read_bytes()


def launch(playwright):
    """Debian's Chromium, headless."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def xss_trace(path: Path) -> None:
    """A small Kineto trace whose run, worker, operator, kernel, stack and GPU names are HTML."""
    events, corr = [], 1000
    t0 = 1_700_000_000_000_000
    for n in range(3):
        s = t0 + n * 10_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 1}",
                       "pid": 1, "tid": 1, "ts": s, "dur": 9_000, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                       "pid": 1, "tid": 1, "ts": s + 10, "dur": 3_000, "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "user_annotation", "name": f"{XSS} range",
                       "pid": 1, "tid": 1, "ts": s + 3_100, "dur": 5_800, "args": {}})
        for k, name in enumerate([XSS, "aten::mm<script>alert(2)</script>", "Other"]):
            ext = corr + 1 + k
            ts = s + 3_200 + k * 1_500
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                           "dur": 1_200, "args": {"External id": ext, "Input Dims": [[8, 8], [8, 8]],
                                                  "Call stack": f"{XSS};train.py(10): <module>"}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts + 100, "dur": 20, "args": {"External id": ext, "correlation": ext}})
            events.append({"ph": "X", "cat": "kernel", "name": f"void k<{XSS}, &amp;>(<b>int</b>) #{k}",
                           "pid": 0, "tid": 7, "ts": ts + 200, "dur": 800 + 100 * k,
                           "args": {"device": 0, "stream": 7, "correlation": ext, "grid": [4, 1, 1],
                                    "block": [128, 1, 1], "external id": ext}})
        corr += 10
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": f"GPU {XSS}", "totalGlobalMem": 17179869184,
                                                       "computeMajor": 8, "computeMinor": 0, "numSms": 108}],
             "traceEvents": events}
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump(trace, fh)


def tensorboard_frame(page, timeout_s: float = 90):
    """Our index.html inside TensorBoard: its plugin iframe holds it in a nested iframe."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in page.frames:
            if "/data/plugin/stepscope/index.html" in f.url:
                return f
        page.wait_for_timeout(250)
    raise AssertionError(f"no stepscope frame; frames: {[f.url for f in page.frames]}")
