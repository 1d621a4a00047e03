"""Analysis in worker processes, the server side; results come back through the disk
cache (issue 5). What runs inside a worker is :mod:`.child`.

The server never analyses on its request threads, and not even in its own process: each
trace is read and analysed by a child process (``forkserver``: never ``fork`` from the
threaded server), which packs its results into the disk cache (:mod:`.packing`,
:mod:`.cache`: JSON + ``.npy``, no pickle) in two stages: first the view payloads, then the
timeline of the trace view. Before the payloads, the child sends the Overview tab's parts
over its pipe; the scheduler's job serves them (:class:`~.lazy.FirstViews`) while the other
views answer 202. The server serves the payloads as soon as they are stored, while the child
goes on with the timeline; until it is stored, ``trace/*`` routes answer 202 (phase
``analyse``, fraction from 0.95 on). Only those parts, a small status dict and the progress
messages travel back, over the worker's own pipe (issue 12: no lock or queue is shared
between processes, so a killed worker can block nobody). A cache hit skips the child
entirely.

Small traces reuse idle worker processes (a process start costs ~0.4 s, more than
analysing a tiny trace); a big one gets a fresh process that ends with it, so its memory
goes back to the system (:data:`REUSE_MAX_BYTES`).

``--no-cache`` uses a private temporary cache folder, removed at exit; so does a cache
folder that cannot be written (read-only, a regular file, disk full: a warning is logged
once and every trace's views carry a ``cache-unwritable`` note, issue 12). A loaded entry's
timeline arrays are memory-mapped only when a ``trace/*`` route needs them
(:mod:`.cached`).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any

from ..errors import AnalysisBug, Loading, StepscopeError, TraceError
from ..fs import filesystem_of, is_url
from ..processes import start_forkserver, worker_context
from .cache import DEFAULT_MAX_BYTES, DiskCache
from .child import TIMELINE_FROM, Progress, _worker_main
from .lazy import FirstViews, LazyTimeline, PayloadSlots, TimelineSlots, load_views, timeline_key
from .remote import decode, storage_env

log = logging.getLogger(__name__)


class WorkerDied(Exception):
    """The worker process ended without answering (killed: by the OOM killer, say)."""


def default_jobs() -> int:
    """Traces analysed at once by default: half the cores, at least 2 (so a huge trace never
    holds up every other run), at most 4."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))


#: Peak memory of analysing a trace, per byte of its JSON (measured: x50 ResNet-50 sample).
MEMORY_PER_JSON_BYTE = 1.3
#: A gzip trace's JSON is about this many times its file size (Kineto JSON: 15-25x).
GZIP_RATIO = 16
#: Jobs expected to need less than this share of the budget never wait for memory.
SMALL_JOB_SHARE = 0.05


def memory_estimate(path: str) -> int:
    """Expected peak bytes of analysing ``path``, from its size on disk."""
    try:
        size = filesystem_of(path).stat(path).size
    except (OSError, ValueError):
        return 0
    json_bytes = size * GZIP_RATIO if path.endswith(".gz") else size
    return int(json_bytes * MEMORY_PER_JSON_BYTE)


def default_memory_budget() -> int:
    """Half of the machine's memory (bytes); 4 GiB where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (AttributeError, OSError, ValueError):
        return 4 << 30


class MemoryBudget:
    """Lets analysis jobs run together only while their estimated peaks fit the budget.

    A job bigger than the whole budget still runs, alone; small jobs (under
    ``SMALL_JOB_SHARE`` of the budget) never wait, so a huge trace never keeps the other
    runs from appearing.
    """

    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self._cond = threading.Condition()

    def acquire(self, need: int) -> Callable[[], None]:
        """Wait until ``need`` bytes fit; returns the function that gives them back."""
        need = min(need, self.total)
        small = need < SMALL_JOB_SHARE * self.total
        with self._cond:
            while not small and self.used and self.used + need > self.total:
                self._cond.wait()
            self.used += need

        def release() -> None:
            with self._cond:
                self.used -= need
                self._cond.notify_all()
        return release


class Rebuild:
    """A timeline analysed again in the background (:class:`~stepscope.store.lazy.Building`):
    ``start()`` runs in a thread (it may wait for the memory budget and a worker)."""

    def __init__(self, start: Callable[[], Task]):
        self.started = time.monotonic()
        self._task: Task | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), daemon=True,
                                        name="stepscope-rebuild")
        self._error: StepscopeError | None = None
        self._thread.start()

    def _run(self, start: Callable[[], Task]) -> None:
        try:
            self._task = start()
            self._error = self._task.error()  # waits for the worker to end
        except StepscopeError as e:
            self._error = e
        except Exception:  # noqa: BLE001 - reported to the trace view as a 500
            log.exception("analysing a timeline again failed")
            self._error = AnalysisBug("internal error while analysing")

    def done(self) -> bool:
        return not self._thread.is_alive()

    def loading(self) -> Loading:
        task = self._task
        fraction = task.loading().fraction if task is not None and task.views_ready.is_set() \
            else TIMELINE_FROM
        return Loading("analyse", fraction, time.monotonic() - self.started)

    def error(self) -> StepscopeError | None:
        self._thread.join()
        return self._error


class Task:
    """The server's side of one trace analysed by a worker process.

    ``views_ready`` is set once the payloads are stored (or the worker is done, whatever
    happened); afterwards the task stands for the timeline still being built
    (:class:`~stepscope.store.lazy.Building`).
    """

    def __init__(self, progress: Progress, first: Callable[[Any], None] | None = None):
        self.progress = progress
        #: takes the parts of the Overview tab the worker sends before the other views
        self.first = first or (lambda parts: None)
        self.views_ready = threading.Event()
        self.future: Future | None = None
        self.started = time.monotonic()
        self.timeline_fraction = 0.0

    def hear(self, phase: str, fraction: float) -> None:
        """A progress message of the worker (on the queue's thread)."""
        if phase != "timeline":
            self.progress(phase, fraction)
            return
        self.views_ready.set()
        self.timeline_fraction = max(self.timeline_fraction, fraction)

    def done(self) -> bool:
        return self.future is not None and self.future.done()

    def loading(self) -> Loading:
        """The 202 of the ``trace/*`` routes meanwhile: still phase ``analyse`` (SPEC §3),
        its fraction going on from the last one of the other views (``cache``)."""
        return Loading("analyse", TIMELINE_FROM + (1 - TIMELINE_FROM) * self.timeline_fraction,
                       time.monotonic() - self.started)

    def result(self) -> dict:
        """The worker's answer (waits for it): ``{"ok": True}`` or an error dict."""
        assert self.future is not None
        try:
            return self.future.result()
        except WorkerDied:
            return {"status": 422, "error": "analysis process died",
                    "detail": "The worker analysing this trace was killed, most likely out "
                              "of memory. Profile fewer steps or run with --jobs 1."}
        except CancelledError:  # the server is shutting down
            return {"status": 503, "error": "server shutting down", "detail": "Restart the server."}
        except Exception:  # a bug in the worker's code (not in the trace)
            log.exception("analysis worker failed")
            return {"status": 500, **AnalysisBug("internal error while analysing").body()}

    def broken(self) -> bool:
        """Did the worker process die under this task (killed, by the OOM killer say)?"""
        f = self.future
        return f is not None and f.done() and not f.cancelled() and \
            isinstance(f.exception(), WorkerDied)

    def error(self) -> StepscopeError | None:
        result = dict(self.result())
        if result.pop("ok", False):
            return None
        cache_failed = bool(result.pop("cache_failed", False))
        error = StepscopeError(result.pop("error", "analysis failed"),
                               result.pop("detail", ""), status=result.pop("status", 422),
                               **result)
        # the worker was killed (a fresh one is started), or the cache could not be
        # written (the server then uses its fallback folder): try again
        error.cache_failed = cache_failed
        error.retry = self.broken() or cache_failed
        return error


def _private_dir() -> str:
    """A new private temporary cache folder, removed at exit."""
    folder = tempfile.mkdtemp(prefix="stepscope-nocache-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _cache_failed(future: Future) -> bool:
    """Did the worker of ``future`` answer that the cache could not be written?"""
    if future.cancelled() or future.exception() is not None:
        return False
    result = future.result()
    return isinstance(result, dict) and bool(result.get("cache_failed"))


class Analyser:
    """The job function of the store: ``Analyser(...)(path, progress) -> ViewSet``.

    ``jobs`` worker processes at most, and only as many at once as fit ``memory_bytes``
    (:class:`MemoryBudget`, default half the machine's memory). With an ``executor`` (the
    executor seam: :class:`~.dask_pool.DaskExecutor`) each trace is analysed there instead,
    as a task returning the packed payloads (:func:`~.remote.analyse_to_bytes`), which
    this process stores in its cache; the timeline is a second task, run when a ``trace/*``
    route first needs it.
    """

    def __init__(self, *, cache_dir: str | None = None, no_cache: bool = False,
                 jobs: int = 2, max_bytes: int = DEFAULT_MAX_BYTES,
                 memory_bytes: int | None = None, executor: Any = None):
        #: where analyses run instead of local worker processes: a
        #: :class:`~.dask_pool.DaskExecutor` (``--scheduler``), or None (the local pool)
        self.executor = executor
        self.no_cache = no_cache
        self._fallback_lock = threading.Lock()
        #: data-quality notes added to every trace's views (the cache could not be written)
        self.notes: list[dict] = []
        if no_cache:
            cache_dir = _private_dir()
        self.cache = DiskCache(cache_dir, max_bytes)
        self.cache_root = os.path.dirname(self.cache.root)
        if not no_cache and (problem := self.cache.unwritable()):
            self._fall_back(problem)
        self.cache.sweep()  # temporary folders of writes killed mid-way (issue 12)
        self.jobs = max(1, jobs)
        self.budget = MemoryBudget(memory_bytes or default_memory_budget())
        self.timelines = TimelineSlots()
        self.payloads = PayloadSlots()
        self._closed = False
        # start the forkserver (which imports numpy and the analyses once) in the
        # background, so the first trace does not wait for it
        start_forkserver()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(self.jobs)
        self._idle: list[WorkerProcess] = []  # started, waiting for a small trace
        self._workers: set[WorkerProcess] = set()  # every live worker
        #: Worker processes started so far (small traces reuse them: issue 12).
        self.process_starts = 0
        atexit.register(self.close)  # every exit path ends the workers

    def _fall_back(self, problem: str) -> None:
        """Use a private temporary cache folder (removed at exit) from now on: the
        configured one cannot be written. Warns once; every trace's views get a note."""
        with self._fallback_lock:
            if self.no_cache:
                return  # already private
            log.warning("the cache folder %s cannot be written (%s); analysing without it "
                        "(results are kept in a temporary folder until exit)",
                        self.cache_root, problem)
            self.no_cache = True
            self.cache = DiskCache(_private_dir(), self.cache.max_bytes)
            self.cache_root = os.path.dirname(self.cache.root)
            self.notes = [{"level": "warning", "code": "cache-unwritable",
                           "text": f"The analysis cache folder cannot be written ({problem}): "
                                   "traces are analysed again after a restart. Fix its "
                                   "permissions or free space, or pass another --cache-dir."}]

    def __call__(self, path: str, progress: Progress) -> Any:
        """The views of ``path`` once all its payloads are stored. A ``progress`` with a
        ``first(viewset)`` method (a :class:`~.scheduler.Job`) gets, before that, views
        answering the Overview tab (:class:`~.lazy.FirstViews`), whose other routes answer
        202 with ``progress.loading()`` meanwhile."""
        try:
            key = self.cache.key(path)  # before reading: see DiskCache.put
        except OSError as e:  # deleted (or made unreadable) since the scan: not a bug
            name = os.path.basename(path)
            raise TraceError("cannot read file", f"{name}: {e.strerror or e}. It was probably "
                             "deleted or moved; reload the run list.", file=name) from e
        cache = self.cache
        views = self._load(path, key, progress)
        if views is not None:
            return views
        progress("read", 0.0)
        task = self._run_child(path, key, progress, first=self._first_views(progress))
        views = self._load(path, key, progress, building=task)
        if views is not None:
            return views  # the payloads are stored; the task goes on with the timeline
        error = task.error()
        if getattr(error, "cache_failed", False):
            self._fall_back(error.detail)  # e.g. the disk filled up: once more, privately
            if self.cache is not cache:
                return self(path, progress)
        if error is not None:
            raise error
        raise TraceError("analysis result not found",
                         "The analysis cache did not keep the result (is the cache folder "
                         "full or shared with a server that evicts it?). Retry, or use a "
                         "bigger --cache-dir.")

    def _first_views(self, progress: Progress) -> Callable[[Any], None] | None:
        """What hands a worker's first parts to ``progress.first`` (None: nobody takes them)."""
        take = getattr(progress, "first", None)
        if take is None:
            return None
        return lambda parts: take(FirstViews(parts, self.notes, progress.loading))

    def _load(self, path: str, key: str, progress: Progress,
              building: Task | None = None) -> Any:
        entry = self.cache.get(path, key)
        if entry is None:
            return None
        progress("cache", TIMELINE_FROM)
        timeline = LazyTimeline(lambda: self.cache.get(path, timeline_key(key)),
                                lambda: self._rebuild(path, key), self.timelines, building)
        try:
            return load_views(entry, timeline, self.notes, self.payloads)
        except (KeyError, ValueError, TypeError, OSError) as e:
            log.warning("cache entry for %s is unusable (%s); rebuilding", path, e)
            self.cache.discard(path, key)
            return None

    def _rebuild(self, path: str, key: str) -> Rebuild:
        """Analyse ``path`` again, in the background, for a timeline whose entry is gone
        (evicted, corrupt, or never stored: a worker killed after the payloads). Only for
        the file version of ``key``: a changed file gets a new job from the store anyway."""
        try:
            same = self.cache.key(path) == key
        except OSError:
            same = False
        if not same:
            raise StepscopeError("trace file changed", "The trace file changed (or vanished) "
                                 "since it was analysed; reload the page to see the new "
                                 "version.", status=503)
        self.cache.discard(path, timeline_key(key))  # a corrupt one would block the new one
        return Rebuild(lambda: self._run_child(path, key, lambda phase, f: None,
                                               wanted=timeline_key(key)))

    def _run_child(self, path: str, key: str, progress: Progress,
                   wanted: str | None = None, first: Callable[[Any], None] | None = None
                   ) -> Task:
        """Start analysing ``path`` in a worker process (within the memory budget); return
        once its payloads are stored or it has ended. A worker killed before the cache
        entry ``wanted`` (default: the payloads) was stored is replaced by a fresh one and
        the trace tried once more (issue 12: never a broken pool kept). ``first``: see
        :class:`Task`."""
        wanted = wanted or key
        for attempt in range(2):
            task = Task(progress, first)
            task.future = Future()
            threading.Thread(target=self._converse, args=(task, path, key, wanted),
                             daemon=True, name="stepscope-worker-io").start()
            task.views_ready.wait()
            if not task.broken() or attempt or self.cache.get(path, wanted) is not None:
                return task
        raise AssertionError("unreachable")

    def _converse(self, task: Task, path: str, key: str, wanted: str) -> None:
        """Run ``task`` on a worker (this thread waits for a free slot and the memory
        budget), passing on its progress; settles ``task.future``."""
        future = task.future
        assert future is not None
        if self.executor is not None:
            try:
                with self._slots:
                    future.set_result(self._run_remote(task, path, wanted))
            except BaseException as e:  # noqa: BLE001 - a bug: reported as a 500
                future.set_exception(e)
            finally:
                task.views_ready.set()
            return
        need = memory_estimate(path)
        env = storage_env() if is_url(path) else None
        try:
            with self._slots:
                release = self.budget.acquire(need)
                try:
                    worker = self._take(reuse=need < REUSE_MAX_BYTES)
                    try:
                        result = worker.run((path, self.cache_root, self.cache.max_bytes, key,
                                             env), task.hear, task.first)
                    finally:
                        self._give_back(worker, reuse=need < REUSE_MAX_BYTES)
                finally:
                    release()
            future.set_result(result)
            if _cache_failed(future):  # e.g. storing the timeline filled the disk
                self._fall_back("it failed while storing a result")
        except BaseException as e:  # noqa: BLE001 - handed to the task (WorkerDied...)
            if isinstance(e, CancelledError) or self._closed:
                future.cancel()
                future.set_running_or_notify_cancel()
            else:
                future.set_exception(e)
        finally:
            task.views_ready.set()

    def _run_remote(self, task: Task, path: str, wanted: str) -> dict:
        """Analyse ``path`` on the executor (the payloads, or the timeline when ``wanted``
        is a timeline key) and store the answer under ``wanted``; the worker's status
        dict (``{"ok": True}`` or an error dict)."""
        what = "timeline" if wanted.endswith(timeline_key("")) else "views"
        answer = self.executor.run(path, what, task.hear)
        if isinstance(answer, dict):
            return answer
        decoded = decode(answer)
        if isinstance(decoded, dict):
            return decoded
        state, arrays = decoded
        try:
            self.cache.put(path, {"state": state}, arrays, key=wanted)
        except OSError as e:
            return {"status": 503, "error": "cache not writable", "cache_failed": True,
                    "detail": f"The analysis cache folder cannot be written "
                              f"({e.strerror or e})."}
        return {"ok": True}

    # --- the worker processes -------------------------------------------------------------

    def _take(self, reuse: bool) -> WorkerProcess:
        """An idle worker (for a small trace) or a new one."""
        with self._lock:
            if self._closed:
                raise CancelledError()
            while reuse and self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                self._workers.discard(worker)
            worker = WorkerProcess(worker_context())
            self._workers.add(worker)
            self.process_starts += 1
        try:
            worker.start()
        except BaseException:
            with self._lock:
                self._workers.discard(worker)
            raise
        return worker

    def _give_back(self, worker: WorkerProcess, reuse: bool) -> None:
        """Keep a worker that analysed a small trace for the next one; end the others (and
        one whose job's answer was not read)."""
        with self._lock:
            keep = reuse and not self._closed and worker.alive() and not worker.unsettled \
                and worker.jobs < WORKER_MAX_JOBS and len(self._idle) < self.jobs
            if keep:
                self._idle.append(worker)
                return
            self._workers.discard(worker)
        worker.stop()

    def close(self) -> None:
        """End the worker processes (a running analysis is abandoned) and, with
        ``no_cache``, remove the private cache folder. Safe to call more than once."""
        with self._lock:
            self._closed = True
            workers, self._workers, self._idle = list(self._workers), set(), []
        for worker in workers:
            worker.kill_soon()
        for worker in workers:
            worker.stop()
        if self.executor is not None:
            self.executor.close()
        if self.no_cache:
            shutil.rmtree(os.path.dirname(self.cache.root), ignore_errors=True)


#: Traces expected to need less memory than this (bytes, :func:`memory_estimate`) share
#: worker processes; bigger ones get a process of their own that ends with them.
REUSE_MAX_BYTES = 64 << 20
#: Jobs a shared worker runs before it is replaced (bounds slow growth of its memory).
WORKER_MAX_JOBS = 500
#: Seconds a worker gets to end on SIGTERM before it is killed (SIGKILL).
STOP_GRACE_S = 2.0


class WorkerProcess:
    """One worker process and the server's end of its private pipe (nothing shared with
    other workers: one that dies blocks no one, it only fails its own job)."""

    def __init__(self, ctx: Any):
        self.conn, self._child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(self._child_conn, os.getpid()),
                                name="stepscope-worker")
        self.jobs = 0
        #: a job was sent and its answer not read (a handler of its messages raised): the
        #: pipe may still hold that job's messages, so the process must not take another
        self.unsettled = False
        self._stop_lock = threading.Lock()  # close() and a job's thread may both stop it
        self._stopped = False

    def start(self) -> None:
        self.proc.start()
        self._child_conn.close()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def run(self, job: tuple, hear: Progress, first: Callable[[Any], None]) -> dict:
        """Send ``job`` (the arguments of :func:`analyse_to_cache`), pass on its progress
        (to ``hear``) and the parts of its Overview tab (to ``first``), return its answer;
        raises :class:`WorkerDied` when the process ends first."""
        self.jobs += 1
        self.unsettled = True
        try:
            self.conn.send(job)
            while True:
                message = self.conn.recv()
                if message[0] == "done":
                    self.unsettled = False
                    return message[1]
                if message[0] == "first":
                    first(message[1])
                else:
                    hear(message[1], message[2])
        except (EOFError, OSError) as e:
            raise WorkerDied(f"worker process {self.proc.pid} ended "
                             f"(exit code {self.proc.exitcode})") from e

    def kill_soon(self) -> None:
        """Ask the process to end (SIGTERM), without waiting."""
        if self.proc.pid is not None and self.proc.is_alive():
            self.proc.terminate()

    def stop(self) -> None:
        """End the process: SIGTERM, SIGKILL after :data:`STOP_GRACE_S`; then reap it.
        Once only, whoever calls first (a second caller waits for the first)."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            if self.proc.pid is not None:
                self.kill_soon()
                self.proc.join(STOP_GRACE_S)
                if self.proc.is_alive():
                    self.proc.kill()
                    self.proc.join(STOP_GRACE_S)
            self.conn.close()
