"""What runs in an analysis worker process (the server side is :mod:`.pool`).

A worker receives jobs over its private pipe (:func:`_worker_main`), reads and analyses one
trace at a time (:func:`analyse_to_cache`), stores the view payloads and then the timeline
into the disk cache, and sends progress messages and a small status dict back. It ends by
itself when the server (or the process that forked it) is gone
(:func:`stepscope.processes.watch_parent`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from ..errors import AnalysisBug, StepscopeError
from ..fs import filesystem_of
from ..processes import MEMORY_BOUND_EVENTS, jobs, small_pages, watch_parent
from ..read.reader import read_trace
from .cache import Ahead, DiskCache
from .lazy import timeline_key
from .packing import pack
from .remote import apply_storage_env

log = logging.getLogger(__name__)


#: ``progress(phase, fraction)``: phase name, overall fraction 0..1 of the job.
Progress = Callable[[str, float], None]


#: Share of a job's progress bar spent reading the file; the rest is analysis.
READ_SHARE = 0.8


_PROGRESS_EVERY_S = 0.2


_conn: Any = None  # the worker's end of its pipe to the server (set by _worker_main)


def _worker_main(conn: Any, server_pid: int) -> None:
    """A worker process: analyse the jobs the server sends over ``conn`` (one at a time)
    until the pipe closes or a ``None`` comes; answer each with ``("done", status dict)``."""
    global _conn
    _conn = conn
    heap_settings()  # before the process starts any thread
    watch_parent(server_pid)
    for job in jobs(conn):
        try:
            result = analyse_to_cache(*job)
        except Exception:  # a bug in the analysis (not in the trace): the server logs it
            log.exception("analysing %s failed", job[0])
            result = {"status": 500, **AnalysisBug("internal error while analysing").body()}
        conn.send(("done", result))
        # idle until the next job, while the server loads what this one stored: the heap
        # the job freed goes back to the system, whatever the trace's size (2024 x50: the
        # worker's RSS 0.66 -> 0.09 GB; it kept it all, 1.0 GB, before packing.py dropped
        # its closures' reference cycles)
        release_memory()




def analyse_file(path: str, progress: Progress, helpers: int = 0) -> Any:
    """Read and analyse one trace file in this process; returns its ``ViewSet``.

    ``progress("read", f)`` with ``f`` in ``[0, READ_SHARE]`` while reading, then
    ``progress("analyse", READ_SHARE)``. ``helpers``: see :func:`~.reader.read_trace`.
    Raises ``TraceError`` for an unusable file.
    """
    from ..views import build_views  # imported here: the views pull in every analysis

    return build_views(_read(path, progress, helpers))


def _read(path: str, progress: Progress, helpers: int) -> Any:
    """The trace of ``path``, reporting the ``read`` phase, then the start of ``analyse``."""
    trace = read_trace(path, progress=lambda f: progress("read", READ_SHARE * f),
                       helpers=helpers)
    release_memory(len(trace))
    progress("analyse", READ_SHARE)
    return trace


def analyse_to_cache(path: str, cache_root: str, max_bytes: int, key: str,
                     env: dict[str, str] | None = None) -> dict:
    """Child process: read + analyse ``path``; store the view payloads under ``key``, then
    the timeline under ``timeline_key(key)``. ``env``: the server's storage variables
    (credentials, endpoints) for a remote ``path`` (:func:`~.remote.storage_env`).

    Progress goes to the server over the worker's pipe: a ``first`` message with the parts of
    the Overview tab once they are built, then the first ``timeline`` message says the
    payloads are stored. Returns ``{"ok": True}`` or the error ``{"status", "error", "detail", ...}``.
    """
    from ..analysis import analyze  # imported here: the views pull in every analysis
    from ..timeline import build_timeline
    from ..timeline.lanes import assign_lanes
    from ..views import ViewSet
    from ..views.trace import timeline_inputs

    last = [0.0, ""]  # when the last message went, and its phase

    def progress(phase: str, fraction: float, *, now: bool = False) -> None:
        t = time.monotonic()
        if _conn is not None and (now or phase != last[1] or t - last[0] >= _PROGRESS_EVERY_S
                                  or fraction >= 1):  # (a new phase is never held back)
            last[:] = [t, phase]
            _conn.send(("progress", phase, fraction))

    apply_storage_env(env)
    cache = DiskCache(cache_root, max_bytes)
    small_pages()
    try:
        analysis = analyze(_read(path, progress, _helpers_for(path)))
        release_memory(len(analysis.trace))  # its temporaries, before the views' peak
        failed = _store(cache, path, key, ViewSet(analysis, first=_send_first))
        if failed is not None:
            return failed
        progress("timeline", 0.0, now=True)  # the payloads can be served
        inputs = timeline_inputs(analysis)
        del analysis  # free the analysis' intermediates before the timeline's memory peak
        ahead = _save_ahead(cache, timeline_key(key), inputs)
        try:
            # the lanes reuse the analysis' nesting, which is freed once they are laid out
            inputs["layout"] = assign_lanes(inputs["trace"], inputs.pop("tree"))
            release_memory(len(inputs["trace"]))
            timeline = build_timeline(**inputs)
            del inputs
            progress("timeline", TIMELINE_BUILD_SHARE, now=True)
            return _store(cache, path, timeline_key(key), timeline, ahead) or {"ok": True}
        except BaseException:
            if ahead is not None:
                ahead.discard()  # (nothing left to remove once the entry is in place)
            raise
    except StepscopeError as e:
        return {"status": e.status, **e.body()}
    except MemoryError:
        return {"status": 422, "error": "out of memory",
                "detail": "The trace needs more memory than is available; profile fewer "
                          "steps (torch.profiler schedule active=...) or free memory."}


def _send_first(parts: Any) -> None:
    """Hand the parts of the Overview tab (:class:`~stepscope.views.FirstParts`) to the
    server, which serves them while the other views are built (issue 19: x200, about 4 s
    sooner)."""
    if _conn is not None:
        _conn.send(("first", parts))


def release_memory(events: int | None = None) -> None:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``; nothing
    elsewhere) between phases of a trace of ``events`` events (None: always). Between
    phases of a big trace, the freed decode objects and analysis intermediates otherwise
    stay in the process's RSS while the next phase allocates anew (issue 19: peak memory of
    the process tree). Traces under :data:`~stepscope.processes.MEMORY_BOUND_EVENTS` keep
    them: their column-sized arrays come from the heap, and the next phase reuses the freed
    pages instead of faulting fresh ones in (x50: analysis 2.25 -> 1.8 s, same peak; at
    x200 keeping them added 0.5 GB to the peak)."""
    if events is not None and events < MEMORY_BOUND_EVENTS:
        return
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


#: glibc's ``mallopt`` parameters
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
#: Free bytes at the top of the heap that glibc gives back by itself (the worker gives the
#: heap's free pages back between phases and jobs: :func:`release_memory`).
TRIM_THRESHOLD = 1 << 30


def heap_settings() -> None:
    """Set glibc's heap up for an analysis worker (``mallopt``; nothing elsewhere); call it
    before the process starts a thread (its read's helper processes inherit it).

    - **One heap for all threads** (``M_ARENA_MAX`` 1). A big trace's analysis runs two
      threads at once (:func:`~stepscope.processes.second_thread`); with a heap per thread,
      the pages one thread freed were not reused by the phases after it. Peak RSS
      in-process, x200 (14.7 M events) while building the views: 3,662-3,714 -> 3,429-3,567
      MiB; 2024 x50 (3.4 M) while building the timeline: 1,045-1,063 -> 794-807 MiB. numpy
      allocates few, big blocks and Python objects come from Python's own allocator, so
      threads sharing one heap wait on it for no measurable time.
    - **Big blocks from that heap too** (``M_MMAP_MAX`` 0), and no trimming of its top by
      glibc itself (``M_TRIM_THRESHOLD`` 1 GiB). A trace's column-sized arrays over 32 MB
      (glibc's largest mmap threshold: from about 4 M events) were each mapped afresh, their
      pages faulted in one at a time (0.45 s per GiB on this VM: first write of 1 GiB 0.64 s,
      a second one 0.18 s), and unmapped when freed; from the heap, the next array reuses the
      pages the last one freed. Issue 19, x200, in one process: analysis 6.7 -> 5.5 s (system
      time 3.7 -> 1.3 s), views 5.8 -> 3.8 s; through the server (``bench_big.py``, same
      run): cold 39.0 -> 35.5 s, the views 5.7 -> 4.2 s and the timeline 11.1 -> 8.8 s after
      the Overview, peak RSS of the process tree 3,428 -> 3,563 MiB; x50 unchanged (2024
      format in one process: analysis 1.07-1.18 -> 1.00-1.07 s, same peak). Without the trim
      threshold glibc gave the heap's top back at every free of 128 kB and faulted it in again
      (x50: 20 % more page faults than with mmap); with mmap off alone, x200 +timeline 9.7 s.
      Session 11 kept ``M_MMAP_MAX`` 0 out for its peak (then 3.8 GB at x200 with it);
      decoding chunks a piece at a time (:func:`~stepscope.read.reader.build_local`) has
      since lowered the peak by more than it adds.
    """
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, 1)
        mallopt(_M_MMAP_MAX, 0)
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


@functools.cache
def _glibc(function: str) -> Any:
    """glibc's ``function`` through ctypes; None elsewhere (musl, macOS, Windows)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


#: Share of the timeline phase spent building it (the rest: storing it), for its progress.
TIMELINE_BUILD_SHARE = 0.6


#: Overall fraction the ``trace/*`` routes' progress starts from once the other views are
#: ready (that of the ``cache`` phase: fractions never decrease, SPEC §3).
TIMELINE_FROM = 0.95


def _save_ahead(cache: DiskCache, key: str, inputs: dict) -> Ahead | None:
    """Start saving the arrays of the timeline entry ``key`` that are final before it is
    built (the trace's columns and the launch links), in a thread while the timeline is laid
    out (issue 19, x200: they are 0.46 of its 0.81 GB on disk). None when there is nothing
    big to save, or the cache cannot be written (:func:`_store` says so)."""
    try:
        return cache.save_ahead(key, pack((inputs["trace"], inputs["links"]))[1].values())
    except OSError:
        return None


def _store(cache: DiskCache, path: str, key: str, obj: Any,
           ahead: Ahead | None = None) -> dict | None:
    """Pack ``obj`` into the cache (``ahead``: some of its arrays saved already); None, or the
    error dict when the cache cannot be written (read-only, a regular file, disk full:
    ``cache_failed``, the server then switches to a private fallback folder and tries
    again, issue 12 item 2)."""
    state, arrays = pack(obj)
    try:
        cache.put(path, {"state": state}, arrays, key=key, ahead=ahead)
    except OSError as e:
        return {"status": 503, "error": "cache not writable",
                "detail": f"The analysis cache folder cannot be written ({e.strerror or e}).",
                "cache_failed": True}
    return None


#: Files at least this big (bytes on disk, gzip or not) are decoded with a helper process.
HELPER_MIN_BYTES = 4 << 20


def _helpers_for(path: str) -> int:
    """One helper process for a big file when there is a second core for it."""
    try:
        big = filesystem_of(path).stat(path).size >= HELPER_MIN_BYTES
    except (OSError, ValueError):
        return 0
    return 1 if big and (os.cpu_count() or 1) >= 2 else 0

