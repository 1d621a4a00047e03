"""Process helpers: how analysis workers start (:func:`worker_context`,
:func:`start_forkserver`), and, shared by the workers (:mod:`stepscope.store.child`) and the
reader's decode helpers (:mod:`stepscope.read.reader`), a process that ends itself once the
process it works for is gone (:func:`watch_parent`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import threading
import time
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
