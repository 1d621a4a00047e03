"""Trace file -> :class:`~stepscope.model.Trace` (SPEC §1.2-1.4).

The one entry point, :func:`read_trace`, streams the file's bytes (:mod:`.rawfile`), decodes
the event list in bounded chunks (:mod:`.decode`) and turns each chunk into numpy columns at
once (:mod:`.builder`), so no Python object per event outlives its chunk. A file the chunked
path cannot take (damage, odd layout) is decoded whole, with repairs and data-quality notes;
a file with nothing usable raises :class:`~stepscope.errors.TraceError` (HTTP 422).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from .builder import ColumnBuilder
from .decode import NeedWholeDocument, decode_document, iter_chunks
from .model import Note, Trace
from .rawfile import iter_bytes

Progress = Optional[Callable[[float], None]]


def read_trace(path: str, progress: Progress = None) -> Trace:
    """Read one trace file (``.json`` or ``.json.gz``) into the columnar model.

    ``progress(fraction)`` receives the share of the file's bytes read so far (0..1).
    Raises :class:`~stepscope.errors.TraceError` when nothing usable is in the file.
    """
    name = os.path.basename(path)
    notes: list[Note] = []
    builder = ColumnBuilder(path)
    try:
        top = None
        for chunk in iter_chunks(iter_bytes(path, notes, progress), name, notes):
            if isinstance(chunk, list):
                builder.add(chunk)
            else:
                top = chunk
        return builder.finish(top, notes)
    except NeedWholeDocument:
        pass
    notes = []
    buf = b"".join(iter_bytes(path, notes, None))
    top, events, more = decode_document(buf, name)
    del buf
    builder = ColumnBuilder(path)
    builder.add(events)
    del events
    return builder.finish(top, notes + more)
