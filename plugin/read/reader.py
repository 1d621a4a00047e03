"""Trace file -> :class:`~stepscope.model.Trace` (SPEC §1.2-1.4).

The one entry point, :func:`read_trace`, streams the file's bytes (:mod:`.rawfile`), cuts the
event list into chunks (:class:`.decode.Split`), decodes each chunk and turns it into numpy
columns at once (:mod:`.builder`), so no Python object per event outlives its chunk. With
``helpers`` > 0, every other chunk is decoded in a helper process while this one decodes the
next, using a second core. A file the chunked path cannot take (damage, odd layout) is
decoded whole, with repairs and data-quality notes; a file with nothing usable raises
:class:`~stepscope.errors.TraceError` (HTTP 422).
"""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple, Optional

from ..errors import TraceError
from ..model import Note, Trace
from ..processes import watch_parent
from .builder import ColumnBuilder, Part, build_part
from .decode import (
    CHUNK_BYTES,
    Chunk,
    NeedWholeDocument,
    Split,
    decode_chunk,
    decode_document,
    decode_tail,
    join_chunks,
)
from .rawfile import iter_bytes, read_whole
from .shared import Buffer, Slots

Progress = Optional[Callable[[float], None]]


def _deep_nesting_is_422(read: Callable[..., Trace]) -> Callable[..., Trace]:
    """msgspec decodes nesting recursively: JSON nested deeper than Python's recursion limit
    (SPEC §1.4: 100,000 levels) raises RecursionError. That is the file's problem: 422."""
    @functools.wraps(read)
    def wrapper(path: str, *args, **kwargs) -> Trace:
        try:
            return read(path, *args, **kwargs)
        except RecursionError:
            name = os.path.basename(path)
            raise TraceError("nested too deeply", f"{name} nests JSON arrays or objects more "
                             f"than {sys.getrecursionlimit():,} levels deep, which no profiler "
                             "writes. Re-export the trace.", file=name) from None
    return wrapper


@_deep_nesting_is_422
def read_trace(path: str, progress: Progress = None, helpers: int = 0) -> Trace:
    """Read one trace file (``.json`` or ``.json.gz``) into the columnar model.

    ``progress(fraction)`` receives the share of the file's bytes read so far (0..1).
    ``helpers``: extra processes decoding chunks in parallel (forked; only for callers that
    run no other threads, such as an analysis worker process). Raises
    :class:`~stepscope.errors.TraceError` when nothing usable is in the file.
    """
    with _gc_paused(), _helper_pool(helpers) as pool:
        try:
            return _read_chunked(path, progress, pool)
        except NeedWholeDocument:
            pass
        notes: list[Note] = []
        buf = read_whole(path, notes)  # bounded: MAX_REPAIR_BYTES
        top, events, more = _decode_before_damage(buf, os.path.basename(path), notes)
        del buf
        builder = ColumnBuilder(path)
        builder.add(events)
        del events
        return builder.finish(top, notes + more)


#: How far before a decode error in a damaged gzip stream garbled output may start (bytes):
#: inflate can emit up to a block of garbage (back-references up to 32 KiB) before it fails.
GARBLED_BACKOFF = (0, 1 << 16, 1 << 20)


def _decode_before_damage(buf: bytes, name: str, notes: list[Note]):
    """:func:`decode_document`; after gzip damage, keep what precedes the garbled bytes
    that the damaged stream inflated to (cut ever further back before the decode error)."""
    try:
        return decode_document(buf, name)
    except TraceError as e:
        if not (e.position and any(n.code == "gzip_damaged" for n in notes)):
            raise
        first = e
    for back in GARBLED_BACKOFF:
        try:
            return decode_document(buf[: max(0, first.position["byte"] - back)], name)
        except TraceError:
            continue
    raise first


def _read_chunked(path: str, progress: Progress, pool: _Helpers | None) -> Trace:
    notes: list[Note] = []
    builder = ColumnBuilder(path)
    split = Split(iter_bytes(path, notes, progress), os.path.basename(path), notes)
    inflight: deque[tuple[Chunk, Future | Part | None, int | None]] = deque()
    held = b""  # chunks whose cut was not an event boundary, waiting to be joined
    local = Buffer()  # what this process decodes itself is written here

    def settle(chunk: Chunk, result: Future | Part | None, slot: int | None) -> None:
        nonlocal held
        if isinstance(result, Future):
            result = result.result()
        if slot is not None:
            pool.slots.release(slot)
        if held:
            chunk = Chunk([join_chunks(held, chunk.data())])
            result = build_local(chunk.data())
        if result is None:
            held = chunk.data()
            if len(held) > 8 * CHUNK_BYTES:  # no event boundary in 256 MB: damaged
                raise NeedWholeDocument
        else:
            held = b""
            builder.merge(result)

    for chunk in split:
        slot = None
        if pool is not None and _busy(inflight) < HELPER_QUEUE:  # else decode it here
            slot = pool.slots.put(chunk)
            future = pool.executor.submit(build_shared, slot, chunk.size) if slot is not None \
                else pool.executor.submit(build_remote, chunk.data())
            inflight.append((chunk, future, slot))
        else:
            inflight.append((chunk, build_local(local.holding(chunk)), None))
        while inflight and (len(inflight) > HELPER_QUEUE + 1 or _settled(inflight[0][1])):
            settle(*inflight.popleft())
    while inflight:
        settle(*inflight.popleft())
    local.close()
    tail = join_chunks(held, b"[" + split.tail)[1:] if held else split.tail
    events, top = decode_tail(split, tail)
    builder.add(events)
    return builder.finish(top, notes)


#: Chunks a helper is given ahead: the reader decodes a chunk itself only while the helpers
#: have this many to do, so a helper (which does not inflate or cut) takes its larger share.
HELPER_QUEUE = 2


def _busy(inflight: deque) -> int:
    """Chunks handed to a helper and not yet answered."""
    return sum(isinstance(r, Future) and not r.done() for _, r, _ in inflight)


def _settled(result: Future | Part | None) -> bool:
    return not isinstance(result, Future) or result.done()


def build_local(chunk) -> Part | None:
    """Columns of one chunk (bytes or a buffer), or None when it does not decode on its own."""
    events = decode_chunk(chunk)
    return None if events is None else build_part(events)


def build_remote(chunk: bytes) -> Part | None:
    """:func:`build_local` in a helper process (GC off there too)."""
    gc.disable()
    return build_local(chunk)


def build_shared(slot: int, size: int) -> Part | None:
    """:func:`build_remote` of the chunk the reader wrote into shared ``slot``."""
    gc.disable()
    assert _slots is not None  # set before this helper was forked
    return build_local(_slots.view(slot, size))


@contextmanager
def _gc_paused():
    """Millions of short-lived objects and no cycles: collections would only cost time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _helper_init(reader_pid: int) -> None:
    """A helper ends once the process it decodes for is gone (killed: it runs no cleanup)."""
    watch_parent(reader_pid)


class _Helpers(NamedTuple):
    """The helper processes of one read and the shared buffers they take chunks from."""

    executor: ProcessPoolExecutor
    slots: Slots


#: The shared buffers of the read in progress, set before its helpers are forked (they find
#: them here, inherited); None otherwise.
_slots: Slots | None = None


@contextmanager
def _helper_pool(helpers: int):
    """``helpers`` forked processes (with :class:`~.shared.Slots` mapped before the fork),
    started before any thread of the read."""
    global _slots
    if helpers <= 0 or not hasattr(os, "fork"):
        yield None
        return
    _slots = Slots(HELPER_QUEUE * helpers + 1)  # the chunks helpers are given, one spare
    pool = ProcessPoolExecutor(helpers, mp_context=mp.get_context("fork"),
                               initializer=_helper_init, initargs=(os.getpid(),))
    try:
        pool.submit(int).result()  # fork now, while this process runs no other thread
        yield _Helpers(pool, _slots)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _slots.close()
        _slots = None
