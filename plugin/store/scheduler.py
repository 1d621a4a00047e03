"""Background store: keeps every discovered trace analysed, off the request thread.

A poll thread re-scans the log directory (:mod:`.discovery`) every ``reload_interval``
seconds (``threading.Event.wait``, no busy loop). Per ``(run, worker, span)`` the store holds
one :class:`Job` for the latest *stable* version of its file:

- A file is stable once its size, mtime and inode were equal over two polls (it may still be
  being written before that). At startup there is no earlier poll, so a file already present
  counts as stable when its mtime is at least one poll interval old: it has then been
  unchanged for as long as the two-poll rule would have waited, and the server is useful
  at once. A file that is fresher waits for the second poll like any new file.
- Until a file's new version is stable, the previous version's answer keeps being served.
- A stable new version (changed or new file) gets a new job; a deleted file vanishes.

Jobs run on ``jobs`` worker threads, taken from a priority queue: jobs of the most recently
requested worker first (the requested span before its sibling spans), then the rest in
discovery order. The job function :func:`analyse_file` is a pure module-level function of
the file path; the default, :class:`~.worker.Analyser`, runs it in worker processes and
hands results back through the disk cache.

Job phases: ``queued`` -> ``read`` -> ``analyse`` -> ``ready`` | ``failed``. A failed job
keeps its error (422 for a :class:`~stepscope.errors.TraceError`, 500 for a bug) until the
file changes.

Symlinks (issue 7): links to files or folders outside the log directory are followed and
analysed (SPEC §1.1), but nothing of such a file is served verbatim: ``trace/download``
refuses it (403) and its error messages do not quote its bytes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..discovery import Scanner, Snapshot, shadow_note
from ..errors import AnalysisBug, Loading, NotFound, StepscopeError, echo
from ..fs import filesystem, redact
from .child import Progress, analyse_file
from .pool import default_jobs

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (run, worker, span)
#: How long a request waits for the very first scan before answering with what is known (s).
FIRST_SCAN_WAIT_S = 10.0


class StillScanning(StepscopeError):
    """A run is asked for before the log directory's first scan is done: 503 for the
    listing routes; the views answer 202 (:meth:`Store.lookup`)."""

    status = 503


@dataclass
class Ready:
    """An analysed span: its views plus notes from discovery (e.g. duplicate files)."""

    viewset: Any
    file_notes: list[dict] = field(default_factory=list)
    path: str = ""  # the analysed trace file (trace/download serves it)
    #: the analysed version's (size, mtime ns, identity): :attr:`~..discovery.FileInfo.signature`
    signature: tuple | None = None

    def names(self) -> list[str]:
        return list(self.viewset.names())

    def notes(self) -> list[dict]:
        return self.file_notes + list(self.viewset.notes())

    def get(self, route: str, params: Mapping[str, str]) -> Any:
        payload = self.viewset.get(route, params)
        if self.file_notes and isinstance(payload, dict) and isinstance(payload.get("notes"), list):
            payload = {**payload, "notes": self.file_notes + payload["notes"]}
        return payload


class Job:
    """Analysis of one version of one file. The job function gets the job as its
    ``progress``: it calls ``progress(phase, fraction)`` (from a worker thread) and may hand
    over views that answer the Overview tab before the others with ``progress.first``."""

    def __init__(self, key: Key, info):
        self.key = key
        self.info = info
        self.queued_at = time.monotonic()
        self.phase = "queued"
        self.fraction = 0.0
        self.result: Ready | None = None
        #: served while the job is still running (:meth:`first`), else None
        self.early: Ready | None = None
        self.error: StepscopeError | None = None
        self.cancelled = False
        self.priority = 0
        self.finished_at = 0.0  # monotonic time the job became ready or failed

    def __call__(self, phase: str, fraction: float) -> None:
        """Progress of the analysis: its phase and overall fraction (0..1)."""
        if self.phase in ("ready", "failed"):
            return
        self.phase = phase
        self.fraction = max(self.fraction, min(1.0, float(fraction)))

    def first(self, viewset: Any) -> None:
        """Views that answer the Overview tab (its other routes answer 202) until the job
        ends (:class:`~.lazy.FirstViews`)."""
        self.early = self.ready(viewset)

    def ready(self, viewset: Any) -> Ready:
        """``viewset`` with the file's notes from discovery (a shadowed duplicate, say)."""
        return Ready(viewset, self._file_notes(), self.info.path, self.info.signature)

    def _file_notes(self) -> list[dict]:
        note = shadow_note(self.info)
        return [note] if note else []

    def update_info(self, info) -> None:
        """The same file seen by a newer scan: its notes follow (a duplicate deleted)."""
        self.info = info
        for ready in (self.result, self.early):
            if ready is not None:
                ready.file_notes = self._file_notes()

    def loading(self) -> Loading:
        """How far the job is; a job that has just ended says ``cache`` (the early views'
        202 of a request that met it just before it ended)."""
        phase = "cache" if self.phase in ("ready", "failed") else self.phase
        return Loading(phase, self.fraction, time.monotonic() - self.queued_at)


class Store:
    """Discovered runs and their analyses. Thread-safe; start with :meth:`start`.

    ``reload_interval``: seconds between polls (<= 0: scan once, take every file as stable).
    ``jobs``: analysis threads (default: half the CPUs, 1..4).
    ``analyse``: the job function, ``analyse(path, progress) -> ViewSet``.
    """

    def __init__(self, logdir: str, *, reload_interval: float = 5.0, jobs: int | None = None,
                 analyse: Callable[[str, Progress], Any] = analyse_file):
        self.fs, self.logdir = filesystem(logdir)  # a local path or a URL (stepscope.fs)
        self.reload_interval = float(reload_interval)
        self.jobs = jobs or default_jobs()
        self._analyse = analyse
        self._scanner = Scanner(self.logdir)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._first_scan = threading.Event()
        self._snapshot: Snapshot = {}
        self._skipped: list[dict[str, str]] = []  # *.json[.gz] that are not traces, and why
        #: why the latest scan could not list the (remote) log directory, else None
        self._scan_error: StepscopeError | None = None
        self._seen: dict[Key, Any] = {}  # key -> FileInfo observed by the previous poll
        self._first_seen: dict[Key, float] = {}  # key -> monotonic time of its discovery
        self._jobs: dict[Key, Job] = {}
        self._run_results: dict[tuple, Any] = {}  # (analysis, run, jobs) -> combination
        self._heap: list[tuple[int, int, Job]] = []
        self._seq = itertools.count()
        self._requests = itertools.count(1)
        self._last_request: Key | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Store:
        """Start the poll thread and the analysis threads (idempotent)."""
        if self._threads:
            return self
        self._threads.append(threading.Thread(target=self._poll_loop, name="stepscope-poll",
                                              daemon=True))
        for i in range(self.jobs):
            self._threads.append(threading.Thread(target=self._work_loop, daemon=True,
                                                  name=f"stepscope-analyse-{i}"))
        for t in self._threads:
            t.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop polling and the workers (a running analysis finishes in the background)."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        for t in self._threads:
            t.join(timeout)
        close = getattr(self._analyse, "close", None)
        if close is not None:
            close()

    def _poll_loop(self) -> None:
        while True:
            try:
                self.poll()
            except Exception:  # a scan bug must not stop reloading forever
                log.exception("scanning %s failed", redact(self.logdir))
            if self.reload_interval <= 0 or self._stop.wait(self.reload_interval):
                return

    # -- polling -------------------------------------------------------------------------
    def poll(self) -> None:
        """Scan once and update jobs (the poll thread calls this; tests may too)."""
        try:
            snap = self._scanner.snapshot()
        except StepscopeError as e:  # the remote log directory cannot be listed
            if str(e) != str(self._scan_error):
                log.warning("%s: %s", e, e.detail)  # once per kind of failure
            self._scan_error = e  # what has been found so far keeps being served
            self._first_scan.set()
            return
        except BaseException:
            self._first_scan.set()  # requests must not wait for a scan that failed
            raise
        self._scan_error = None
        first = not self._first_scan.is_set()
        now_ns = time.time_ns()
        settle_ns = int(self.reload_interval * 1e9)
        with self._lock:
            seen: dict[Key, Any] = {}
            for key, info in _flatten(snap):
                seen[key] = info
                prev = self._seen.get(key)
                if prev is not None:
                    stable = prev.path == info.path and prev.signature == info.signature
                else:
                    stable = first and (settle_ns <= 0 or now_ns - info.mtime_ns >= settle_ns)
                job = self._jobs.get(key)
                same = job is not None and (job.info.path, job.info.signature) == (
                    info.path, info.signature)
                if same and not _transient(job):
                    job.update_info(info)  # keep the newest list of shadowed files
                elif stable or same:  # (same: failed for now, e.g. the scheduler was away)
                    if job is not None:
                        job.cancelled = True
                    self._jobs[key] = job = Job(key, info)
                    self._push(job, 0)
            for key in [k for k in self._jobs if k not in seen]:
                self._jobs.pop(key).cancelled = True
            now = time.monotonic()
            self._first_seen = {k: self._first_seen.get(k, now) for k in seen}
            self._seen = seen
            self._snapshot = snap
            self._skipped = self._scanner.skipped
            self._lock.notify_all()
        self._first_scan.set()

    def _push(self, job: Job, priority: int) -> None:
        job.priority = priority
        heapq.heappush(self._heap, (priority, next(self._seq), job))

    # -- analysis workers ----------------------------------------------------------------
    def _next_job(self) -> Job | None:
        with self._lock:
            while not self._stop.is_set():
                while self._heap:
                    priority, _, job = heapq.heappop(self._heap)
                    if job.cancelled or job.phase != "queued" or priority != job.priority:
                        continue  # stale entry: superseded, re-prioritised or started
                    job.phase = "read"
                    return job
                self._lock.wait()
        return None

    def _work_loop(self) -> None:
        while (job := self._next_job()) is not None:
            self._run(job)

    def _run(self, job: Job) -> None:
        name = job.info.name
        try:
            result, error = job.ready(self._analyse(job.info.path, job)), None
        except StepscopeError as e:
            if e.file is None:
                e.file = name
            if not self.fs.is_inside(self.logdir, job.info.path):
                e.detail = (f"{name} is a link to a file outside the log directory, so its "
                            "content is not quoted here. Point the link at a profiler trace.")
            result, error = None, e
        except Exception:
            log.exception("analysing %s failed", job.info.path)
            result, error = None, AnalysisBug(
                f"{name}: internal error while analysing the file", file=name)
        with self._lock:
            job.result, job.error, job.early = result, error, None
            job.finished_at = time.monotonic()
            job.fraction = 1.0
            job.phase = "ready" if error is None else "failed"

    # -- queries (request threads) -------------------------------------------------------
    def _wait_first_scan(self) -> None:
        self._first_scan.wait(FIRST_SCAN_WAIT_S)

    def first_scan_done(self, timeout: float = 0.0) -> bool:
        """Wait up to ``timeout`` seconds for the first scan; True when it is done."""
        return self._first_scan.wait(timeout)

    def has_runs(self) -> bool:
        """Did the latest scan find any trace (no waiting)?"""
        return bool(self._snapshot)

    def runs(self) -> list[str]:
        """Run names, sorted."""
        self._wait_first_scan()
        return list(self._snapshot)

    def status(self) -> dict[str, dict[str, int]]:
        """``{run: {"ready": n, "loading": n, "failed": n}}`` counting spans."""
        self._wait_first_scan()
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for key, _info in _flatten(self._snapshot):
                counts = out.setdefault(key[0], {"ready": 0, "loading": 0, "failed": 0})
                job = self._jobs.get(key)
                phase = job.phase if job is not None else "queued"
                counts[phase if phase in ("ready", "failed") else "loading"] += 1
        return out

    def runs_info(self) -> dict:
        """The ``runs`` answer: ``{"runs": [names], "loading": bool, "status": {...},
        "skipped": [{"file", "reason"}]}``.

        ``loading`` is true until the first scan is done and while any span is not analysed;
        ``skipped`` lists the ``*.json[.gz]`` files that are not traces (SPEC §1.1).
        Raises the listing error (404 missing bucket, 403 access denied, 503 unreachable,
        :func:`~stepscope.fs.listing_error`) while a remote log directory cannot be listed
        and nothing was found before.
        """
        self._wait_first_scan()
        error = self._scan_error
        if error is not None and not self._snapshot:
            raise error.with_traceback(None)
        with self._lock:
            runs = list(self._snapshot)
            status = self.status()
            skipped = self._skipped
        loading = not self._first_scan.is_set() or any(c["loading"] for c in status.values())
        return {"runs": runs, "loading": loading, "status": status, "skipped": skipped}

    def workers(self, run: str) -> list[str]:
        """Workers of ``run``; raises NotFound."""
        return list(self._run_of(run))

    def spans(self, run: str, worker: str) -> list[str]:
        """Spans of ``worker`` in ``run``, numerically sorted; raises NotFound."""
        return list(self._worker_of(run, worker))

    def _run_of(self, run: str) -> dict:
        self._wait_first_scan()
        workers = self._snapshot.get(run)
        if workers is None:
            if not self._first_scan.is_set():  # (a log directory of many folders, remote)
                raise StillScanning("still scanning the log directory",
                                    "Its first scan is not done yet: try again in a few "
                                    f"seconds ({echo(run)} may be among the runs).")
            raise NotFound(f"unknown run {echo(run)}",
                           "GET runs lists the runs under the log directory.")
        return workers

    def _worker_of(self, run: str, worker: str) -> dict:
        spans = self._run_of(run).get(worker)
        if spans is None:
            raise NotFound(f"unknown worker {echo(worker)} in run {run!r}",
                           f"GET workers?run={run} lists its workers.")
        return spans

    def resolve(self, run: str, worker: str, span: str | None) -> Key:
        """The key of a span; ``span`` None or "" means the latest. Raises NotFound."""
        spans = self._worker_of(run, worker)
        if not span:
            return (run, worker, list(spans)[-1])
        if span not in spans:
            raise NotFound(f"unknown span {echo(span)} of worker {worker!r} in run {run!r}",
                           f"GET spans?run={run}&worker={worker} lists its spans; "
                           "leave span out for the latest.")
        return (run, worker, span)

    def lookup(self, run: str, worker: str, span: str | None,
               early: bool = False) -> Ready | Loading:
        """The analysed views of a span, or how far its analysis is; with ``early``, the
        views a running job serves ahead (:meth:`Job.first`) when it has them.

        Raises NotFound (unknown run/worker/span), the file's error (422 TraceError, 500
        AnalysisBug) when its analysis failed. Moves the span's worker to the queue's front.
        """
        try:
            key = self.resolve(run, worker, span)
        except StillScanning:  # the views wait for it as for an analysis
            return Loading("queued", 0.0, 0.0)
        with self._lock:
            job = self._jobs.get(key)
            if job is None:  # discovered, not stable yet (still being written?)
                since = self._first_seen.get(key, time.monotonic())
                return Loading("queued", 0.0, time.monotonic() - since)
            if job.phase == "ready":
                return job.result
            if job.phase == "failed":
                raise job.error.with_traceback(None)  # (else each raise adds frames to it)
            self._prioritise(key)
            if early and job.early is not None:
                return job.early
            return job.loading()

    def run_result(self, run: str, analysis: Any) -> Any:
        """The combination of a run-level ``analysis`` (:mod:`stepscope.runlevel`) over
        every span of ``run``, from the spans' cached summaries; or a :class:`Loading`
        (the least advanced span's progress) while some are not analysed yet.

        Spans that failed are passed to ``combine`` as ``(worker, span, error)``; the
        combination is kept until a span of the run changes (new job objects).
        """
        try:
            keys = [(run, w, s) for w in self._run_of(run) for s in self._worker_of(run, w)]
        except StillScanning:
            return Loading("queued", 0.0, 0.0)
        with self._lock:
            jobs = [self._jobs.get(k) for k in keys]
            waiting = [j for j in jobs if j is None or j.phase not in ("ready", "failed")]
            if waiting:
                known = [j for j in waiting if j is not None]
                slowest = min(known, key=lambda j: j.fraction) if known else None
                return slowest.loading() if slowest else Loading("queued", 0.0, 0.0)
            memo_key = (analysis.name, run, tuple((j.key, j.queued_at) for j in jobs))
            cached = self._run_results.get(memo_key)
        if cached is not None:
            return cached
        from ..runlevel import TraceSummary  # the views pull in every analysis

        summaries, failed = [], []
        for (_run, worker, span), job in zip(keys, jobs):
            if job.phase == "ready":
                summary = getattr(job.result.viewset, "summaries", {}).get(analysis.name)
                summaries.append(TraceSummary(worker, span, summary))
            else:
                failed.append((worker, span, str(job.error)))
        result = analysis.combine(summaries, failed)
        with self._lock:
            for k in [k for k in self._run_results if k[:2] == memo_key[:2]]:
                del self._run_results[k]  # an older version of this run's combination
            self._run_results[memo_key] = result
        return result

    def _prioritise(self, key: Key) -> None:
        """Queue the requested span first, then its worker's other spans (lock held)."""
        run, worker, span = key
        if self._last_request == key:
            return
        self._last_request = key
        n = next(self._requests)
        for s in self._snapshot.get(run, {}).get(worker, {}):
            job = self._jobs.get((run, worker, s))
            if job is not None and job.phase == "queued":
                self._push(job, -2 * n - (1 if s == span else 0))


#: Seconds after which a job that failed for a passing reason (503) is tried again.
RETRY_UNAVAILABLE_S = 30.0


def _transient(job: Job) -> bool:
    """Did ``job`` fail for a reason that may pass (503: the Dask scheduler or the storage
    was unavailable) at least :data:`RETRY_UNAVAILABLE_S` ago? Such a job is tried again
    at the next scan; meanwhile the span answers the 503 with its reason."""
    return job.phase == "failed" and getattr(job.error, "status", 0) == 503 and \
        time.monotonic() - job.finished_at >= RETRY_UNAVAILABLE_S


def _flatten(snap: Snapshot):
    for run, workers in snap.items():
        for worker, spans in workers.items():
            for span, info in spans.items():
                yield (run, worker, span), info

