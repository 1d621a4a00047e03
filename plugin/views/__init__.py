"""JSON payloads of the views (SPEC §3), computed once per trace.

``build_views(trace)`` runs the analyses and formats every payload up front (both
``group_by`` variants), so :meth:`ViewSet.get` is a dict lookup. The payloads know nothing
of HTTP; the app maps routes and query parameters onto :meth:`ViewSet.get`.

Example::

    views = build_views(read_trace("worker0.pt.trace.json.gz"))
    views.names()                                   # ["Overview", "Operator", "Kernel", "Trace"]
    views.get("operation/table", {"group_by": "Operation"})[0]["name"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis import Analysis, analyze
from ..analysis.kernels import GROUP_BY as KERNEL_GROUP_BY
from ..analysis.operators import GROUP_BY as OPERATOR_GROUP_BY
from ..errors import BadParameter, NotFound
from ..model import Trace
from ..timeline import Timeline, build_timeline
from .kernel import kernel_payloads
from .operator import group_by_param, operation_payloads, operator_groups, stack_rows
from .overview import notes, overview_payload

__all__ = ["ViewSet", "build_views", "timeline_of"]


class ViewSet:
    """Precomputed payloads and the timeline of one trace; :meth:`get` answers a route.

    ``timeline``: a :class:`~stepscope.timeline.Timeline` (or a stand-in with its ``query``
    and ``event``); None until one is attached (an analysis worker stores the payloads
    first and builds the timeline after them, see :mod:`stepscope.worker`).

    ``analysis`` (kept for tests and in-process use) and ``timeline`` are left out when the
    views are packed into the disk cache (:mod:`stepscope.packing`): the timeline is cached
    as an entry of its own.
    """

    ROUTES = ("overview", "operation", "operation/table", "operation/stack", "kernel/table",
              "kernel", "kernel/tc_pie", "trace/timeline", "trace/event")

    def __init__(self, analysis: Analysis, timeline: Any = None):
        a = self.analysis = analysis
        self._groups = operator_groups(a)
        self._operation = operation_payloads(self._groups, a.gpu)
        self._kernel = kernel_payloads(a)
        self._overview = overview_payload(a)
        self._notes = notes(a)
        self._names = (["Overview", "Operator"] if a.has_host else []) + \
            (["Kernel"] if a.has_kernels else []) + ["Trace"]
        self.timeline = timeline

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("analysis", "timeline")}

    def names(self) -> list[str]:
        """Views that have data, in display order."""
        return self._names

    def notes(self) -> list[dict]:
        """Data-quality notes ``[{"level", "code", "text"}]``: reader's, then analyses'."""
        return self._notes

    def get(self, route: str, params: Mapping[str, str]) -> Any:
        """Payload of ``route`` for the query ``params`` (JSON-able; do not mutate).

        Raises :class:`~stepscope.errors.BadParameter` for a bad view parameter and
        :class:`~stepscope.errors.NotFound` for a route that is not a view route.
        """
        if route == "overview":
            return self._overview
        if route in ("operation", "operation/table"):
            return self._operation[group_by_param(params, OPERATOR_GROUP_BY)][route]
        if route == "operation/stack":
            return stack_rows(self._groups, params)
        if route == "kernel/table":
            return self._kernel[route][group_by_param(params, KERNEL_GROUP_BY)]
        if route in ("kernel", "kernel/tc_pie"):
            group_by_param(params, KERNEL_GROUP_BY)
            return self._kernel[route]
        if route == "trace/timeline":
            return self.timeline.query(params.get("start") or None, params.get("end") or None,
                                       params.get("width") or 1000)
        if route == "trace/event":
            return self.timeline.event(event_id_param(params))
        raise NotFound(f"unknown view route {route!r}",
                       f"Use one of: {', '.join(self.ROUTES)}.")


#: Most digits an event id may have (ids index an int64 column).
MAX_ID_DIGITS = 19


def event_id_param(params: Mapping[str, str]) -> int:
    """The ``id`` of ``trace/event``: a non-negative integer (400 otherwise)."""
    raw = params.get("id")
    # "²".isdigit() but int() fails; past 4,300 digits int() refuses (and no id is that long)
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_ID_DIGITS:
        shown = raw if raw is None or len(raw) <= 40 else f"{raw[:40]}... ({len(raw)} chars)"
        raise BadParameter("bad id", "Pass id=<event id>: the 6th element of a single-event "
                           f"block in trace/timeline (got {shown!r}).")
    return int(raw)


def timeline_of(a: Analysis) -> Timeline:
    """The trace view's timeline of an analysed trace (reuses its links and steps)."""
    return build_timeline(a.trace, links=a.links,
                          steps=zip(a.steps.names, a.steps.start.tolist(), a.steps.end.tolist()))


def build_views(trace: Trace) -> ViewSet:
    """Analyse ``trace`` and precompute every view payload and the timeline."""
    a = analyze(trace)
    return ViewSet(a, timeline_of(a))
