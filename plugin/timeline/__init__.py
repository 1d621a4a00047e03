"""The trace view's timeline (issue 6): only what the screen can show, at any trace size.

- :mod:`.lanes`    lane and row of every event (host nesting depth, device stream packing)
- :mod:`.lod`      per-row level-of-detail index (pre-merged items at 1 µs x 4^k buckets)
- :mod:`.query`    greedy per-pixel merging of a window's items into blocks
- :mod:`.counters` GPU utilization and memory counter lanes
- :mod:`.event`    one event's details and its launch links
- :mod:`.build`    :func:`build_timeline` and :class:`Timeline` (``query``, ``event``)

Usage::

    tl = build_timeline(trace)                 # once, at analysis time
    tl.query(None, None, 2000)                 # trace/timeline, whole range
    tl.query(1000.0, 3000.0, 1000)             # a 2 ms window, µs relative to the origin
    tl.event(123)                              # trace/event
"""

from __future__ import annotations

from .build import Timeline, build_timeline

__all__ = ["Timeline", "build_timeline"]
