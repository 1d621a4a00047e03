"""Analysis in worker processes through the disk cache (issue 5)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
from conftest import SHARED
from tracebuild import NO_SHARED, op, step

from stepscope.errors import Loading, NotReady, StepscopeError
from stepscope.store.lazy import LazyTimeline, TimelineSlots, timeline_key
from stepscope.store.pool import Analyser

RESNET4 = SHARED / "kineto_resnet50" / "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"
DLRM0 = next((SHARED / "param_v100_dlrm_8rank").glob("worker0*"), SHARED / "missing")


@pytest.fixture(scope="module")
def analyser(tmp_path_factory):
    a = Analyser(cache_dir=str(tmp_path_factory.mktemp("cache")), jobs=2)
    yield a
    a.close()


def _run(analyser, path):
    phases = []
    views = analyser(str(path), lambda phase, f: phases.append((phase, f)))
    views.timeline.wait()  # the worker stores the timeline after the payloads
    return views, phases


def _timeline(views, params):
    """``trace/timeline`` of ``views``, waiting while it is (re)built in the background."""
    for _ in range(3):
        try:
            return views.get("trace/timeline", params)
        except NotReady:
            views.timeline.wait()
    raise AssertionError("the timeline never became ready")


def _payloads(views) -> bytes:
    return orjson.dumps([views.get(r, {}) for r in ("overview", "operation/table",
                                                    "kernel/table", "kernel")],
                        option=orjson.OPT_SERIALIZE_NUMPY)


def test_cold_then_cache_hit(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json.gz"
    shutil.copy(RESNET4, path)
    cold, phases = _run(analyser, path)
    assert phases[0] == ("read", 0.0) and phases[-1][0] == "cache"
    fractions = [f for _, f in phases]
    assert fractions == sorted(fractions)
    warm, phases = _run(analyser, path)
    assert [p for p, _ in phases] == ["cache"]  # no worker process, no reading
    assert _payloads(warm) == _payloads(cold)
    assert warm.get("overview", {})["environments"][2]["value"] == "83.63 %"  # golden
    whole = warm.get("trace/timeline", {"width": "500"})
    assert sum(b[4] for lane in whole["lanes"] if lane["kind"] == "device"
               for b in lane["blocks"]) == 9456 + 351 + 12  # kernels + memsets + memcpys


def test_changed_file_is_analysed_again(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    first, _ = _run(analyser, path)
    text = path.read_bytes().replace(b'"ProfilerStep#', b'"ProfilerStep#1')  # step N -> 1N
    path.write_bytes(text)
    os.utime(path, ns=(1, 1))  # a different mtime for sure
    second, phases = _run(analyser, path)
    assert phases[0][0] == "read"
    step = first.get("overview", {})["steps"]["rows"][0][0]
    assert second.get("overview", {})["steps"]["rows"][0][0] == "1" + step


def test_corrupt_entry_is_rebuilt(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    good, _ = _run(analyser, path)
    folder = analyser.cache._folder(timeline_key(analyser.cache.key(str(path))))
    victim = "small.bin"  # the timeline's small arrays (a big one has its own .npy)
    with open(os.path.join(folder, victim), "r+b") as f:
        f.seek(200)
        f.write(b"\x00garbage\x00")
    again, phases = _run(analyser, path)
    assert [p for p, _ in phases] == ["cache"]  # the payloads are fine and load at once
    assert _payloads(again) == _payloads(good)
    # the corrupt array is found when the timeline loads: 202 while it is analysed again
    with pytest.raises(NotReady):
        again.get("trace/timeline", {"width": "300"})
    assert _timeline(again, {"width": "300"}) == good.get("trace/timeline", {"width": "300"})


def test_unusable_file_is_a_422_from_the_worker(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    path.write_text("<html>502 Bad Gateway</html>")
    with pytest.raises(StepscopeError) as e:
        _run(analyser, path)
    assert e.value.status == 422 and e.value.file == "w.pt.trace.json"
    assert e.value.position == {"byte": 0, "line": 1}


def test_no_cache_leaves_nothing_behind(tmp_path):
    a = Analyser(no_cache=True, jobs=1)
    try:
        views, _ = _run(a, DLRM0)
        assert views.names()[0] == "Overview"
        assert views.get("trace/timeline", {"width": "100"})["lanes"]
    finally:
        a.close()
    assert not os.path.exists(a.cache.root)


def test_only_a_few_timelines_stay_loaded(tmp_path):
    """Timelines load on first use and at most LOADED_TIMELINES stay mapped (open files)."""
    from stepscope.store.lazy import LOADED_TIMELINES

    a = Analyser(cache_dir=str(tmp_path / "c"), jobs=2)
    try:
        paths = sorted((SHARED / "param_v100_dlrm_8rank").glob("*.json"))
        views = [_run(a, p)[0] for p in paths]
        assert all(v.timeline._timeline is None for v in views)  # nothing mapped yet
        for v in views:
            assert v.get("trace/timeline", {"width": "200"})["lanes"]
        loaded = [v for v in views if v.timeline._timeline is not None]
        assert len(loaded) == LOADED_TIMELINES == len(a.timelines._loaded)
        assert loaded == views[-LOADED_TIMELINES:]  # least recently used went first
        import gc

        gc.collect()
        mapped = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                mapped.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the fd of listdir itself, closed by now
                pass
        mapped = [p for p in mapped if p.startswith(a.cache.root)]
        entries = [v.timeline.entry for v in loaded]
        # arrays stored narrow are widened into memory on load: only the others stay mapped
        arrays = sum("dtype" not in e.manifest["files"][n + ".npy"] for e in entries
                     for n in e.names() if n + ".npy" in e.manifest["files"])
        assert len(mapped) == arrays  # the unloaded timelines' files are closed
        again = views[0].get("trace/timeline", {"width": "200"})  # reloads transparently
        assert again == _run(a, paths[0])[0].get("trace/timeline", {"width": "200"})
    finally:
        a.close()


def test_timeline_of_an_evicted_entry_is_rebuilt(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    views, _ = _run(analyser, path)
    want = views.get("trace/timeline", {"width": "300"})
    views.timeline.unload()
    shutil.rmtree(analyser.cache._folder(timeline_key(analyser.cache.key(str(path)))))  # evicted
    with pytest.raises(NotReady):  # analysed again in the background, not on this thread
        views.get("trace/timeline", {"width": "300"})
    assert _timeline(views, {"width": "300"}) == want


def test_timeline_of_a_changed_file_is_not_rebuilt_from_the_new_version(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    views, _ = _run(analyser, path)
    shutil.rmtree(analyser.cache._folder(timeline_key(analyser.cache.key(str(path)))))
    os.utime(path, ns=(1, 1))  # a new version: the store will analyse it as a new job
    with pytest.raises(StepscopeError) as e:
        views.get("trace/timeline", {"width": "300"})
    assert e.value.status == 503 and "changed" in e.value.error


def test_a_broken_pool_is_not_the_timelines_own_error(analyser, tmp_path):
    """A worker killed for another trace breaks the pool under every task: a timeline
    stored before that loads; one not stored is analysed again (not a sticky error)."""
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    views, _ = _run(analyser, path)
    want = views.get("trace/timeline", {"width": "300"})
    died = StepscopeError("analysis process died", "killed", status=422)
    died.retry = True
    building = FakeBuilding(died)
    building.finished.set()
    assert _lazy(analyser, path, building).query(None, None, 300) == want


class FakeBuilding:
    """A timeline a worker is still building, finished when the test says so."""

    def __init__(self, error=None):
        self.finished = threading.Event()
        self.err = error

    def done(self):
        return self.finished.is_set()

    def loading(self):
        return Loading("analyse", 0.975, 1.5)

    def error(self):
        self.finished.wait()
        return self.err


def _lazy(analyser, path, building):
    key = timeline_key(analyser.cache.key(str(path)))

    def rebuild():
        raise AssertionError("the timeline is in the cache: nothing to rebuild")
    return LazyTimeline(lambda: analyser.cache.get(str(path), key), rebuild,
                        TimelineSlots(), building)


def test_timeline_answers_202_until_the_worker_stored_it(analyser, tmp_path):
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    views, _ = _run(analyser, path)
    want = views.get("trace/timeline", {"width": "300"})
    building = FakeBuilding()
    lazy = _lazy(analyser, path, building)
    for _ in range(2):
        with pytest.raises(NotReady) as e:
            lazy.query(None, None, 300)
        assert e.value.loading.body() == {"loading": True, "phase": "analyse",
                                          "fraction": 0.975, "elapsed_s": 1.5}
    building.finished.set()
    assert lazy.query(None, None, 300) == want


def test_timeline_error_stays_the_trace_view_answer(analyser, tmp_path):
    """A worker that stored the payloads but failed on the timeline (out of memory, say):
    the trace view answers that error, the other views keep working."""
    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    _run(analyser, path)
    building = FakeBuilding(StepscopeError("analysis process died", "out of memory",
                                           status=422))
    building.finished.set()
    lazy = _lazy(analyser, path, building)
    for _ in range(2):
        with pytest.raises(StepscopeError) as e:
            lazy.event(0)
        assert e.value.status == 422 and e.value.error == "analysis process died"


def test_payloads_come_before_the_timeline(analyser, tmp_path):
    """The worker stores the payloads, then the timeline: the views come back at once with
    the worker still attached as the timeline's builder."""
    path = tmp_path / "w.pt.trace.json.gz"
    shutil.copy(RESNET4, path)
    views = analyser(str(path), lambda phase, f: None)
    building = views.timeline.building
    assert building is not None and building.loading().phase == "analyse"
    assert building.loading().fraction >= 0.95  # goes on from the "cache" phase's 0.95
    assert views.get("overview", {})["environments"][2]["value"] == "83.63 %"
    assert building.error() is None  # the worker ended well
    assert analyser.cache.get(str(path), timeline_key(analyser.cache.key(str(path))))
    assert views.get("trace/timeline", {"width": "100"})["lanes"]
    assert views.timeline.building is None


class _Job:
    """What the analyser sees of the scheduler's job: progress, ``first``, ``loading``."""

    def __init__(self):
        self.heard: list[str] = []
        self.early = None

    def __call__(self, phase: str, fraction: float) -> None:
        self.heard.append(phase)

    def first(self, views) -> None:
        self.heard.append("first")
        self.early = views

    def loading(self) -> Loading:
        return Loading("analyse", 0.8, 1.5)


def test_the_overview_is_handed_over_before_the_other_views(analyser, tmp_path):
    """Issue 19: the worker sends the Overview tab's parts before it builds the other views;
    they answer as the complete views do, and the other routes raise NotReady at the job's
    progress meanwhile. A cache hit has nothing to hand over early."""
    path = tmp_path / "w.pt.trace.json.gz"
    shutil.copy(RESNET4, path)
    job = _Job()
    views = analyser(str(path), job)
    views.timeline.wait()
    early = job.early
    assert job.heard.index("first") > job.heard.index("analyse")
    assert job.heard.index("first") < job.heard.index("cache")  # before the payloads load
    assert early.get("overview", {}) == views.get("overview", {})
    assert early.get("overview", {})["environments"][2]["value"] == "83.63 %"  # golden
    assert early.names() == views.names() and early.notes() == views.notes()
    # the run-level summaries come brief (enough for ``views``), their values the summary's
    assert early.summaries.keys() == views.summaries.keys()
    for name, short in early.summaries.items():
        assert short == {k: views.summaries[name][k] for k in short}
    for route, params in (("operation", {}), ("kernel/table", {}), ("module/tree", {}),
                          ("trace/timeline", {"width": "100"})):
        with pytest.raises(NotReady) as e:
            early.get(route, params)
        assert e.value.loading == job.loading()
    again = _Job()
    analyser(str(path), again)
    assert again.early is None and again.heard == ["cache"]


def test_task_reports_a_killed_or_cancelled_worker():
    """The server's side of a worker: a pool broken under it (a worker killed, by the OOM
    killer say) is a 422 naming that; a task cancelled at shutdown is a 503; a task that
    ended well has no error."""
    from concurrent.futures import Future

    from stepscope.store.pool import Task, WorkerDied

    def task(setup):
        t = Task(lambda phase, f: None)
        t.future = Future()
        setup(t.future)
        return t

    killed = task(lambda f: f.set_exception(WorkerDied("killed")))
    assert killed.broken() and killed.done()
    assert (killed.error().status, killed.error().error) == (422, "analysis process died")
    cancelled = task(lambda f: f.cancel())
    assert not cancelled.broken() and cancelled.error().status == 503
    ok = task(lambda f: f.set_result({"ok": True}))
    assert not ok.broken() and ok.error() is None
    failed = task(lambda f: f.set_result({"status": 422, "error": "not JSON", "detail": "d",
                                          "file": "w.json"}))
    assert (failed.error().status, failed.error().file) == (422, "w.json")
    t = Task(lambda phase, f: None)
    t.hear("read", 0.5)
    assert not t.views_ready.is_set()
    t.hear("timeline", 0.6)  # the payloads are stored: the timeline is on its way
    assert t.views_ready.is_set() and t.loading().phase == "analyse"  # SPEC §3 phases only
    assert t.loading().fraction == pytest.approx(0.95 + 0.05 * 0.6) and not t.done()


def _tiny(path, kernel_us=40):
    """A small Kineto trace file: one step, one op launching one kernel of ``kernel_us``."""
    from tracebuild import kernel, op, runtime, step

    events = [step(1, 0, 100), op("aten::mm", 10, 50, ext=7),
              runtime("cudaLaunchKernel", 20, 5, corr=1, ext=7),
              kernel("volta_sgemm", 30, kernel_us, corr=1)]
    path.write_bytes(orjson.dumps({"traceEvents": events,
                                   "deviceProperties": [{"id": 0, "numSms": 80}]}))
    return path


def test_a_new_phase_is_reported_at_once(tmp_path, monkeypatch):
    """Progress messages are sent at most every 0.2 s, but a phase change never waits: the
    'analyse' phase was lost when the read had just reported (a flaky server test)."""
    from stepscope.store import child

    heard = []

    class Pipe:
        def send(self, message):
            heard.append(message[0] if message[0] != "progress" else message[1])

    monkeypatch.setattr(child, "_conn", Pipe())
    monkeypatch.setattr(child.time, "monotonic", lambda: 1000.0)  # all within one interval
    result = child.analyse_to_cache(str(_tiny(tmp_path / "w.pt.trace.json")),
                                    str(tmp_path / "cache"), 1 << 30, "key")
    assert result == {"ok": True}
    phases = [h for k, h in enumerate(heard) if k == 0 or heard[k - 1] != h]
    assert phases == ["read", "analyse", "first", "timeline"], heard


@pytest.mark.parametrize("part", ["manifest.json", "meta.json"])
def test_entry_missing_a_part_is_analysed_again(analyser, tmp_path, part):
    """Issue 12 item 6: a payload entry missing its manifest or meta used to answer 422
    "analysis result not found" for ever; it is removed and rebuilt."""
    path = _tiny(tmp_path / "w.pt.trace.json")
    first, _ = _run(analyser, path)
    os.remove(os.path.join(analyser.cache._folder(analyser.cache.key(str(path))), part))
    again, phases = _run(analyser, path)
    assert phases[0] == ("read", 0.0)  # analysed again
    assert _payloads(again) == _payloads(first)


def test_stale_temporary_folders_are_swept_at_start(tmp_path):
    """Issue 12 item 12: a write killed mid-way leaves a ``.tmp-`` folder; the next server
    start removes it."""
    from stepscope.store.cache import DiskCache, _tmp_prefix

    cache = DiskCache(str(tmp_path / "c"))
    shard = os.path.join(cache.root, "ab")
    os.makedirs(shard)
    dead = os.path.join(shard, _tmp_prefix("ab" * 32).rsplit("-", 2)[0] + "-999999999-x_1")
    os.makedirs(dead)
    a = Analyser(cache_dir=str(tmp_path / "c"), jobs=1)
    a.close()
    assert not os.path.exists(dead)


def test_unwritable_cache_folder_analyses_without_it(tmp_path, caplog):
    """Issue 12 item 2: a cache path that cannot be written (here a regular file: tests run
    as root, so permissions would not stop them) no longer fails every view; the trace is
    analysed, a warning is logged once and the views carry a note."""
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    path = _tiny(tmp_path / "w.pt.trace.json")
    with caplog.at_level("WARNING", logger="stepscope.store.pool"):
        a = Analyser(cache_dir=str(blocked), jobs=1)
        try:
            views, _ = _run(a, path)
            job = _Job()
            again = a(str(_tiny(tmp_path / "w2.pt.trace.json", kernel_us=20)), job)
            again.timeline.wait()
            assert views.notes()[0]["code"] == "cache-unwritable"
            assert job.early.notes()[0]["code"] == "cache-unwritable"
            assert again.notes()[0]["code"] == "cache-unwritable"
            assert views.get("trace/timeline", {"width": "100"})["lanes"]
        finally:
            a.close()
    assert sum("cannot be written" in r.getMessage() for r in caplog.records) == 1
    assert blocked.read_text() == "not a folder"
    assert not os.path.exists(a.cache.root)  # the private fallback is removed at close


def test_cache_becoming_unwritable_later_falls_back(tmp_path):
    """The cache folder turns unwritable while serving (another process replaced it, the
    disk filled up): the worker's failed write is not a 500; the trace is analysed again
    into the private fallback folder."""
    root = tmp_path / "cache"
    a = Analyser(cache_dir=str(root), jobs=1)
    try:
        shutil.rmtree(root)
        root.write_text("in the way")
        views, _ = _run(a, _tiny(tmp_path / "w.pt.trace.json"))
        assert views.notes()[0]["code"] == "cache-unwritable"
        assert views.get("trace/timeline", {"width": "100"})["lanes"]
    finally:
        a.close()


def test_full_disk_is_reported_by_the_worker_not_raised(tmp_path, monkeypatch):
    """A write failing with ENOSPC in the worker becomes its ``cache_failed`` answer (the
    server falls back), never an exception (which read as "a bug in Stepscope")."""
    import errno

    import stepscope.store.cache as cache_mod
    from stepscope.store.child import analyse_to_cache

    def full(path, *parts):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(cache_mod, "_write", full)
    path = _tiny(tmp_path / "w.pt.trace.json")
    answer = analyse_to_cache(str(path), str(tmp_path / "c"), 1 << 30, "k" * 64)
    assert answer["cache_failed"] is True and answer["status"] == 503
    assert "No space left on device" in answer["detail"]
    assert not any(n.startswith(".tmp-") for _, dirs, _ in os.walk(tmp_path / "c")
                   for n in dirs)  # the half-written folder is removed


def _names_trace(path, names: int) -> str:
    """A trace of ``names`` distinct operators, each launching one kernel."""
    import json

    from tracebuild import kernel, op, runtime, step

    events = [step(1, 0, 10 * names + 10)]
    for i in range(names):
        events += [op(f"aten::op_{i}", 10 * i + 1, 8, ext=i + 1),
                   runtime("cudaLaunchKernel", 10 * i + 2, 2, corr=i + 1, ext=i + 1),
                   kernel(f"k_{i}", 10 * i + 4, 4, corr=i + 1)]
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_cold_payloads_stay_compressed_and_answer_the_same(tmp_path):
    """Issue 12 item 9: the server keeps a cached trace's payloads compressed and unpacks a
    view's payload on use, in an LRU by size; a cold trace answers exactly as a hot one.
    The payloads of the last two traces asked for (a diff reads two) are kept whatever
    their size; a third trace's push them out."""
    a = Analyser(cache_dir=str(tmp_path / "c"), jobs=1)
    try:
        views = a(_names_trace(tmp_path / "w.pt.trace.json", 50), lambda phase, f: None)
        hot = views.get("operation/table", {"group_by": "Operation"})
        assert len(hot) == 50 and views.get("kernel/table", {})["data"]["rows"]
        assert a.payloads.bytes > 0
        a.payloads.max_bytes = 0
        views.get("overview", {})  # the trace's own payloads stay loaded
        assert {v for _s, v in a.payloads._loaded} == {"Operator", "Kernel", "Overview"}
        second, third = (a(_names_trace(tmp_path / f"{n}.pt.trace.json", 3), lambda p, f: None)
                         for n in "xy")
        second.get("overview", {})
        assert len(a.payloads._loaded) == 4  # (a diff of the two reads both)
        third.get("overview", {})
        assert {(s, v) for s, v in a.payloads._loaded} == {(second.serial, "Overview"),
                                                           (third.serial, "Overview")}
        assert views.packed_bytes() < sum(s for _b, s in views._packed.values())
        assert views.get("operation/table", {"group_by": "Operation"}) == hot
        assert views.names() == ["Overview", "Operator", "Kernel", "Trace", "Module"]
    finally:
        a.close()


def test_a_killed_worker_is_replaced_and_the_timeline_rebuilt(analyser, tmp_path):
    """Issue 12: a worker killed (OOM killer) after the payloads, before the timeline: the
    trace view is analysed again by a fresh process (200), not a 422 until restart."""
    import signal

    path = tmp_path / "w.pt.trace.json"
    shutil.copy(DLRM0, path)
    views, _ = _run(analyser, path)
    want = views.get("trace/timeline", {"width": "300"})
    views.timeline.unload()
    import psutil

    forkservers = [p for p in psutil.Process().children()
                   if "forkserver" in " ".join(p.cmdline())]
    workers = [w for f in forkservers for w in f.children()]
    assert workers
    for w in workers:  # the idle workers die (SIGKILL: no cleanup)
        w.send_signal(signal.SIGKILL)
    psutil.wait_procs(workers, timeout=10)
    shutil.rmtree(analyser.cache._folder(timeline_key(analyser.cache.key(str(path)))))
    assert _timeline(views, {"width": "300"}) == want


def test_a_worker_whose_answer_was_not_read_is_not_reused(tmp_path):
    """When a handler of a job's messages raises (here: taking the Overview's parts), that
    job's error is reported and its worker, whose pipe may still hold the job's messages,
    ends: the next small trace gets a new process and its own, right views."""
    a = Analyser(cache_dir=str(tmp_path / "c"), jobs=1)
    paths = []
    for i, dur in enumerate((100, 300)):
        path = tmp_path / f"w{i}.pt.trace.json"
        path.write_bytes(orjson.dumps({"traceEvents": [step(1, 0, dur), op("aten::mm", 10, 50)]}))
        paths.append(str(path))

    class Progress:
        def __call__(self, phase, fraction):
            pass

        def first(self, views):
            raise RuntimeError("the handler failed")

        def loading(self):
            return Loading("analyse", 0.5, 0.0)
    try:
        with pytest.raises(StepscopeError, match="internal error"):
            a(paths[0], Progress())
        views = a(paths[1], lambda phase, f: None)
        views.timeline.wait()
        step_row = views.get("overview", {})["steps"]["rows"][0]
        assert step_row[0] == "1" and step_row[3] + step_row[5] == 300  # this trace's step (µs)
        assert a.process_starts == 2
    finally:
        a.close()


def test_small_traces_share_worker_processes(tmp_path):
    """Issue 12: tiny traces do not pay a process start each (50 traces, 2 jobs at once:
    at most 2 processes); a big one gets a process of its own that ends with it."""
    from stepscope.store import pool as worker

    a = Analyser(cache_dir=str(tmp_path / "c"), jobs=2)
    paths = []
    for i in range(50):
        path = tmp_path / f"w{i}.pt.trace.json"
        path.write_bytes(orjson.dumps({"traceEvents": [step(1, 0, 100 + i), op("aten::mm", 10, 50)]}))
        paths.append(str(path))
    try:
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda p: a(p, lambda phase, f: None), paths))
        for views in done:
            views.timeline.wait()
        assert len(done) == 50 and a.process_starts <= 2
        assert len(a._idle) == a.process_starts  # kept for the next small trace
        big = Analyser(cache_dir=str(tmp_path / "c2"), jobs=2, memory_bytes=1 << 40)
        old = worker.REUSE_MAX_BYTES
        worker.REUSE_MAX_BYTES = 1  # every trace is "big" now
        try:
            for p in paths[:3]:
                big(p, lambda phase, f: None).timeline.wait()
        finally:
            worker.REUSE_MAX_BYTES = old
            big.close()
        assert big.process_starts == 3 and not big._idle
    finally:
        a.close()


def _hold_helpers(conn) -> None:
    """Child process: start the decode helpers as a read does, say their pids, wait."""
    import psutil

    from stepscope.read.reader import _helper_pool

    with _helper_pool(1):
        conn.send([p.pid for p in psutil.Process().children()])
        time.sleep(600)


def test_decode_helpers_end_with_a_killed_reader():
    """Issue 12: a worker killed while a helper decodes for it (SIGTERM at shutdown, the OOM
    killer) runs no cleanup; its helper notices and ends (it held 86-163 MB for good)."""
    import multiprocessing as mp
    import signal

    import psutil

    from stepscope.processes import ORPHAN_POLL_S

    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe()
    reader = ctx.Process(target=_hold_helpers, args=(theirs,))
    reader.start()
    helpers = [psutil.Process(pid) for pid in ours.recv()]
    assert helpers
    os.kill(reader.pid, signal.SIGKILL)
    reader.join(10)
    _, alive = psutil.wait_procs(helpers, timeout=3 * ORPHAN_POLL_S)
    for p in alive:
        p.kill()
    assert not alive


@pytest.mark.skipif(not RESNET4.exists(), reason=NO_SHARED)
def test_views_built_in_a_second_thread_equal_the_serial_build(monkeypatch):
    """A big trace builds the Module view in a second thread: every payload (and its order)
    is the same as built one after the other."""
    import stepscope.views as views
    from stepscope import processes
    from stepscope.read.reader import read_trace
    from stepscope.store.packing import pack

    analysis = views.analyze(read_trace(str(RESNET4)))
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(0))
    serial = pack(views.ViewSet(analysis))
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(10**9))
    first = []
    threaded = pack(views.ViewSet(analysis, first=first.append))
    assert orjson.dumps(serial[0]) == orjson.dumps(threaded[0])
    assert orjson.dumps(pack(first[0].payloads["Overview"])[0]) == \
        orjson.dumps(serial[0]["d"]["_payloads"]["Overview"])
    assert serial[1].keys() == threaded[1].keys()
    for name, arr in serial[1].items():
        assert arr.dtype == threaded[1][name].dtype and arr.tobytes() == threaded[1][name].tobytes()


@pytest.mark.parametrize("events,threaded", [(1_000, False), (1_000_000, True),
                                             (15_000_000, True)])
def test_which_traces_get_a_second_thread(monkeypatch, events, threaded):
    """Traces from 200 k events on run independent work in two threads, memory-bound ones
    (x200) too; none when the bounds are empty (how the tests force the serial build)."""
    from stepscope import processes

    def has_pool() -> bool:
        with processes.second_thread(events) as pool:
            return pool is not None
    assert has_pool() == threaded
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(0))
    assert not has_pool()


@pytest.mark.parametrize("events,trims", [(None, True), (10, False), (4_000_000, True)])
def test_heap_is_trimmed_between_phases_of_big_traces_only(monkeypatch, events, trims):
    """Between phases the C heap's free pages are given back for big traces (their peak),
    kept for smaller ones (the next phase reuses them)."""
    from stepscope.store import child

    calls = []
    monkeypatch.setattr(child, "MEMORY_BOUND_EVENTS", 4_000_000)
    monkeypatch.setattr(child, "_glibc", lambda name: calls.append if name == "malloc_trim" else None)
    child.release_memory(events)
    assert calls == ([0] if trims else [])


def test_workers_map_numpy_arrays_with_small_pages_unless_told(monkeypatch, tmp_path):
    """An analysis (and the standalone server) has numpy map its arrays with 4 KiB pages, not
    transparent huge pages (issue 19: measured faster); ``NUMPY_MADVISE_HUGEPAGE``, when
    set, keeps numpy's own choice."""
    from numpy._core.multiarray import _set_madvise_hugepage

    from stepscope.processes import small_pages
    from stepscope.store import child

    was = _set_madvise_hugepage(True)
    try:
        monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
        small_pages()
        assert _set_madvise_hugepage(True) is False  # it was switched off
        path = tmp_path / "w.pt.trace.json"
        path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
                        '"ts": 1, "dur": 2, "cat": "cpu_op"}]}')
        assert child.analyse_to_cache(str(path), str(tmp_path / "cache"), 10**9, "k") == \
            {"ok": True}
        assert _set_madvise_hugepage(True) is False  # the analysis switched it off
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
        small_pages()
        assert _set_madvise_hugepage(True) is True  # left as numpy had it
    finally:
        _set_madvise_hugepage(was)


@pytest.mark.skipif(not RESNET4.exists(), reason=NO_SHARED)
def test_analysis_in_two_threads_equals_the_serial_one(monkeypatch):
    """A big trace runs the analysis' independent branches in two threads: the nesting, the
    links, the operator accounts and every payload built from them are the same."""
    import importlib

    import stepscope.views as views
    from stepscope import processes
    from stepscope.read.reader import read_trace
    from stepscope.store.packing import pack

    analyze_module = importlib.import_module("stepscope.analysis.analyze")
    trace = read_trace(str(RESNET4))
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(0))
    serial = analyze_module.analyze(trace)
    monkeypatch.setattr(processes, "THREADED_EVENTS", range(10**9))
    threaded = analyze_module.analyze(trace)
    for a, b in ((serial.tree.parent, threaded.tree.parent), (serial.links.owner, threaded.links.owner),
                 (serial.nodes.host_self, threaded.nodes.host_self),
                 (serial.nodes.device_total, threaded.nodes.device_total)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert orjson.dumps(pack(views.ViewSet(serial))[0]) == orjson.dumps(pack(views.ViewSet(threaded))[0])


def test_a_worker_gives_its_heap_back_after_each_job(monkeypatch):
    """Once a job is answered, the worker waits for the next one while the server loads what
    it stored: it gives the C heap's free pages back first, whatever the trace's size (issue
    19: the idle worker of a 2024 x50 trace held 0.66 GB, 0.09 GB trimmed)."""
    from stepscope.store import child

    seen = []
    monkeypatch.setattr(child, "_conn", None)  # (set by the worker loop; restored after)
    monkeypatch.setattr(child, "watch_parent", lambda pid: None)
    monkeypatch.setattr(child, "analyse_to_cache",
                        lambda *job: seen.append(("job", job)) or {"ok": True})
    monkeypatch.setattr(child, "_glibc", lambda name: lambda *args: seen.append((name, *args)))

    class Conn:
        inbox = [("a.json",), ("b.json",), None]

        def recv(self):
            return self.inbox.pop(0)

        def send(self, message):
            seen.append(("send", message[0]))
    child._worker_main(Conn(), os.getpid())
    # (first of all, every thread it will start shares one C heap, which big arrays come
    # from too: see heap_settings)
    assert seen == [("mallopt", -8, 1), ("mallopt", -4, 0), ("mallopt", -1, 1 << 30),
                    ("job", ("a.json",)), ("send", "done"), ("malloc_trim", 0),
                    ("job", ("b.json",)), ("send", "done"), ("malloc_trim", 0)]


def test_the_timeline_stored_with_columns_saved_ahead_is_the_one_built(monkeypatch, tmp_path):
    """The worker saves the trace's columns and links while it builds the timeline (issue 19:
    x200); every array is big here, so all of those go that way: the stored timeline answers
    as the one built in-process, and no temporary folder is left."""
    from stepscope.read.reader import read_trace
    from stepscope.store import cache as cache_mod
    from stepscope.store import child
    from stepscope.views import build_views

    monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    monkeypatch.setattr(child, "_conn", None)
    saved = []
    real = cache_mod.DiskCache.save_ahead
    monkeypatch.setattr(cache_mod.DiskCache, "save_ahead",
                        lambda self, key, arrays: saved.append(a := real(self, key, arrays)) or a)
    from stepscope.store.cache import DiskCache

    path = _tiny(tmp_path / "w.pt.trace.json")
    cache = DiskCache(str(tmp_path / "c"))
    key = cache.key(str(path))
    assert child.analyse_to_cache(str(path), str(tmp_path / "c"), 1 << 40, key) == {"ok": True}
    assert saved and saved[0] is not None
    want = build_views(read_trace(str(path))).timeline
    lazy = LazyTimeline(lambda: cache.get(str(path), timeline_key(key)), lambda: 1 / 0,
                        TimelineSlots())
    assert lazy.query(None, None, 700) == want.query(None, None, 700)
    for i in range(0, len(want.trace), max(1, len(want.trace) // 50)):
        assert lazy.event(i) == want.event(i)
    assert not [f for d, _, fs in os.walk(cache.root) for f in fs if f.startswith("ahead-")]
    assert not [d for d, _, _ in os.walk(cache.root) if ".tmp-" in d]


def test_a_timeline_that_cannot_be_stored_leaves_nothing_saved_ahead(monkeypatch, tmp_path):
    from stepscope.store import cache as cache_mod
    from stepscope.store import child
    from stepscope.timeline import Timeline

    monkeypatch.setattr(cache_mod, "SMALL_ARRAY_BYTES", 0)
    monkeypatch.setattr(child, "_conn", None)
    real = child.pack

    def pack(obj):
        if isinstance(obj, Timeline):
            raise MemoryError
        return real(obj)
    monkeypatch.setattr(child, "pack", pack)
    path = _tiny(tmp_path / "w.pt.trace.json")
    answer = child.analyse_to_cache(str(path), str(tmp_path / "c"), 1 << 40, "k" * 64)
    assert answer["error"] == "out of memory"
    assert not [d for d, _, _ in os.walk(tmp_path / "c") if ".tmp-" in d]
