"""Read a trace file's bytes: plain or gzip (damaged gzip tolerated), with progress.

Returns the decompressed bytes and any data-quality notes (a truncated or corrupt gzip
stream keeps what could be decompressed; a gzip inside a gzip is unwrapped).
"""

from __future__ import annotations

import os
import zlib
from typing import Callable, Optional

from .errors import TraceError
from .model import Note

CHUNK = 8 << 20  # bytes read per progress tick
GZIP_MAGIC = b"\x1f\x8b"
Progress = Optional[Callable[[float], None]]


def read_bytes(path: str, progress: Progress = None) -> tuple[bytes, list[Note]]:
    """The file's JSON bytes. ``progress(fraction)`` is called with the share of file bytes read."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                data, notes = _gunzip_stream(f, size, name, progress)
            else:
                data, notes = _read_plain(f, size, progress), []
    except OSError as e:
        raise TraceError("cannot read file", f"{name}: {e.strerror or e}. Check the file "
                         "exists and is readable.", file=name) from e
    if data[:2] == GZIP_MAGIC:  # gzip of gzip: unwrap once more
        data, more = _gunzip_bytes(data, name)
        notes += [Note("info", "nested_gzip", f"{name} was compressed twice; unwrapped it.")]
        notes += more
    return data, notes


def _read_plain(f, size: int, progress: Progress) -> bytes:
    parts, done = [], 0
    while chunk := f.read(CHUNK):
        parts.append(chunk)
        done += len(chunk)
        if progress and size:
            progress(min(done / size, 1.0))
    return b"".join(parts)


def _gunzip_stream(f, size: int, name: str, progress: Progress) -> tuple[bytes, list[Note]]:
    """Decompress every gzip member; keep what precedes damage or a cut-off end."""
    parts: list[bytes] = []
    notes: list[Note] = []
    d = zlib.decompressobj(wbits=31)
    done = 0
    while chunk := f.read(CHUNK):
        done += len(chunk)
        while chunk:
            try:
                parts.append(d.decompress(chunk))
            except zlib.error as e:
                notes.append(Note("warning", "gzip_damaged",
                                  f"{name}: the gzip stream is damaged near byte {done:,} "
                                  f"({e}); kept the data before the damage."))
                return b"".join(parts), notes
            chunk = d.unused_data  # a further gzip member follows
            if d.eof:
                d = zlib.decompressobj(wbits=31) if chunk[:2] == GZIP_MAGIC else None
                if d is None:
                    break
        if d is None:
            break
        if progress and size:
            progress(min(done / size, 1.0))
    if d is not None and not d.eof:
        parts.append(d.flush())
        if done:
            notes.append(Note("warning", "gzip_truncated",
                              f"{name}: the gzip stream ends early (file cut off at "
                              f"{done:,} bytes); kept the data that was complete."))
    if progress:
        progress(1.0)
    return b"".join(parts), notes


def _gunzip_bytes(data: bytes, name: str) -> tuple[bytes, list[Note]]:
    import io

    return _gunzip_stream(io.BytesIO(data), len(data), name, None)
