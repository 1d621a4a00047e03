"""Discovery of runs, workers and spans (SPEC §1.1)."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from conftest import SHARED, SHARED_RUNS

from stepscope.discovery import (
    CUT_OFF,
    NO_EVENTS,
    Scanner,
    Sniff,
    TopLevelScanner,
    has_traces,
    parse_name,
    shadow_note,
    snapshot,
    sniff_bytes,
    sniff_file,
    sniff_trace,
)

TRACE = b'{"schemaVersion": 1, "traceEvents": []}'


def write(path, data: bytes = TRACE, mtime: float | None = None):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def layout(snap) -> dict:
    """``{run: {worker: [spans]}}`` with file names, for compact asserts."""
    return {run: {w: {s: os.path.basename(i.path) for s, i in spans.items()}
                  for w, spans in workers.items()} for run, workers in snap.items()}


@pytest.mark.parametrize("name, expected", [
    ("worker0.1623143089861.pt.trace.json.gz", ("worker0", "1623143089861")),
    ("rank-0.Apr_03_18_51_38.1102.pt.trace.json", ("rank-0.Apr_03_18_51_38", "1102")),
    ("worker0_step_12.1694128201545.pt.trace.json", ("worker0_step_12", "1694128201545")),
    ("worker0.pt.trace.json", ("worker0", "default")),
    ("libkineto_activities_4242.json", ("libkineto_activities_4242", "default")),
    ("trace.json.gz", ("trace", "default")),
    ("host.1.json", ("host", "1")),
    ("notes.txt", None),
])
def test_parse_name(name, expected):
    assert parse_name(name) == expected


@pytest.mark.parametrize("head, is_trace", [
    (b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}', True),
    (b'\xef\xbb\xbf \n\t{ "traceEvents": [', True),  # BOM, whitespace, cut off
    (b'{"traceEvents"', True),  # cut right after the key
    (b'[{"name": "aten::mm", "ph": "X", "ts": 1}]', True),
    (b'[ {"args": {"a": [1, {"b": 2}]}, "ph": "X"}', True),  # ph after nested args
    (b'[{"name": "a\\"ph\\": ", "args": {"ph": "X"}}]', False),  # only nested / in strings
    (b'[{"key": "aten::mm", "count": 3, "cpu_time_total": 12.5}]', False),  # key_averages
    (b'{"model": "resnet50", "batch_size": 32}', False),  # meta.json-like
    # SPEC §1.1: only a top-level traceEvents *list* makes an object a trace
    (b'{"schemaVersion": 1, "deviceProperties": []}', False),
    (b'{"displayTimeUnit": "ms"}', False),
    (b'{"traceEvents": 5}', False),
    (b'{"traceEvents": {"ph": "X"}}', False),
    (b'{"metadata": {"traceEvents": []}}', False),  # nested, not top level
    (b'{"note": "{\\"traceEvents\\": [", "n": 1}', False),  # inside a string
    (b'{}', False),
    (b'[]', False),
    (b'', False),
    (b'not json', False),
])
def test_sniff_bytes(head, is_trace):
    assert sniff_bytes(head) is is_trace


def metadata_first(metadata_bytes: int) -> bytes:
    """An analysis tool's export: a big ``metadata`` object (nested lists, strings with
    quotes, escapes, brackets and a decoy ``traceEvents``) before ``traceEvents``."""
    item = b'{"k": "a \\"quoted\\" ]}[{ \\\\", "v": [1, 2.5, null, {"traceEvents": [1]}]},'
    items = item * (metadata_bytes // len(item))
    return (b'{\n  "metadata": {"runs": [' + items + b'{}], "ok": true},\n  "schemaVersion": 1,'
            b'\n  "traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]\n}')


def test_trace_after_a_large_metadata_object_is_detected(tmp_path):
    """Issue 11: traceEvents ~26 KB (here ~200 KB) in, after a metadata object; plain, gzip,
    and fed to the scanner in pieces that cut strings, escapes and the BOM anywhere."""
    data = metadata_first(200_000)
    assert data.index(b'"traceEvents": [{') > 200_000
    write(tmp_path / "export.json", data)
    write(tmp_path / "export2.json.gz", data)
    assert sniff_file(str(tmp_path / "export.json")) == Sniff(True)
    assert sniff_file(str(tmp_path / "export2.json.gz")) == Sniff(True)
    small = b"\xef\xbb\xbf" + metadata_first(300)
    for size in (1, 2, 3, 7):
        scanner = TopLevelScanner()
        verdicts = [scanner.feed(small[i:i + size]) for i in range(0, len(small), size)]
        assert [v for v in verdicts if v is not None][:1] == [Sniff(True)], size
    snap = layout(snapshot(str(tmp_path)))
    assert snap == {tmp_path.name: {"export": {"default": "export.json"},
                                    "export2": {"default": "export2.json.gz"}}}


def test_metadata_without_trace_events_is_skipped_with_the_reason(tmp_path):
    data = metadata_first(20_000)
    cut = data[:data.index(b'"schemaVersion"')] + b'"x": 1}'  # same object, no traceEvents
    json.loads(cut)
    write(tmp_path / "results.json", cut)
    assert sniff_file(str(tmp_path / "results.json")) == Sniff(False, NO_EVENTS)


def test_scan_stops_at_the_limit(tmp_path, monkeypatch):
    import stepscope.discovery as discovery

    monkeypatch.setattr(discovery, "SNIFF_LIMIT", 1 << 20)
    write(tmp_path / "big.json", metadata_first(2 << 20))
    assert sniff_file(str(tmp_path / "big.json")) == Sniff(
        False, 'no top-level "traceEvents" list in the first 1 MiB')
    write(tmp_path / "ok.json", metadata_first(900_000))
    assert sniff_file(str(tmp_path / "ok.json")) == Sniff(True)


@pytest.mark.parametrize("data, reason", [
    (b"", "empty file"),
    (b"  \n", "empty file"),
    (b"hello", "not JSON (does not start with { or [)"),
    (b'{"lr": 0.1}', NO_EVENTS),
    (b"{}", "an empty JSON object"),
    (b'{"traceEvents": null}', '"traceEvents" is not a list'),
    (b'{"schemaVersion": 1, "deviceProperties": [{"name": "A100"', CUT_OFF),
    (b'[{"key": "aten::mm", "count": 1}]', 'a JSON list whose first element has no "ph" key'),
    (b"[1, 2]", "a JSON list whose first element is not an event object"),
])
def test_sniff_reasons(tmp_path, data, reason):
    write(tmp_path / "f.json", data)
    assert sniff_file(str(tmp_path / "f.json")) == Sniff(False, reason)


def test_sniff_gzip_reads_only_the_start(tmp_path):
    big = b'{"traceEvents": [' + b'{"ph": "X", "name": "op", "ts": 1, "dur": 2},' * 200_000
    write(tmp_path / "libkineto_activities_1.json.gz", big + b"{}]}")
    assert sniff_trace(str(tmp_path / "libkineto_activities_1.json.gz"))
    (tmp_path / "broken.json.gz").write_bytes(b"\x1f\x8b garbage")
    assert not sniff_trace(str(tmp_path / "broken.json.gz"))


def test_runs_at_any_depth_named_by_relative_path(tmp_path):
    root = tmp_path / "logs"
    write(root / "worker0.pt.trace.json")
    write(root / "exp" / "a" / "rank1.pt.trace.json.gz")
    write(root / "exp" / "b" / "trace.json")  # sniffs as a trace
    write(root / "exp" / "empty_dir" / "readme.txt", b"hi")
    assert layout(snapshot(str(root))) == {
        "exp/a": {"rank1": {"default": "rank1.pt.trace.json.gz"}},
        "exp/b": {"trace": {"default": "trace.json"}},
        "logs": {"worker0": {"default": "worker0.pt.trace.json"}},
    }


def test_side_files_and_non_traces_are_not_workers(tmp_path):
    write(tmp_path / "worker0.pt.trace.json")
    write(tmp_path / "key_averages.json", b'[{"key": "aten::mm", "count": 1}]')
    write(tmp_path / "meta.json", b'{"traceEvents": "even if it looked like one"}')
    write(tmp_path / "config.json", b'{"lr": 0.1}')
    write(tmp_path / "libkineto_activities_77.json", b'{"traceEvents": []}')
    write(tmp_path / "legacy.json", b'[{"name": "aten::add", "ph": "X", "pid": "CPU functions"}]')
    write(tmp_path / "empty.pt.trace.json", b"")  # always a trace by name: 422 later
    (run,) = layout(snapshot(str(tmp_path))).values()
    assert sorted(run) == ["empty", "legacy", "libkineto_activities_77", "worker0"]


def test_spans_sorted_numerically_and_workers_naturally(tmp_path):
    for name in ["worker10.5.pt.trace.json", "worker2.10.pt.trace.json",
                 "worker2.9.pt.trace.json", "worker2.100.pt.trace.json"]:
        write(tmp_path / name)
    (run,) = snapshot(str(tmp_path)).values()
    assert list(run) == ["worker2", "worker10"]
    assert list(run["worker2"]) == ["9", "10", "100"]


def test_json_and_json_gz_same_span_newer_wins_with_note(tmp_path):
    write(tmp_path / "worker0.pt.trace.json", mtime=1_700_000_000)
    write(tmp_path / "worker0.pt.trace.json.gz", mtime=1_700_000_100)
    write(tmp_path / "worker1.pt.trace.json", mtime=1_700_000_200)
    write(tmp_path / "worker1.pt.trace.json.gz", mtime=1_700_000_100)
    (run,) = snapshot(str(tmp_path)).values()
    w0, w1 = run["worker0"]["default"], run["worker1"]["default"]
    assert w0.name == "worker0.pt.trace.json.gz"
    assert w1.name == "worker1.pt.trace.json"
    assert [os.path.basename(p) for p in w0.shadowed] == ["worker0.pt.trace.json"]
    note = shadow_note(w0)
    assert note["code"] == "duplicate_file" and "worker0.pt.trace.json.gz" in note["text"]
    assert shadow_note(run["worker1"]["default"]) is not None


def test_hidden_folders_and_files_skipped(tmp_path):
    write(tmp_path / "run" / "worker0.pt.trace.json")
    write(tmp_path / ".git" / "worker0.pt.trace.json")
    write(tmp_path / "run" / ".cache" / "worker0.pt.trace.json")
    write(tmp_path / "run" / "._worker0.pt.trace.json", b"\x00\x05\x16\x07")  # macOS AppleDouble
    snap = snapshot(str(tmp_path))
    assert list(snap) == ["run"] and list(snap["run"]) == ["worker0"]


def test_a_folder_linked_beside_itself_keeps_its_own_name(tmp_path):
    """``latest -> run3`` beside run3: the run stays "run3" whatever order the folder
    lists its entries in; a folder reached only through a link is named by the link."""
    for i in range(6):
        write(tmp_path / f"run{i}" / "worker0.pt.trace.json")
        (tmp_path / f"latest{i}").symlink_to(tmp_path / f"run{i}", target_is_directory=True)
    write(tmp_path.parent / f"{tmp_path.name}_outside" / "w.pt.trace.json")
    (tmp_path / "zz_link").symlink_to(tmp_path.parent / f"{tmp_path.name}_outside")
    assert list(snapshot(str(tmp_path))) == [f"run{i}" for i in range(6)] + ["zz_link"]


def test_symlinks_followed_and_loops_end(tmp_path):
    outside = tmp_path / "outside"
    write(outside / "worker0.pt.trace.json")
    root = tmp_path / "logs"
    write(root / "real" / "worker1.pt.trace.json")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "real" / "loop").symlink_to(root, target_is_directory=True)  # cycle
    (root / "real" / "self").symlink_to(root / "real", target_is_directory=True)
    (root / "real" / "worker2.pt.trace.json").symlink_to(outside / "worker0.pt.trace.json")
    (root / "real" / "dangling.pt.trace.json").symlink_to(tmp_path / "nowhere")
    snap = layout(snapshot(str(root)))
    assert snap == {"linked": {"worker0": {"default": "worker0.pt.trace.json"}},
                    "real": {"worker1": {"default": "worker1.pt.trace.json"},
                             "worker2": {"default": "worker2.pt.trace.json"}}}


def test_scanner_caches_sniffing_until_the_file_changes(tmp_path, monkeypatch):
    path = write(tmp_path / "trace.json", b'{"lr": 1}', mtime=1_700_000_000)
    scanner = Scanner(str(tmp_path))
    assert scanner.snapshot() == {}
    calls = []
    import stepscope.discovery as discovery
    real = discovery.sniff_file
    monkeypatch.setattr(discovery, "sniff_file", lambda p: calls.append(p) or real(p))
    assert scanner.snapshot() == {}
    assert calls == []  # unchanged file: cached verdict
    write(path, TRACE, mtime=1_700_000_500)
    assert list(scanner.snapshot()) == [tmp_path.name]
    assert calls == [str(path)]


def test_shared_traces_give_all_runs():
    snap = snapshot(str(SHARED))
    assert list(snap) == SHARED_RUNS
    dlrm = snap["param_v100_dlrm_8rank"]
    assert list(dlrm) == [f"worker{i}_step_12" for i in range(8)]
    assert list(dlrm["worker0_step_12"]) == ["1694128201545"]
    assert list(snap["hta_cpu_only_gloo"]) == ["rank-34.Jul_15_10_52_41"]
    assert "expected" not in str(snap["kineto_resnet50/resnet50_num_workers_0"])


def test_has_traces(tmp_path):
    assert not has_traces(str(tmp_path))
    write(tmp_path / "a" / "b" / "config.json", b'{"lr": 1}')
    assert not has_traces(str(tmp_path))
    write(tmp_path / "a" / "b" / "libkineto_activities_1.json")
    assert has_traces(str(tmp_path))
    assert has_traces(str(SHARED))


def test_names_that_are_not_utf8_round_trip(tmp_path):
    """Issue 12: Latin-1 folder and file names are shown with U+FFFD, made unique, and keep
    their real paths (the bytes open the file)."""
    root = os.fsencode(tmp_path)
    for folder in (b"caf\xe9", b"caf\xe8", "café".encode()):
        os.makedirs(os.path.join(root, folder))
    for folder, name in ((b"caf\xe9", b"w\xe9.pt.trace.json"), (b"caf\xe9", b"w\xe8.pt.trace.json"),
                         (b"caf\xe8", b"worker0.pt.trace.json"),
                         ("café".encode(), b"worker0.pt.trace.json"),
                         (b"caf\xe9", b"notes\xff.json")):
        with open(os.path.join(root, folder, name), "wb") as f:
            f.write(b'{"x": 1}' if name.startswith(b"notes") else TRACE)
    scanner = Scanner(str(tmp_path))
    snap = scanner.snapshot()
    assert list(snap) == ["café", "caf\ufffd", "caf\ufffd (2)"]
    assert list(snap["caf\ufffd (2)"]) == ["w\ufffd", "w\ufffd (2)"]
    real = snap["caf\ufffd (2)"]["w\ufffd (2)"]["default"]
    assert os.fsencode(real.path) == os.path.join(root, b"caf\xe9", b"w\xe9.pt.trace.json")
    assert real.name == "w\ufffd.pt.trace.json"
    with open(real.path, "rb") as f:
        assert f.read() == TRACE
    assert os.fsencode(snap["caf\ufffd"]["worker0"]["default"].path).startswith(
        os.path.join(root, b"caf\xe8"))
    assert scanner.skipped == [{"file": "caf\ufffd/notes\ufffd.json", "reason": NO_EVENTS}]


def test_root_run_named_like_a_sub_folder_is_dot(tmp_path):
    """Issue 12: a sub-folder named like the log directory must not hide the root run."""
    root = tmp_path / "logs"
    write(root / "worker0.pt.trace.json")
    write(root / "logs" / "worker1.pt.trace.json")
    assert layout(snapshot(str(root))) == {
        ".": {"worker0": {"default": "worker0.pt.trace.json"}},
        "logs": {"worker1": {"default": "worker1.pt.trace.json"}},
    }
    write(root / "other" / "worker2.pt.trace.json")
    (root / "logs" / "worker1.pt.trace.json").unlink()
    assert list(snapshot(str(root))) == ["logs", "other"]  # no clash: its own name again


def test_skipped_files_listed_and_logged_once(tmp_path, caplog):
    write(tmp_path / "worker0.pt.trace.json")
    write(tmp_path / "key_averages.json", b'[{"key": "aten::mm", "count": 1}]')
    write(tmp_path / "sub" / "config.json", b'{"lr": 0.1}')
    write(tmp_path / "sub" / "notes.txt", b"not json at all")  # not *.json: not listed
    scanner = Scanner(str(tmp_path))
    with caplog.at_level("WARNING", logger="stepscope.discovery"):
        scanner.snapshot()
        scanner.snapshot()
    expected = [{"file": "key_averages.json", "reason": "a profiler side file, not a trace"},
                {"file": "sub/config.json", "reason": NO_EVENTS}]
    assert scanner.skipped == expected
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"skipping {tmp_path}/key_averages.json: a profiler side file, not a trace",
        f"skipping {tmp_path}/sub/config.json: {NO_EVENTS}"]


def test_a_folder_that_cannot_be_listed_for_now_keeps_its_runs():
    """A passing listing error of a remote sub-folder (a timeout) keeps the runs found
    there before; a folder never listed stays out."""
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    for run in ("run1", "run2"):
        mem.pipe(f"/passing/{run}/worker0.pt.trace.json", b'{"traceEvents": []}')
    scanner = Scanner("memory://passing")
    assert list(scanner.snapshot()) == ["run1", "run2"]
    real_ls = type(scanner.fs.fs).ls

    def flaky(self, path, *a, **k):
        if path.rstrip("/").endswith("run1"):
            raise TimeoutError("read timed out")
        return real_ls(self, path, *a, **k)
    try:
        type(scanner.fs.fs).ls = flaky
        assert list(scanner.snapshot()) == ["run1", "run2"]
        assert list(Scanner("memory://passing").snapshot()) == ["run2"]  # never listed
    finally:
        type(scanner.fs.fs).ls = real_ls
        mem.rm("/passing", recursive=True)


def test_unreadable_folders_and_files_are_listed_as_skipped_with_the_reason(tmp_path, caplog,
                                                                           monkeypatch):
    """A run folder or file the server may not read (chmod 000) vanished from the runs
    without a word (SPEC §1.4: nothing is hidden without a reason)."""
    for run in ("runA", "runB"):
        write(tmp_path / run / "worker0.pt.trace.json")
    write(tmp_path / "runA" / "worker1.pt.trace.json")
    scanner = Scanner(str(tmp_path))
    assert list(scanner.snapshot()) == ["runA", "runB"]
    real_scandir, real_stat = scanner.fs.scandir, scanner.fs.stat

    def scandir(folder):
        if folder.endswith("runB"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(folder)

    def stat(path):
        if path.endswith("worker1.pt.trace.json"):
            raise PermissionError(13, "Permission denied")
        return real_stat(path)

    # (scanner.fs is the one local filesystem object: patched for this test only)
    monkeypatch.setattr(scanner.fs, "scandir", scandir)
    monkeypatch.setattr(scanner.fs, "stat", stat)
    with caplog.at_level("WARNING", logger="stepscope.discovery"):
        runs = scanner.snapshot()
        scanner.snapshot()
    assert {r: list(w) for r, w in runs.items()} == {"runA": ["worker0"]}
    assert scanner.skipped == [
        {"file": "runA/worker1.pt.trace.json", "reason": "cannot read: Permission denied"},
        {"file": "runB/", "reason": "cannot list this folder: Permission denied"}]
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot list {tmp_path}/runB: [Errno 13] Permission denied"]  # once


def test_listing_errors_say_what_to_do():
    """No credentials at all is a 403 about credentials (not "is the service reachable?");
    a URL naming a file is a 404 asking for the folder."""
    from stepscope.fs import listing_error

    class NoCredentialsError(Exception):  # botocore's, by name
        pass
    denied = listing_error("s3://b/logs", NoCredentialsError("Unable to locate credentials"))
    assert denied.status == 403 and "AWS_ACCESS_KEY_ID" in denied.detail
    file = listing_error("file:///x/w.pt.trace.json", NotADirectoryError(20, "Not a directory"))
    assert file.status == 404 and str(file).endswith("is not a folder") and "not a file" in file.detail


def test_a_side_file_rewritten_every_step_is_logged_once(tmp_path, caplog):
    import logging
    caplog.set_level(logging.WARNING, logger="stepscope.discovery")
    scanner = Scanner(str(tmp_path))
    for step in range(4):
        write(tmp_path / "trainer_state.json", json.dumps({"global_step": step}).encode(),
              mtime=1_700_000_000 + step)
        scanner.snapshot()
    assert sum("trainer_state.json" in r.getMessage() for r in caplog.records) == 1
    assert scanner.skipped[0]["file"] == "trainer_state.json"


def test_a_remote_url_naming_a_file_is_refused_as_not_a_folder():
    """As a local path naming a file is: not a run named after the file."""
    fsspec = pytest.importorskip("fsspec")
    from stepscope.errors import StepscopeError
    mem = fsspec.filesystem("memory")
    mem.pipe("/afile/run1/trace.json", b'{"traceEvents": []}')
    try:
        with pytest.raises(StepscopeError) as e:
            Scanner("memory://afile/run1/trace.json").snapshot()
        assert e.value.status == 404 and "is not a folder" in str(e.value)
        assert list(Scanner("memory://afile").snapshot()) == ["run1"]
    finally:
        mem.rm("/afile", recursive=True)
