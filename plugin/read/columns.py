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
    types = set(map(type, values))  # one C-speed pass
    if types == {str}:  # 2024 formats: every value decimal text
        return _text_us_to_ns(values)
    if types <= {int}:  # traces up to early 2024: every value an int
        try:
            us = np.array(values, dtype=np.int64)
            if n == 0 or np.abs(us).max() <= _US_LIMIT:
                return us * 1000, np.ones(n, dtype=bool)
        except OverflowError:
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


#: Longest text the vectorised parse takes: ``-`` + 19 digits + ``.``. Longer texts, and
#: those with an exponent, more than 3 fraction digits, spaces or non-ASCII characters, go
#: through :class:`~decimal.Decimal` one by one (Kineto writes none of these).
_WIDTH = 21
_DOT, _MINUS, _ZERO = ord("."), ord("-"), ord("0")
_TEN = np.uint64(10)


def _text_us_to_ns(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Decimal texts of µs -> (ns, valid), exactly (no float round trip).

    ``[-]digits[.d[d[d]]]`` texts (what Kineto writes: ``1712195495519689.047``) are parsed
    from their ASCII bytes as integers, vectorised: the texts become rows of a byte matrix,
    grouped by length and by the point's position (at most a few groups per column); in each
    group the digits are summed up column by column (Horner, uint64: 19 digits cannot
    overflow) and scaled by ``10**(3 - fraction digits)``. Other texts go through
    :class:`decimal.Decimal` (rounded half to even to the ns).

    Example: ``["1712195495519689.047", "-1.5", "0.0015"] -> [1712195495519689047, -1500, 2]``.
    """
    n = len(texts)
    ns = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    try:
        mat = np.array(texts, dtype=f"S{_WIDTH + 1}")  # longer texts are cut: excluded below
    except UnicodeEncodeError:  # a non-ASCII text: all through Decimal
        mat = None
    if mat is not None and n:
        b = mat.view(np.uint8).reshape(n, _WIDTH + 1)
        length = np.strings.str_len(mat)
        for size in np.flatnonzero(np.bincount(length)[1: _WIDTH + 1]).tolist():
            size += 1
            rows = np.flatnonzero(length == size)
            _parse_group(b[rows, :size], rows, ns, valid)
    for i in np.flatnonzero(~valid).tolist():
        ns[i], valid[i] = _decimal_us_to_ns(texts[i])
    return ns, valid


def _parse_group(sub: np.ndarray, rows: np.ndarray, ns: np.ndarray, valid: np.ndarray) -> None:
    """Parse the texts of one length (``sub``: their bytes, one row each) that are
    ``[-]digits`` or ``[-]digits.digits`` with 1 to 3 fraction digits; set ``ns[rows]`` and
    ``valid[rows]`` where they parse (others are left for Decimal)."""
    size = sub.shape[1]
    neg = sub[:, 0] == _MINUS
    digit = (sub - _ZERO) < 10  # uint8: bytes below "0" wrap around
    digit[:, 0] |= neg
    for frac in range(4):  # digits after the point (0: no point)
        point = size - 1 - frac if frac else size  # the point's column
        if point < 1:
            break
        ok = (sub[:, point] == _DOT) if frac else np.ones(len(sub), dtype=bool)
        if not ok.any():
            continue
        for j in range(size):  # column by column: row-wise all() is slow on short rows
            if j != point:
                ok &= digit[:, j]
        ok &= point > neg  # a digit before the point ("-", ".5", "-.5": not here)
        # at most 19 digits once scaled to ns (uint64); longer: Decimal says if it fits
        ok &= (point - neg + 3) <= 19
        if not ok.any():
            continue
        g = sub[ok]
        val = np.where(neg[ok], 0, g[:, 0] - _ZERO).astype(np.uint64)
        for j in range(1, size):
            if j != point:
                val = val * _TEN + (g[:, j] - _ZERO)
        val *= np.uint64(10 ** (3 - frac))
        fits = val <= np.uint64(INT64_MAX)
        v = val.astype(np.int64)
        where = rows[ok][fits]
        ns[where] = np.where(neg[ok], -v, v)[fits]
        valid[where] = True


def _decimal_us_to_ns(text: str) -> tuple[int, bool]:
    """One decimal text of µs -> (ns, valid) through :class:`decimal.Decimal`."""
    try:
        x = Decimal(text) * 1000
        # beyond int64 (checked before int(): "5e555555" would make a 555,555-digit int)
        if not x.is_finite() or (x and x.adjusted() > 19):
            return 0, False
        v = int(x.to_integral_value())  # ROUND_HALF_EVEN by default
    except (ArithmeticError, ValueError):  # InvalidOperation, decimal.Overflow ("1e999999")
        return 0, False
    return (v, True) if INT64_MIN <= v <= INT64_MAX else (0, False)
