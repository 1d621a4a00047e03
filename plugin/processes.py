"""Process lifetime helpers shared by the analysis workers (:mod:`stepscope.store.child`)
and the reader's decode helper (:mod:`stepscope.read.reader`): a process that ends itself
once the process it works for is gone.
"""

from __future__ import annotations

import os
import threading
import time

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
