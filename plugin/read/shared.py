"""Shared buffers that hand a chunk of JSON to a helper process without copying it again.

Sending a 32 MB chunk through a pipe costs three copies (pickle, the pipe, unpickle) on top
of the one that joins its pieces: on two cores that was ~15 % of a big read's CPU (issue 19,
py-spy over both processes). :class:`Slots` are anonymous shared memory maps created *before*
the helper processes are forked, so both sides see the same pages: the reader writes a chunk
into a free slot (its one copy) and sends only the slot's number and length; the helper
decodes straight from the slot and writes its answer (the pickled columns) back into it. A
chunk bigger than a slot is decoded by the reader itself. The chunks the reader decodes
itself go through one reused :class:`Buffer` for the same reason (page faults of a fresh
buffer per chunk).
"""

from __future__ import annotations

import mmap
from typing import Any, Optional

from .decode import Chunk

#: Bytes per slot (virtual: only the pages a chunk touches become memory). A chunk is about
#: ``CHUNK_BYTES`` plus one inflated piece.
SLOT_BYTES = 96 << 20


class Slots:
    """``count`` shared buffers of ``size`` bytes; see the module doc. Used by one reader
    thread (:meth:`put`, :meth:`release`) and the helper a slot is given to (:meth:`view`
    and :meth:`write`, until it answers). With a multiprocessing ``context`` (given before
    the fork), the chunk in a slot is decoded by whichever of the two :meth:`claim` s it
    first."""

    def __init__(self, count: int, size: int | None = None, context: Any = None):
        self.size = size = size or SLOT_BYTES
        self.maps = [mmap.mmap(-1, size) for _ in range(count)]  # MAP_SHARED, anonymous
        self.free = list(range(count))
        #: per slot, taken by whichever process decodes the chunk in it (the helper it was
        #: sent to, or the reader when it would otherwise wait: :meth:`claim`)
        self.claims = [context.Lock() for _ in range(count)] if context is not None else None

    def put(self, chunk: Chunk) -> Optional[int]:
        """Copy ``chunk`` into a free slot; its number, or None (too big, or none free)."""
        if chunk.size > self.size or not self.free:
            return None
        slot = self.free.pop()
        _write(self.maps[slot], chunk)
        return slot

    def view(self, slot: int, size: int) -> memoryview:
        """The first ``size`` bytes of ``slot`` (the chunk, or the answer, written there)."""
        return memoryview(self.maps[slot])[:size]

    def write(self, slot: int, data: bytes) -> None:
        """Write ``data`` (at most :attr:`size` bytes) at the start of ``slot``."""
        self.maps[slot][: len(data)] = data

    def claim(self, slot: int) -> bool:
        """Take the chunk in ``slot`` to decode it; False when the other process has."""
        return self.claims is None or self.claims[slot].acquire(block=False)

    def release(self, slot: int) -> None:
        """``slot`` may be written again (its helper has answered)."""
        if self.claims is not None:
            self.claims[slot].release()
        self.free.append(slot)

    def close(self) -> None:
        """Unmap every slot (the reader is done; see :func:`_unmap`)."""
        for m in self.maps:
            _unmap(m)
        self.maps, self.free = [], []


class Buffer:
    """One reusable buffer for the chunks this process decodes itself: a fresh 32 MB
    ``bytes`` per chunk costs its page faults every time (py-spy at x200: ~8 % of the
    reader's CPU), a buffer written in place pays them once."""

    def __init__(self, size: int | None = None):
        self.map = mmap.mmap(-1, size or SLOT_BYTES, flags=mmap.MAP_PRIVATE)

    def holding(self, chunk: Chunk):
        """``chunk``'s bytes: a view of this buffer (valid until the next call), or the
        bytes themselves when the chunk is bigger than the buffer."""
        if chunk.size > len(self.map):
            return chunk.data()
        _write(self.map, chunk)
        return memoryview(self.map)[:chunk.size]

    def close(self) -> None:
        _unmap(self.map)


def _unmap(m: mmap.mmap) -> None:
    """Close ``m``; one still viewed somewhere (by the traceback of an error raised while a
    chunk was decoded from it, say) is unmapped when the view goes: its ``BufferError``
    would replace the error being raised."""
    try:
        m.close()
    except BufferError:
        pass


def _write(buf: mmap.mmap, chunk: Chunk) -> None:
    """Copy ``chunk``'s parts to the start of ``buf``."""
    at = 0
    for part in chunk.parts:
        buf[at: at + len(part)] = part
        at += len(part)
