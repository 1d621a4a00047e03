"""Vectorised interval arithmetic on integer-ns half-open intervals ``[start, end)``.

Everything here is sort + cumsum + searchsorted, O(n log n), no per-interval Python loop.

Example::

    >>> s, e = union(np.array([0, 5, 20]), np.array([10, 12, 30]))
    >>> s.tolist(), e.tolist()
    ([0, 20], [12, 30])
    >>> covered(s, e, np.array([0, 11]), np.array([25, 40])).tolist()
    [17, 11]
"""

from __future__ import annotations

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D array, by a sort: numpy >= 2.3 hashes instead, which
    is ~50x slower when most values are distinct (interval bounds, rows)."""
    v = np.sort(values)
    keep = np.empty(len(v), dtype=bool)
    keep[:1] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint, non-touching ones (empty intervals dropped)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    s, e = (starts, ends) if keep.all() else (starts[keep], ends[keep])  # read, not written
    if not len(s):
        return _EMPTY, _EMPTY
    if not (s[1:] >= s[:-1]).all():  # often sorted already (one stream, one thread)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], run[last]


def difference(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """``A \\ B`` of two unions (sorted, disjoint ``[s, e)``), as a union.

    Example: ``[0, 10)`` minus ``[2, 4)`` and ``[8, 12)`` -> ``[0, 2)``, ``[4, 8)``.
    """
    if not len(a_s) or not len(b_s):
        return a_s, a_e
    points = sorted_unique(np.concatenate((a_s, a_e, b_s, b_e)))
    left, right = points[:-1], points[1:]
    keep = inside(a_s, a_e, left) & ~inside(b_s, b_e, left)
    return union(left[keep], right[keep])


def inside(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per ``t``: does it lie in one of disjoint sorted ``[ms, me)``?

    Example: ``[0, 2)``, ``[5, 9)`` and ``t`` = 1, 2, 5 -> True, False, True.
    """
    if not len(ms):
        return np.zeros(np.shape(t), dtype=bool)
    i = np.searchsorted(ms, t, side="right") - 1
    return (i >= 0) & (t < me[np.maximum(i, 0)])


def cumulative_lengths(ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    """Covered length before each of disjoint sorted ``[ms, me)`` (length ``len(ms) + 1``)."""
    return np.concatenate(([0], np.cumsum(me - ms)))


def coverage_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray,
                    cum: np.ndarray | None = None) -> np.ndarray:
    """For disjoint sorted ``[ms, me)``: total covered length in ``(-inf, t)``, per ``t``.

    ``cum``: :func:`cumulative_lengths` of ``ms, me``, when kept for many calls (then a call
    costs O(len(t) log len(ms)))."""
    t = np.asarray(t, dtype=np.int64)
    if not len(ms):
        return np.zeros(t.shape, dtype=np.int64)
    lengths = me - ms
    cum = cumulative_lengths(ms, me) if cum is None else cum
    i = np.searchsorted(ms, t, side="right") - 1
    inside = np.where(i >= 0, np.clip(t - ms[np.maximum(i, 0)], 0, lengths[np.maximum(i, 0)]), 0)
    return cum[np.maximum(i, 0)] * (i >= 0) + inside


def covered(ms: np.ndarray, me: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of disjoint sorted ``[ms, me)`` inside each window ``[lo, hi)`` (int64 ns)."""
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)
    return coverage_before(ms, me, hi) - coverage_before(ms, me, lo)


def clipped_durations(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per interval, its length inside ``[lo, hi)`` (0 when outside)."""
    return np.maximum(np.minimum(ends, hi) - np.maximum(starts, lo), 0)
