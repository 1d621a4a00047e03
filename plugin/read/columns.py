"""Exact conversion of decoded JSON values to numpy columns (timestamps, ids, metrics).

Kineto writes ``ts``/``dur`` in microseconds as integers (to early 2024), as epoch µs with a
3-digit ns fraction (``1712195495519689.047``), or relative to ``baseTimeNanoseconds`` with 3
decimals. A float64 resolves only 0.25 µs at epoch scale, so the reader decodes floats as their
decimal *text* (msgspec ``float_hook=str``) and this module turns that text into exact integer
nanoseconds, vectorised with numpy string functions.

Example: ``["1712195495519689.047", 12, "135.162"] -> [1712195495519689047, 12000, 135162]``.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_US_LIMIT = INT64_MAX // 1000  # µs values beyond this overflow as ns


def int_column(values: list, missing: int = -1) -> np.ndarray:
    """Python values -> int64 array; anything not an in-range int becomes ``missing``.

    Example: ``[3, None, "x", 2**70] -> [3, -1, -1, -1]``.
    """
    try:
        return np.array([missing if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [v if type(v) is int and INT64_MIN <= v <= INT64_MAX else missing for v in values],
            dtype=np.int64,
        )


def float_column(values: list) -> np.ndarray:
    """Python values (ints, decimal text from ``float_hook=str``) -> float64; bad or not
    finite (``"1e999999"``, ``"inf"``) -> nan."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            out[i] = float(v)
        except (TypeError, ValueError, OverflowError):
            pass
    out[np.isinf(out)] = np.nan
    return out


def us_to_ns(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond values (int, or decimal text) -> (int64 ns, valid mask), exactly.

    Fractions beyond 3 decimals are rounded half-even to the ns. Invalid values (missing,
    non-numeric, out of int64 range, bools) get ``valid=False`` and ns 0.
    """
    n = len(values)
    try:  # fast path: every value an int (traces up to early 2024)
        us = np.array(values, dtype=np.int64)
        if us.dtype == np.int64 and (n == 0 or np.abs(us).max() <= _US_LIMIT):
            return us * 1000, np.ones(n, dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    ns = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    ints = [i for i, v in enumerate(values) if type(v) is int and abs(v) <= _US_LIMIT]
    if ints:
        idx = np.array(ints, dtype=np.int64)
        ns[idx] = np.array([values[i] for i in ints], dtype=np.int64) * 1000
        valid[idx] = True
    texts = [i for i, v in enumerate(values) if type(v) is str]
    if texts:
        idx = np.array(texts, dtype=np.int64)
        t_ns, t_ok = _text_us_to_ns([values[i] for i in texts])
        ns[idx] = t_ns
        valid[idx] = t_ok
    return ns, valid


def _text_us_to_ns(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Decimal texts of µs -> (ns, valid). Plain ``[-]digits[.digits]`` vectorised; the rest
    (exponents, very long fractions) through :class:`decimal.Decimal`."""
    arr = np.array(texts, dtype=str)
    neg = np.strings.startswith(arr, "-")
    body = np.where(neg, np.strings.lstrip(arr, "-"), arr)
    head, _sep, frac = np.strings.partition(body, ".")
    flen = np.strings.str_len(frac)
    hlen = np.strings.str_len(head)
    simple = (
        np.strings.isdigit(head)
        & ((flen == 0) | np.strings.isdigit(frac))
        & (flen <= 12)
        & (hlen <= 15)
    )
    ns = np.zeros(len(texts), dtype=np.int64)
    if simple.any():
        h = head[simple].astype(np.int64)
        f = np.where(flen[simple] == 0, "0", frac[simple]).astype(np.int64)
        fl = flen[simple].astype(np.int64)
        # scale the fraction to ns: 3 digits exact; fewer -> multiply; more -> round half even
        up = np.where(fl < 3, 10 ** np.clip(3 - fl, 0, 3), 1)
        down = np.where(fl > 3, 10 ** np.clip(fl - 3, 0, 18), 1)
        q, r = np.divmod(f * up, down)
        half = down // 2
        q = q + ((r > half) | ((r == half) & (down > 1) & (q % 2 == 1)))
        val = h * 1000 + q
        ns[simple] = np.where(neg[simple], -val, val)
    valid = simple.copy()
    for i in np.flatnonzero(~simple):
        try:
            d = Decimal(texts[i]) * 1000
            v = int(d.to_integral_value())  # ROUND_HALF_EVEN by default
        except (ArithmeticError, ValueError):  # InvalidOperation, decimal.Overflow ("1e999999")
            continue
        if d.is_finite() and INT64_MIN <= v <= INT64_MAX:
            ns[i] = v
            valid[i] = True
    return ns, valid
