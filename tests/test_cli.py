"""The standalone server as users start it: ``python -m stepscope DIR`` (SPEC §3.1)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import PREFIX, ROOT, SHARED, until

from stepscope import __version__

KINETO = SHARED / "kineto_resnet50"
SERVING = re.compile(r"^Serving on http://(?P<host>[^/]+):(?P<port>\d+)/$")
START_TIMEOUT_S = 30


def start(env: dict, *args: str, exe: list[str] | None = None) -> subprocess.Popen:
    """Start the server; stdout is a pipe (not a tty), so the first line must be flushed."""
    cmd = (exe or [sys.executable, "-m", "stepscope"]) + list(args)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepscope", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=START_TIMEOUT_S)


def first_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().rstrip("\n")
    if not line:
        proc.kill()
        raise AssertionError(f"no output; stderr: {proc.communicate(timeout=5)[1]}")
    return line


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.terminate()
    try:
        return proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


@pytest.fixture(scope="module")
def server(subprocess_env):
    """One server on a free port over the two kineto runs: ``(proc, base url)``."""
    proc = start(subprocess_env, str(KINETO), "--port", "0", "--reload-interval", "1")
    line = first_line(proc)
    m = SERVING.match(line)
    assert m, f"first line was {line!r}"
    assert m["host"] == "127.0.0.1" and m["port"] != "0"
    yield proc, f"http://127.0.0.1:{m['port']}"
    stop(proc)


def test_serving_line_then_runs(server):
    _proc, base = server
    status, body = get_json(f"{base}{PREFIX}/runs")
    assert status == 200
    assert body["runs"] == ["resnet50_num_workers_0", "resnet50_num_workers_4"]


def test_root_redirects_to_dashboard(server):
    _proc, base = server
    with urllib.request.urlopen(f"{base}/?run=resnet50_num_workers_0", timeout=10) as resp:
        assert resp.url == f"{base}{PREFIX}/index.html?run=resnet50_num_workers_0"
        assert b"Stepscope" in resp.read()


def test_missing_dir_exits_2(tmp_path, subprocess_env):
    proc = run(subprocess_env, str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and proc.stdout == ""


def test_busy_port_exits_1(tmp_path, subprocess_env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = run(subprocess_env, str(tmp_path), "--port", str(port))
    assert proc.returncode == 1, proc.stderr
    assert str(port) in proc.stderr and "--port" in proc.stderr
    assert "Serving" not in proc.stdout


@pytest.mark.parametrize("args,code,says", [
    (["--reload-interval", "nan"], 2, "--reload-interval must be 0..86,400 seconds"),
    (["--reload-interval", "inf"], 2, "--reload-interval must be 0..86,400 seconds"),
    (["--reload-interval", "-1"], 2, "--reload-interval must be 0..86,400 seconds"),
    (["--host", "bad host!"], 1, "cannot listen on 'bad host!'"),
])
def test_bad_options_say_why_without_a_traceback(tmp_path, subprocess_env, args, code, says):
    """``nan`` spun the scan loop at full CPU and ``inf`` killed it, the server hanging;
    a host name that does not resolve printed waitress' traceback (fuzzing the CLI)."""
    proc = run(subprocess_env, str(tmp_path), "--port", "0", *args)
    assert proc.returncode == code and says in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Serving" not in proc.stdout


def test_all_interfaces_warns(tmp_path, subprocess_env):
    proc = start(subprocess_env, str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    line = first_line(proc)
    _out, err = stop(proc)
    assert SERVING.match(line) and line.startswith("Serving on http://0.0.0.0:")
    assert "warning" in err and "0.0.0.0" in err


def test_serve_subcommand_is_the_default(tmp_path, subprocess_env):
    """``stepscope serve DIR`` = ``stepscope DIR``; ``--help`` names both forms."""
    proc = start(subprocess_env, "serve", str(tmp_path), "--port", "0")
    line = first_line(proc)
    stop(proc)
    assert SERVING.match(line)
    helped = run(subprocess_env, "serve", "--help")
    assert helped.returncode == 0 and "stepscope [serve] DIR" in helped.stdout
    assert run(subprocess_env, "serve").returncode == 2  # DIR still required


def test_url_log_directory_without_its_filesystem_exits_2(subprocess_env):
    proc = run(subprocess_env, "nosuchscheme://bucket/logs")
    assert proc.returncode == 2 and "stepscope[remote]" in proc.stderr and proc.stdout == ""


def test_version_flag(subprocess_env):
    proc = run(subprocess_env, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"stepscope {__version__}"


@pytest.mark.skipif(shutil.which("stepscope") is None, reason="package not installed")
def test_console_script(tmp_path, subprocess_env):
    proc = start(subprocess_env, str(tmp_path), "--port", "0", exe=[shutil.which("stepscope")])
    line = first_line(proc)
    stop(proc)
    assert SERVING.match(line)


def test_idle_connections_do_not_starve_the_server(tmp_path, subprocess_env):
    """Issue 12: 150 idle, half-sent requests (waitress' default limit is 100) must not keep
    a new request from being answered within a second."""
    proc = start(subprocess_env, str(tmp_path), "--port", "0")
    try:
        m = SERVING.match(first_line(proc))
        port = int(m["port"])
        idle = []
        for _ in range(150):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /data/plugin/stepscope/runs HTTP/1.1\r\nHost: x\r\n")  # no end
            idle.append(s)
        t0 = time.monotonic()
        status, body = get_json_within(f"http://127.0.0.1:{port}{PREFIX}/runs", 1.0)
        assert status == 200 and body["runs"] == []
        assert time.monotonic() - t0 < 1.0
        for s in idle:
            s.close()
    finally:
        stop(proc)


def get_json_within(url: str, timeout: float):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read())


def _raw_get(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_options_is_405_json_and_slash_redirects_are_relative(server):
    """Issue 12: OPTIONS is 405 with the JSON error body (api.md); ``//path`` redirects to
    a relative Location, never to the request's Host header."""
    _proc, base = server
    port = int(base.rsplit(":", 1)[1])
    head, _, body = _raw_get(port, f"OPTIONS {PREFIX}/runs HTTP/1.0\r\nHost: localhost\r\n\r\n"
                             .encode()).partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"405"
    assert b"Content-Type: application/json" in head
    assert json.loads(body)["error"] == "405 Method Not Allowed"
    for path, to in ((f"{PREFIX}//runs?a=1", f"{PREFIX}/runs?a=1"),
                     ("//?a=1", f"{PREFIX}/index.html?a=1"),
                     (f"{PREFIX}/", "index.html"),
                     ("//evil.example//x", None), (f"/{PREFIX}/runs", None)):
        head = _raw_get(port, f"GET {path} HTTP/1.0\r\nHost: localhost.\r\n\r\n"
                        .encode()).partition(b"\r\n\r\n")[0].decode()
        location = [h.split(":", 1)[1].strip() for h in head.split("\r\n")
                    if h.lower().startswith("location:")]
        if to is not None:
            assert location == [to], (path, head)
        assert not any(loc.startswith("//") or "evil" in loc or "localhost" in loc
                       for loc in location), head
    # (a Host naming another machine is refused outright: tests/test_security.py)
    head = _raw_get(port, f"GET {PREFIX}//runs HTTP/1.0\r\nHost: evil.example\r\n\r\n".encode())
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"403"


# --- SIGTERM ends every child (issue 12) ------------------------------------------------

#: Seconds the server and all its descendants get to end after a SIGTERM.
SHUTDOWN_S = 10


def _serve_group(env: dict, logdir) -> subprocess.Popen:
    """The server in a process group of its own (its descendants stay in it)."""
    return subprocess.Popen([sys.executable, "-m", "stepscope", str(logdir), "--port", "0",
                             "--no-cache"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)


def _group(pgid: int) -> list:
    import psutil

    procs = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                procs.append(p)
        except (OSError, psutil.Error):
            pass
    return procs


def _terminate_all_gone(proc: subprocess.Popen) -> None:
    """SIGTERM the server; within SHUTDOWN_S it and every process of its group are gone."""
    import psutil

    kids = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        try:
            proc.wait(SHUTDOWN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("the server did not exit within "
                                 f"{SHUTDOWN_S} s of SIGTERM") from None
        _, alive = psutil.wait_procs(kids, timeout=max(0.1, SHUTDOWN_S - (time.monotonic() - t0)))
        left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        left += [p for p in _group(proc.pid) if p not in left]
        assert not left, [(p.pid, p.cmdline()[:4]) for p in left]
    finally:
        for p in _group(proc.pid):
            p.kill()


def _big_trace(path) -> int:
    """A ~6 MB trace (decoded with a helper process: worker.HELPER_MIN_BYTES); its size."""
    from tracebuild import op, step

    events = [step(1, 0, 10 ** 8)] + [op(f"aten::op{i % 97}", 10 + 2 * i, 1)
                                       for i in range(70_000)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path.stat().st_size


@pytest.mark.slow
def test_sigterm_while_a_big_trace_is_read_ends_every_child(subprocess_env, tmp_path):
    from stepscope.store.child import HELPER_MIN_BYTES

    (tmp_path / "r").mkdir()
    assert _big_trace(tmp_path / "r" / "w.pt.trace.json") >= HELPER_MIN_BYTES
    proc = _serve_group(subprocess_env, tmp_path)
    first_line(proc)
    import psutil

    def depth(p) -> int:  # (a child may end between the listing and this: depth 0)
        try:
            return len(p.parents())
        except psutil.NoSuchProcess:
            return 0

    def helper_started() -> bool:  # server -> forkserver -> worker -> decode helper
        return any(depth(p) >= 3 + len(psutil.Process(proc.pid).parents())
                   for p in psutil.Process(proc.pid).children(recursive=True))
    until(helper_started, timeout=30, what="the decode helper")
    _terminate_all_gone(proc)


@pytest.mark.slow
def test_sigterm_just_after_the_overview_ends_every_child(subprocess_env, tmp_path):
    (tmp_path / "r").mkdir()
    shutil.copy(next((SHARED / "param_v100_dlrm_8rank").glob("worker0*")),
                tmp_path / "r" / "worker0.pt.trace.json")
    proc = _serve_group(subprocess_env, tmp_path)
    base = SERVING.match(first_line(proc))
    url = (f"http://{base['host']}:{base['port']}{PREFIX}/overview?run=r&worker=worker0")

    def ready() -> bool:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status == 200
    until(ready, timeout=60, what="the overview")
    _terminate_all_gone(proc)


@pytest.mark.slow
def test_sigterm_right_after_start_ends_every_child(subprocess_env, tmp_path):
    (tmp_path / "r").mkdir()
    proc = _serve_group(subprocess_env, tmp_path)
    time.sleep(0.3)  # while the forkserver starts
    _terminate_all_gone(proc)
