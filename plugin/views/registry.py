"""The shapes of the view registry: a view, its routes and their query parameters.

Each view module (``overview``, ``operator``, ``kernel``, ``trace``, ...) declares one
:class:`View`; :data:`stepscope.views.VIEWS` lists them in tab order. Everything else reads
that list: the app registers one URL per :class:`Route`, ``views`` answers the names of the
views whose ``has_data`` holds, the API-doc test checks every route is documented, and the
frontend loads ``frontend/views/<View.frontend>.js`` for a tab.

Adding a view = one analysis module, one view module declaring a ``View``, one frontend
module, one line in ``VIEWS`` (and its routes in ``api.md``).

A view comparing two spans (the Diff view) declares a :class:`PairView` instead, listed in
``PAIR_VIEWS``: its :class:`PairRoute` answers from both spans' own payloads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BadParameter, echo


@dataclass(frozen=True)
class Param:
    """A query parameter of a route.

    ``choices``: the allowed values, the first being the default (validated: 400 naming
    them); empty for free-form values that the route's ``answer`` checks itself.
    ``doc``: one line for humans (API doc, error details).
    """

    name: str
    choices: tuple[str, ...] = ()
    doc: str = ""

    def value(self, params: Mapping[str, str]) -> str | None:
        """This parameter's value in ``params``: the default if absent; 400 if not allowed."""
        raw = params.get(self.name) or None
        if not self.choices:
            return raw
        if raw is None:
            return self.choices[0]
        if raw not in self.choices:
            raise BadParameter(f"unknown {self.name} {echo(raw)}",
                               f"Use one of: {', '.join(self.choices)}.")
        return raw


def int_param(params: Mapping[str, str | None], key: str, default: int | None, lo: int,
              hi: int) -> int | None:
    """The whole number ``params[key]`` in ``lo..hi`` (``default`` when absent or empty): ASCII
    digits only (no sign, ``_``, spaces or other scripts' digits); 400 otherwise. One rule
    for every count-like query parameter (``offset``, ``limit``)."""
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(hi)) \
            or not lo <= int(raw) <= hi:
        raise BadParameter(f"bad {key}", f"{key} must be a whole number in {lo}..{hi}, "
                           f"got {echo(raw)}.")
    return int(raw)


class _Validated:
    """``validated(query)``: every declared parameter of a route, validated (defaults
    filled); shared by :class:`Route` and :class:`PairRoute`."""

    params: tuple[Param, ...]

    def validated(self, params: Mapping[str, str]) -> dict[str, str | None]:
        return {p.name: p.value(params) for p in self.params}


@dataclass(frozen=True)
class Route(_Validated):
    """One URL of a view: ``answer(views, params) -> JSON-able``.

    ``views`` is the span's :class:`~stepscope.views.ViewSet` (its precomputed payloads
    and timeline); ``params`` holds every declared parameter, validated (defaults filled).
    ``report(views) -> [params]``: the parameter sets a ``stepscope report`` file embeds
    answers for (:mod:`stepscope.share.report`); None: every combination of the
    parameters' ``choices`` (free-form parameters left out).
    ``mimetype``: ``application/json``, or ``text/plain`` for an answer that is a str sent
    as is (``stacks/collapsed``).
    """

    path: str
    answer: Callable[[Any, dict[str, str | None]], Any]
    params: tuple[Param, ...] = ()
    report: Callable[[Any], list[dict[str, str]]] | None = None
    mimetype: str = "application/json"


@dataclass(frozen=True)
class View:
    """A dashboard view (a tab).

    ``name``: as ``views`` lists it (``"Operator"``); ``frontend``: its module under
    ``frontend/views/`` without ``.js``; ``build(analysis)``: its payloads, computed once in
    the analysis worker and cached (JSON-able, or None when the routes read elsewhere, as
    the timeline does); ``has_data(analysis)``: whether a span shows this view.
    """

    name: str
    frontend: str
    routes: tuple[Route, ...]
    build: Callable[[Any], Any]
    has_data: Callable[[Any], bool]


@dataclass(frozen=True)
class PairRoute(_Validated):
    """A URL of a view over two spans: a baseline (``run``, ``worker``, ``span``) and an
    experiment (``diff_run``, ``diff_worker``, ``diff_span``).

    ``answer(baseline, experiment, params) -> JSON-able``: each side answers
    ``get(route, params)`` with its own, already-built view payloads (the app looks both up
    in the store; 202 / 422 name the side that is loading or failed).
    """

    path: str
    answer: Callable[[Any, Any, dict[str, str | None]], Any]
    params: tuple[Param, ...] = ()


@dataclass(frozen=True)
class PairView:
    """A view comparing two spans (a tab listed by ``views`` whenever the server has at
    least two spans, of any runs); ``frontend`` as for :class:`View`."""

    name: str
    frontend: str
    routes: tuple[PairRoute, ...]
