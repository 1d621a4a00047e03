"""The executor seam's Dask side (issue 21): ``stepscope DIR --scheduler tcp://HOST:8786``
analyses each trace as a task on a Dask distributed cluster (``pip install
'stepscope[dask]'``); without the flag the local process pool (:mod:`.pool`) stays.

A task runs :func:`~.remote.analyse_to_bytes` (the same reading and analysis as a local
worker process) and brings back only the compact packed result: the view payloads and the
per-rank summaries of the distributed view; the server stores it in its disk cache and
serves it as usual, so its memory never holds a rank's events. The workers must reach the
traces (a shared folder, or an object-store URL with their own credentials) and run the
same stepscope version as the server (a blob from other code is refused, see
:func:`~.remote.decode`).

Failures: a worker that dies mid-task makes the scheduler run the task again on another
(Dask's own retries, up to its ``allowed-failures``); a task that keeps killing workers,
or a scheduler that goes away, makes that trace answer an error with the reason (422 or
503) while everything already analysed keeps being served.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import CancelledError
from typing import Any

from ..fs import redact, scrub
from .remote import analyse_to_bytes

log = logging.getLogger(__name__)

#: Seconds to wait for the scheduler when connecting.
CONNECT_TIMEOUT_S = 10.0
#: How often a waiting analysis checks that the client is still connected (s).
POLL_S = 0.5
#: Seconds a disconnected client may take to reconnect before its analyses fail with 503.
RECONNECT_GRACE_S = 10.0


class SchedulerUnavailable(Exception):
    """The Dask scheduler cannot be reached (at start, or it went away)."""


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise SchedulerUnavailable("--scheduler needs the distributed package; install it "
                                   "with: pip install 'stepscope[dask]'") from None
    return distributed


class DaskExecutor:
    """Runs trace analyses on the Dask cluster at ``address`` (``tcp://HOST:8786``)."""

    def __init__(self, address: str, *, timeout: float = CONNECT_TIMEOUT_S):
        distributed = _distributed()
        self.address = address
        self.shown = redact(address)  # what pages and logs may show
        self._killed_worker = distributed.KilledWorker
        self.timeout = timeout
        self._lock = threading.Lock()
        try:
            # a malformed address is refused before a Client exists: a half-built one spent
            # 20 s closing itself at exit, printing a traceback
            from distributed.comm import parse_address
            from distributed.comm.addressing import parse_host_port

            scheme, location = parse_address(address)
            if scheme in ("tcp", "tls"):
                parse_host_port(location)
            self.client = distributed.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise SchedulerUnavailable(f"cannot reach the Dask scheduler at {self.shown}: "
                                       f"{scrub(str(e) or type(e).__name__)}") from None
        self._closed = threading.Event()

    def parallelism(self) -> int:
        """Threads of the cluster's workers together (at least 2): traces worth keeping in
        flight at once."""
        try:
            workers = self.client.scheduler_info()["workers"].values()
            return max(2, sum(int(w.get("nthreads", 1)) for w in workers))
        except Exception:  # noqa: BLE001 - only a sizing hint
            return 2

    def run(self, path: str, what: str, hear: Any) -> bytes | dict:
        """Analyse ``path`` on the cluster: the result blob, or an error dict
        (``{"status", "error", "detail"}``) when the cluster could not give one."""
        hear("read", 0.0)
        try:
            self._reconnect()
            future = self.client.submit(analyse_to_bytes, path, what, pure=False,
                                        key=f"stepscope-{what}-{uuid.uuid4().hex}")
        except Exception as e:  # noqa: BLE001 - a closed or broken client
            return self._unavailable(e)
        try:
            return self._wait(future)
        except self._killed_worker as e:
            return {"status": 422, "error": "analysis killed its Dask workers",
                    "detail": f"The workers analysing this trace died again and again "
                              f"({scrub(str(e))}), most likely out of memory. Give the "
                              "workers more memory or profile fewer steps."}
        except (CancelledError, OSError, TimeoutError, SchedulerUnavailable) as e:
            return self._unavailable(e)
        finally:
            future.release()

    def _wait(self, future: Any) -> bytes:
        """The task's result; raises SchedulerUnavailable once the client has been
        disconnected from the scheduler for :data:`RECONNECT_GRACE_S`."""
        lost_since = None
        while True:
            try:
                return future.result(timeout=POLL_S)
            except TimeoutError:
                pass
            if self._closed.is_set():
                raise SchedulerUnavailable("the server is shutting down")
            status = self.client.status
            if status == "running":
                lost_since = None
                continue
            lost_since = lost_since or time.monotonic()
            if status in ("closed", "closing") or \
                    time.monotonic() - lost_since >= RECONNECT_GRACE_S:
                raise SchedulerUnavailable(f"lost the connection to the scheduler "
                                           f"(client {status})")

    def _reconnect(self) -> None:
        """A new client when the old one gave up (the scheduler went away and came back:
        a restarted scheduler at the same address is used again)."""
        with self._lock:
            if self.client.status not in ("closed", "closing", "failed"):
                return
            distributed = _distributed()
            try:
                client = distributed.Client(self.address, timeout=self.timeout,
                                            set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise SchedulerUnavailable(f"cannot reach the scheduler: "
                                           f"{scrub(str(e) or type(e).__name__)}") from None
            self.client = client

    def _unavailable(self, e: BaseException) -> dict:
        reason = scrub(str(e) or type(e).__name__)
        log.warning("Dask scheduler %s: %s", self.shown, reason)
        return {"status": 503, "error": "Dask scheduler unavailable",
                "detail": f"The analysis could not run on the Dask cluster at {self.shown} "
                          f"({reason}). Traces analysed before are still served; restart "
                          "the scheduler and its workers, then reload."}

    def close(self) -> None:
        """Disconnect from the scheduler (the cluster itself keeps running)."""
        self._closed.set()
        try:
            self.client.close(timeout=2)
        except Exception:  # noqa: BLE001 - already gone
            pass
