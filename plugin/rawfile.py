"""Stream a trace file's JSON bytes: plain or gzip (damaged gzip tolerated), with progress.

:func:`iter_bytes` yields consecutive pieces of the decompressed bytes (about ``CHUNK``
each) and appends a data-quality note to ``notes`` when the gzip stream is truncated or
damaged (what was decompressed before the damage is kept) or wrapped in a second gzip.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from collections.abc import Iterator
from typing import Callable, Optional

from .errors import TraceError
from .model import Note

CHUNK = 16 << 20  # file bytes read per step (and per progress tick)
OUT_PIECE = 16 << 20  # most decompressed bytes yielded at once
GZIP_MAGIC = b"\x1f\x8b"
Progress = Optional[Callable[[float], None]]


def iter_bytes(path: str, notes: list[Note], progress: Progress = None) -> Iterator[bytes]:
    """Decompressed pieces of the file. ``progress(fraction)``: share of file bytes read.

    Reading and decompressing run in a helper thread (zlib releases the GIL), one piece
    ahead of the consumer, so decompression overlaps with decoding on a second core.
    """
    return _prefetch(_iter_bytes(path, notes, progress))


def _prefetch(pieces: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """Run ``pieces`` in a thread, at most ``depth`` pieces ahead; re-raise its errors."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for piece in pieces:
                while not stop.is_set():
                    try:
                        q.put(piece, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put(e)

    thread = threading.Thread(target=produce, name="stepscope-read", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        pieces_close = getattr(pieces, "close", None)
        thread.join(timeout=5)
        if pieces_close and not thread.is_alive():
            pieces_close()


def _iter_bytes(path: str, notes: list[Note], progress: Progress) -> Iterator[bytes]:
    name = os.path.basename(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError("cannot read file", f"{name}: {e.strerror or e}. Check that the file "
                         "exists and is readable.", file=name) from e
    with f:
        size = os.fstat(f.fileno()).st_size
        raw = _read(f, size, progress)
        first = next(raw, b"")
        if first[:2] != GZIP_MAGIC:
            yield first
            yield from raw
            return
        pieces = _gunzip(_chain(first, raw), name, notes)
        first = next(pieces, b"")
        if first[:2] == GZIP_MAGIC:  # gzip of gzip: unwrap once more
            notes.append(Note("info", "nested_gzip", f"{name} was compressed twice; unwrapped it."))
            pieces = _gunzip(_chain(first, pieces), name, notes)
            first = next(pieces, b"")
        yield first
        yield from pieces


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _read(f, size: int, progress: Progress) -> Iterator[bytes]:
    done = 0
    try:
        while chunk := f.read(CHUNK):
            done += len(chunk)
            if progress and size:
                progress(min(done / size, 1.0))
            yield chunk
    except OSError as e:
        raise TraceError("cannot read file", f"read failed after {done:,} bytes: {e}") from e


def _gunzip(chunks: Iterator[bytes], name: str, notes: list[Note]) -> Iterator[bytes]:
    """Decompress every gzip member; stop at damage or a cut-off end, with a note."""
    d = zlib.decompressobj(wbits=31)
    seen = 0
    for chunk in chunks:
        seen += len(chunk)
        while chunk:
            try:
                out = d.decompress(chunk, OUT_PIECE)
            except zlib.error as e:
                notes.append(Note("warning", "gzip_damaged",
                                  f"{name}: the gzip stream is damaged near byte {seen:,} "
                                  f"({e}); kept the data before the damage."))
                return
            if out:
                yield out
            if d.unconsumed_tail:  # more output pending for this input
                chunk = d.unconsumed_tail
                continue
            chunk = d.unused_data
            if d.eof:
                if chunk[:2] != GZIP_MAGIC:  # trailing garbage after the last member
                    return
                d = zlib.decompressobj(wbits=31)  # a further gzip member follows
    if not d.eof:
        tail = d.flush()
        if tail:
            yield tail
        notes.append(Note("warning", "gzip_truncated",
                          f"{name}: the gzip stream ends early (file cut off at {seen:,} "
                          "bytes); kept the data that was complete."))
