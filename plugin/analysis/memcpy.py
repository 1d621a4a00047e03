"""Memcpy activities by copy direction (``stepscope summary``, SPEC §4.5).

Example: two ``Memcpy HtoD (Pageable -> Device)`` of 3 and 5 µs and one ``Memcpy DtoH
(Device -> Pinned)`` of 2 µs -> ``[("HtoD", 2, 8000, 3000, 5000), ("DtoH", 1, 2000, ...)]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..taxonomy import MEMCPY_DIRECTION, Kind
from .intervals import sorted_unique


@dataclass(frozen=True)
class MemcpyDirection:
    """One copy direction: calls and durations in integer ns."""

    direction: str  # "HtoD", ..., or the activity's name when it names no direction
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int


def memcpy_by_direction(trace: Trace) -> list[MemcpyDirection]:
    """Memcpy activities grouped by direction, the largest total time first."""
    rows = np.flatnonzero(trace.kind == Kind.MEMCPY)
    out: dict[str, list[int]] = {}
    for name_id in sorted_unique(trace.name[rows]).tolist():
        name = trace.strings[name_id]
        m = MEMCPY_DIRECTION.search(name)
        dur = trace.dur[rows[trace.name[rows] == name_id]]
        g = out.setdefault(m.group(1) if m else name, [0, 0, int(dur.min()), int(dur.max())])
        g[0] += len(dur)
        g[1] += int(dur.sum())
        g[2] = min(g[2], int(dur.min()))
        g[3] = max(g[3], int(dur.max()))
    return sorted((MemcpyDirection(d, *v) for d, v in out.items()),
                  key=lambda r: (-r.total_ns, r.direction))
