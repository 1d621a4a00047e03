"""PATH of ``stepscope report`` / ``stepscope summary`` -> the spans it holds, analysed.

PATH is a trace file, a run folder (holding trace files) or a log directory (folders of
runs); discovery names runs, workers and spans exactly as the server does. Each span is
read and analysed in this process by the server's own code (``read_trace`` ->
``analyze`` -> :class:`~stepscope.views.ViewSet`), without the timeline (no report or
summary shows it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..discovery import parse_name, snapshot
from ..errors import StepscopeError
from ..fs import LOCAL, filesystem, filesystem_of, is_url, redact

#: progress(file name, fraction of its bytes read 0..1)
Progress = Callable[[str, float], None] | None


class PathError(StepscopeError):
    """PATH is missing or holds no trace files (a one-line message for the terminal)."""

    status = 400


@dataclass(frozen=True)
class Span:
    """One trace file: its run, worker and span names as the dashboard shows them."""

    run: str
    worker: str
    span: str
    path: str


def spans_of(path: str) -> list[Span]:
    """The spans under ``path`` (a trace file, a run folder or a log directory; a local path
    or a URL, as the server takes), runs, workers and spans in the dashboard's order.
    Raises :class:`PathError`."""
    fs, where = LOCAL, path
    if is_url(path):
        try:
            fs, where = filesystem(path)  # (file:// is the local disk)
        except ValueError as e:  # fsspec (or the store's package) missing: what to install
            raise PathError(str(e)) from None
    if fs.is_regular_file(where):
        folder, name = _parent_and_name(fs, where)
        worker, span = parse_name(name) or (name.split(".")[0] or name, "default")
        return [Span(_parent_and_name(fs, folder)[1] or "run", worker, span, where)]
    if not fs.remote and not os.path.isdir(where):
        raise PathError(f"{path}: no such file or folder")
    try:
        runs = snapshot(where)
    except StepscopeError as e:  # a missing bucket, denied access: the server's words
        raise PathError(f"{e.error}: {e.detail}") from None
    found = [Span(run, worker, span, info.path) for run, workers in runs.items()
             for worker, spans in workers.items() for span, info in spans.items()]
    if not found:
        raise PathError(f"{redact(path)}: no trace files (*.pt.trace.json[.gz]) in this "
                        "folder or its sub-folders")
    return found


def _parent_and_name(fs, path: str) -> tuple[str, str]:
    """``(folder, name)`` of a local path or an object store's URL."""
    if fs.remote:
        folder, _, name = path.rstrip("/").rpartition("/")
        return folder, name
    path = os.path.abspath(path)
    return os.path.dirname(path), os.path.basename(path)


def analyse(span: Span, progress: Progress = None):
    """The span's :class:`~stepscope.views.ViewSet` (payloads of every view, no timeline).

    Raises :class:`~stepscope.errors.TraceError` for a file with nothing usable in it.
    """
    from ..analysis import analyze
    from ..read.reader import read_trace
    from ..views import ViewSet

    name = _parent_and_name(filesystem_of(span.path), span.path)[1]
    trace = read_trace(span.path, (lambda f: progress(name, f)) if progress else None)
    return ViewSet(analyze(trace))


def one_line(e: Exception) -> str:
    """An error as the one line ``report`` and ``summary`` print (``file: error (detail)``)."""
    if isinstance(e, StepscopeError):
        where = f"{e.file}: " if e.file else ""
        return f"{where}{e.error}" + (f" ({e.detail})" if e.detail else "")
    if isinstance(e, OSError) and e.filename and e.strerror:  # "-o DIR/x.html: ..."
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split())
