"""Per-row level-of-detail index: pre-merged groups of events at coarser and coarser scales.

Level 0 is the drawn events themselves, sorted by (global row, start). Level ``L`` cuts time
into aligned buckets of ``bucket`` ns (1 µs x 4^j) and merges each run of consecutive events
of a row that lie inside one bucket into one *item*; an event crossing a bucket boundary stays
an item of its own. So an item never spans more than its bucket unless it is a single event,
and every level partitions the same event sequence into consecutive ranges (an item is raw
events ``first .. first + count - 1``). Each level is built from the one before; a level is
kept only when it has at most half the items of the last kept one (memory: about 24 bytes
per event for level 0 plus 48 per item of the kept levels).

A window query picks the coarsest level whose bucket is at most one pixel, takes the items
lying wholly inside the window, and covers the edges with finer levels down to single events
(like a segment tree), so every event overlapping the window is counted exactly once, and
the work is bounded by a few items per pixel and row plus a few per level at each edge, not
by the number of events in the window.

Example (one row, bucket 10): events ``[0,3) [4,6) [8,12) [13,15)`` -> items
``[0,6) count 2 | [8,12) count 1 | [13,15) count 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: bucket of the first coarse level (ns) and the factor between levels
BASE_BUCKET = 1000
FACTOR = 4
#: keep a coarse level only when it has at most this share of the last kept level's items
KEEP_RATIO = 0.5
#: do not even build a level that merges away less than 25 % of the items of the one before
SKIP_RATIO = 0.75
#: slice length of the sample that estimates a level's saving before building it
SAMPLE = 1024


@dataclass
class Items:
    """Parallel arrays of items (merged groups of consecutive events of one row)."""

    start: np.ndarray    # int64 ns, start of the first event
    end: np.ndarray      # int64 ns, end of the last event (ends are sorted within a row)
    count: np.ndarray    # int32, events it stands for
    longest: np.ndarray  # int64 ns, duration of its longest event
    name: np.ndarray     # int32, name (string id) of its longest event
    ev: np.ndarray       # int64, event id of its longest event (the event when count == 1)
    first: np.ndarray    # int64, index of its first event in level 0

    def __len__(self) -> int:
        return len(self.start)

    def take(self, idx: np.ndarray) -> Items:
        return Items(*(getattr(self, f)[idx] for f in _FIELDS))


_FIELDS = ("start", "end", "count", "longest", "name", "ev", "first")


def concat(parts: list[Items]) -> Items:
    return Items(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


@dataclass
class Level:
    bucket: int  # ns; 0 for level 0 (single events, kept as keys in :class:`LOD`)
    items: Items | None
    #: ``items.first`` followed by the number of events (where each item's range ends)
    ext: np.ndarray | None = None


class LOD:
    """The levels of one timeline plus the keys that find a window's events per row."""

    def __init__(self, row: np.ndarray, start: np.ndarray, end: np.ndarray, name: np.ndarray,
                 nrows: int):
        """Index drawn events given by parallel arrays in event-id order (``row`` is the
        global row id, ``name`` the string id). Rows must hold non-overlapping intervals
        (see :mod:`.lanes`)."""
        self.nrows = nrows
        self.names = name
        hi = int(end.max()) if len(end) else 0
        self.shift = max(hi, 1).bit_length() + 1
        if (max(nrows, 1) << self.shift) >= 2**62:
            raise ValueError("trace too long for the timeline index")
        self.mask = (1 << self.shift) - 1
        # (in place where possible: a big trace's temporaries cost more to allocate than
        # to compute)
        key = row.astype(np.int64)
        np.bitwise_or(np.left_shift(key, self.shift, out=key), start, out=key)
        order = _row_start_order(row, start, nrows)
        key_start, end_sorted, key_end = self._sorted(key, end, order)
        if len(order) and (key_end[1:] < key_end[:-1]).any():
            # only zero-length events may tie on a start; put them first
            order = np.lexsort((end, key))
            key_start, end_sorted, key_end = self._sorted(key, end, order)
        del key
        #: level 0, sorted by (row, start): keys ``row << shift | time`` and event ids
        self.key_start = key_start
        self.key_end = key_end
        self.ev = order
        #: global row -> index of its first event in level 0 (length nrows + 1)
        self.row_first = np.searchsorted(self.key_start,
                                         np.arange(nrows + 1, dtype=np.int64) << self.shift)
        self.levels = [Level(0, None)]
        self.levels += _coarse_levels(key_start & self.mask, end_sorted,
                                      np.right_shift(key_start, self.shift), order, name, nrows, hi)

    def _sorted(self, key: np.ndarray, end: np.ndarray, order: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start keys, ends and end keys (``row << shift | end``: the start key's row bits)
        in ``order``."""
        key_start = key[order]
        end_sorted = end[order]
        key_end = np.bitwise_and(key_start, ~self.mask)
        np.bitwise_or(key_end, end_sorted, out=key_end)
        return key_start, end_sorted, key_end

    def take_raw(self, idx: np.ndarray) -> Items:
        """Level-0 positions ``idx`` as single-event items."""
        s = self.key_start[idx] & self.mask
        e = self.key_end[idx] & self.mask
        ev = self.ev[idx]
        return Items(start=s, end=e, count=np.ones(len(idx), dtype=np.int32), longest=e - s,
                     name=self.names[ev], ev=ev, first=idx)

    def take(self, level: int, idx: np.ndarray) -> Items:
        return self.take_raw(idx) if level == 0 else self.levels[level].items.take(idx)

    @property
    def size(self) -> int:
        """Events in level 0."""
        return len(self.key_start)

    def nbytes(self) -> int:
        """Memory held by the index (bytes)."""
        raw = self.key_start.nbytes + self.key_end.nbytes + self.ev.nbytes
        return raw + sum(getattr(lv.items, f).nbytes for lv in self.levels[1:] for f in _FIELDS)

    def window(self, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """Per global row, the level-0 index range ``[lo, hi)`` of the events overlapping the
        half-open window ``[s, e)`` (a zero-length event counts when ``s <= start < e``)."""
        top = (1 << self.shift) - 1
        s = min(max(s, 0), top)
        e = min(max(e, 0), top)
        base = np.arange(self.nrows, dtype=np.int64) << self.shift
        # first event with end > s or start >= s (both monotone in a row)
        lo = np.minimum(np.searchsorted(self.key_end, base | s, side="right"),
                        np.searchsorted(self.key_start, base | s, side="left"))
        hi = np.searchsorted(self.key_start, base | e, side="left")
        hi = np.maximum(hi, lo)
        return lo, hi

    def cover(self, lo: np.ndarray, hi: np.ndarray, px: float) -> Items:
        """Items covering exactly the level-0 ranges ``[lo, hi)``, as coarse as one pixel of
        ``px`` ns allows, sorted by level-0 position (so by row, then time)."""
        keep = hi > lo
        a, b = lo[keep], hi[keep]
        k = 0
        for i, lv in enumerate(self.levels):
            if lv.bucket <= px:
                k = i
        parts: list[Items] = []
        for level in range(k, 0, -1):
            if not len(a):
                break
            first, ext = self.levels[level].items.first, self.levels[level].ext
            i_lo = np.searchsorted(first, a, side="left")
            i_hi = np.searchsorted(ext, b, side="right") - 1
            full = i_lo < i_hi
            parts.append(self.take(level, _expand(i_lo[full], i_hi[full])))
            # the edges left over go to the next finer level
            left_b = np.where(full, ext[i_lo], b)
            right_a = np.where(full, ext[np.maximum(i_hi, 0)], b)
            na = np.concatenate([a, right_a])
            nb = np.concatenate([left_b, b])
            ok = nb > na
            a, b = na[ok], nb[ok]
        if len(a):
            parts.append(self.take_raw(_expand(a, b)))
        if not parts:
            return self.take_raw(np.zeros(0, dtype=np.int64))
        out = concat(parts)
        return out.take(np.argsort(out.first, kind="stable"))

    def row_of(self, first: np.ndarray) -> np.ndarray:
        """Global row of level-0 positions."""
        return np.searchsorted(self.row_first, first, side="right") - 1


def _row_start_order(row: np.ndarray, start: np.ndarray, nrows: int) -> np.ndarray:
    """Stable order by (row, start): by start, then by row (stable, so each row keeps its
    start order). The same as a stable sort of ``row << shift | start``, in about two
    thirds of the time: sorting the starts alone is cheaper (long ascending runs) and the
    few rows sort as 16-bit keys (radix sort: x200, 0.6 -> 0.4 s)."""
    by_start = np.argsort(start, kind="stable")
    if nrows > np.iinfo(np.uint16).max:
        return by_start[np.argsort(row[by_start], kind="stable")]
    return by_start[np.argsort(row[by_start].astype(np.uint16), kind="stable")]


def _expand(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(lo[i], hi[i])`` for all i, vectorised."""
    lens = hi - lo
    total = int(lens.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    offs = np.cumsum(lens) - lens
    return np.repeat(lo - offs, lens) + np.arange(total, dtype=np.int64)


class _Cut:
    """The items of the last level built, as far as building the next one needs them: per
    item, ``row << bits | bucket`` of its start (``b0``) and of its last ns (``be``: of
    ``end - 1``, or of the start of a zero-length item) at the current bucket size, and the
    index of its first element in the last level kept (``head``; None: that level's own
    items). An item lies inside one bucket when ``b0 == be``; a bucket ``FACTOR`` times
    bigger is a shift of both (the row's bits shift along, and stay apart)."""

    def __init__(self, b0: np.ndarray, be: np.ndarray, head: np.ndarray | None):
        self.b0, self.be, self.head = b0, be, head

    def __len__(self) -> int:
        return len(self.b0)

    def joins(self, sl: slice = slice(None)) -> np.ndarray:
        """``join[i]``: item ``i + 1`` continues the run of item ``i`` (same row, same bucket,
        both inside it)."""
        b0 = self.b0[sl]
        small = b0 == self.be[sl]
        return (b0[1:] == b0[:-1]) & small[1:] & small[:-1]

    def heads(self) -> np.ndarray | None:
        """First items of the runs merged at the current bucket; None when merging would
        save less than ``1 - SKIP_RATIO`` of the items (not worth a level)."""
        n = len(self)
        if n > 64 * SAMPLE:  # estimate on evenly spaced slices first: most levels are skipped
            offs = np.linspace(0, n - SAMPLE, 64).astype(np.int64)
            joined = sum(int(self.joins(slice(o, o + SAMPLE)).sum()) for o in offs)
            if joined < (1 - SKIP_RATIO) * 64 * (SAMPLE - 1) * 0.8:
                return None
        heads = np.flatnonzero(np.r_[True, ~self.joins()])
        return None if len(heads) > SKIP_RATIO * n else heads

    def merge(self, heads: np.ndarray) -> _Cut:
        """The items merged into runs starting at ``heads``."""
        last = np.append(heads[1:], len(self)) - 1
        return _Cut(self.b0[heads], self.be[last],
                    heads if self.head is None else self.head[heads])


def _coarse_levels(start: np.ndarray, end: np.ndarray, row: np.ndarray, ev: np.ndarray,
                   names: np.ndarray, nrows: int, hi: int) -> list[Level]:
    """The coarse levels over level 0 (``start``, ``end``, global ``row`` and event id of
    each event, sorted by row then start; ``names``: name of each event id; ``hi``: the
    latest end). ``row`` (int64) is overwritten.

    Level ``L`` merges runs of consecutive items of level ``L - 1`` inside one bucket; a run
    of items inside a bucket is a run of events inside it, so a level is the same when
    built from any finer one. Hence only the bucket keys of each level are built from the
    one before (shifted per level); the items of a level are reduced only when it is kept,
    from the last level kept (issue 19: most of the build time went to levels dropped)."""
    n0 = len(start)
    step = FACTOR.bit_length() - 1
    if FACTOR != 1 << step:
        raise ValueError("FACTOR must be a power of 2")
    if not n0:
        return []
    bits = (max(hi, 1) // BASE_BUCKET).bit_length() + 1
    top = np.left_shift(row, bits, out=row)
    b0 = np.floor_divide(start, BASE_BUCKET)
    np.bitwise_or(b0, top, out=b0)
    be = np.subtract(end, 1)
    np.floor_divide(np.maximum(be, start, out=be), BASE_BUCKET, out=be)
    np.bitwise_or(be, top, out=be)
    del top, row
    cut = _Cut(b0, be, None)
    del b0, be
    ref: Items | None = None  # the last level kept (None: level 0)
    levels: list[Level] = []
    kept = n0
    bucket = BASE_BUCKET
    while bucket < 2 * max(hi, 1) and len(cut) > nrows:
        if bucket > BASE_BUCKET:
            np.right_shift(cut.b0, step, out=cut.b0)
            np.right_shift(cut.be, step, out=cut.be)
        heads = cut.heads()
        if heads is not None:
            cut = cut.merge(heads)
            if len(cut) <= KEEP_RATIO * kept:
                if ref is None:
                    ref = _reduce_raw(start, end, ev, names, cut.head)
                else:
                    ref = _reduce_items(ref, cut.head, n0)
                levels.append(Level(bucket, ref, np.append(ref.first, n0)))
                cut.head = None
                kept = len(cut)
        bucket *= FACTOR
    return levels


def _longest(longest: np.ndarray, heads: np.ndarray, scratch: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per segment starting at ``heads``: the longest duration and the position of its
    first element of that duration. ``scratch``: ``longest`` may be overwritten."""
    n = len(longest)
    bits = max(n, 1).bit_length()
    if int(longest.max()) < (1 << (62 - bits)):
        # one reduceat: longest in the high bits, earliest position wins ties
        key = np.left_shift(longest, bits, out=longest if scratch else None)
        np.bitwise_or(key, np.arange(n - 1, -1, -1, dtype=np.int64), out=key)
        best = np.maximum.reduceat(key, heads)
        del key
        pick = (n - 1) - (best & ((1 << bits) - 1))
        return best >> bits, pick
    last = np.append(heads[1:], n) - 1
    top = np.maximum.reduceat(longest, heads)
    seg = np.repeat(np.arange(len(heads)), last - heads + 1)
    cand = np.flatnonzero(longest == top[seg])
    return top, cand[np.r_[True, seg[cand][1:] != seg[cand][:-1]]]


def _reduce_raw(start: np.ndarray, end: np.ndarray, ev: np.ndarray, names: np.ndarray,
                heads: np.ndarray) -> Items:
    """Items of the runs of level-0 events starting at ``heads``."""
    last = np.append(heads[1:], len(ev)) - 1
    top, pick = _longest(end - start, heads, scratch=True)
    pick_ev = ev[pick]
    return Items(start=start[heads], end=end[last], count=np.diff(np.append(heads, len(ev))),
                 longest=top, name=names[pick_ev], ev=pick_ev, first=heads)


def _reduce_items(ref: Items, heads: np.ndarray, n0: int) -> Items:
    """Items of the runs of ``ref``'s items starting at ``heads`` (over ``n0`` events)."""
    last = np.append(heads[1:], len(ref)) - 1
    top, pick = _longest(ref.longest, heads)
    first = ref.first[heads]
    return Items(start=ref.start[heads], end=ref.end[last], count=np.diff(np.append(first, n0)),
                 longest=top, name=ref.name[pick], ev=ref.ev[pick], first=first)


def reduce_segments(prev: Items, heads: np.ndarray, last: np.ndarray) -> Items:
    """One item per segment ``heads[i] .. last[i]``; name/ev of its (first) longest item."""
    n = len(prev)
    bits = max(n, 1).bit_length()
    if n and int(prev.longest.max()) < (1 << (62 - bits)):
        # one reduceat: longest in the high bits, earliest position wins ties
        key = (prev.longest << bits) | (n - 1 - np.arange(n, dtype=np.int64))
        best = np.maximum.reduceat(key, heads)
        longest = best >> bits
        pick = (n - 1) - (best & ((1 << bits) - 1))
    else:
        longest = np.maximum.reduceat(prev.longest, heads) if n else prev.longest[:0]
        seg = np.repeat(np.arange(len(heads)), last - heads + 1)
        cand = np.flatnonzero(prev.longest == longest[seg])
        pick = cand[np.r_[True, seg[cand][1:] != seg[cand][:-1]]] if len(cand) else cand
    return Items(start=prev.start[heads], end=prev.end[last],
                 count=np.add.reduceat(prev.count, heads) if n else prev.count[:0],
                 longest=longest, name=prev.name[pick], ev=prev.ev[pick],
                 first=prev.first[heads])
