"""The answers other than 200: errors, and "not ready yet".

Every layer raises :class:`StepscopeError` (or a subclass) with a short ``error`` text and
a ``detail`` that tells the user what to do; the app turns it into
``{"error", "detail", "file"?, "position"?}`` with the error's HTTP ``status``.

:class:`Loading` is the 202 answer (SPEC §3) while a span is analysed; :class:`NotReady`
raises one from a route whose data comes later than the rest of the span (the timeline).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Characters of a request's value quoted back in an error at most (:func:`echo`).
ECHO_CHARS = 40


def echo(value: object) -> str:
    """``repr`` of a value from a request, cut to :data:`ECHO_CHARS` characters: an error
    quotes what it refuses without sending a 100 kB name back."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= ECHO_CHARS:
        return repr(text) if isinstance(value, str) else text
    return repr(f"{text[:ECHO_CHARS]}... ({len(text):,} chars)")


@dataclass
class Loading:
    """A 202 answer: the requested data is not ready yet (SPEC §3)."""

    phase: str      # "queued" | "read" | "analyse" | "cache"
    fraction: float  # 0..1, never decreases for one job
    elapsed_s: float  # seconds since the job was queued

    def body(self) -> dict:
        return {"loading": True, "phase": self.phase, "fraction": round(self.fraction, 4),
                "elapsed_s": round(self.elapsed_s, 3)}


class NotReady(Exception):
    """A route's data is still being prepared: the app answers 202 with ``loading``."""

    def __init__(self, loading: Loading):
        super().__init__(loading.phase)
        self.loading = loading


class StepscopeError(Exception):
    """A problem the user can act on; never a bug.

    ``status``: HTTP status (400 bad parameter, 403 not served, 404 unknown run/worker/span,
    422 unusable trace).
    ``position``: optional ``{"byte": int, "line": int}`` inside ``file``.
    """

    status = 400

    def __init__(self, error: str, detail: str = "", *, file: str | None = None,
                 position: dict | None = None, status: int | None = None):
        super().__init__(error)
        self.error = error
        self.detail = detail
        self.file = file
        self.position = position
        if status is not None:
            self.status = status

    def body(self) -> dict:
        """The JSON error body of SPEC §3."""
        out = {"error": self.error, "detail": self.detail}
        if self.file is not None:
            out["file"] = self.file
        if self.position is not None:
            out["position"] = self.position
        return out


class AnalysisBug(StepscopeError):
    """An unexpected exception while analysing a file: a bug in Stepscope, 500."""

    status = 500

    def __init__(self, error: str, detail: str = "This is a bug in Stepscope, not a problem "
                 "with the trace; please report it with the server log.", **kwargs):
        super().__init__(error, detail, **kwargs)


class TraceError(StepscopeError):
    """A trace file with nothing usable in it (empty, not JSON, not a trace, no events): 422."""

    status = 422


class NotFound(StepscopeError):
    """Unknown run, worker or span: 404."""

    status = 404


class Forbidden(StepscopeError):
    """A file that exists but is not served (a link to outside the log directory): 403."""

    status = 403


class BadParameter(StepscopeError):
    """Missing or malformed query parameter: 400."""

    status = 400
