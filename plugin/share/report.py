"""``stepscope report PATH -o report.html``: one self-contained HTML file (SPEC §4.5).

The file holds, per span, the answers of the routes of the views it shows (the server's own
payloads: :meth:`ViewSet.get`), the dashboard's frontend modules and plotly.js
(:mod:`.bundle`). In the page, ``frontend/lib/api.js`` answers from the embedded data
(``frontend/lib/embedded.js``) instead of the network, so the very same view modules render.

Which answers are embedded: every view of :data:`REPORT_VIEWS` that has data for the span,
picked from the registry; per route the parameter sets its ``Route.report`` lists, else
every combination of its parameters' choices. The file grows with the trace's distinct
names (operators, kernels, call stacks), not with its events: per-event tables are cut to
their largest rows (:data:`ROW_LIMITS`) and a big memory curve is embedded downsampled
(:data:`EXACT_CURVE_SAMPLES`).

Embedded data::

    {"version", "source", "runs": <runs answer>, "workers": {run: [..]},
     "spans": {run: {worker: [..]}}, "routes": {path: {param: default or null}},
     "windowed": [paths cut to start/end in the page], "notes": [text],
     "data": {run: {worker: {span: {"views": [..], "notes": [..],
                                    "answers": {path: [[params, answer], ...]}}}}}}
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import secrets
import stat
from dataclasses import dataclass

import orjson

from .. import __version__
from ..discovery import display_name
from ..errors import StepscopeError
from ..views import ROUTES, VIEWS, Route, ViewSet, memory
from . import bundle
from .load import Progress, Span, analyse, one_line, spans_of

#: Views a report shows, in the registry's tab order (Trace needs the server's timeline).
REPORT_VIEWS = ("Overview", "Operator", "Kernel", "Memory", "Module")
#: Per-event tables kept to their largest rows: route -> (column ranked on, rows kept).
ROW_LIMITS = {"memory/events": ("Size", 2000)}
#: Routes whose answer the page cuts to the asked start/end window (the embedded answer is
#: the whole span at the width of ``Route.report``).
WINDOWED = ("memory/curve",)
#: A device with at most this many memory events has its whole curve embedded, every
#: sample, so a zoomed window's curve and peak are the server's; a bigger one's curve is
#: embedded downsampled (its windows approximate, with a note). 13,385 allocations of a
#: real trace: 26,770 samples, 0.92 MB of JSON (the page gzips it: the file grew by 0.3 MB).
EXACT_CURVE_SAMPLES = 50_000


@dataclass
class ReportInfo:
    """What :func:`write_report` wrote: ``bytes`` of the file, its spans, its notes (the
    report's own, e.g. tables cut), and per span ``"run / worker / span: text"`` lines: the
    traces left out (``failed``) and the data-quality notes of the others (``quality``)."""

    path: str
    bytes: int
    spans: int
    notes: list[str]
    failed: list[str]
    quality: list[str]


def route_params(route: Route, views: ViewSet) -> list[dict[str, str]]:
    """The parameter sets embedded for ``route`` (see the module docstring)."""
    if route.report is not None:
        return route.report(views)
    choices = [[(p.name, c) for c in p.choices] for p in route.params if p.choices]
    return [dict(combo) for combo in itertools.product(*choices)]


def _limited(path: str, answer, label: str, notes: list[str]):
    """``answer`` cut to :data:`ROW_LIMITS` (largest rows first ranked, original order)."""
    if path not in ROW_LIMITS or not isinstance(answer, dict) or "rows" not in answer:
        return answer
    column, keep = ROW_LIMITS[path]
    rows = answer["rows"]
    if len(rows) <= keep:
        return answer
    k = [c["name"] for c in answer["columns"]].index(column)
    top = sorted(range(len(rows)), key=lambda i: -(rows[i][k] or 0))[:keep]
    notes.append(f"{label}: {path} holds the {keep:,} largest of {len(rows):,} rows "
                 f"(by {column}).")
    kept = sorted(top)
    return {**answer, "rows": [rows[i] for i in kept], "index": kept}  # ids: allocation order


def _exact_curve(views: ViewSet, params: dict, answer: dict, label: str,
                 notes: list[str]) -> dict:
    """``memory/curve`` with every sample when the device has at most
    :data:`EXACT_CURVE_SAMPLES` (the page cuts its windows from it, exactly as the server
    does); else ``answer`` (downsampled), with a note."""
    n = len(views.payload("Memory")["per"].get(answer.get("device"), {}).get("ts", ()))
    if n <= EXACT_CURVE_SAMPLES:
        return memory.curve(views, params, exact=True)
    notes.append(f"{label}: the {answer['device']} memory curve is embedded at "
                 f"{params.get('width')} pixels ({n:,} samples): a zoomed window's curve and "
                 "peak are approximate (the server's are exact).")
    return answer


def span_data(views: ViewSet, label: str, notes: list[str]) -> dict:
    """The embedded answers of one span (``label`` names it in ``notes``)."""
    shown = [v for v in VIEWS if v.name in REPORT_VIEWS and v.name in views.names()]
    answers: dict[str, list] = {}
    for view in shown:
        for route in view.routes:
            for params in route_params(route, views):
                try:
                    answer = views.get(route.path, params)
                    if route.path == "memory/curve":
                        answer = _exact_curve(views, params, answer, label, notes)
                except StepscopeError:
                    continue  # a parameter set this span cannot answer: the page says 404
                answers.setdefault(route.path, []).append(
                    [params, _limited(route.path, answer, label, notes)])
    return {"views": [v.name for v in shown], "notes": views.notes(), "answers": answers}


def report_data(spans: list[Span], source: str, progress: Progress = None,
                failed: list[tuple[str, str]] | None = None,
                quality: list[str] | None = None) -> dict:
    """The embedded data for ``spans`` (analysed here, one at a time). A trace that cannot
    be read is left out (SPEC §1.4: it does not hide the others), named in ``failed`` as
    ``(run / worker / span, error)`` and in the page's notes, which start with one
    "... is left out" line per entry of ``failed``; when none can, its error is raised.
    ``quality`` receives each span's data-quality notes."""
    notes: list[str] = []
    data: dict = {}
    workers: dict = {}
    span_names: dict = {}
    failed = [] if failed is None else failed
    first_error: StepscopeError | OSError | None = None
    for s in spans:
        where = f"{s.run} / {s.worker} / {s.span}"
        try:
            views = analyse(s, progress)
        except (StepscopeError, OSError) as e:
            first_error = first_error or e
            failed.append((where, one_line(e)))
            continue
        if quality is not None:
            quality += [f"{where}: {n['text']}" for n in views.notes()]
        data.setdefault(s.run, {}).setdefault(s.worker, {})[s.span] = span_data(
            views, f"{s.run}/{s.worker}/{s.span}", notes)
        if s.worker not in workers.setdefault(s.run, []):
            workers[s.run].append(s.worker)
        span_names.setdefault(s.run, {}).setdefault(s.worker, []).append(s.span)
    routes = {path: {p.name: (p.choices[0] if p.choices else None) for p in r.params}
              for path, (_v, r) in ROUTES.items()}
    if not data and first_error is not None:
        raise first_error
    return {"version": __version__, "source": source,
            "runs": {"runs": list(data), "loading": False, "status": {}, "skipped": []},
            "workers": workers, "spans": span_names, "routes": routes,
            "windowed": list(WINDOWED),
            "notes": [f"{where} is left out: {why}" for where, why in failed] + notes,
            "data": data}


def _default(obj):
    if hasattr(obj, "tolist"):  # numpy values, as the server's json_response writes them
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON: {type(obj).__name__}")


def write_report(path: str, out: str, progress: Progress = None) -> ReportInfo:
    """Analyse every span under ``path`` and write the report to ``out``."""
    spans = spans_of(path)
    source = display_name(os.path.basename(os.path.abspath(path)))
    failed: list[tuple[str, str]] = []
    quality: list[str] = []
    data = report_data(spans, source, progress, failed, quality)
    own = data["notes"][len(failed):]  # the report's own notes, after the left-out lines
    spans = [s for s in spans if s.span in data["data"].get(s.run, {}).get(s.worker, {})]
    blob = orjson.dumps(data, default=_default,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    note = (f"Stepscope {__version__} report of {source} ({len(spans)} trace"
            f"{'s' if len(spans) != 1 else ''}), made {when}. "
            + " ".join(data["notes"]))
    text = bundle.page(blob, title=f"{source} — Stepscope report", note=note.strip())
    return ReportInfo(out, _write_whole(out, text), len(spans), own,
                      [f"{where}: {why}" for where, why in failed], quality)


def output_problem(out: str) -> OSError | None:
    """Why the report cannot be written to ``out`` (a folder, or in a folder that does not
    exist), naming ``out`` as given; None when it can be tried."""
    real = os.path.realpath(out)
    if os.path.isdir(real):
        return IsADirectoryError(21, "is a folder: name the HTML file to write", out)
    if not os.path.isdir(os.path.dirname(real)):
        return FileNotFoundError(2, "no such folder to write the report into", out)
    return None


def _write_whole(out: str, text: str) -> int:
    """Write ``text`` to the file ``out`` so that it appears whole or not at all: a new
    temporary file beside it (a name no file has), renamed over it; removed when anything
    fails (a folder named ``out``, a full disk), so nothing the user did not name is left
    behind or overwritten. A symbolic link's target is written (the link stays a link); a
    device or a pipe (``/dev/stdout``) is written into, not replaced (as root, the rename
    replaced ``/dev/null`` with the report). Returns the bytes written."""
    problem = output_problem(out)
    if problem is not None:
        raise problem
    try:  # on the path as given: realpath of /dev/stdout on a pipe is "/proc/PID/fd/pipe:[N]"
        device = not stat.S_ISREG(os.stat(out).st_mode)
    except OSError:  # no such file yet
        device = False
    if device:
        data = text.encode("utf-8")
        with open(out, "wb") as f:
            f.write(data)
        return len(data)
    out = os.path.realpath(out)
    tmp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.{secrets.token_hex(6)}.tmp")
    try:
        # (mode 0o666 less the umask, as open() makes a file)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w",
                  encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return os.path.getsize(out)
