"""Rounding rules of the API, in one place (SPEC §2.2).

Times are summed in integer nanoseconds and rounded once, at output, to integer
microseconds **half to even**; shares are ``round(100 * part / total, 2)``.

Example: ``us(1500) == 2``, ``us(2500) == 2``, ``us(-1500) == -2``, ``pct(1, 3) == 33.33``.
"""

from __future__ import annotations

import numpy as np


def div_round(num, den):
    """``num / den`` rounded half to even, exactly, for ints or int64 arrays (``den > 0``).

    Example: ``div_round(5, 2) == 2``, ``div_round(7, 2) == 4``.
    """
    if isinstance(num, np.ndarray) or isinstance(den, np.ndarray):
        num = np.asarray(num, dtype=np.int64)
        den = np.asarray(den, dtype=np.int64)
        q, r = np.divmod(num, den)
        twice = 2 * r
        up = (twice > den) | ((twice == den) & (q % 2 == 1))
        return q + up
    q, r = divmod(int(num), int(den))
    if 2 * r > den or (2 * r == den and q % 2 == 1):
        q += 1
    return q


def us(ns):
    """Integer ns (scalar or int64 array) -> integer µs, rounded half to even."""
    out = div_round(ns, 1000)
    return out if isinstance(out, np.ndarray) else int(out)


def us_list(ns: np.ndarray) -> list[int]:
    """int64 ns array -> list of Python ints in µs (JSON-ready)."""
    return us(np.asarray(ns, dtype=np.int64)).tolist()


def pct(part, total) -> float:
    """``round(100 * part / total, 2)``; 0.0 when ``total`` is 0."""
    if not total:
        return 0.0
    if isinstance(part, (int, np.integer)) and isinstance(total, (int, np.integer)):
        return round(100 * int(part) / int(total), 2)  # exact int division, one rounding
    return round(100 * float(part) / float(total), 2)


def format_bytes(v: int) -> str:
    """Bytes for people, binary units, two decimals: ``1.50 GiB``, ``12.00 KiB``, ``-12 B``."""
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= scale:
            return f"{sign}{v / scale:.2f} {unit}"
    return f"{sign}{v} B"
