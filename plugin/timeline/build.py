"""The timeline of one trace: built once at analysis time, then queried per window.

``build_timeline(trace)`` lays out the events (:mod:`.lanes`), indexes them per row at
several levels of detail (:mod:`.lod`), prepares counters (:mod:`.counters`) and link tables
(:mod:`.event`). ``Timeline.query(start_us, end_us, width)`` answers ``trace/timeline``;
``Timeline.event(id)`` answers ``trace/event``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np

from ..analysis.links import Links, link
from ..analysis.steps import host_steps
from ..analysis.tree import HostTree
from ..errors import BadParameter, echo
from ..model import Trace
from ..processes import later, second_thread
from ..taxonomy import Kind
from .counters import build_counters
from .event import EventIndex
from .lanes import Layout, assign_lanes
from .lod import LOD
from .query import greedy_blocks

MAX_WIDTH = 10000


#: matches per ``trace/search`` page by default, and at most
SEARCH_PAGE = 100
MAX_SEARCH_PAGE = 1000


class Timeline:
    """Lanes, level-of-detail index, counters, steps and links of one trace."""

    #: The per-event tables, which only ``trace/event`` and ``trace/search`` read: a timeline
    #: read back from the cache unpacks them when first used (``_later``, see
    #: :mod:`stepscope.store.packing`), so its first window is drawn without them (issue 19,
    #: x200: 1.7 of the 2.4 GB the server loaded before answering it).
    _UNPACK_LATER = ("trace", "layout", "event_index")

    def __init__(self, trace: Trace, layout: Layout, steps: list[tuple[str, int, int]],
                 links: Links):
        self.trace = trace
        self.layout = layout
        # what a window reads of the trace and the layout, kept here too: those two are
        # unpacked later (_UNPACK_LATER), and a window must not need them
        self.strings = trace.strings
        self.lanes = layout.lanes
        n = len(trace)
        end = trace.start + trace.dur
        self.end_ns = max(int(end.max()) if n else 0,
                          int(trace.memory["ts"].max()) if len(trace.memory["ts"]) else 0)
        rows = np.array([ln.row0 for ln in layout.lanes], dtype=np.int64)
        self.lane_row0 = rows
        nrows = sum(ln.rows for ln in layout.lanes)
        gid = rows[layout.lane] + layout.row if n else np.zeros(0, dtype=np.int64)
        # the counters and the link tables are built beside the index in a second thread
        # for big traces (numpy runs without the GIL; x200: their 0.3 s hidden in LOD's)
        with second_thread(n) as pool:
            counters = later(pool, build_counters, trace)
            event_index = later(pool, EventIndex, trace, layout, links)
            self.lod = LOD(gid, trace.start, layout.vis_end, trace.name, nrows)
            self.counters = counters.result()
        self.steps = sorted(steps, key=lambda s: (s[1], s[2]))
        # (name, start) -> id of the ProfilerStep#N host events
        rows = np.flatnonzero(trace.kind == Kind.STEP)
        self.step_ids = {(trace.name_of(r), int(trace.start[r])): r for r in rows.tolist()}
        self.event_index = event_index.result()

    def __getattr__(self, name: str):
        """A field of :data:`_UNPACK_LATER` still packed: unpacked now, once."""
        later = self.__dict__.get("_later")
        if later is None or name not in later:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self.__dict__[name] = later[name]()
        return value

    # --- trace/timeline ---------------------------------------------------------------------

    def window(self, start_us: float | None, end_us: float | None, width: int) -> tuple[int, int]:
        """Validate a request; return the window in ns."""
        try:
            width = int(width)
        except (TypeError, ValueError):
            raise BadParameter("bad width", f"width must be an integer, got {width!r}.") from None
        if not 1 <= width <= MAX_WIDTH:
            raise BadParameter("bad width", f"width must be 1..{MAX_WIDTH} pixels, got {width}.")
        s = 0 if start_us is None else _ns(start_us, "start")
        e = self.end_ns if end_us is None else _ns(end_us, "end")
        if start_us is None and end_us is None and e <= s:
            e = s + 1  # an empty or instantaneous trace: a 1 ns window
        if s >= e:
            raise BadParameter("empty window", f"start ({s / 1000} µs) must be before end "
                               f"({e / 1000} µs).")
        return s, e

    def query(self, start_us: float | None, end_us: float | None, width: int = 1000) -> dict:
        """The ``trace/timeline`` answer for window ``[start_us, end_us)`` at ``width`` px."""
        s, e = self.window(start_us, end_us, width)
        width = int(width)
        px = (e - s) / width
        lo, hi = self.lod.window(s, e)
        items = self.lod.cover(lo, hi, px)
        blocks, brow = greedy_blocks(self.lod, items, px)
        used, name_idx = np.unique(blocks.name, return_inverse=True)
        lane_of_block = np.searchsorted(self.lane_row0, brow, side="right") - 1
        depth = brow - self.lane_row0[lane_of_block]
        cols = ((blocks.start / 1000).tolist(), ((blocks.end - blocks.start) / 1000).tolist(),
                name_idx.reshape(-1).tolist(), depth.tolist(), blocks.count.tolist())
        rows = [list(r) for r in zip(*cols)]
        ev = blocks.ev.tolist()
        for i in np.flatnonzero(blocks.count == 1).tolist():
            rows[i].append(ev[i])
        cut = np.searchsorted(lane_of_block, np.arange(len(self.lanes) + 1))
        lanes = [{"id": ln.id, "name": ln.name, "kind": ln.kind, "rows": ln.rows,
                  "blocks": rows[cut[k]:cut[k + 1]]}
                 for k, ln in enumerate(self.lanes)]
        lanes += [{"id": c.id, "name": c.name, "kind": "counter", "unit": c.unit,
                   "points": c.points(s, e, width)} for c in self.counters]
        strings = self.strings
        return {
            "range": [0, self.end_ns / 1000], "start": s / 1000, "end": e / 1000,
            "names": [strings[i] for i in used.tolist()],
            "lanes": lanes,
            "steps": [self._step(st) for st in self.steps if st[1] < e and (st[2] > s or st[1] >= s)],
        }

    def _step(self, st: tuple) -> list:
        """``[name, start, end, host_start, host_end, host_event_id]`` (µs): the step as
        re-timed (GPU work attributed to the step that launched it, SPEC §2.1), the span of
        its ``ProfilerStep#N`` host event and that event's id (None when the trace has
        none). Steps given as ``(name, start, end)`` are their own host span."""
        name, a, b = st[:3]
        ha, hb = st[3:5] if len(st) >= 5 else (a, b)
        return [name, a / 1000, b / 1000, ha / 1000, hb / 1000,
                self.step_ids.get((f"ProfilerStep#{name}", ha))]

    # --- trace/search ---------------------------------------------------------------------------

    def search(self, q: str, offset: int = 0, limit: int = SEARCH_PAGE) -> dict:
        """Events of the whole trace whose name contains ``q`` (case-insensitive), by start
        time (then id): ``{"q", "total", "offset", "limit", "matches": [brief]}``, one page of
        ``limit`` from ``offset``. A brief is ``trace/event``'s short form (times in µs).

        Example: names ``aten::add`` @5 µs, ``aten::addmm`` @2 µs, ``aten::mul``; ``q="ADD"``
        gives total 2, matches ``addmm`` then ``add``."""
        needle = q.lower()
        strings = self.strings
        lower = getattr(self, "_lower_names", None)
        if lower is None or len(lower) != len(strings):
            lower = self._lower_names = [s.lower() for s in strings]
        hit = np.fromiter((needle in s for s in lower), bool, len(lower))
        rows = np.flatnonzero(hit[self.trace.name] & (self.layout.lane >= 0))
        rows = rows[np.lexsort((rows, self.trace.start[rows]))]
        page = rows[offset:offset + limit].tolist()
        brief = self.event_index._brief
        return {"q": q, "total": int(len(rows)), "offset": offset, "limit": limit,
                "matches": [brief(i) for i in page]}

    # --- trace/event ----------------------------------------------------------------------------

    def event(self, event_id: int) -> dict:
        """Full details of one event (``trace/event``); :class:`NotFound` for unknown ids."""
        return self.event_index.details(event_id)


#: A time in a query (µs): ASCII digits with an optional minus, point and exponent; not the
#: ``+``, ``_``, spaces, other scripts' digits, ``nan`` or ``inf`` that ``float()`` takes.
_TIME_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _ns(us: float | str, what: str) -> int:
    """The time ``us`` (µs: a number, or a query parameter's text) in ns; 400 when it is not
    one, or is more than 10^15 µs (31 years) from the trace's start."""
    try:
        if isinstance(us, str) and not _TIME_TEXT.fullmatch(us):
            raise ValueError
        v = float(us)
    except (TypeError, ValueError):
        raise BadParameter(f"bad {what}", f"{what} must be a time in µs, got {echo(us)}.") \
            from None
    if not math.isfinite(v) or abs(v) > 1e15:
        raise BadParameter(f"bad {what}", f"{what} must be a time in µs within ±1e15 "
                           f"(31 years) of the trace's start, got {echo(us)}.")
    return round(v * 1000)


def build_timeline(trace: Trace, *, steps: Iterable[tuple[str, int, int]] | None = None,
                   links: Links | None = None, tree: HostTree | None = None,
                   layout: Layout | None = None) -> Timeline:
    """Build the timeline of ``trace`` (vectorised; done once at analysis time).

    ``steps``: ``(name, start ns, end ns)`` step markers; default: the trace's
    ``ProfilerStep#N`` host events. ``links``: launch links; default: ``link(trace)``.
    ``tree``: the host nesting (SPEC §2.4.1) the host lanes are drawn from; default:
    ``build_tree(trace)``. With an :class:`~stepscope.analysis.Analysis` ``a`` at hand, pass
    its results (:func:`stepscope.views.trace.timeline_inputs`)::

        build_timeline(a.trace, links=a.links, tree=a.tree,
                       steps=zip(a.steps.names, a.steps.start.tolist(), a.steps.end.tolist()))

    ``layout``: the lanes, ``assign_lanes(trace, tree)``, when the caller made them already
    (then ``tree`` is not used: a caller can free the nesting before the timeline's peak).
    """
    if steps is None:
        names, start, end, synthetic = host_steps(trace)
        steps = [] if synthetic else zip(names, start.tolist(), end.tolist())
    return Timeline(trace, assign_lanes(trace, tree) if layout is None else layout,
                    list(steps), link(trace) if links is None else links)
