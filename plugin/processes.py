"""Process helpers: how analysis workers start (:func:`worker_context`,
:func:`start_forkserver`); shared by the workers (:mod:`stepscope.store.child`) and the
reader's decode helpers (:mod:`stepscope.read.reader`): the jobs a process is sent
(:func:`jobs`), a process that ends itself once the process it works for is gone
(:func:`watch_parent`), the memory pages numpy maps (:func:`small_pages`); and, for the
analysis and the views, independent work run in a second thread on big traces
(:func:`second_thread`, :func:`later`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

log = logging.getLogger(__name__)

#: How often a worker checks that the server that started it is still alive (s).
ORPHAN_POLL_S = 2.0


def watch_parent(pid: int) -> None:
    """End this process (at once, no cleanup) once ``pid`` (the server, or the process that
    forked this one) or this process's parent is gone.

    A server killed outright (SIGKILL, the OOM killer) runs no cleanup, nor does a worker
    killed while a helper decodes for it: the orphan would wait forever, keeping the
    forkserver and the resource tracker alive too (issues 7 and 12: nothing leaks)."""
    threading.Thread(target=_exit_with, args=(pid, os.getppid()), daemon=True,
                     name="stepscope-orphan-watch").start()


def jobs(conn: Any) -> Iterator[Any]:
    """The jobs a worker process is sent over its pipe ``conn``, one at a time, until the pipe
    closes or a ``None`` comes."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        yield job


def _exit_with(pid: int, parent: int) -> None:
    while os.getppid() == parent and _alive(pid):
        time.sleep(ORPHAN_POLL_S)
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pid now belongs to another user's process
        return False
    return True


def worker_context() -> Any:
    """How analysis workers start: ``forkserver`` with stepscope preloaded (``spawn`` where
    there is no fork)."""
    ctx = mp.get_context("forkserver" if sys.platform != "win32" else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["stepscope.store.child", "stepscope.views"])
    return ctx


def start_forkserver() -> None:
    """Start the forkserver (which imports numpy and the analyses once) in the background,
    so the first trace does not wait for it; the server calls this first thing, so that
    import overlaps its own start (issue 19: time to the first overview)."""
    threading.Thread(target=_ensure_forkserver, daemon=True, name="stepscope-forkserver").start()


def _ensure_forkserver() -> None:
    try:
        if worker_context().get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - only a warm-up: the pool starts it when needed
        log.debug("could not start the forkserver early", exc_info=True)


def small_pages() -> None:
    """Have numpy map this process's big arrays with ordinary 4 KiB pages, not transparent
    huge pages (``madvise``, numpy's default on Linux); nothing when
    ``NUMPY_MADVISE_HUGEPAGE`` says which. An analysis fills many fresh column-sized arrays
    once each, and a huge page is zeroed whole at its first touch. Measured in issue 19 on
    this 2-core machine (a VM, THP ``madvise``), small pages against huge ones:

    - x50 2021: analysis 1.6-1.7 -> 1.1 s (system time 3.0 -> 1.8 s); x50 2024: read +
      analysis + views 6.8-6.9 -> 6.3-6.4 s; x200 2021: analysis 11.0 -> 8.3 s, read to
      stored views 34.7 -> 31.1 s;
    - the server loading a timeline widened from the cache: x50 (602 MB) 1.25-1.5 ->
      0.38 s, x200 (2.4 GB) 3.6-7.0 -> 1.4-1.5 s;
    - but the timeline of a memory-bound trace is slower (x200: build + store 3.4 -> 4.0-4.7
      s; switching to huge pages for it alone made it 6.6 s: a VM pays for memory it has not
      touched yet, and the small pages freed before are reused).
    """
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # another numpy layout: keep its default
        return
    _set_madvise_hugepage(False)


#: From this many events on, memory is what limits a trace's analysis (issue 19: x200
#: peaks near 3.5 GB): the worker gives the heap's free pages back between its phases
#: (:func:`~stepscope.store.child.release_memory`).
MEMORY_BOUND_EVENTS = 4_000_000
#: Traces with this many events run independent analyses, views and timeline layouts in a
#: second thread (their numpy work runs without the GIL); not small ones (a thread costs
#: more than it saves). Memory-bound traces too, since their threads share one C heap
#: (:func:`~stepscope.store.child.heap_settings`): x200 (14.7 M events), analysis
#: 8.5-8.7 -> 5.5-5.8 s, its peak RSS at most 0.06 GB higher, still below the views' peak.
THREADED_EVENTS = range(200_000, 1 << 62)


def second_thread(events: int):
    """A one-thread pool for the work :func:`later` puts aside on a trace of ``events``
    events, or a context giving None (that work then runs at once)."""
    return ThreadPoolExecutor(1) if events in THREADED_EVENTS else nullcontext()


def later(pool: ThreadPoolExecutor | None, fn, *args) -> Future:
    """``fn(*args)`` in ``pool``'s thread, or at once when there is no pool."""
    if pool is not None:
        return pool.submit(fn, *args)
    done: Future = Future()
    done.set_result(fn(*args))
    return done
