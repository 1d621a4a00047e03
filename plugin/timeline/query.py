"""Window query: the items of a window merged greedily per row into blocks of one pixel.

Merging rule (issue 6): walking a row in time order, a block starts at an item and absorbs the
following items only while the whole group still fits in one pixel (``end of the last -
start of the first <= px``). A block's ``count`` is the number of events it stands for; it takes
the name of its longest event; a block of one event carries that event's id. An item longer
than a pixel is a block of its own.

Example (px = 10 ns): items ``[0,4) [5,9) [12,30) [31,33)`` -> blocks
``[0,9) count 2 | [12,30) count 1 | [31,33) count 1``.

The merge is vectorised: ``nxt[i]`` (the first item that would overflow a block started at
``i``) is one ``searchsorted``; the block starts are the chain ``first, nxt[first], ...`` of
each row, followed for all rows at once.
"""

from __future__ import annotations

import numpy as np

from .lod import LOD, Items, reduce_segments


def greedy_blocks(lod: LOD, items: Items, px: float) -> tuple[Items, np.ndarray]:
    """Merge ``items`` (sorted by row, then time) into blocks; return them and their rows."""
    m = len(items)
    if not m:
        return items, np.zeros(0, dtype=np.int64)
    row = lod.row_of(items.first)
    shift = lod.shift
    top = (1 << shift) - 1
    span = int(min(max(px, 0), top))
    base = row.astype(np.int64) << shift
    key_end = base | items.end
    target = base | np.minimum(items.start + span, top)
    idx = np.arange(m, dtype=np.int64)
    nxt = np.maximum(np.searchsorted(key_end, target, side="right"), idx + 1)
    heads = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    row_end = np.repeat(np.append(heads[1:], m), np.diff(np.append(heads, m)))
    start_flag = np.zeros(m, dtype=bool)
    cur = heads
    while len(cur):
        start_flag[cur] = True
        nx = nxt[cur]
        cur = nx[nx < row_end[cur]]
    bstart = np.flatnonzero(start_flag)
    last = np.append(bstart[1:], m) - 1
    blocks = reduce_segments(items, bstart, last)
    return blocks, row[bstart]
