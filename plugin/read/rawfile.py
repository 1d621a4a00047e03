"""Stream a trace file's JSON bytes: plain or gzip (damaged gzip tolerated), with progress.

:func:`iter_bytes` yields consecutive pieces of the decompressed bytes (about ``CHUNK``
each) and appends a data-quality note to ``notes`` when the gzip stream is truncated or
damaged (what was decompressed before the damage is kept) or wrapped in a second gzip.

Hostile input is bounded (SPEC §1.4, issue 7): a file whose JSON exceeds
:data:`MAX_TRACE_BYTES` (a gzip bomb, a runaway export) is refused with a
:class:`~stepscope.errors.TraceError` (422) as soon as reading passes the limit, and
:func:`read_whole` (the in-memory repair path) stops at :data:`MAX_REPAIR_BYTES`. A file
that is rewritten in place while it is read raises a TraceError rather than handing on a mix
of old and new bytes (a replaced or deleted file is read whole from the open handle).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from typing import Callable, Optional

try:  # ISA-L inflates gzip about 3x faster than zlib, with the same streaming interface
    from isal import isal_zlib as zlib
except ImportError:  # a platform without an isal wheel
    import zlib  # type: ignore[no-redef]

from ..errors import TraceError
from ..fs import filesystem_of, is_url, scrub
from ..model import Note

CHUNK = 16 << 20  # file bytes read per step (and per progress tick)
OUT_PIECE = 16 << 20  # most decompressed bytes yielded at once
#: compressed bytes fed to zlib at once: damage loses at most this much input's output
GZIP_IN_PIECE = 256 << 10
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"
Progress = Optional[Callable[[float], None]]


def _env_bytes(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ[name]))
    except (KeyError, ValueError):
        return default


def _half_the_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (AttributeError, OSError, ValueError):
        return 8 << 30


#: Most JSON bytes (after decompression) a trace may hold. Analysis takes ~1.3 bytes of
#: memory per JSON byte, so a bigger file could not be analysed here anyway; a gzip bomb
#: stops at this point instead of filling memory. Default: half the machine's memory.
MAX_TRACE_BYTES = _env_bytes("STEPSCOPE_MAX_TRACE_BYTES", _half_the_memory())
#: Most JSON bytes repaired in memory (:func:`read_whole`): whole-document repairs take up to
#: ~9 bytes of memory per byte (measured: ill-typed events, 231 MB -> 2 GB).
MAX_REPAIR_BYTES = _env_bytes("STEPSCOPE_MAX_REPAIR_BYTES", 1 << 30)


def iter_bytes(path: str, notes: list[Note], progress: Progress = None) -> Iterator[bytes]:
    """Decompressed pieces of the file. ``progress(fraction)``: share of file bytes read.

    Reading and decompressing run in a helper thread (zlib/ISA-L release the GIL), one piece
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


def read_whole(path: str, notes: list[Note], limit: int | None = None) -> bytes:
    """All the decompressed bytes of the file, for the in-memory repair path.

    Raises TraceError (422) past ``limit`` bytes (default :data:`MAX_REPAIR_BYTES`), and
    when a damaged gzip stream gave nothing at all (rather than calling the file empty).
    """
    name = os.path.basename(path)
    limit = MAX_REPAIR_BYTES if limit is None else limit
    pieces, size, blank = [], 0, True
    for piece in iter_bytes(path, notes, None):
        blank = blank and not piece.strip()
        if blank:  # nothing but whitespace so far: keep none of it
            pieces, size = [], 0
            continue
        size += len(piece)
        if size > limit:
            del pieces
            raise TraceError(
                "too large to repair", f"{name} holds damage (or an odd layout) that is "
                f"repaired in memory, which Stepscope does for at most {limit:,} bytes of "
                "JSON; this file is larger. Re-export the trace, or raise "
                "STEPSCOPE_MAX_REPAIR_BYTES if the machine has ~10x that memory.", file=name)
        pieces.append(piece)
        head = pieces[0].removeprefix(BOM).lstrip()[:1]
        if head and head not in b"{[":  # not JSON: its first bytes say so, no need for more
            break
    buf = b"".join(pieces)
    damage = [n for n in notes if n.code in ("gzip_damaged", "gzip_truncated")]
    if damage and not buf.strip():
        where = damage[0].text.split("; kept the data")[0]
        raise TraceError("damaged gzip", f"{where}, and nothing could be decompressed "
                         "before the damage; copy the file again.", file=name)
    return buf


def _iter_bytes(path: str, notes: list[Note], progress: Progress) -> Iterator[bytes]:
    name = os.path.basename(path)
    try:
        fs = filesystem_of(path)  # a local path or a remote URL (stepscope.fs)
        f = fs.open(path)
        size = fs.stat(path).size
    except Exception as e:  # a storage library's own errors too (no credentials...)
        if not isinstance(e, OSError) and not is_url(path):
            raise
        reason = scrub(str(getattr(e, "strerror", None) or e or type(e).__name__))
        raise TraceError("cannot read file", f"{name}: {reason}. Check that the file "
                         "exists and is readable.", file=name) from e
    with f:
        raw = _read(f, size, name)
        first = next(raw, b"")
        # progress: the share of the file's bytes consumed, as they are handed on (plain
        # JSON) or inflated (gzip): reading itself runs ahead by up to a CHUNK
        done = _Done(size, progress)
        if first[:2] != GZIP_MAGIC:
            yield from _limited(_cut_nul_tail(done.counted(_chain(first, raw)), name, notes),
                                name)
            return
        pieces = _gunzip(_chain(first, raw), name, notes, done)
        first = next(pieces, b"")
        if first[:2] == GZIP_MAGIC:  # gzip of gzip: unwrap once more
            notes.append(Note("info", "nested_gzip", f"{name} was compressed twice; unwrapped it."))
            pieces = _gunzip(_chain(first, pieces), name, notes)
            first = next(pieces, b"")
        yield from _limited(_cut_nul_tail(_chain(first, pieces), name, notes), name)


def _cut_nul_tail(pieces: Iterator[bytes], name: str, notes: list[Note]) -> Iterator[bytes]:
    """``pieces`` without the NUL bytes that end them, with a note: a crashed writer leaves
    its preallocated file padded with zeros after the JSON it wrote (issue 12). NULs held
    back are handed on (at most :data:`OUT_PIECE` at a time) when data follows them. A file
    that starts with NUL is no JSON at all: handed on as it is (refused at its first byte)."""
    held = 0  # NUL bytes seen after the last other byte
    seen = 0  # bytes handed on
    for piece in pieces:
        if not seen and piece[:1] == b"\0":
            yield piece
            yield from pieces
            return
        body = piece.rstrip(b"\0")
        if body:
            while held:
                n = min(held, OUT_PIECE)
                yield bytes(n)
                held -= n
                seen += n
            yield body if len(body) == len(piece) else bytes(body)
            seen += len(body)
        held += len(piece) - len(body)
    if held:
        notes.append(Note("warning", "nul_tail",
                          f"{name}: ignored {held:,} NUL bytes at the end of its JSON (from byte "
                          f"{seen:,}): the file was preallocated and its writer stopped early."))


def _limited(pieces: Iterator[bytes], name: str) -> Iterator[bytes]:
    """``pieces``, raising TraceError once they exceed :data:`MAX_TRACE_BYTES` in all."""
    seen = 0
    for piece in pieces:
        seen += len(piece)
        if seen > MAX_TRACE_BYTES:
            raise TraceError(
                "trace too large", f"{name} holds more than {MAX_TRACE_BYTES:,} bytes of JSON "
                "(decompressed), more than this machine can analyse (or a gzip bomb). Profile "
                "fewer steps (torch.profiler schedule active=...), or raise "
                "STEPSCOPE_MAX_TRACE_BYTES.", file=name)
        yield piece


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


class _Done:
    """Reports ``progress(bytes consumed / size)`` of a file of ``size`` bytes."""

    def __init__(self, size: int, progress: Progress):
        self.size = size
        self.progress = progress
        self.bytes = 0

    def add(self, n: int) -> None:
        self.bytes += n
        if self.progress and self.size:
            self.progress(min(self.bytes / self.size, 1.0))

    def counted(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self.add(len(piece))
            yield piece


def _read(f, size: int, name: str = "") -> Iterator[bytes]:
    done = 0
    before = _fstat(f)
    try:
        while chunk := f.read(CHUNK):
            done += len(chunk)
            yield chunk
        after = _fstat(f)
    except OSError as e:
        raise TraceError("cannot read file", f"{name}: read failed after {done:,} bytes: {e}",
                         file=name or None) from e
    # Rewritten in place while we read: what we got may mix old and new bytes.
    if done != size or after != before:
        raise TraceError("file changed while it was read",
                         f"{name} was modified while Stepscope read it ({size:,} -> "
                         f"{after[0] if after else done:,} bytes); it is read again once it "
                         "stops changing.", file=name or None)


def _fstat(f) -> tuple[int, int] | None:
    """(size, mtime_ns) of an open local file; None for a remote one (fixed once opened)."""
    try:
        st = os.fstat(f.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
    return st.st_size, st.st_mtime_ns


def _gunzip(chunks: Iterator[bytes], name: str, notes: list[Note],
            done: _Done | None = None) -> Iterator[bytes]:
    """Decompress every gzip member; stop at damage or a cut-off end, with a note.
    ``done`` hears the compressed bytes as they are inflated.

    After a member ends, what follows must start another member (anything else is trailing
    garbage, ignored); its two magic bytes may straddle two input pieces.
    """
    d = zlib.decompressobj(wbits=31)
    seen = 0
    between = False  # a member just ended: the next bytes must start another one
    rest = b""  # input left over after a member's end
    for piece in _slices(chunks, GZIP_IN_PIECE):
        seen += len(piece)
        if done is not None:
            done.add(len(piece))
        chunk = rest + bytes(piece) if rest else piece
        rest = b""
        while chunk:
            if between:
                if len(chunk) < len(GZIP_MAGIC) and GZIP_MAGIC.startswith(bytes(chunk)):
                    rest = bytes(chunk)  # the magic continues in the next piece
                    break
                if bytes(chunk[:2]) != GZIP_MAGIC:  # trailing garbage after the last member
                    notes.append(Note("warning", "trailing_garbage",
                                      f"{name}: the bytes after the end of the gzip data "
                                      "are not gzip; ignored."))
                    return
                d, between = zlib.decompressobj(wbits=31), False
            try:
                out = d.decompress(chunk, OUT_PIECE)
            except zlib.error as e:
                notes.append(Note("warning", "gzip_damaged",
                                  f"{name}: the gzip stream is damaged near byte {seen:,} "
                                  f"({e}); kept the data before the damage."))
                return
            if out:
                yield out
            if d.eof:  # the input after the member's end is in unused_data (and, when the
                # output was capped, also in unconsumed_tail: check eof first, or loop forever)
                chunk, between = d.unused_data, True
            else:
                chunk = d.unconsumed_tail  # more output pending for this input, or b""
    if not between:
        tail = d.flush()
        if tail:
            yield tail
        if not d.eof:
            notes.append(Note("warning", "gzip_truncated",
                              f"{name}: the gzip stream ends early (file cut off at {seen:,} "
                              "bytes); kept the data that was complete."))


def _slices(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    """``chunks`` re-cut into pieces of at most ``size`` bytes (zlib loses the output of the
    call that hits damage, so small inputs keep more of a damaged stream)."""
    for chunk in chunks:
        view = memoryview(chunk)
        for i in range(0, len(view), size):
            yield view[i: i + size]
