"""The filesystem seam (plugin/fs.py): local paths through os, URLs through fsspec."""

from __future__ import annotations

import os

import pytest

from stepscope.fs import LOCAL, FsspecFS, LocalFS, filesystem, filesystem_of, is_url


def test_locations_pick_their_filesystem(tmp_path):
    assert filesystem(str(tmp_path)) == (LOCAL, str(tmp_path))
    assert filesystem(f"file://{tmp_path}") == (LOCAL, str(tmp_path))
    assert filesystem("relative/dir")[1] == os.path.abspath("relative/dir")
    assert not is_url("C:\\logs") and not is_url("/a://b") and is_url("s3://b/p")
    pytest.importorskip("fsspec")  # the [remote] extra
    fs, root = filesystem("memory://logs")
    assert isinstance(fs, FsspecFS) and root == "memory://logs"
    assert filesystem_of("memory://logs/a.json") is not LOCAL and filesystem_of("/x") is LOCAL


def test_unknown_scheme_says_what_to_install():
    with pytest.raises(ValueError, match="stepscope\\[remote\\]"):
        filesystem("nosuchscheme://bucket/x")


def test_local_stat_scandir_and_guard(tmp_path):
    (tmp_path / "run").mkdir()
    f = tmp_path / "run" / "w.pt.trace.json"
    f.write_bytes(b"{}")
    outside = tmp_path.parent / (tmp_path.name + "-outside.json")
    outside.write_text("{}")
    (tmp_path / "run" / "link.json").symlink_to(outside)
    (tmp_path / "run" / "dangling.json").symlink_to(tmp_path / "missing")
    fs = LocalFS()
    st = fs.stat(str(f))
    assert (st.size, st.mtime_ns, st.identity) == (2, os.stat(f).st_mtime_ns, os.stat(f).st_ino)
    entries = {e.name: e for e in fs.scandir(str(tmp_path / "run"))}
    assert entries["w.pt.trace.json"].is_file and not entries["w.pt.trace.json"].is_dir
    assert not entries["dangling.json"].is_file  # a dangling link is nothing
    assert fs.is_inside(str(tmp_path), str(f))
    assert not fs.is_inside(str(tmp_path), str(tmp_path / "run" / "link.json"))
    assert not fs.is_inside(str(tmp_path / "run"), str(tmp_path / "run" / ".." / "x"))
    with fs.open(str(f)) as fh:
        assert fh.read() == b"{}"
    outside.unlink()


def test_fsspec_memory_filesystem_lists_stats_and_reads():
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    mem.pipe("/seam-test/run1/worker0.pt.trace.json", b'{"traceEvents": []}')
    fs, root = filesystem("memory://seam-test")
    names = {e.name: e for e in fs.scandir(root)}
    assert names["run1"].is_dir
    (entry,) = fs.scandir(fs.join(root, "run1"))
    assert entry.is_file and entry.name == "worker0.pt.trace.json"
    assert entry.path == "memory://seam-test/run1/worker0.pt.trace.json"
    assert fs.stat(entry.path).size == len(b'{"traceEvents": []}')
    with fs.open(entry.path) as f:
        assert f.read() == b'{"traceEvents": []}'
    assert fs.is_inside(root, entry.path)
    assert not fs.is_inside(root, fs.join(root, "run1", "..", "..", "etc"))
    assert fs.is_regular_file(entry.path) and not fs.is_regular_file(fs.join(root, "run1"))
    mem.rm("/seam-test", recursive=True)


def test_a_log_directory_url_is_served_end_to_end(client_for):
    """memory:// stands in for an object store: discovery lists it, the reader streams the
    file through fsspec, views answer and trace/download serves the original bytes."""
    fsspec = pytest.importorskip("fsspec")
    import json

    from conftest import query, wait_ready
    from tracebuild import kernel, op, runtime, step

    from stepscope.store.child import analyse_file

    events = [step(1, 0, 100), op("aten::mm", 10, 50, ext=7), runtime("cudaLaunchKernel", 20, 5,
              corr=3, ext=7), kernel("gemm", 30, 40, corr=3)]
    data = json.dumps({"traceEvents": events}).encode()
    mem = fsspec.filesystem("memory")
    mem.pipe("/url-logdir/job/worker0.pt.trace.json", data)
    mem.pipe("/url-logdir/job/notes.json", b'{"not": "a trace"}')
    try:
        client = client_for("memory://url-logdir", analyse=analyse_file)
        runs = client.get("/data/plugin/stepscope/runs").json
        assert runs["runs"] == ["job"]
        assert runs["skipped"] == [{"file": "job/notes.json", "reason": runs["skipped"][0]["reason"]}]
        assert wait_ready(client, "job", "worker0").json[:3] == ["Overview", "Operator", "Kernel"]
        rows = client.get(query("kernel/table", run="job", worker="worker0")).json["data"]["rows"]
        assert rows[0][:3] == ["gemm", 1, 40]
        dl = client.get(query("trace/download", run="job", worker="worker0"))
        assert dl.status_code == 200 and dl.data == data
    finally:
        mem.rm("/url-logdir", recursive=True)
