"""JSON bytes -> msgspec event structs, in bounded chunks, repairing damage (SPEC §1.3-1.4).

Only the keys the model needs are decoded (unknown keys are skipped in C), into one struct
per phase (:func:`_phase_structs`: an ``X`` event's args have the fields of duration events
only), or the loose :class:`Event` when an entry fits none. Floats are decoded as their text
(``float_hook=str``) so timestamps stay exact (see :mod:`stepscope.read.columns`); in pieces
whose timestamps have fractions, ``ts`` and ``dur`` stay JSON text (:class:`TextTimes`).

Big files are never decoded in one piece: :class:`Split` cuts the ``traceEvents`` array at
event boundaries (``}`` ``,`` ``{`` between two top-level events) into chunks that decode
as JSON lists on their own (:func:`decode_events`, possibly in another process), so memory
stays bounded by the chunk size. A cut that lands inside an event makes its chunk fail to
decode; it is then joined with the next one, so a misleading ``},{`` inside ``args`` cannot
corrupt the result. Whatever the fast path cannot handle is decoded
as a whole document by :func:`decode_document`, which applies :mod:`stepscope.read.repair`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Optional, Union

import msgspec

from ..errors import TraceError
from ..model import Note
from . import repair

F = msgspec.field
_MAX_REPAIRS = 16
_POS = re.compile(r"\(byte (\d+)\)")
CHUNK_BYTES = 32 << 20  # cut the event list in chunks of about this size
#: A chunk is decoded a piece of about this many bytes at a time (:func:`cut_piece`).
PIECE_BYTES = 1 << 20
#: A rest of the event list longer than this at the end of the file is cut once more.
TAIL_CUT_BYTES = 1 << 20
#: ``}`` ``,`` ``{`` with JSON's whitespace between (not ``\s``: a form feed there is not JSON,
#: and a cut drops what it cuts at)
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_PREFIX_LIMIT = 64 << 20  # metadata before traceEvents larger than this: decode whole
#: More bytes than this without an event boundary (``},{``) is one entry that long: refused
#: with a 422 (a multi-GB single line or name must not be gathered in memory).
MAX_EVENT_BYTES = 64 << 20


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys the model reads; all others are skipped unparsed."""

    correlation: Any = None
    external_id: Any = F(default=None, name="External id")
    external_id_lc: Any = F(default=None, name="external id")
    device: Any = None
    stream: Any = None
    grid: Any = None  # [x, y, z] ints; checked by the builder
    block: Any = None
    blocks_per_sm: Any = F(default=None, name="blocks per SM")
    occupancy: Any = F(default=None, name="est. achieved occupancy %")
    # the dims' JSON text, printed once per distinct text (None when absent)
    input_dims: msgspec.Raw = F(default=None, name="Input Dims")
    input_dims_lc: msgspec.Raw = F(default=None, name="Input dims")
    call_stack: Any = F(default=None, name="Call stack")
    device_type: Any = F(default=None, name="Device Type")
    device_id: Any = F(default=None, name="Device Id")
    bytes: Any = F(default=None, name="Bytes")
    total_allocated: Any = F(default=None, name="Total Allocated")
    total_reserved: Any = F(default=None, name="Total Reserved")
    # record_param_comms (SPEC §4.3)
    collective_name: Any = F(default=None, name="Collective name")
    in_nelems: Any = F(default=None, name="In msg nelems")
    out_nelems: Any = F(default=None, name="Out msg nelems")
    dtype: Any = None
    pg_name: Any = F(default=None, name="Process Group Name")
    pg_id: Any = None
    addr: Any = F(default=None, name="Addr")


#: Any JSON value but an object (msgspec unions take one object type: here Args or Event).
NotAnObject = Union[str, int, float, bool, None, list]


class Event(msgspec.Struct, gc=False):
    """One trace event. Fields are decoded loosely (any JSON value) so that one ill-typed
    value never fails its chunk: the builder checks the types, ignores the bad values and
    counts them (issue 12). ``args`` that is not an object decodes as that value."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None  # int, or decimal text (float_hook=str)
    dur: Any = None
    args: Union[Args, NotAnObject] = None
    id: Any = None  # flow id (legacy ``cpu_to_cuda`` flows link an op to its kernels)


class TextTimes(Event, gc=False):
    """An :class:`Event` whose ``ts`` and ``dur`` are kept as their JSON text, unparsed
    (:class:`msgspec.Raw`; None when absent): for pieces whose timestamps have fractions
    (2024 formats), which :func:`~.columns.us_to_ns` parses from the text in one vectorised
    pass. Decoding them as text through ``float_hook=str`` called Python twice per event
    (issue 19, 2024 x50: decode 15 % faster so)."""

    ts: msgspec.Raw = None
    dur: msgspec.Raw = None


# -- per-phase structs: the fast path -----------------------------------------------------------
#: The :class:`Args` keys duration events (``X``) and memory instants (``i``) use.
X_ARGS = ("correlation", "external_id", "external_id_lc", "device", "stream", "grid", "block",
          "blocks_per_sm", "occupancy", "input_dims", "input_dims_lc", "call_stack",
          "collective_name", "in_nelems", "out_nelems", "dtype", "pg_name", "pg_id")
MEMORY_ARGS = ("device_type", "device_id", "bytes", "total_allocated", "total_reserved", "addr")


def _args_struct(name: str, keys: tuple[str, ...]) -> type:
    """An :class:`Args` with only the fields ``keys`` (same names, types and JSON keys)."""
    fields = {f.name: f for f in msgspec.structs.fields(Args)}
    return msgspec.defstruct(name, [(k, fields[k].type, F(default=None, name=fields[k].encode_name))
                                    for k in keys], gc=False, module=__name__)


EventArgs = _args_struct("EventArgs", X_ARGS)
MemoryArgs = _args_struct("MemoryArgs", MEMORY_ARGS)
#: Every phase of the Chrome trace format; a piece with another (or none) is decoded with
#: the loose :class:`Event` instead.
PHASES = "XiIsftMCBEbenPONDRVvc()"


def _phase_structs(times: Any) -> Any:
    """A tagged union of one struct per phase (``ph``, a class attribute): ``X`` events
    decode ``args`` as :class:`EventArgs`, ``i`` as :class:`MemoryArgs`, flow ends keep
    ``id``, the others skip their args unparsed. ``times``: the type of ``ts`` and ``dur``.

    msgspec looks each key of an object up among the struct's fields one by one: every key
    the struct lacks ("Input type", "Trace name", "queued"...) costs a pass over all its
    fields. :class:`Args` has 25 fields for every kind of event; with the 18 an ``X`` event
    can use (and none for the others), decode + build of 60 MB of events (``build_local``,
    median of 16 alternations in one process; issue 19) took 0.691 -> 0.653 s on the 2021
    format (-5.5 %) and 0.817 -> 0.792 s on the 2024 one (-3 %)."""

    fields = {"cat": Any, "name": Any, "pid": Any, "tid": Any, "ts": times, "dur": times}
    base = type("PhaseEvent", (msgspec.Struct,), {"__annotations__": fields, "__module__": __name__,
                                                  **dict.fromkeys(fields)},
                gc=False, tag_field="ph")
    out = []
    for ph in PHASES:
        ns: dict[str, Any] = {"ph": ph, "__annotations__": {"ph": ClassVar[str]},
                              "__module__": __name__}
        if ph == "X":
            ns["__annotations__"]["args"] = Union[EventArgs, NotAnObject]
            ns["args"] = None
        elif ph == "i":
            ns["__annotations__"]["args"] = Union[MemoryArgs, NotAnObject]
            ns["args"] = None
        elif ph in "sf":
            ns["__annotations__"]["id"] = Any
            ns["id"] = None
        out.append(type(f"Event_{ph}", (base,), ns, tag=ph))
    return Union[tuple(out)]


#: An entry of ``traceEvents``: an event, or any other JSON value (ignored and counted).
Entry = Union[Event, NotAnObject]
#: The same, for pieces with fractional timestamps.
TextTimesEntry = Union[TextTimes, NotAnObject]
#: The start of UTF-16 text: a byte order mark, or ASCII ``{``/``[`` with a zero byte.
_UTF16 = re.compile(rb"\xff\xfe|\xfe\xff|[{\[ \r\n\t]\x00|\x00[{\[ \r\n\t]")
#: A ``ts`` with a fraction (``"ts": 1712195495519689.047``): the piece is decoded as
#: :data:`TextTimesEntry`.
_FRACTION_TS = re.compile(rb'"ts"\s*:\s*-?\d+\.')
#: How far into a piece :data:`_FRACTION_TS` is looked for (bytes).
_SNIFF_BYTES = 4096


class TraceObject(msgspec.Struct):
    """Top level of a Kineto trace object; only these keys are decoded."""

    traceEvents: Union[list[Entry], msgspec.UnsetType] = msgspec.UNSET
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None
    with_stack: Any = None
    with_modules: Any = None
    with_flops: Any = None
    record_shapes: Any = None
    profile_memory: Any = None
    trace_id: Any = None


_OBJ = msgspec.json.Decoder(TraceObject, float_hook=str)
_LIST = msgspec.json.Decoder(list[Entry], float_hook=str)
_LIST_TEXT_TIMES = msgspec.json.Decoder(list[TextTimesEntry], float_hook=str)
_BY_PHASE = msgspec.json.Decoder(list[_phase_structs(Any)], float_hook=str)
_BY_PHASE_TEXT_TIMES = msgspec.json.Decoder(list[_phase_structs(msgspec.Raw)], float_hook=str)
_ANY = msgspec.json.Decoder(float_hook=str)
_ONE = msgspec.json.Decoder(Event, float_hook=str)


def decode_any(raw: bytes) -> Any:
    """Decode a small JSON value untyped (floats as text)."""
    return _ANY.decode(raw)


# --- chunked fast path -------------------------------------------------------------------------


class NeedWholeDocument(Exception):
    """The chunked path cannot handle this file; decode it whole (with repairs)."""


class Split:
    """The event list of a file cut into JSON arrays of whole events (unvalidated cuts).

    Iterating yields each chunk (a :class:`Chunk`, ``[{...},...,{...}]``); afterwards ``head`` holds the
    top-level keys before ``traceEvents`` and ``tail`` the bytes from the last cut to the end
    of the file (decode it with :func:`decode_tail`). A cut is made at ``}`` ``,`` ``{``,
    which is almost always a boundary between two events; when it is not (inside ``args``,
    or inside a string), the chunk fails to decode and the consumer joins it with the next
    one (:func:`join_chunks`). Raises :class:`NeedWholeDocument` for files this cannot take.
    """

    def __init__(self, pieces: Iterable[bytes], name: str = "",
                 notes: Optional[list[Note]] = None):
        self.pieces = pieces
        self.name = name  # the file's name, for errors
        self.notes = notes if notes is not None else []  # data-quality notes (BOM, tail)
        self.head = TraceObject()
        self.tail = b""
        self.tail_offset = 0  # byte offset of ``tail`` in the file's JSON text
        self.read = 0  # JSON bytes taken from ``pieces`` so far
        self.is_object = True

    def __iter__(self) -> Iterator[Chunk]:
        it = _counted(iter(self.pieces), self)
        carry = b""
        for piece in it:
            carry += piece
            if carry.lstrip():
                break
        carry, bom = repair.strip_bom(carry, self.name)
        self.notes += bom
        stripped = carry.lstrip()
        if not stripped or stripped[:1] not in (b"{", b"["):
            raise NeedWholeDocument
        self.is_object = stripped[:1] == b"{"
        if self.is_object:
            while not (m := _EVENTS_KEY.search(carry)):
                piece = next(it, None)
                if piece is None or len(carry) > _PREFIX_LIMIT:
                    raise NeedWholeDocument
                carry += piece
            try:
                self.head = _OBJ.decode(carry[: m.end()] + b"]}")
            except (msgspec.DecodeError, UnicodeDecodeError):
                raise NeedWholeDocument from None
            carry = carry[m.end():]
        else:
            carry = stripped[1:]
        pending, size = [carry], len(carry)
        for piece in it:
            pending.append(piece)
            size += len(piece)
            if size < CHUNK_BYTES:
                continue
            chunk, carry = _cut(pending)
            pending, size = [carry], len(carry)
            if chunk is not None:
                yield chunk
            elif size > MAX_EVENT_BYTES:  # no event boundary at all: one giant event
                raise TraceError("event too large", f"{self.name}: one event (or an entry of "
                                 f"the event list) is longer than {MAX_EVENT_BYTES:,} bytes, "
                                 "which no profiler writes (a runaway name or args?). Re-export "
                                 "the trace.", file=self.name or None)
        if size > TAIL_CUT_BYTES:  # its events too as a chunk (maybe decoded elsewhere), so
            # that the tail decoded at the end holds just the last event and the closing keys
            chunk, carry = _cut(pending)
            pending = [carry]
            if chunk is not None:
                yield chunk
        self.tail = b"".join(pending)
        self.tail_offset = self.read - len(self.tail)


def _counted(pieces: Iterator[bytes], split: Split) -> Iterator[bytes]:
    """``pieces``, adding their sizes up in ``split.read``."""
    split.read = 0
    for piece in pieces:
        split.read += len(piece)
        yield piece


class Chunk:
    """A JSON array of whole events, ``[{...},...,{...}]``, held as consecutive buffers
    (views of the inflated pieces) so that it is copied once: into ``bytes``
    (:meth:`data`), or into a shared buffer for a helper process (:meth:`parts`)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list):
        self.parts = parts
        self.size = sum(map(len, parts))

    def data(self) -> bytes:
        """The chunk's bytes (one copy)."""
        return b"".join(self.parts)


#: The last event boundary of a chunk is looked for in its last this many bytes first.
_BOUNDARY_WINDOW = 1 << 18


def _cut(pending: list[bytes]) -> tuple[Optional[Chunk], bytes]:
    """Cut ``pending`` (consecutive pieces) after the last ``}`` that is followed by ``,``
    and ``{``: ``(chunk [events], rest starting at "{")``, or ``(None, everything)``. The
    chunk is made of views of the pieces (no copy; the rest, smaller than a piece, is
    copied)."""
    total = sum(map(len, pending))
    window = max(0, total - _BOUNDARY_WINDOW)
    found = deque(_BOUNDARY.finditer(b"".join(_views(pending, window, total))), maxlen=1)
    if not found:
        window = 0
        found = deque(_BOUNDARY.finditer(b"".join(pending)), maxlen=1)
    if not found:
        return None, b"".join(pending)
    start, end = window + found[0].start(), window + found[0].end()
    parts = [b"[", *_views(pending, 0, start + 1), b"]"]
    return Chunk(parts), b"".join(_views(pending, end - 1, total))


def _views(pieces: list[bytes], lo: int, hi: int) -> list[memoryview]:
    """Views of the bytes ``[lo, hi)`` of the pieces taken end to end."""
    out, at = [], 0
    for piece in pieces:
        n = len(piece)
        if at + n > lo and at < hi:
            out.append(memoryview(piece)[max(lo - at, 0): min(hi - at, n)])
        at += n
    return out


def cut_piece(chunk, lo: int, past: int = 0) -> tuple[Any, int]:
    """The events of ``chunk`` (a :class:`Split` chunk: bytes or any buffer) from ``lo`` (0,
    or the ``{`` of an event) to the first event boundary :data:`PIECE_BYTES` or more
    after ``lo`` and after ``past``, as a JSON array (``[{...},...]``: for
    :func:`decode_events`), and where the next piece starts (its ``{``; ``len(chunk)`` when
    this piece reaches the chunk's end). Like the chunk's own cut, the boundary may turn out
    to be inside an event: the piece then fails to decode (cut it again ``past`` that).

    Example, with ``PIECE_BYTES`` 1: ``cut_piece(b'[{"a":1}, {"b":2}, {"c":3}]', 0)`` is
    ``(b'[{"a":1}]', 10)``, and ``cut_piece(b'[{"a":1}, {"b":2}, {"c":3}]', 10, 19)`` is
    ``(b'[{"b":2}, {"c":3}]', 27)`` (no boundary after byte 19: the rest)."""
    view = memoryview(chunk)
    after = max(lo + PIECE_BYTES, past)
    found = _BOUNDARY.search(view, after) if after < len(view) else None
    if found is None:
        return (view[lo:] if lo == 0 else b"".join((b"[", view[lo:]))), len(view)
    piece = view[lo:found.start() + 1]
    return b"".join((b"[", piece, b"]") if lo else (piece, b"]")), found.end() - 1


def decode_events(chunk, by_phase: bool = True) -> tuple[Optional[list[Event]], bool]:
    """``(events, by_phase)``: the events of a chunk from :class:`Split` (None when its cut
    was not a boundary) and whether they are structs per phase. Where the chunk's first
    timestamps have fractions, ``ts`` and ``dur`` are JSON text (:class:`TextTimes`).

    The events are structs per phase (:func:`_phase_structs`) when ``by_phase`` and every
    entry fits them; else (an unknown or missing phase, an entry that is no object) the
    loose :class:`Event`. Both give the builder the same values."""
    text = _FRACTION_TS.search(memoryview(chunk)[:_SNIFF_BYTES]) is not None
    if by_phase:
        try:
            return (_BY_PHASE_TEXT_TIMES if text else _BY_PHASE).decode(chunk), True
        except msgspec.ValidationError:
            pass
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None, True
    try:
        return (_LIST_TEXT_TIMES if text else _LIST).decode(chunk), False
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None, False


def join_chunks(a: bytes, b: bytes) -> bytes:
    """Two consecutive chunks as one: ``[x]`` + ``[y]`` -> ``[x,y]``."""
    return a[:-1] + b"," + b[1:]


def decode_tail(split: Split, tail: bytes) -> tuple[list[Event], TraceObject]:
    """The last events and the top-level keys (those before ``traceEvents`` from
    ``split.head``, those after it from the tail). ``tail`` is ``split.tail``, possibly
    preceded by chunks that did not decode on their own (``split.tail_offset`` then
    overstates where it starts, which only shifts the byte offsets a note quotes).

    A truncated tail (a job killed while writing) keeps its complete events, with a note,
    so a big cut-off file is repaired without decoding it whole.
    """
    opening = b'{"traceEvents": [' if split.is_object else b"["
    decode = _OBJ.decode if split.is_object else (
        lambda b: TraceObject(traceEvents=_LIST.decode(b)))
    try:
        end = decode(opening + tail)
    except msgspec.DecodeError as e:
        if "truncated" not in str(e):
            raise NeedWholeDocument from None
        cut = repair.cut_truncated(opening + tail, decode, split.name, split.is_object,
                                   offset=split.tail_offset - len(opening))
        if cut is None:
            raise NeedWholeDocument from None
        end, note = cut
        split.notes.append(note)
    except UnicodeDecodeError:
        raise NeedWholeDocument from None
    top = split.head
    for field in TraceObject.__struct_fields__:
        if field != "traceEvents" and getattr(top, field) is None:
            setattr(top, field, getattr(end, field))
    return end.traceEvents, top


# --- whole document, with repairs ---------------------------------------------------------------


def decode_document(buf: bytes, name: str) -> tuple[TraceObject, list[Event], list[Note]]:
    """Strict decode, then one repair at a time until it decodes (or cannot be repaired)."""
    notes: list[Note] = []
    buf, more = repair.strip_bom(buf, name)
    notes += more
    first = buf.lstrip()[:1]
    if not first:
        raise TraceError("empty file", f"{name} is empty. A trace is written when the profiler "
                         "finishes; re-run the job or remove the file.", file=name)
    if first not in (b"{", b"["):
        raise not_json(buf, name, len(buf) - len(buf.lstrip()))
    is_object = first == b"{"
    decode = (_OBJ if is_object else _LIST).decode
    for _ in range(_MAX_REPAIRS):
        try:
            decoded = decode(buf)
            break
        except msgspec.ValidationError:  # 'traceEvents' not a list (events decode loosely):
            # per-event path, which says so (typed decoding stops at the first ill-typed
            # value: syntax damage after it is found, and repaired, by the untyped decode)
            def decode(b: bytes) -> Any:
                return _lenient(b, is_object, name, notes)
            continue
        except UnicodeDecodeError:
            buf, note = repair.fix_utf8(buf, name)
        except msgspec.DecodeError as e:
            msg = str(e)
            if "truncated" in msg:
                cut = repair.cut_truncated(buf, decode, name, is_object)
                if cut is None:
                    raise TraceError("truncated before the first complete event",
                                     f"{name} ends at byte {len(buf):,} before any event was "
                                     "complete. Re-run the profiler.", file=name,
                                     position=repair.position(buf, len(buf))) from e
                decoded, note = cut
                notes.append(note)
                break
            m = _POS.search(msg)
            byte = int(m.group(1)) if m else 0
            fix = repair.fix_at(buf, byte, name)
            if fix is None:
                raise not_json(buf, name, byte, msg) from e
            buf, note = fix
        notes.append(note)
    else:
        raise TraceError("too damaged to repair", f"{name} needed more than {_MAX_REPAIRS} "
                         "repairs. Re-export the trace.", file=name)
    if is_object:
        if decoded.traceEvents is msgspec.UNSET:
            raise TraceError("not a trace", f"{name} is JSON but has no 'traceEvents' list. "
                             "Point Stepscope at torch.profiler output "
                             "(tensorboard_trace_handler or export_chrome_trace).", file=name)
        return decoded, decoded.traceEvents, notes
    return TraceObject(), decoded, notes


def not_json(buf: bytes, name: str, byte: int, why: str = "") -> TraceError:
    if _UTF16.match(buf[:4]):  # PowerShell's ">" writes UTF-16
        return TraceError("not UTF-8", f"{name} is UTF-16 text (as PowerShell's > writes "
                          "it); JSON traces are UTF-8. Save it as UTF-8 (Out-File -Encoding "
                          "utf8), or copy the file the profiler wrote.", file=name)
    snippet = buf[byte: byte + 40].decode("utf-8", "replace")
    return TraceError("not JSON", f"{name} is not a JSON trace (at byte {byte:,}: "
                      f"{snippet!r}{'; ' + why if why else ''}). Is it a profiler trace?",
                      file=name, position=repair.position(buf, byte))


def _lenient(buf: bytes, is_object: bool, name: str, notes: list[Note]):
    """Decode untyped, then keep each event that converts; count the dropped ones."""
    raw = _ANY.decode(buf)
    if is_object:
        if not isinstance(raw, dict):
            raise TraceError("not a trace", f"{name}: top level is not an object.", file=name)
        events = raw.pop("traceEvents", msgspec.UNSET)
        top = msgspec.convert({k: v for k, v in raw.items() if k in TraceObject.__struct_fields__},
                              TraceObject)
        if events is not msgspec.UNSET and not isinstance(events, list):
            raise TraceError("not a trace", f"{name}: 'traceEvents' is a "
                             f"{type(events).__name__}, not a list of events.", file=name)
    else:
        events, top = raw, None
    kept, bad_args, dropped = [], 0, 0
    for ev in events or []:
        if not isinstance(ev, dict):
            dropped += 1
            continue
        try:
            kept.append(_ONE.decode(msgspec.json.encode(ev)))
            continue
        except msgspec.ValidationError:
            pass
        try:
            args = ev.pop("args", None)
            kept.append(_ONE.decode(msgspec.json.encode(ev)))
            bad_args += args is not None
        except msgspec.ValidationError:
            dropped += 1
    if dropped or bad_args:
        notes.append(Note("warning", "ill_typed_events",
                          f"{name}: dropped {dropped:,} entries that are not well-formed events; ignored "
                          f"the args of {bad_args:,} events whose args were malformed."))
    if is_object:
        top.traceEvents = kept if events is not msgspec.UNSET else msgspec.UNSET
        return top
    return kept
