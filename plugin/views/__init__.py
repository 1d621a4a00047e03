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

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .. import runlevel  # module, not names: runlevel imports views.registry
from ..analysis import Analysis, analyze
from ..errors import NotFound, echo
from ..model import Trace
from ..processes import later, second_thread
from . import diff, kernel, memory, module, operator, overview, trace
from .overview import notes
from .registry import PairRoute, PairView, Param, Route, View
from .trace import timeline_of

__all__ = ["VIEWS", "ROUTES", "PAIR_VIEWS", "FirstParts", "PairRoute", "PairView", "Param",
           "Route", "View", "ViewSet", "build_views", "first_parts", "timeline_of"]

#: Every view, in tab order. A new view adds its module's ``VIEW`` here.
VIEWS: tuple[View, ...] = (overview.VIEW, operator.VIEW, kernel.VIEW, trace.VIEW, memory.VIEW,
                           module.VIEW)
#: Route path -> (view, route), for every view route.
ROUTES: dict[str, tuple[View, Route]] = {r.path: (v, r) for v in VIEWS for r in v.routes}
#: Views over two spans (baseline and experiment), after the per-span tabs.
PAIR_VIEWS: tuple[PairView, ...] = (diff.VIEW,)


class ViewSet:
    """Precomputed payloads and the timeline of one trace; :meth:`get` answers a route.

    ``timeline``: a :class:`~stepscope.timeline.Timeline` (or a stand-in with its ``query``
    and ``event``); None until one is attached (an analysis worker stores the payloads
    first and builds the timeline after them, see :mod:`stepscope.store.pool`).

    ``analysis`` (kept for tests and in-process use) and ``timeline`` are left out when the
    views are packed into the disk cache (:mod:`stepscope.store.packing`): the timeline is cached
    as an entry of its own.
    """

    ROUTES = tuple(ROUTES)

    def __init__(self, analysis: Analysis, timeline: Any = None,
                 first: Callable[[FirstParts], None] | None = None):
        self.analysis = analysis
        # every view's payloads are built (a route may be asked for a view not listed). The
        # parts the Overview tab needs come first, handed to ``first`` (an analysis worker
        # sends them to the server, which serves the Overview while the others are built).
        # On a big trace the other views are built in a second thread meanwhile, the Module
        # view (the slowest) last, beside the Operator view: the flame graph's temporaries
        # (57 B an event) then meet the Operator's grouping (37 B) but not the run-level
        # summaries' (x50, this phase's peak: 927-944 MiB; 1,023-1,046 with the Module view
        # begun beside the summaries). The parts carry the run-level analyses' brief
        # summaries; the full ones follow them. x200, in the worker: the parts 0.34-0.47 s
        # after the analysis (1.0-1.3 s with the full summaries), all the views after 4.9-5.4.
        # (The Kernel view here beside the Operator's: 0.2 s sooner, the peak 100-300 MiB up.)
        aside_views = [v for v in VIEWS if v not in (overview.VIEW, operator.VIEW)]
        with second_thread(len(analysis.trace)) as pool:
            aside = later(pool, _build, analysis, aside_views) if pool is not None else None
            parts = first_parts(analysis, briefs=first is not None)
            if first is not None:
                first(parts)
            #: compact per-trace summaries of the run-level analyses (:mod:`stepscope.runlevel`)
            self.summaries = runlevel.summaries_of(analysis)
            built = {**parts.payloads, operator.VIEW.name: operator.VIEW.build(analysis)}
            built.update(aside.result() if aside is not None else _build(analysis, aside_views))
        self._payloads = {v.name: built[v.name] for v in VIEWS}
        self._names = parts.names
        self._notes = parts.notes
        self.timeline = timeline

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("analysis", "timeline")}

    def names(self) -> list[str]:
        """Views that have data, in display order."""
        return self._names

    def notes(self) -> list[dict]:
        """Data-quality notes ``[{"level", "code", "text"}]``: reader's, then analyses'."""
        return self._notes

    def payload(self, view: str) -> Any:
        """What ``view``'s ``build`` made for this trace."""
        return self._payloads[view]

    def get(self, route: str, params: Mapping[str, str]) -> Any:
        """Payload of ``route`` for the query ``params`` (JSON-able; do not mutate).

        Raises :class:`~stepscope.errors.BadParameter` for a bad view parameter and
        :class:`~stepscope.errors.NotFound` for a route that is not a view route.
        """
        if route not in ROUTES:
            raise NotFound(f"unknown view route {echo(route)}",
                           f"Use one of: {', '.join(ROUTES)}.")
        _view, r = ROUTES[route]
        return r.answer(self, r.validated(params))


class FirstParts(NamedTuple):
    """What the Overview tab needs, built before the other views (:class:`ViewSet`)."""

    payloads: dict[str, Any]   # {view name: payload}: the Overview's
    names: list[str]           # the views that have data, in display order
    notes: list[dict]          # data-quality notes
    #: brief summaries of the run-level analyses (:func:`stepscope.runlevel.briefs_of`):
    #: whether the span shows their tabs; the full summaries are built after these parts
    briefs: dict[str, Any]


def _build(analysis: Analysis, views: list[View]) -> dict[str, Any]:
    """``{view name: payload}`` of ``views``, built in their order."""
    return {v.name: v.build(analysis) for v in views}


def first_parts(analysis: Analysis, briefs: bool = True) -> FirstParts:
    """The Overview's payload, the names of the views with data, the notes and the
    run-level analyses' brief summaries (which decide whether the run has a Distributed
    tab; ``briefs=False``: none, for parts nobody serves before the full summaries)."""
    return FirstParts({overview.VIEW.name: overview.VIEW.build(analysis)},
                      [v.name for v in VIEWS if v.has_data(analysis)], notes(analysis),
                      runlevel.briefs_of(analysis) if briefs else {})


def build_views(trace: Trace) -> ViewSet:
    """Analyse ``trace`` and precompute every view payload and the timeline."""
    a = analyze(trace)
    return ViewSet(a, timeline_of(a))
