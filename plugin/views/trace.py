"""Trace view (the timeline): its routes answer from the span's timeline, which the
analysis worker builds and caches after the other payloads (see :mod:`stepscope.timeline`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..analysis import Analysis
from ..errors import BadParameter, echo
from ..timeline import Timeline, build_timeline
from ..timeline.build import MAX_SEARCH_PAGE, MAX_WIDTH, SEARCH_PAGE
from .registry import Param, Route, View, int_param


def timeline_inputs(a: Analysis) -> dict:
    """What the timeline takes from an analysed trace (its links, steps and host nesting):
    ``build_timeline(**timeline_inputs(a))``. Holding only these lets a caller free the
    rest of the analysis before the timeline's memory peak."""
    return {"trace": a.trace, "links": a.links, "tree": a.tree,
            "steps": list(zip(a.steps.names, a.steps.start.tolist(), a.steps.end.tolist(),
                              a.steps.host_start.tolist(), a.steps.host_end.tolist()))}


def timeline_of(a: Analysis) -> Timeline:
    """The trace view's timeline of an analysed trace (reuses its links, steps and nesting)."""
    return build_timeline(**timeline_inputs(a))


#: Most digits an event id may have (ids index an int64 column).
MAX_ID_DIGITS = 19


def event_id_param(params: Mapping[str, str | None]) -> int:
    """The ``id`` of ``trace/event``: a non-negative integer (400 otherwise)."""
    raw = params.get("id")
    # "²".isdigit() but int() fails; past 4,300 digits int() refuses (and no id is that long)
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_ID_DIGITS:
        raise BadParameter("bad id", "Pass id=<event id>: the 6th element of a single-event "
                           "block in trace/timeline ("
                           + (f"got {echo(raw)})." if raw is not None else "none was given)."))
    return int(raw)


#: longest search text accepted (a name pasted whole is rarely longer)
MAX_QUERY_CHARS = 500


def _search(views, p: Mapping[str, str | None]) -> dict:
    q = (p.get("q") or "").strip()
    if not q:
        raise BadParameter("missing q", "Pass q=<text>: events whose name contains it are listed.")
    if len(q) > MAX_QUERY_CHARS:
        raise BadParameter("bad q", f"q may have at most {MAX_QUERY_CHARS} characters "
                           f"(got {len(q)}).")
    return views.timeline.search(q, int_param(p, "offset", 0, 0, 10**12),
                                 int_param(p, "limit", SEARCH_PAGE, 1, MAX_SEARCH_PAGE))


def _window(views, p: Mapping[str, str | None]) -> dict:
    return views.timeline.query(p["start"], p["end"], int_param(p, "width", 1000, 1, MAX_WIDTH))


VIEW = View(
    name="Trace", frontend="trace",
    build=lambda a: None,  # the timeline is attached to the ViewSet, cached on its own
    has_data=lambda a: True,
    routes=(
        Route("trace/timeline", _window,
              (Param("start", doc="window start, µs from the trace start"),
               Param("end", doc="window end, µs from the trace start"),
               Param("width", doc="pixels across the window (default 1000)"))),
        Route("trace/event", lambda v, p: v.timeline.event(event_id_param(p)),
              (Param("id", doc="event id from trace/timeline"),)),
        Route("trace/search", _search,
              (Param("q", doc="text an event's name contains (case-insensitive)"),
               Param("offset", doc="first match of the page (default 0)"),
               Param("limit", doc=f"matches per page, 1..{MAX_SEARCH_PAGE} (default {SEARCH_PAGE})"))),
    ),
)
