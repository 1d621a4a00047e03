"""Trace file -> :class:`~stepscope.model.Trace` (SPEC §1.2-1.4).

The one entry point, :func:`read_trace`, streams the file's bytes (:mod:`.rawfile`), cuts the
event list into chunks (:class:`.decode.Split`), decodes each chunk a piece at a time and
turns each piece into numpy columns at once (:mod:`.builder`), so no Python object per
event outlives its piece. With ``helpers`` > 0, every other chunk is decoded in a helper
process while this one decodes the next, using a second core; rather than wait for a
helper, the reader decodes the chunks that helper has not started yet
(:meth:`_Job.take_over`). A file the chunked path cannot take (damage, odd layout) is
decoded whole, with repairs and data-quality notes; a file with nothing usable raises
:class:`~stepscope.errors.TraceError` (HTTP 422).
"""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from typing import Optional

from ..errors import TraceError
from ..model import Note, Trace
from ..processes import jobs, watch_parent
from .builder import ColumnBuilder, Part
from .decode import (
    CHUNK_BYTES,
    Chunk,
    NeedWholeDocument,
    Split,
    cut_piece,
    decode_document,
    decode_events,
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


def _read_chunked(path: str, progress: Progress, helpers: _Helpers | None) -> Trace:
    notes: list[Note] = []
    builder = ColumnBuilder(path)
    split = Split(iter_bytes(path, notes, progress), os.path.basename(path), notes)
    inflight: deque[_Job] = deque()  # in file order
    held = b""  # chunks whose cut was not an event boundary, waiting to be joined
    local = Buffer()  # what this process decodes itself is written here

    def settle(job: _Job) -> None:
        nonlocal held
        if not job.done():  # rather than wait for it, decode the chunks a helper has not
            for waiting in (job, *inflight):  # started yet (at the end of a file above all)
                if waiting.result is None and waiting.helper is not None:
                    waiting.take_over()
        if job.helper is not None:
            job.helper.wait_for(job)
        chunk, result = job.chunk, job.result
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
        job = _Job(chunk)
        helper = helpers.least_busy() if helpers is not None else None
        if helper is None or helper.busy() >= HELPER_QUEUE or not helper.send(job):
            job.result = build_local(local.holding(chunk))  # else the helper decodes it
        inflight.append(job)
        while inflight and (len(inflight) > HELPER_QUEUE + 1 or inflight[0].done()):
            settle(inflight.popleft())
    while inflight:
        settle(inflight.popleft())
    local.close()
    tail = join_chunks(held, b"[" + split.tail)[1:] if held else split.tail
    events, top = decode_tail(split, tail)
    builder.add(events)
    return builder.finish(top, notes)


#: Chunks a helper is given ahead: the reader decodes a chunk itself only while the helpers
#: have this many to do, so a helper (which does not inflate or cut) takes its larger share.
HELPER_QUEUE = 2


def build_local(chunk) -> Part | None:
    """Columns of one chunk (bytes or a buffer), or None when it does not decode on its own.

    The chunk is decoded and turned into columns a piece of about
    :data:`~.decode.PIECE_BYTES` at a time, the structs of one piece freed before the next is
    decoded: a piece's structs then stay in the core's cache for the builder's passes over
    them, and the next piece reuses their memory (issue 19, 2024-format x10, decode + build +
    free per entry: 2.65 µs for 32 MB at once, 1.96 µs by 1 MB pieces; 2021 format 3.06 ->
    2.52 µs)."""
    builder = ColumnBuilder("")
    lo, by_phase = 0, True
    while lo < len(chunk):
        events, lo, by_phase = _decode_piece(chunk, lo, by_phase)
        if events is None:
            return None
        builder.add(events)
        del events
    return builder.export()


def _decode_piece(chunk, lo: int, by_phase: bool) -> tuple[list | None, int, bool]:
    """The events of the piece of ``chunk`` that starts at ``lo``, where the next starts
    (:func:`~.decode.cut_piece`) and whether to decode it per phase (once a piece of the
    chunk needed the loose structs, its next ones are decoded with them at once:
    :func:`~.decode.decode_events`); None when the rest of the chunk does not decode. When the
    piece does not decode (its end was a ``},{`` inside an event), the rest of the chunk is
    decoded at once, as a chunk was before it was decoded in pieces: trying the next boundary
    and the next would decode the piece over and over where most ``},{`` are inside events
    (args holding lists of objects)."""
    piece, hi = cut_piece(chunk, lo)
    events, by_phase = decode_events(piece, by_phase)
    if events is None and hi < len(chunk):
        piece, hi = cut_piece(chunk, lo, len(chunk))
        events, by_phase = decode_events(piece, by_phase)
    return events, hi, by_phase


class _Job:
    """One chunk of the read: decoded here (``result`` set at once) or by ``helper``."""

    __slots__ = ("chunk", "result", "helper", "slot")

    def __init__(self, chunk: Chunk):
        self.chunk = chunk
        self.result: Part | None = None
        self.helper: _Helper | None = None  # while a helper has it
        self.slot: int | None = None

    def done(self) -> bool:
        """Is the result here? (a helper's answers are taken in as they come)"""
        if self.helper is not None:
            self.helper.collect()
        return self.helper is None

    def take_over(self) -> None:
        """Decode the chunk here when the helper it was sent to has not started it (that
        helper then answers "taken" and moves on): the reader would only wait for it, one
        core idle (issue 19, 2024 x50: 0.5-0.7 s of waiting for the helper per read, most
        of it at the end of the file, when the helper still had up to two chunks to do;
        0.0-0.06 s with this)."""
        if self.helper.slots.claim(self.slot):
            self.result = build_local(self.helper.slots.view(self.slot, self.chunk.size))


class _Helper:
    """One forked decode process and the reader's end of its pipe.

    The reader talks to it from its own thread only: a job is a slot number and length
    (the chunk is in that shared slot), the answer is the pickled :class:`Part` written back
    into the same slot (or, when it does not fit, sent through the pipe), so what crosses
    the pipe is a few bytes each way. A ``ProcessPoolExecutor`` moved jobs and answers in a
    thread of the reader that needs the GIL, which the reader holds while it decodes its
    own chunk (msgspec holds it for a whole chunk): the helper sat idle for 0.05-0.1 s
    between chunks, a quarter of its time (issue 19, x50: per-chunk timestamps)."""

    def __init__(self, context, slots: Slots):
        self.slots = slots
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_helper_main, args=(theirs, slots, os.getpid()),
                                       daemon=True, name="stepscope-decode")
        self.process.start()
        theirs.close()
        self.waiting: deque[_Job] = deque()  # sent, not answered yet (answers come in order)

    def busy(self) -> int:
        """Chunks sent and not answered yet."""
        self.collect()
        return len(self.waiting)

    def send(self, job: _Job) -> bool:
        """Give ``job`` to this helper; False when its chunk fits no free slot."""
        slot = self.slots.put(job.chunk)
        if slot is None:
            return False
        self.conn.send((slot, job.chunk.size))
        job.helper, job.slot = self, slot
        self.waiting.append(job)
        return True

    def collect(self) -> None:
        """Take in the answers that have come."""
        while self.waiting and self.conn.poll():
            self._receive()

    def wait_for(self, job: _Job) -> None:
        """Block until ``job`` (sent to this helper) is answered."""
        while job.helper is self:
            self._receive()

    def _receive(self) -> None:
        try:
            where, answer = self.conn.recv()
        except (EOFError, OSError):
            raise RuntimeError("a decode helper process ended while it decoded a chunk "
                               f"(exit code {self.process.exitcode})") from None
        job = self.waiting.popleft()
        if where == "slot":
            answer = pickle.loads(self.slots.view(job.slot, answer))
        self.slots.release(job.slot)
        job.helper = None
        if where == "error":
            raise answer
        if where != "taken":  # (else the reader decoded it: :meth:`_Job.take_over`)
            job.result = answer

    def stop(self) -> None:
        """Ask the process to end and wait for it (end it if it does not)."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.conn.close()


#: Answers go back through the job's slot (False: through the pipe; tests).
ANSWER_IN_SLOT = True


def _helper_main(conn, slots: Slots, reader_pid: int) -> None:
    """A helper process: decode the chunks the reader puts in ``slots`` until told to stop.
    It ends once the reader is gone (killed: it runs no cleanup)."""
    watch_parent(reader_pid)
    gc.disable()
    for slot, size in jobs(conn):
        if not slots.claim(slot):  # the reader took it over
            conn.send(("taken", None))
            continue
        try:
            part = build_local(slots.view(slot, size))
            blob = pickle.dumps(part, protocol=5) if ANSWER_IN_SLOT else b""
        except BaseException as e:  # noqa: BLE001 - re-raised in the reader
            conn.send(("error", e))
            continue
        if 0 < len(blob) <= slots.size:
            slots.write(slot, blob)
            conn.send(("slot", len(blob)))
        else:
            conn.send(("pipe", part))


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


class _Helpers:
    """The helper processes of one read and the shared buffers they take chunks from."""

    def __init__(self, count: int):
        context = mp.get_context("fork")  # forked now, before any thread of the read starts
        # the chunks helpers are given, one spare
        self.slots = Slots(HELPER_QUEUE * count + 1, context=context)
        self.helpers: list[_Helper] = []
        try:
            for _ in range(count):
                self.helpers.append(_Helper(context, self.slots))
        except BaseException:
            self.close()
            raise

    def least_busy(self) -> _Helper:
        return min(self.helpers, key=_Helper.busy)

    def close(self) -> None:
        for helper in self.helpers:
            helper.stop()
        self.slots.close()


@contextmanager
def _helper_pool(helpers: int):
    """``helpers`` forked processes (with :class:`~.shared.Slots` mapped before the fork),
    started before any thread of the read; None for none."""
    if helpers <= 0 or not hasattr(os, "fork"):
        yield None
        return
    pool = _Helpers(helpers)
    try:
        yield pool
    finally:
        pool.close()
