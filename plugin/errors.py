"""The one error type a trace problem raises, and how it becomes a JSON error body.

Every layer raises :class:`StepscopeError` (or a subclass) with a short ``error`` text and
a ``detail`` that tells the user what to do; the app turns it into
``{"error", "detail", "file"?, "position"?}`` with the error's HTTP ``status``.
"""

from __future__ import annotations


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
