"""Trace file -> :class:`~stepscope.model.Trace` (SPEC §1.2-1.4).

Decodes only the fields the model needs, straight into typed msgspec structs (unknown keys
are skipped in C), then turns them into numpy columns; the structs are dropped once the
columns exist. Floats are decoded as their text (``float_hook=str``) so timestamps stay
exact (see :mod:`stepscope.columns`). Damaged JSON is repaired by :mod:`stepscope.repair`;
a file with nothing usable raises :class:`~stepscope.errors.TraceError` (HTTP 422).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any, Callable, Optional, Union

import msgspec
import numpy as np

from . import repair
from .columns import float_column, int_column, us_to_ns
from .errors import TraceError
from .model import EVENT_COLUMNS, MEMORY_COLUMNS, Note, Trace
from .rawfile import read_bytes
from .taxonomy import DEVICE_KINDS, HOST_KINDS, STEP_KINDS, STEP_NAME, Kind, category_kind

F = msgspec.field
#: Events further than this from the median start are absurd (e.g. a `Record Window End`
#: decades away): ignored for the origin and extent (ns).
ABSURD_NS = 30 * 24 * 3600 * 10**9
_MAX_REPAIRS = 16
_POS = re.compile(r"\(byte (\d+)\)")


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys the model reads; all others are skipped unparsed."""

    correlation: Any = None
    external_id: Any = F(default=None, name="External id")
    external_id_lc: Any = F(default=None, name="external id")
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    blocks_per_sm: Any = F(default=None, name="blocks per SM")
    occupancy: Any = F(default=None, name="est. achieved occupancy %")
    input_dims: msgspec.Raw = F(default=msgspec.Raw(b""), name="Input Dims")
    input_dims_lc: msgspec.Raw = F(default=msgspec.Raw(b""), name="Input dims")
    call_stack: Any = F(default=None, name="Call stack")
    device_type: Any = F(default=None, name="Device Type")
    device_id: Any = F(default=None, name="Device Id")
    bytes: Any = F(default=None, name="Bytes")
    total_allocated: Any = F(default=None, name="Total Allocated")
    total_reserved: Any = F(default=None, name="Total Reserved")


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[Args] = None


class TraceObject(msgspec.Struct):
    """Top level of a Kineto trace object; only these keys are decoded."""

    traceEvents: Union[list[Event], msgspec.UnsetType] = msgspec.UNSET
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


TRACE_KEYS = ("schemaVersion", "traceEvents", "deviceProperties", "displayTimeUnit",
              "baseTimeNanoseconds", "distributedInfo", "traceName")
_OBJ = msgspec.json.Decoder(TraceObject, float_hook=str)
_LIST = msgspec.json.Decoder(list[Event], float_hook=str)
_ANY = msgspec.json.Decoder(float_hook=str)
_ONE = msgspec.json.Decoder(Event, float_hook=str)


def read_trace(path: str, progress: Optional[Callable[[float], None]] = None) -> Trace:
    """Read one trace file (``.json`` or ``.json.gz``) into the columnar model.

    ``progress(fraction)`` receives the share of the file's bytes read so far (0..1).
    Raises :class:`TraceError` when nothing usable is in the file.
    """
    name = os.path.basename(path)
    buf, notes = read_bytes(path, progress)
    buf, more = repair.strip_bom(buf, name)
    notes += more
    top, events, more = _decode(buf, name)
    notes += more
    del buf
    return _build(path, top, events, notes)


# --- decoding --------------------------------------------------------------------------------


def _decode(buf: bytes, name: str) -> tuple[TraceObject, list[Event], list[Note]]:
    """Strict decode, then one repair at a time until it decodes (or cannot be repaired)."""
    first = buf.lstrip()[:1]
    if not first:
        raise TraceError("empty file", f"{name} is empty. A trace is written when the profiler "
                         "finishes; re-run the job or remove the file.", file=name)
    if first not in (b"{", b"["):
        raise _not_json(buf, name, len(buf) - len(buf.lstrip()))
    is_object = first == b"{"
    decoder = _OBJ if is_object else _LIST
    notes: list[Note] = []
    for _ in range(_MAX_REPAIRS):
        try:
            decoded = decoder.decode(buf)
            break
        except msgspec.ValidationError:  # ill-typed container somewhere: per-event path
            decoded = _lenient(buf, is_object, name, notes)
            break
        except UnicodeDecodeError:
            buf, note = repair.fix_utf8(buf, name)
        except msgspec.DecodeError as e:
            msg = str(e)
            if "truncated" in msg:
                cut = repair.cut_truncated(buf, decoder.decode, name, is_object)
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
                raise _not_json(buf, name, byte, msg) from e
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


def _not_json(buf: bytes, name: str, byte: int, why: str = "") -> TraceError:
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
        blob = msgspec.json.encode(ev)
        try:
            kept.append(_ONE.decode(blob))
        except msgspec.ValidationError:
            ev.pop("args", None)
            bad_args += 1
            kept.append(_ONE.decode(msgspec.json.encode(ev)))
    if dropped or bad_args:
        notes.append(Note("warning", "ill_typed_events",
                          f"{name}: dropped {dropped:,} entries that are not events; ignored "
                          f"the args of {bad_args:,} events whose args were malformed."))
    if is_object:
        top.traceEvents = kept if events is not msgspec.UNSET else msgspec.UNSET
        return top
    return kept


# --- columns -----------------------------------------------------------------------------------


def _build(path: str, top: TraceObject, events: list[Event], notes: list[Note]) -> Trace:
    name = os.path.basename(path)
    phases = [e.ph for e in events]
    phase_counts = Counter(p if isinstance(p, str) else "?" for p in phases)
    xs = [e for e, p in zip(events, phases) if p == "X"]
    mem = [e for e, p in zip(events, phases) if p == "i" and e.name == "[memory]"]
    if not xs and not mem:
        raise TraceError("no events", f"{name} holds no duration events "
                         f"({len(events):,} entries in all). Was the profiler stopped before "
                         "the first step?", file=name)
    base_ns = top.baseTimeNanoseconds if type(top.baseTimeNanoseconds) is int else 0

    strings: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    ok = np.ones(len(xs), dtype=bool)
    names = [e.name for e in xs]
    ok &= np.fromiter((type(s) is str for s in names), bool, len(xs))
    name_ids = [strings.setdefault(s, len(strings)) if type(s) is str else 0 for s in names]
    cats = [e.cat if type(e.cat) is str else "" for e in xs]
    cat_ids = np.array([strings.setdefault(c, len(strings)) for c in cats], dtype=np.int32)
    pids = [e.pid for e in xs]
    tids = [e.tid for e in xs]
    hashable = np.fromiter((type(p) in (int, str) and type(t) in (int, str)
                            for p, t in zip(pids, tids)), bool, len(xs))
    ok &= hashable
    thread_ids = [threads.setdefault((p, t), len(threads)) if h else 0
                  for p, t, h in zip(pids, tids, hashable)]
    start, ok_ts = us_to_ns([e.ts for e in xs])
    dur, ok_dur = us_to_ns([e.dur for e in xs])
    ok &= ok_ts & ok_dur & (dur >= 0)
    start += base_ns

    table = list(strings)
    kind_of_string = np.array([category_kind(s) for s in table] or [0], dtype=np.uint8)
    kind = kind_of_string[cat_ids]
    _legacy_kinds(kind, cats, pids)
    is_step_name = np.array([bool(STEP_NAME.match(s)) for s in table] or [False])
    name_arr = np.array(name_ids, dtype=np.int32)
    kind[is_step_name[name_arr] & np.isin(kind, STEP_KINDS)] = Kind.STEP

    args = [e.args for e in xs]
    cols = {
        "kind": kind, "cat": cat_ids, "name": name_arr,
        "thread": np.array(thread_ids, dtype=np.int32), "start": start, "dur": dur,
        **_link_columns(args, kind, pids, tids),
        **_kernel_columns(args, kind),
    }
    shapes: dict[str, int] = {}
    stacks: dict[str, int] = {}
    cols["shape"], cols["stack"] = _host_columns(args, kind, shapes, stacks)

    # absurd timestamps: far from the bulk of the trace (ignored for origin and extent)
    if ok.any():
        mid = int(np.median(start[ok]))
        absurd = ok & ((np.abs(start - mid) > ABSURD_NS) | (dur > ABSURD_NS))
        if absurd.any():
            notes.append(Note("warning", "absurd_timestamps",
                              f"{name}: ignored {int(absurd.sum()):,} events with timestamps "
                              "more than 30 days away from the rest of the trace."))
            ok &= ~absurd
    dropped = int((~ok).sum())
    if dropped:
        notes.append(Note("warning", "dropped_events",
                          f"{name}: dropped {dropped:,} events with missing or ill-typed "
                          "name, pid/tid, ts or dur."))
    cols = {k: np.ascontiguousarray(v[ok], dtype=EVENT_COLUMNS[k][0]) for k, v in cols.items()}
    if not len(cols["kind"]) and not mem:
        raise TraceError("no usable events", f"{name}: none of its {len(xs):,} duration events "
                         "has a valid name, pid/tid, ts and dur.", file=name)
    origin = int(cols["start"].min()) if len(cols["kind"]) else 0
    cols["start"] -= origin
    memory = _memory_columns(mem, base_ns + 0, origin)
    return Trace(
        path=path, origin_ns=origin, events=cols, strings=table, threads=list(threads),
        shapes=list(shapes), stacks=list(stacks), memory=memory,
        device_properties=[d for d in top.deviceProperties or [] if isinstance(d, dict)]
        if isinstance(top.deviceProperties, list) else [],
        distributed_info=top.distributedInfo if isinstance(top.distributedInfo, dict) else {},
        metadata={k: getattr(top, k) for k in TraceObject.__struct_fields__
                  if k not in ("traceEvents", "deviceProperties", "distributedInfo")
                  and getattr(top, k) is not None},
        notes=notes, phase_counts=dict(phase_counts),
    )


def _legacy_kinds(kind: np.ndarray, cats: list[str], pids: list) -> None:
    """Legacy ``torch.autograd.profiler`` exports carry no ``cat``: use the pid label."""
    for i, (c, p) in enumerate(zip(cats, pids)):
        if not c and isinstance(p, str):
            if p == "CPU functions":
                kind[i] = Kind.HOST_OP
            elif p == "CUDA functions":
                kind[i] = Kind.KERNEL


_STREAM = re.compile(r"(\d+)\s*$")


def _lane_int(v: Union[int, str, None]) -> int:
    """Device/stream number from an int or a label such as ``"stream 7"``; -1 if none."""
    if type(v) is int:
        return v
    m = _STREAM.search(v) if isinstance(v, str) else None
    return int(m.group(1)) if m else -1


def _link_columns(args: list, kind: np.ndarray, pids: list, tids: list) -> dict:
    corr = int_column([a.correlation if a is not None else None for a in args])
    ext = int_column([(a.external_id if a.external_id is not None else a.external_id_lc)
                      if a is not None else None for a in args])
    device = np.full(len(args), -1, dtype=np.int64)
    stream = np.full(len(args), -1, dtype=np.int64)
    for i in np.flatnonzero(np.isin(kind, DEVICE_KINDS)):
        a = args[i]
        d = a.device if a is not None and type(a.device) is int else _lane_int(pids[i])
        s = a.stream if a is not None and type(a.stream) is int else _lane_int(tids[i])
        device[i], stream[i] = d, s
    return {"correlation": corr, "external_id": ext, "device": device, "stream": stream}


def _kernel_columns(args: list, kind: np.ndarray) -> dict:
    n = len(args)
    blocks = np.full(n, -1, dtype=np.int64)
    tpb = np.full(n, -1, dtype=np.int64)
    bps = np.full(n, np.nan)
    occ = np.full(n, np.nan)
    rows = np.flatnonzero(kind == Kind.KERNEL)
    sub = [args[i] for i in rows]
    blocks[rows] = [_product(a.grid) if a is not None else -1 for a in sub]
    tpb[rows] = [_product(a.block) if a is not None else -1 for a in sub]
    bps[rows] = float_column([a.blocks_per_sm if a is not None else None for a in sub])
    occ[rows] = float_column([a.occupancy if a is not None else None for a in sub])
    return {"blocks": blocks, "threads_per_block": tpb, "blocks_per_sm": bps, "occupancy": occ}


def _product(dims: Any) -> int:
    if not isinstance(dims, list) or not dims or not all(type(d) is int and d >= 0 for d in dims):
        return -1
    out = 1
    for d in dims:
        out *= d
    return out if out < 2**62 else -1


_dims_cache: dict[bytes, str] = {}


def _host_columns(args: list, kind: np.ndarray, shapes: dict, stacks: dict):
    """Input shapes (printed as torch prints them) and call stacks of host events."""
    n = len(args)
    shape = np.full(n, -1, dtype=np.int32)
    stack = np.full(n, -1, dtype=np.int32)
    raw_ids: dict[bytes, int] = {}
    for i in np.flatnonzero(np.isin(kind, HOST_KINDS)):
        a = args[i]
        if a is None:
            continue
        raw = bytes(a.input_dims) or bytes(a.input_dims_lc)
        if raw:
            sid = raw_ids.get(raw)
            if sid is None:
                sid = raw_ids[raw] = shapes.setdefault(_format_dims(raw), len(shapes))
            shape[i] = sid
        if type(a.call_stack) is str and a.call_stack:
            stack[i] = stacks.setdefault(a.call_stack, len(stacks))
    return shape, stack


def _format_dims(raw: bytes) -> str:
    """``b'[[32,3,224,224], []]'`` -> ``"[[32, 3, 224, 224], []]"`` (torch's printing)."""
    try:
        return str(_ANY.decode(raw))
    except (msgspec.DecodeError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


def _memory_columns(mem: list[Event], base_ns: int, origin: int) -> dict:
    args = [e.args for e in mem]
    ts, ok = us_to_ns([e.ts for e in mem])
    keep = ok

    def col(field: str) -> np.ndarray:
        return int_column([getattr(a, field) if a is not None else None for a in args])

    out = {
        "ts": ts + base_ns - origin,
        "device_type": col("device_type"), "device_id": col("device_id"),
        "bytes": col("bytes"), "total_allocated": col("total_allocated"),
        "total_reserved": col("total_reserved"),
    }
    return {k: np.ascontiguousarray(v[keep], dtype=MEMORY_COLUMNS[k][0]) for k, v in out.items()}
