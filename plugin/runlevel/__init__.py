"""Run-level analyses: views over several traces of one run (distributed, diff), computed
from each trace's compact *summary*, never from the traces' events.

A :class:`RunAnalysis` has two halves:

- ``summarise(analysis) -> JSON-able``: runs in the per-trace analysis worker, next to the
  view payloads, and is cached with them (small: per-step numbers, per-collective
  arrays). It may run on another machine: it sees one trace only.
- ``combine(summaries) -> payload``: runs in the server over the summaries of the run's
  analysed traces (:class:`TraceSummary`, in worker/span order). No process ever holds two
  traces' events; the combination's memory depends on the summaries' size only.

The store (:meth:`stepscope.store.scheduler.Store.run_result`) answers a run-level route once every
trace of the run is analysed (202 while some are loading; traces that failed are left out
and named in the result's notes), and keeps the combination until a trace of the run changes.

Adding one: a module here defining a ``RunAnalysis``, and a line in :data:`RUNLEVEL`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..views.registry import Param


@dataclass(frozen=True)
class TraceSummary:
    """One trace's summary for a run-level analysis."""

    worker: str
    span: str
    summary: Any


@dataclass(frozen=True)
class RunRoute:
    """A URL of a run-level analysis: ``answer(combined, params) -> JSON-able``."""

    path: str
    answer: Callable[[Any, dict[str, str | None]], Any]
    params: tuple[Param, ...] = ()

    def validated(self, params) -> dict[str, str | None]:
        return {p.name: p.value(params) for p in self.params}


@dataclass(frozen=True)
class RunAnalysis:
    """A run-level analysis (see the module docstring).

    ``combine(summaries, failed)``: ``summaries`` of the analysed traces, ``failed`` the
    ``(worker, span, error text)`` of traces that could not be analysed.
    """

    name: str
    summarise: Callable[[Any], Any]
    combine: Callable[[list[TraceSummary], list[tuple[str, str, str]]], Any]
    routes: tuple[RunRoute, ...]
    #: ``brief(analysis)``: the part of the summary that decides whether a span shows the
    #: analysis' tab, quicker than ``summarise``; it answers ``views`` while the span's
    #: other views are built (None: ``summarise``)
    brief: Callable[[Any], Any] | None = None


def _analyses() -> tuple[RunAnalysis, ...]:
    from .distributed import DISTRIBUTED  # imports this module's classes
    return (DISTRIBUTED,)


#: Every run-level analysis. The distributed and diff views add theirs here.
RUNLEVEL: tuple[RunAnalysis, ...] = _analyses()


def summaries_of(analysis: Any, runlevel: tuple[RunAnalysis, ...] | None = None) -> dict:
    """``{name: summary}`` of one analysed trace, for every run-level analysis."""
    return {ra.name: ra.summarise(analysis) for ra in (RUNLEVEL if runlevel is None else runlevel)}


def briefs_of(analysis: Any) -> dict:
    """``{name: brief summary}`` of one analysed trace, for every run-level analysis (see
    :attr:`RunAnalysis.brief`)."""
    return {ra.name: (ra.brief or ra.summarise)(analysis) for ra in RUNLEVEL}
