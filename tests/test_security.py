"""Traversal, links leaving the log directory and hostile names in answers (issue 7).

The rule for symlinks (SPEC §1.1 follows them): a link to a trace file or a run folder
outside the log directory is discovered and analysed like any other trace, and its views are
shown; but nothing outside the log directory is ever served verbatim: ``trace/download``
answers 403 for such a file, and its error messages do not quote its bytes. Static files
come only from the package's frontend folder (and plotly.min.js from the plotly package).
"""

from __future__ import annotations

import html
import http.client
import json
import os
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from browser import stepscope_server
from conftest import PREFIX, ROOT, query, wait_ready

SECRET = b"TOP-SECRET-7f3a9c-do-not-serve-0123456789abcdef\n" * 3
XSS = "<img src=x onerror=alert(1)>"


def tiny_trace(extra: list | None = None, gpus: int = 1) -> bytes:
    """Two steps, an op that launches a kernel per GPU; ``extra`` events appended."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
         "args": {"External id": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 110, "dur": 5},
    ]
    for g in range(gpus):
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 12 + g, "dur": 1, "args": {"External id": 7, "correlation": 50 + g}},
            {"ph": "X", "cat": "kernel", "name": f"k{g}", "pid": g, "tid": 7, "ts": 20, "dur": 150,
             "args": {"device": g, "stream": 7, "correlation": 50 + g, "grid": [1, 1, 1]}},
        ]
    props = [{"id": g, "name": "Tesla V100", "totalGlobalMem": 16 << 30, "computeMajor": 7,
              "computeMinor": 0, "numSms": 80} for g in range(gpus)]
    return json.dumps({"schemaVersion": 1, "deviceProperties": props,
                       "traceEvents": events + (extra or [])}).encode()


def error_body(resp, status: int) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.get_data()[:300])
    assert resp.mimetype == "application/json"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    body = resp.json
    assert body["error"] and "detail" in body
    return body


# -- a log directory with links ------------------------------------------------------------------
@pytest.fixture(scope="module")
def linked(tmp_path_factory, views_module):
    """``(client, logdir, outside)``: runs that are real files, links inside, links outside."""
    from stepscope.web.app import app_store, create_app

    base = tmp_path_factory.mktemp("links")
    outside, logdir = base / "outside", base / "logdir"
    (outside / "dir").mkdir(parents=True)
    (outside / "trace.json").write_bytes(tiny_trace())
    (outside / "dir" / "worker0.pt.trace.json").write_bytes(tiny_trace())
    (outside / "secret.txt").write_bytes(SECRET)
    for run in ("inside", "link_file", "secret", "internal", "swap", "hostile"):
        (logdir / run).mkdir(parents=True)
    (logdir / "inside" / "worker0.pt.trace.json").write_bytes(tiny_trace())
    (logdir / "swap" / "worker0.pt.trace.json").write_bytes(tiny_trace())
    (logdir / "link_file" / "worker0.pt.trace.json").symlink_to(outside / "trace.json")
    (logdir / "link_dir").symlink_to(outside / "dir")
    (logdir / "secret" / "worker0.pt.trace.json").symlink_to(outside / "secret.txt")
    (logdir / "internal" / "worker0.pt.trace.json").symlink_to(
        Path("..") / "inside" / "worker0.pt.trace.json")
    evil = f"nn.Module: DataParallel{XSS}"
    (logdir / "hostile" / "worker0.pt.trace.json").write_bytes(tiny_trace(gpus=2, extra=[
        {"ph": "X", "cat": "python_function", "name": evil, "pid": 1, "tid": 1, "ts": 11, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "Broadcast<script>alert(2)</script>", "pid": 1,
         "tid": 1, "ts": 120, "dur": 3}]))
    app = create_app(str(logdir), reload_interval=0, cache_dir=str(base / "cache"))
    client = app.test_client()
    for run in ("inside", "link_file", "link_dir", "secret", "internal", "swap", "hostile"):
        wait_ready(client, run, "worker0")
    yield client, logdir, outside
    app_store(app).close(timeout=5)


def test_links_are_followed_and_analysed(linked):
    client, _, _ = linked
    assert client.get(query("runs")).json["runs"] == [
        "hostile", "inside", "internal", "link_dir", "link_file", "secret", "swap"]
    for run in ("inside", "link_file", "link_dir", "internal"):
        resp = client.get(query("overview", run=run, worker="worker0"))
        assert resp.status_code == 200, run


def test_download_serves_only_files_inside_the_log_directory(linked):
    client, logdir, _ = linked
    for run in ("inside", "internal"):
        resp = client.get(query("trace/download", run=run, worker="worker0"))
        assert resp.status_code == 200
        assert resp.get_data() == (logdir / "inside" / "worker0.pt.trace.json").read_bytes()
        resp.close()
    for run in ("link_file", "link_dir"):
        body = error_body(client.get(query("trace/download", run=run, worker="worker0")), 403)
        assert body["file"] == "worker0.pt.trace.json" and "outside the log directory" in body["detail"]


def test_download_supports_ranges_and_revalidation(linked):
    client, logdir, _ = linked
    data = (logdir / "inside" / "worker0.pt.trace.json").read_bytes()
    url = query("trace/download", run="inside", worker="worker0")
    part = client.get(url, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.get_data() == data[10:20]
    part.close()
    whole = client.get(url)
    etag = whole.headers["ETag"]
    whole.close()
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    same = client.get(url, headers={"If-Match": etag, "If-Unmodified-Since": "Fri, 01 Jan 2100 "
                                                                              "00:00:00 GMT"})
    assert same.status_code == 200 and same.get_data() == data
    same.close()


@pytest.mark.parametrize("header", [{"If-Match": '"not-its-tag"'},
                                    {"If-Unmodified-Since": "Wed, 21 Oct 1970 07:28:00 GMT"}])
def test_download_of_a_changed_file_is_refused_with_a_json_error(linked, header):
    """A precondition the file no longer meets is a JSON 412 (werkzeug's answered 412 with the
    whole file as its body; an old If-Unmodified-Since answered 200)."""
    client, _, _ = linked
    resp = client.get(query("trace/download", run="inside", worker="worker0"), headers=header)
    body = error_body(resp, 412)
    assert body["error"] == "precondition failed" and "download it again" in body["detail"]


def test_download_of_a_file_changed_since_its_analysis_is_a_409(tmp_path):
    """A file being rewritten in place: the views still show the version analysed, so its
    new (maybe half-written) bytes are not served as if they were that version."""
    from stepscope.web.app import app_store, create_app

    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "worker0.pt.trace.json"
    path.write_bytes(tiny_trace())
    app = create_app(str(tmp_path), reload_interval=0, no_cache=True)
    try:
        client = app.test_client()
        wait_ready(client, "run", "worker0")
        url = query("trace/download", run="run", worker="worker0")
        ok = client.get(url)
        assert ok.status_code == 200 and ok.get_data() == path.read_bytes()
        ok.close()
        path.write_bytes(tiny_trace()[:100])  # the rewrite has begun
        body = error_body(client.get(url), 409)
        assert body["error"] == "changed since analysed" and "new version is analysed" in body["detail"]
        assert client.get(query("overview", run="run", worker="worker0")).status_code == 200
    finally:
        app_store(app).close(timeout=5)


def test_download_of_an_unreadable_file_says_so(linked, monkeypatch):
    """Permission denied is not "the file is gone" (it is there; the views still answer)."""
    import stepscope.fs

    client, _, _ = linked

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(stepscope.fs.os, "open", refuse)
    body = error_body(client.get(query("trace/download", run="inside", worker="worker0")), 403)
    assert body["error"] == "worker0.pt.trace.json cannot be read"
    assert body["detail"].startswith("Permission denied: ") and "permissions" in body["detail"]


def test_errors_of_a_file_outside_do_not_quote_it(linked):
    client, _, _ = linked
    for route in ("views", "overview", "notes", "trace/download"):
        body = error_body(client.get(query(route, run="secret", worker="worker0")), 422)
        assert body["file"] == "worker0.pt.trace.json" and body["error"] == "not JSON"
        assert b"SECRET" not in json.dumps(body).encode() and "7f3a9c" not in body["detail"]
    everything = b"".join(client.get(query(r)).get_data() for r in ("runs",))
    assert b"SECRET" not in everything


def test_a_link_swapped_in_after_analysis_is_not_served(linked):
    client, logdir, outside = linked
    path = logdir / "swap" / "worker0.pt.trace.json"
    path.unlink()
    path.symlink_to(outside / "secret.txt")  # the store has not re-scanned (interval 0)
    resp = client.get(query("trace/download", run="swap", worker="worker0"))
    body = error_body(resp, 403)
    assert b"SECRET" not in resp.get_data() and "outside" in body["detail"]
    path.unlink()
    assert error_body(client.get(query("trace/download", run="swap", worker="worker0")), 404)


@pytest.mark.parametrize("params", [
    {"run": ".."}, {"run": "../outside"}, {"run": "inside/.."}, {"run": "/etc"},
    {"run": "inside", "worker": "../../../etc/passwd"}, {"run": "inside", "worker": ".."},
    {"run": "inside", "worker": "worker0", "span": "../../secret"},
    {"run": "inside", "worker": "worker0", "span": "%2e%2e"},
    {"run": "inside\x00", "worker": "worker0"}, {"run": "link_dir/..", "worker": "worker0"},
])
def test_parameters_are_names_not_paths(linked, params):
    client, _, _ = linked
    for route in ("workers", "spans", "overview", "trace/download"):
        resp = client.get(query(route, **{"worker": "worker0", **params}))
        if route == "workers" and "run" in params and params["run"] == "inside":
            continue  # workers ignores worker=
        if route == "spans" and "span" in params:
            continue
        body = error_body(resp, 404)
        assert "unknown" in body["error"]


def test_event_id_must_be_ascii_digits(linked):
    client, _, _ = linked
    for bad in ("\u00b2", "\u0663", "1e3", "-1", " 1", "0x10"):
        error_body(client.get(query("trace/event", run="inside", worker="worker0", id=bad)), 400)
    assert client.get(query("trace/event", run="inside", worker="worker0", id="1")).status_code == 200


# -- hostile names in answers -----------------------------------------------------------------------
def test_recommendation_html_escapes_trace_names(linked):
    client, _, _ = linked
    overview = client.get(query("overview", run="hostile", worker="worker0")).json
    items = {it["id"]: it for it in overview["recommendation_items"]}
    evil = f"nn.Module: DataParallel{XSS}"
    assert evil in items["data_parallel"]["text"]  # plain text; the frontend renders text
    page = overview["recommendations"]
    assert html.escape(evil) in page and "<img" not in page and "<script" not in page
    assert re.fullmatch(r"(<ul>|</ul>|<li>|</li>|<a href =\"https://[^\"<>]+\" target=\"_blank\">"
                        r"|</a>|[^<>]+)+", page), page
    for row in overview["steps"]["rows"]:  # the only other HTML: step tooltips, no trace names
        for cell in row[2::2]:
            assert re.fullmatch(r'<div class="visualization-tooltip" style="white-space: nowrap;">'
                                r"Step \d+<br>Total: [\d.]+us<br><b>[A-Za-z ]+: [\d.]+us</b><br>"
                                r"Percentage: [\d.]+%</div>", cell), cell


def test_error_names_come_back_as_json_text(client_for, tmp_path):
    run = tmp_path / f"run {XSS}"
    run.mkdir()
    name = f"{XSS}\"'&.pt.trace.json"
    (run / name).write_bytes(b"<html><script>alert(3)</script></html>")
    os.utime(run / name, (1e9, 1e9))
    client = client_for(tmp_path)
    assert client.get(query("runs")).json["runs"] == [f"run {XSS}"]
    worker = f"{XSS}\"'&"
    body = error_body(wait_ready(client, f"run {XSS}", worker), 422)
    assert body["file"] == name and "<script>alert(3)</script>" in body["detail"]
    unknown = error_body(client.get(query("overview", run=XSS, worker=XSS)), 404)
    assert XSS in unknown["error"]
    route = error_body(client.get(f"{PREFIX}/{quote(XSS)}"), 404)
    assert XSS in route["error"]


def test_redirect_does_not_reflect_markup(shared_client):
    resp = shared_client.get("/?run=%22%3E%3Cscript%3Ealert(1)%3C/script%3E&view=Kernel")
    assert resp.status_code == 302
    assert "<script" not in resp.headers["Location"]
    assert b"<script>alert" not in resp.get_data()
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


# -- static files -------------------------------------------------------------------------------------
TRAVERSALS = [
    "../../etc/passwd", "../../../../../../etc/passwd", "..%2f..%2fetc%2fpasswd",
    "%2e%2e/%2e%2e/etc/passwd", "%2e%2e%2f%2e%2e%2fsetup.py", "..%252f..%252fsetup.py",
    "%252e%252e/setup.py", "/etc/passwd", "//etc/passwd", "%2fetc%2fpasswd",
    "..\\..\\setup.py", "..%5c..%5csetup.py", "....//....//setup.py", "lib/../../setup.py",
    "views/../../plugin/app.py", "vendor/../../setup.py", "index.html/../../setup.py",
    "%c0%ae%c0%ae/setup.py", "index.html%00.js", ".%2e/setup.py", "..;/setup.py",
    "~/.ssh/id_rsa", "file:///etc/passwd",
]
#: text that only files outside the frontend folder contain
LEAKS = (b"root:x:", b"setuptools", b"def create_app", b"import ", b"BEGIN OPENSSH")


def _no_leak(data: bytes) -> None:
    for marker in LEAKS:
        assert marker not in data, marker


@pytest.mark.parametrize("path", TRAVERSALS)
def test_static_traversal_test_client(shared_client, path):
    resp = shared_client.get(f"{PREFIX}/{path}")
    assert resp.status_code in (301, 302, 308, 400, 404), resp.status_code
    _no_leak(resp.get_data())


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("served")
    (logdir / "r").mkdir()
    (logdir / "r" / "worker0.pt.trace.json").write_bytes(tiny_trace())
    with stepscope_server(logdir) as base:
        yield base


def raw_get(base: str, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (no client-side normalisation)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=15)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_static_traversal_real_server(server_url):
    assert raw_get(server_url, f"{PREFIX}/index.html")[0] == 200
    for path in TRAVERSALS:
        for full in (f"{PREFIX}/{path}", f"/{path}", f"{PREFIX}/vendor/{path}"):
            status, data = raw_get(server_url, full)
            assert status in (301, 302, 308, 400, 404), (full, status)
            _no_leak(data)
    for path in (f"{PREFIX}/../../../../etc/passwd", "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                 f"{PREFIX}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd",
                 f"{PREFIX}/trace/download?run=r&worker=worker0&path=/etc/passwd"):
        status, data = raw_get(server_url, path)
        _no_leak(data)
        if "download" in path:  # extra parameters are ignored: still the run's own trace
            assert status in (200, 202) and b"root:" not in data


def test_only_frontend_and_plotly_are_static():
    """Everything the static route can reach: the frontend folder; the plotly route: one file."""
    from stepscope.web.assets import frontend_dir, plotly_js

    front = frontend_dir().resolve()
    assert front == (ROOT / "frontend").resolve() or front.name == "frontend"
    for p in front.rglob("*"):
        assert p.resolve().is_relative_to(front), f"{p} leaves the frontend folder"
    js = plotly_js()
    assert js is None or js.name == "plotly.min.js"


def test_default_host_is_loopback_and_others_are_not():
    from stepscope.cli import build_parser, is_loopback

    assert build_parser().parse_args(["d"]).host == "127.0.0.1"
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]", "LOCALHOST.",
                 "app.localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.org", "", "localhost.example.org"):
        assert not is_loopback(host), host  # these print the warning (tests/test_cli.py)


def test_a_loopback_server_refuses_other_host_names(tmp_path):
    """DNS rebinding: a page of attacker.example, its name resolving to 127.0.0.1 once
    loaded, made the browser read the loopback server's runs and trace files."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "worker0.pt.trace.json").write_bytes(tiny_trace())
    with stepscope_server(tmp_path, "--allow-host", "Proxy.Example") as base:
        where = urlsplit(base)

        def get(host: str) -> tuple[int, dict]:
            conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
            try:
                conn.request("GET", f"{PREFIX}/runs", headers={"Host": host})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        for host in (where.netloc, f"localhost:{where.port}", f"[::1]:{where.port}",
                     "proxy.example"):
            status, body = get(host)
            assert status == 200 and body["runs"] == ["run"], host
        for host in (f"attacker.example:{where.port}", "attacker.example", f"localhost.evil:{where.port}"):
            status, body = get(host)
            assert status == 403 and body["error"] == "not a local host name", host
            assert "http://127.0.0.1:PORT/" in body["detail"] and "--allow-host" in body["detail"]
