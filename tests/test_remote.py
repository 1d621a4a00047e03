"""Remote log directories (issue 21): ``s3://`` against a real S3-compatible server that the
tests start on 127.0.0.1 (moto's ``ThreadedMotoServer``), through s3fs.

The golden trace is uploaded and served through the full path (worker processes, disk
cache keyed by the object's ETag); its answers equal those of the same traces read from
the local disk, byte for byte. A missing bucket or denied access answers a clear 4xx
naming the URL; no credential appears in any response or log line.
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from conftest import SHARED, query, wait_ready

pytest.importorskip("s3fs", reason="needs s3fs (pip install 'stepscope[remote]')")
pytest.importorskip("moto.server", reason="needs moto[server] (the test extra)")

from test_golden import REQUESTS, RUNS  # noqa: E402  (the golden runs and requests)

from stepscope.fs import filesystem, listing_error, redact, scrub  # noqa: E402
from stepscope.store.child import analyse_file  # noqa: E402

GOLDEN = SHARED / "kineto_resnet50"
KEY_ID = "AKIDSTEPSCOPETEST01"
SECRET = "stepscope-secret-never-shown-0123456789"
BUCKET = "stepscope-logs"


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 with the golden runs under s3://BUCKET/golden/;
    credentials and endpoint through the environment only."""
    import s3fs
    from moto.server import ThreadedMotoServer

    from stepscope.processes import _ensure_forkserver

    _ensure_forkserver()  # before the credentials are set: workers get them per job
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem()
        fs.mkdir(BUCKET)
        for run in RUNS:
            fs.put_file(str(GOLDEN / run / "worker0.pt.trace.json.gz"),
                        f"{BUCKET}/golden/{run}/worker0.pt.trace.json.gz")
        yield fs
        s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


def _no_secret(text: str | bytes) -> None:
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    assert SECRET not in text and "pw-in-url" not in text


def test_redact_and_scrub():
    assert redact("s3://AK:pw@bucket/logs?X-Amz-Signature=abc#x") == "s3://bucket/logs"
    assert redact("abfs://container@account.dfs.core.windows.net/logs?sig=1") == \
        "abfs://container@account.dfs.core.windows.net/logs"  # no password: kept
    assert redact("/local/path?x") == "/local/path?x"
    # the same where a library wrote the path or address without its scheme
    assert scrub("logs/x?X-Amz-Signature=SIG1 and 'user:pw-1@127.0.0.1:7699'") == \
        "logs/x and '127.0.0.1:7699'"
    assert scrub("Is it reachable? (yes?) 10:30 a@b") == "Is it reachable? (yes?) 10:30 a@b"
    os.environ["STEPSCOPE_TEST_TOKEN"] = "tok-0123456789"
    try:
        assert scrub("at gs://u:p@b/k?t=1 with tok-0123456789") == "at gs://b/k with ***"
    finally:
        del os.environ["STEPSCOPE_TEST_TOKEN"]
    with pytest.raises(ValueError, match="credentials in the URL") as err:
        filesystem("s3://AK:pw-in-url@bucket/logs")
    _no_secret(str(err.value))


def test_remote_stat_identity_is_the_etag(s3):
    fs, root = filesystem(f"s3://{BUCKET}/golden")
    path = fs.join(root, RUNS[0], "worker0.pt.trace.json.gz")
    st = fs.stat(path)
    info = s3.info(f"{BUCKET}/golden/{RUNS[0]}/worker0.pt.trace.json.gz")
    assert st.identity == info["ETag"].strip('"') and st.identity
    assert st.size == os.path.getsize(GOLDEN / RUNS[0] / "worker0.pt.trace.json.gz")
    assert st.mtime_ns == int(info["LastModified"].timestamp() * 1e9)


def test_s3_log_directory_answers_the_local_bytes(s3, client_for, tmp_path, caplog):
    """Worker processes stream the objects from S3; every golden route's body equals the
    local run's; a second server over the same cache answers from it (keyed by ETag)
    without starting a worker; a re-scan lists a run uploaded meanwhile."""
    caplog.set_level(logging.DEBUG)
    local = client_for(str(GOLDEN), analyse=analyse_file, reload_interval=0)
    url = f"s3://{BUCKET}/golden"
    remote = client_for(url, cache_dir=str(tmp_path / "cache"), reload_interval=0.2)
    from stepscope.web.app import app_store

    runs = remote.get("/data/plugin/stepscope/runs")
    assert runs.status_code == 200 and runs.json["runs"] == list(RUNS)
    compared = 0
    for run in RUNS:
        assert wait_ready(remote, run, "worker0", timeout=120).status_code == 200
        assert wait_ready(local, run, "worker0", timeout=120).status_code == 200
        for route, params in REQUESTS:
            a = local.get(query(route, run=run, worker="worker0", **params))
            b = remote.get(query(route, run=run, worker="worker0", **params))
            assert a.status_code == b.status_code == 200, (route, b.json)
            assert a.data == b.data, route
            compared += 1
    assert compared == 10
    assert app_store(remote.application)._analyse.process_starts >= 1  # worker processes
    from test_golden import Comparer, _golden  # the golden numbers themselves

    golden = _golden()
    c = Comparer()
    c.value(golden[0], remote.get(query("overview", run=RUNS[0], worker="worker0")).json,
            "overview")
    assert not c.errors and c.numbers > 20

    # the cache: a second server over the same URL answers from it, no worker started
    again = client_for(url, cache_dir=str(tmp_path / "cache"), reload_interval=0)
    assert wait_ready(again, RUNS[0], "worker0").status_code == 200
    assert app_store(again.application)._analyse.process_starts == 0

    # a re-scan lists what was uploaded since (listings are not cached between scans)
    s3.put_file(str(GOLDEN / RUNS[1] / "worker0.pt.trace.json.gz"),
                f"{BUCKET}/golden/later/worker0.pt.trace.json.gz")
    deadline = time.monotonic() + 20
    while "later" not in remote.get("/data/plugin/stepscope/runs").json["runs"]:
        assert time.monotonic() < deadline, "the new run never appeared"
        time.sleep(0.2)
    # and a worker added to a run's folder by another client (s3fs forgot the root's listing
    # only: a file added or rewritten inside a run was never seen until a restart; a write
    # through the server's own s3fs instance clears its listings itself)
    import s3fs

    other = s3fs.S3FileSystem(skip_instance_cache=True)
    other.put_file(str(GOLDEN / RUNS[1] / "worker0.pt.trace.json.gz"),
                   f"{BUCKET}/golden/later/worker1.pt.trace.json.gz")
    deadline = time.monotonic() + 20
    while remote.get("/data/plugin/stepscope/workers?run=later").json != ["worker0", "worker1"]:
        assert time.monotonic() < deadline, "the new worker never appeared"
        time.sleep(0.2)

    # a download of an object deleted since its listing: 404 at once (it answered 200 with
    # the old length and no bytes, the error only while streaming)
    assert wait_ready(remote, "later", "worker1", timeout=120).status_code == 200
    other.rm(f"{BUCKET}/golden/later/worker1.pt.trace.json.gz")
    gone = remote.get("/data/plugin/stepscope/trace/download?run=later&worker=worker1")
    assert gone.status_code == 404 and "is gone" in gone.json["error"]
    s3.rm(f"{BUCKET}/golden/later", recursive=True)
    for record in caplog.records:
        _no_secret(record.getMessage())


def test_missing_bucket_is_a_clear_404(s3, client_for, caplog):
    caplog.set_level(logging.DEBUG)
    client = client_for("s3://no-such-bucket-here/logs", reload_interval=0,
                        analyse=analyse_file)
    r = client.get("/data/plugin/stepscope/runs")
    assert r.status_code == 404, r.json
    assert r.json["error"] == "s3://no-such-bucket-here/logs not found"
    assert "bucket does not exist" in r.json["detail"]
    _no_secret(r.data)
    for record in caplog.records:
        _no_secret(record.getMessage())


def test_denied_access_is_a_clear_403(s3, client_for, monkeypatch):
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # enforce IAM auth
    client = client_for(f"s3://{BUCKET}/golden", reload_interval=0, analyse=analyse_file)
    r = client.get("/data/plugin/stepscope/runs")
    assert r.status_code == 403, r.json
    assert r.json["error"] == f"access to s3://{BUCKET}/golden denied"
    assert "AWS_ACCESS_KEY_ID" in r.json["detail"]
    _no_secret(r.data)
    assert KEY_ID not in r.data.decode()


def test_listing_errors_name_the_redacted_url():
    e = listing_error("s3://b/logs?sig=zzz", PermissionError("denied"))
    assert (e.status, str(e)) == (403, "access to s3://b/logs denied")
    assert listing_error("s3://b/x", FileNotFoundError("gone")).status == 404
    other = listing_error("s3://b/x", ConnectionError("refused"))
    assert other.status == 503 and str(other) == "cannot list s3://b/x"
    denied = listing_error("s3://b/x", PermissionError("not in our records."))
    assert denied.detail.startswith("not in our records. Check the credentials")  # (not "..")


def test_cli_refuses_a_missing_bucket_and_url_credentials(s3, capsys):
    from stepscope.cli import main

    for url, says in (("s3://no-such-bucket-here/logs", "s3://no-such-bucket-here/logs not "
                       "found"), ("s3://AK:pw-in-url@b/logs", "credentials in the URL")):
        with pytest.raises(SystemExit) as stop:
            main([url, "--port", "0"])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert says in err, err
        _no_secret(err)
