"""Exact conversion of decoded JSON values to numpy columns (timestamps, ids, metrics).

Kineto writes ``ts``/``dur`` in microseconds as integers (to early 2024), as epoch µs with a
3-digit ns fraction (``1712195495519689.047``), or relative to ``baseTimeNanoseconds`` with 3
decimals. A float64 resolves only 0.25 µs at epoch scale, so the reader decodes floats as their
decimal *text* (msgspec ``float_hook=str``; ``ts`` and ``dur`` of such pieces as their JSON
text, :class:`msgspec.Raw`) and this module turns that text into exact integer nanoseconds,
vectorised with numpy.

Example: ``["1712195495519689.047", 12, "135.162"] -> [1712195495519689047, 12000, 135162]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import msgspec
import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_US_LIMIT = INT64_MAX // 1000  # µs values beyond this overflow as ns
_RAW = msgspec.Raw
#: JSON text -> the value the event decoders give (floats as their text)
_VALUE = msgspec.json.Decoder(float_hook=str)


def int_column(values: list, missing: int = -1) -> np.ndarray:
    """Python values -> int64 array; anything not an in-range int becomes ``missing``.

    Example: ``[3, None, "x", 2**70, 1.5, "7", []] -> [3, -1, -1, -1, -1, -1, -1]`` (a
    ``True`` among ints counts as 1, as numpy converts it).
    """
    try:
        # the dtype numpy infers says whether every value is an int in range; ``dtype=int64``
        # would take ``"5"``, ``1.7`` and ``[]`` too (a list turned the column 2-D)
        out = np.array([missing if v is None else v for v in values])
        if out.dtype == np.int64 and out.ndim == 1:
            return out
    except (TypeError, ValueError, OverflowError):  # lists of different lengths
        pass
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
    if n and type(values[0]) is _RAW:  # 2024 formats: the JSON text (msgspec.Raw)
        return _raw_us_to_ns(values)
    if n and type(values[0]) is str:  # decimal text (others checked there)
        return _text_us_to_ns(values)
    types = set(map(type, values))  # one C-speed pass
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
_DOT, _MINUS, _ZERO, _COMMA = ord("."), ord("-"), ord("0"), ord(",")
_TEN = np.uint64(10)


def _raw_us_to_ns(raws: list) -> tuple[np.ndarray, np.ndarray]:
    """:func:`us_to_ns` of values kept as their JSON text (:class:`msgspec.Raw`, or None
    when absent). Plain numbers are parsed from the text joined as it is
    (:func:`_plain_us_to_ns`); anything else (absent, a string, a list, an exponent) is
    decoded as JSON first and converted as before."""
    if not raws:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    try:
        text = b",".join(raws) + b","
    except TypeError:  # an absent value
        text = None
    if text is not None and not text.translate(None, _PLAIN_BYTES):
        return _plain_us_to_ns(text, raws)
    joined = None if text is None else np.frombuffer(text, dtype=np.uint8)
    if joined is None or np.count_nonzero(joined == _COMMA) != len(raws):  # a list
        return us_to_ns([v if v is None else _VALUE.decode(v) for v in raws])
    return _text_us_to_ns(raws, joined)


#: The bytes of JSON numbers without an exponent, and the comma that ends each in the text
#: :func:`_plain_us_to_ns` takes.
_PLAIN_BYTES = b"0123456789.-,"


def _plain_us_to_ns(text: bytes, raws: list) -> tuple[np.ndarray, np.ndarray]:
    """``text``: JSON numbers without an exponent (``-?digits[.digits]``), each followed by a
    comma (``raws``: the same, one by one) -> (ns, valid), exactly.

    Without its point, ``1712195495519689.047`` is the integer count of ns; numpy parses
    all the integers in C (``np.fromstring``), and those with fewer than 3 fraction digits
    are scaled by ``10**(3 - digits)``. Values with more than 3 fraction digits (rounded)
    or beyond int64 (numpy saturates them) go through :class:`~decimal.Decimal`. Issue 19,
    2024 x50, per duration event: ``ts`` 228-251 -> 164-171 ns, ``dur`` 332-342 -> 124-145
    ns (the byte-matrix parse of :func:`_text_us_to_ns` made tens of numpy calls per piece,
    and more for ``dur``'s many lengths)."""
    n = len(raws)
    joined = np.frombuffer(text, dtype=np.uint8)
    dots = np.flatnonzero(joined == _DOT)  # at most one per number (JSON)
    try:
        ns = np.fromstring(text.replace(b".", b""), dtype=np.int64, sep=",")
    except ValueError:  # (not expected: every number has a digit)
        ns = None
    if ns is None or len(ns) != n:
        return _text_us_to_ns(raws, joined)
    odd = (ns == INT64_MAX) | (ns == INT64_MIN)  # maybe saturated: beyond int64
    if not (len(dots) == n and dots[-1] + 4 < len(joined) and (joined[dots + 4] == _COMMA).all()):
        # not every number has 3 fraction digits (one point each, its 4th byte on a comma)
        ends = np.flatnonzero(joined == _COMMA)
        frac = np.zeros(n, dtype=np.int64)
        at = ends.searchsorted(dots)  # the number each point is in
        frac[at] = ends[at] - dots - 1
        odd |= frac > 3
        scale = 10 ** (3 - np.minimum(frac, 3))
        odd |= np.abs(np.where(odd, 0, ns)) > INT64_MAX // scale
        ns = np.where(odd, 0, ns) * scale
    valid = np.ones(n, dtype=bool)
    for i in np.flatnonzero(odd).tolist():
        ns[i], valid[i] = _decimal_us_to_ns(raws[i])
    return ns, valid


def _text_us_to_ns(texts: list, joined: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Decimal texts of µs -> (ns, valid), exactly (no float round trip). Other values
    among them are fine too: ints are exact as text; None, bools and lists are invalid.

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
    for sub, rows in _by_length(texts, joined):
        _parse_group(sub, rows, ns, valid)
    for i in np.flatnonzero(~valid).tolist():
        ns[i], valid[i] = _decimal_us_to_ns(texts[i])
    return ns, valid


def _by_length(texts: list, joined: np.ndarray | None = None
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The texts of each length from 1 to ``_WIDTH`` as ``(bytes matrix, one row a
    text; their positions)``. Texts that are not strings, not ASCII or longer are in no
    group (left to Decimal). All-ASCII string texts are joined with commas and cut at them
    (3-4 times faster than numpy's conversion of each text, the one used otherwise: x50
    2024, issue 19); texts all of one length (epoch timestamps) are one matrix as they lie."""
    n = len(texts)
    try:
        if joined is None:
            joined = np.frombuffer((",".join(texts) + ",").encode("ascii"), dtype=np.uint8)
    except (TypeError, UnicodeEncodeError):  # not all strings, or not ASCII
        joined = None
    if joined is not None:
        ends = np.flatnonzero(joined == _COMMA)
        if len(ends) == n:  # (else a text holds a comma: not a number, done below)
            starts = np.empty_like(ends)
            starts[:1], starts[1:] = 0, ends[:-1] + 1
            length = ends - starts
            if n and (length == length[0]).all() and 0 < length[0] <= _WIDTH:
                size = int(length[0])
                yield joined.reshape(n, size + 1)[:, :size], np.arange(n)
                return
            for size, rows in _lengths(length):
                yield joined[starts[rows, None] + np.arange(size)], rows
            return
    try:
        # any value becomes text (None -> b"None": not a number); longer ones are cut, so
        # they are left to Decimal below
        mat = np.array(texts, dtype=f"S{_WIDTH + 1}")
    except (UnicodeEncodeError, ValueError, TypeError):  # non-ASCII, a list: one by one
        return
    if n:
        b = mat.view(np.uint8).reshape(n, _WIDTH + 1)
        for size, rows in _lengths(np.strings.str_len(mat)):
            yield b[rows, :size], rows


def _lengths(length: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each length from 1 to ``_WIDTH`` present in ``length`` and the positions holding it."""
    for size in np.flatnonzero(np.bincount(length)[1: _WIDTH + 1]).tolist():
        yield size + 1, np.flatnonzero(length == size + 1)


def _parse_group(sub: np.ndarray, rows: np.ndarray, ns: np.ndarray, valid: np.ndarray) -> None:
    """Parse the texts of one length (``sub``: their bytes, one row each) that are
    ``[-]digits`` or ``[-]digits.digits`` with 1 to 3 fraction digits; set ``ns[rows]`` and
    ``valid[rows]`` where they parse (others are left for Decimal)."""
    size = sub.shape[1]
    col = np.ascontiguousarray(sub.T)  # one row per character position: contiguous passes
    neg = col[0] == _MINUS
    digit = (col - _ZERO) < 10  # uint8: bytes below "0" wrap around
    digit[0] |= neg
    for frac in range(4):  # digits after the point (0: no point)
        point = size - 1 - frac if frac else size  # the point's position
        if point < 1:
            break
        ok = (col[point] == _DOT) if frac else np.ones(len(sub), dtype=bool)
        if not ok.any():
            continue
        for j in range(size):
            if j != point:
                ok &= digit[j]
        ok &= point > neg  # a digit before the point ("-", ".5", "-.5": not here)
        # at most 19 digits once scaled to ns (uint64); longer: Decimal says if it fits
        ok &= (point - neg + 3) <= 19
        if not ok.any():
            continue
        every = ok.all()
        g = col if every else col[:, ok]
        g_neg = neg if every else neg[ok]
        val = np.where(g_neg, 0, g[0] - _ZERO).astype(np.uint64)
        for j in range(1, size):
            if j != point:
                val *= _TEN
                val += g[j] - _ZERO
        val *= np.uint64(10 ** (3 - frac))
        fits = val <= np.uint64(INT64_MAX)
        v = val.astype(np.int64)
        np.negative(v, out=v, where=g_neg)
        where = rows if every else rows[ok]
        if not fits.all():
            where, v = where[fits], v[fits]
        ns[where] = v
        valid[where] = True


def _decimal_us_to_ns(text: object) -> tuple[int, bool]:
    """One decimal text (or int, or JSON text) of µs -> (ns, valid) through
    :class:`decimal.Decimal`."""
    if type(text) is _RAW:
        text = _VALUE.decode(text)
    if type(text) is int:
        return (text * 1000, True) if abs(text) <= _US_LIMIT else (0, False)
    if type(text) is not str:
        return 0, False
    try:
        x = Decimal(text) * 1000
        # beyond int64 (checked before int(): "5e555555" would make a 555,555-digit int)
        if not x.is_finite() or (x and x.adjusted() > 19):
            return 0, False
        v = int(x.to_integral_value())  # ROUND_HALF_EVEN by default
    except (ArithmeticError, ValueError):  # InvalidOperation, decimal.Overflow ("1e999999")
        return 0, False
    return (v, True) if INT64_MIN <= v <= INT64_MAX else (0, False)
