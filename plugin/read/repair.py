"""Repairs for JSON damage seen in real traces (SPEC §1.4).

The reader decodes strictly first (fast path). Only when that fails does it ask
:func:`repair` for one fix at a time, each applied to the whole buffer:

- a BOM before the JSON;
- invalid UTF-8 (replaced by U+FFFD);
- bare ``N/A`` / ``NaN`` / ``Infinity`` tokens (old Kineto) -> ``null``;
- raw control characters inside strings -> escaped;
- lone UTF-16 surrogate escapes (``"\\ud800"``, which no text can hold) -> U+FFFD;
- text after the end of the JSON document (a proxy's error page appended) -> ignored;
- a truncated tail (killed job) -> cut after the last complete event and closed.

Each fix returns a :class:`~stepscope.model.Note` saying what was repaired.
"""

from __future__ import annotations

import re
from typing import Callable

import msgspec

from ..model import Note

BOM = b"\xef\xbb\xbf"
_BARE_TOKEN = re.compile(rb"(?<=[:\[,\s])(?:N/A|NaN|-?Infinity|nan|-?inf)(?=\s*[,\]}])")
_CTRL = re.compile(rb"[\x00-\x1f]")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')  # every JSON string, matched left to right
_MAX_TAIL_CUTS = 64  # how many closing braces to try when cutting a truncated tail
#: a \\u escape of a UTF-16 surrogate (after an even number of backslashes: a real escape);
#: group 2 a high surrogate with the low one that completes it, if any
_SURROGATE = re.compile(rb"(?<!\\)((?:\\\\)*)(\\u[dD][89abAB][0-9a-fA-F]{2}"
                        rb"(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_NEAR_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def position(buf: bytes, byte: int) -> dict:
    """``{"byte", "line"}`` of a byte offset (line numbers start at 1)."""
    byte = max(0, min(byte, len(buf)))
    return {"byte": byte, "line": buf.count(b"\n", 0, byte) + 1}


def strip_bom(buf: bytes, name: str) -> tuple[bytes, list[Note]]:
    if buf.startswith(BOM):
        return buf[len(BOM):], [Note("info", "bom", f"{name} starts with a byte-order mark; ignored it.")]
    return buf, []


def fix_utf8(buf: bytes, name: str) -> tuple[bytes, Note]:
    text = buf.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - buf.decode("utf-8", errors="ignore").count("\ufffd")
    return text.encode("utf-8"), Note(
        "warning", "invalid_utf8",
        f"{name} holds {bad:,} invalid UTF-8 byte sequence(s); shown as \ufffd.")


def fix_at(buf: bytes, byte: int, name: str) -> tuple[bytes, Note] | None:
    """A fix for an 'invalid character' at ``byte``, or None when it is not repairable."""
    window = buf[max(0, byte - 1): byte + 12]
    if _BARE_TOKEN.search(buf, max(0, byte - 1), byte + 12) or b"N/A" in window:
        fixed, count = _BARE_TOKEN.subn(b"null", buf)
        if count:
            return fixed, Note("warning", "bare_tokens",
                               f"{name}: {count:,} bare N/A/NaN value(s) read as missing.")
    if byte < len(buf) and buf[byte] < 0x20:
        count = 0

        def escape(m: re.Match) -> bytes:
            nonlocal count
            if not _CTRL.search(m.group()):
                return m.group()
            count += 1
            return _CTRL.sub(lambda c: b"\\u%04x" % c.group()[0], m.group())

        fixed = _STRING.sub(escape, buf)
        if count:
            return fixed, Note("warning", "control_chars",
                               f"{name}: {count:,} string(s) held raw control characters; "
                               "escaped them.")
    if _NEAR_SURROGATE.search(buf, max(0, byte - 16), byte + 8):
        fixed, count = _fix_surrogates(buf)
        if count:
            return fixed, Note("warning", "lone_surrogates",
                               f"{name}: {count:,} lone UTF-16 surrogate escape(s) in strings; "
                               "shown as \ufffd.")
    for end in (byte - 1, byte):  # msgspec reports the byte after the first stray one
        if 0 < end < len(buf) and _complete_json(memoryview(buf)[:end]):
            return buf[:end], Note("warning", "trailing_garbage",
                                   f"{name}: ignored {len(buf) - end:,} bytes of text after the "
                                   f"end of the JSON document (from byte {end:,}).")
    return None


def _fix_surrogates(buf: bytes) -> tuple[bytes, int]:
    """Replace surrogate escapes that are not part of a high+low pair by ``\\ufffd``."""
    count = 0

    def fix(m: re.Match) -> bytes:
        nonlocal count
        if len(m.group(2)) == 12:  # a complete pair
            return m.group()
        count += 1
        return m.group(1) + b"\\ufffd"

    return _SURROGATE.sub(fix, buf), count


def _complete_json(prefix: memoryview) -> bool:
    """Is ``prefix`` one whole JSON value? (validated in C, nothing built)"""
    try:
        msgspec.json.decode(prefix, type=msgspec.Raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def cut_truncated(buf: bytes, decode: Callable[[bytes], object], name: str,
                  is_object: bool, offset: int = 0) -> tuple[object, Note] | None:
    """Decode the longest prefix that ends after a complete event, closed properly.

    Tries the last closing braces (an event's ``}``) from the end, each followed by the
    brackets that close the event list (``]}`` for an object trace, ``]`` for a bare list).
    Returns ``(decoded, note)`` or None when no prefix decodes. ``offset``: where ``buf``
    starts in the file (for the byte positions the note quotes).
    """
    suffixes = (b"]}", b"}", b"]") if is_object else (b"]", b"]}")
    end = len(buf)
    for _ in range(_MAX_TAIL_CUTS):
        end = buf.rfind(b"}", 0, end)
        if end < 0:
            return None
        for suffix in suffixes:
            try:
                decoded = decode(buf[: end + 1] + suffix)
            except Exception:  # noqa: BLE001 - any decode failure means: try an earlier cut
                continue
            return decoded, Note(
                "warning", "truncated",
                f"{name} is truncated at byte {offset + len(buf):,} (the job was probably "
                f"killed while writing it); kept the complete events before byte "
                f"{offset + end + 1:,}.")
    return None
