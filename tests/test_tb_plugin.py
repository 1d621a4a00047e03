"""The TensorBoard host (SPEC §3.1).

In-process tests mount the plugin in TensorBoard's own WSGI app (fast). The tests named
``test_tensorboard_subprocess_*`` (marked ``slow``) start the real ``tensorboard`` command,
once plain and once with ``--path_prefix /foo``; they run in CI like every other test.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import PREFIX, SHARED
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from stepscope.web.tb_plugin import ENTRY_ROUTE, TAB_NAME, StepscopePlugin

KINETO = SHARED / "kineto_resnet50"
KINETO_RUNS = ["resnet50_num_workers_0", "resnet50_num_workers_4"]
TB_START_TIMEOUT_S = 90


def make_plugin(logdir, reload_interval=0.0) -> StepscopePlugin:
    ctx = base_plugin.TBContext(
        logdir=str(logdir) if logdir else None,
        flags=argparse.Namespace(reload_interval=reload_interval))
    return StepscopePlugin(ctx)


@pytest.fixture(scope="module")
def tb_client(views_module):
    """TensorBoard's WSGI app with only our plugin, behind ``--path_prefix /foo``."""
    plugin = make_plugin(KINETO)
    wsgi = application.TensorBoardWSGI([plugin], path_prefix="/foo")
    yield Client(wsgi)
    plugin._store().close(timeout=2)


def test_listed_with_tab_name_and_entry_module(tb_client):
    resp = tb_client.get("/foo/data/plugins_listing")
    meta = json.loads(resp.get_data())["stepscope"]
    assert meta["enabled"] is True and meta["tab_name"] == TAB_NAME
    assert meta["loading_mechanism"] == {"type": "IFRAME",
                                         "module_path": f"/foo{PREFIX}{ENTRY_ROUTE}"}


def test_api_and_dashboard_under_path_prefix(tb_client, caplog):
    with caplog.at_level(logging.WARNING, logger="tensorboard"):
        runs = tb_client.get(f"/foo{PREFIX}/runs")
        assert runs.status_code == 200 and runs.json["runs"] == KINETO_RUNS
        entry = tb_client.get(f"/foo{PREFIX}{ENTRY_ROUTE}")
        assert entry.status_code == 200 and entry.mimetype == "text/javascript"
        assert "import.meta.url" in entry.get_data(as_text=True)
        page = tb_client.get(f"/foo{PREFIX}/index.html")
        assert page.status_code == 200 and page.mimetype == "text/html"
        again = tb_client.get(f"/foo{PREFIX}/index.html",
                              headers={"If-None-Match": page.headers["ETag"]})
        assert again.status_code == 304
        missing = tb_client.get(f"/foo{PREFIX}/workers?run=nope")
        assert missing.status_code == 404 and missing.json["error"] == "unknown run 'nope'"
    # TensorBoard's security validator logs a warning for each non-conforming response
    assert "will become an error" not in caplog.text


def test_entry_page_loads_the_entry_module(tb_client):
    html = tb_client.get("/foo/data/plugin_entry.html?name=stepscope").get_data(as_text=True)
    assert f'import(".{ENTRY_ROUTE}")' in html


def test_inactive_without_traces(tmp_path, views_module):
    (tmp_path / "events.out.tfevents.1").write_bytes(b"")
    plugin = make_plugin(tmp_path)
    try:
        assert plugin.is_active() is False
    finally:
        plugin._store().close()
    assert make_plugin(None).is_active() is False
    assert make_plugin(None).get_plugin_apps() == {}


def test_logdir_spec_is_said_to_be_unsupported(caplog):
    """tensorboard --logdir_spec a:DIR,b:DIR gives plugins no logdir: the tab was silently
    off; the log says what to do."""
    ctx = base_plugin.TBContext(logdir=None, flags=argparse.Namespace(
        reload_interval=0.0, logdir_spec="a:/x,b:/y"))
    with caplog.at_level("WARNING", logger="stepscope.web.tb_plugin"):
        plugin = StepscopePlugin(ctx)
    assert plugin.is_active() is False
    assert [r.getMessage() for r in caplog.records] == [
        "stepscope: the PyTorch Profiler tab needs --logdir (it does not read --logdir_spec); "
        "or run `stepscope DIR` beside TensorBoard"]


def test_is_active_is_cached(views_module):
    plugin = make_plugin(KINETO)
    try:
        assert plugin.is_active() is True
        t = time.perf_counter()
        for _ in range(1000):
            plugin.is_active()
        assert time.perf_counter() - t < 1.0  # no scan per call
    finally:
        plugin._store().close()


def test_cache_env_vars_pass_through(tmp_path, monkeypatch, views_module):
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")
    plugin = make_plugin(tmp_path)
    app = plugin._wsgi_app()
    try:
        assert app.config["STEPSCOPE_CACHE_DIR"] == str(tmp_path / "cache")
        assert app.config["STEPSCOPE_NO_CACHE"] is True
    finally:
        plugin._store().close()


# -- the real tensorboard command --------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def tensorboards(subprocess_env):
    """Two ``tensorboard`` processes started together: ``{prefix: base url}``."""
    procs, urls = [], {}
    for prefix in ("", "/foo"):
        port = free_port()
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(KINETO),
               "--host", "127.0.0.1", "--port", str(port)]
        if prefix:
            cmd += ["--path_prefix", prefix]
        procs.append(subprocess.Popen(cmd, env=subprocess_env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
        urls[prefix] = f"http://127.0.0.1:{port}{prefix}"
    try:
        deadline = time.monotonic() + TB_START_TIMEOUT_S
        for proc, url in zip(procs, urls.values()):
            while True:
                try:
                    fetch(f"{url}/data/plugins_listing")
                    break
                except (urllib.error.URLError, ConnectionError):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        proc.kill()
                        pytest.fail(f"tensorboard did not start: {proc.stderr.read()}")
                    time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["", "/foo"])
def test_tensorboard_subprocess_serves_the_plugin(tensorboards, prefix):
    base = tensorboards[prefix]
    listing = fetch(f"{base}/data/plugins_listing")
    assert listing["stepscope"]["enabled"] is True
    assert listing["stepscope"]["tab_name"] == TAB_NAME
    assert fetch(f"{base}{PREFIX}/runs")["runs"] == KINETO_RUNS
    with urllib.request.urlopen(f"{base}{PREFIX}/index.html", timeout=10) as resp:
        assert resp.status == 200 and b"Stepscope" in resp.read()


def test_options_405_and_relative_redirect_in_tensorboard(tb_client):
    """Issue 12: through TensorBoard too, OPTIONS is a 405 JSON error and the ``a//b``
    redirect does not copy the request's Host header into ``Location``."""
    resp = tb_client.open(f"/foo{PREFIX}/runs", method="OPTIONS")
    assert resp.status_code == 405 and resp.json["error"] == "405 Method Not Allowed"
    resp = tb_client.get(f"/foo{PREFIX}//runs?a=1", headers={"Host": "evil.example"})
    assert resp.status_code == 308 and resp.headers["Location"] == f"/foo{PREFIX}/runs?a=1"
