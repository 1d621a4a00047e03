"""Decoded event structs -> numpy columns of :class:`~stepscope.model.Trace`, chunk by chunk.

:class:`ColumnBuilder` takes the events of a file in consecutive chunks (file order), turns
each chunk into columns at once (the structs can then be freed) and shares the interning
tables (strings, threads, shapes, stacks) across chunks. :meth:`ColumnBuilder.finish` joins
the chunks, applies ``baseTimeNanoseconds``, drops absurd or ill-typed events (with notes)
and moves the origin to the earliest start. Legacy ``cpu_to_cuda`` flows become correlation
ids shared by an op and its kernels (:func:`_link_legacy_flows`).
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, compress
from typing import Any, Union

import numpy as np

from ..errors import TraceError
from ..model import EVENT_COLUMNS, MEMORY_COLUMNS, Note, Trace
from ..taxonomy import DEVICE_KINDS, HOST_KINDS, STEP_KINDS, STEP_NAME, Kind, category_kind
from .columns import INT64_MAX, INT64_MIN, float_column, int_column, us_to_ns
from .decode import Args, Event, EventArgs, MemoryArgs, TraceObject, decode_any
from .metadata import checked_metadata, metadata_note

#: Events further than this from the median start are absurd (e.g. a `Record Window End`
#: decades away): ignored for the origin and extent (ns).
ABSURD_NS = 30 * 24 * 3600 * 10**9
_STREAM = re.compile(r"(\d+)\s*$")


@dataclass
class Part:
    """Columns of consecutive chunks built by one :class:`ColumnBuilder`, with its own
    interning tables (ids in the columns index them). Plain arrays and lists: it crosses
    process boundaries cheaply."""

    chunks: list[dict[str, np.ndarray]]
    ok: list[np.ndarray]
    strings: list
    threads: list
    shapes: list
    stacks: list
    comms: list
    memory: list[dict[str, np.ndarray]]
    phases: dict
    entries: int
    bad_values: dict
    non_events: int
    #: legacy ``cpu_to_cuda`` flow ends: columns ``is_end``, ``thread``, ``ts`` (ns), ``id``
    flows: list = field(default_factory=list)


class ColumnBuilder:
    """Accumulates columns for one trace file; see the module doc."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        self.strings: dict[str, int] = _interner()
        self.threads: dict[tuple, int] = _interner()
        self.shapes: dict[str, int] = {}
        self.stacks: dict[str, int] = {}
        self.comms: dict[tuple, int] = {}
        self._raw_shapes: dict[bytes, int] = {}
        self._kind_of: list[int] = []      # string id -> Kind of that string as a category
        self._is_step: list[bool] = []     # string id -> matches ProfilerStep#N
        self._not_text: list[bool] = []    # string id -> an ill-typed value, not a string
        self.chunks: list[dict[str, np.ndarray]] = []
        self.ok: list[np.ndarray] = []
        self.memory: list[dict[str, np.ndarray]] = []
        self.phases: Counter = Counter()
        self.entries = 0
        #: ill-typed values ignored, per field ("name", "grid", ...)
        self.bad_values: Counter = Counter()
        self.non_events = 0  # entries of the event list that are not objects
        self.flows: list[dict[str, np.ndarray]] = []

    # --- per chunk ---------------------------------------------------------------------

    def add(self, events: list[Event]) -> None:
        """Turn one chunk of decoded events into columns."""
        self.entries += len(events)
        try:
            phases = [e.ph for e in events]
        except AttributeError:  # entries that are not objects (a number, a list): counted
            kept = [e for e in events if isinstance(e, Event)]
            self.non_events += len(events) - len(kept)
            events = kept
            phases = [e.ph for e in events]
        try:
            counts = Counter(phases)
        except TypeError:  # an unhashable ph (list, object)
            phases = self._checked(phases, "ph", _TEXT)
            counts = Counter(phases)
        for ph in [p for p in counts if type(p) not in _TEXT]:  # few keys: cheap
            self.bad_values["ph"] += counts.pop(ph)
        self.phases.update(counts)
        # each pass below runs only when its phase is in the chunk (most chunks hold no
        # memory events, today's no legacy flows: issue 19, the cost per entry)
        if counts.get("i"):
            mem = [e for e in _of_phase(events, phases, "i", counts["i"]) if e.name == "[memory]"]
            if mem:
                self.memory.append(_memory_columns(mem, self._checked_args(mem), self.threads))
        xs = _of_phase(events, phases, "X", counts.get("X", 0))
        if xs:
            cols, ok = self._event_columns(xs)
            self.chunks.append(cols)
            self.ok.append(ok)
        if counts.get("s") or counts.get("f"):
            flows = [e for e in compress(events, map(_FLOW_END.get, phases))
                     if e.cat == "cpu_to_cuda" and type(e.pid) in _LANE and type(e.tid) in _LANE]
            if flows:
                self.flows.append(self._flow_columns(flows))

    def _flow_columns(self, flows: list[Event]) -> dict[str, np.ndarray]:
        """Ends of legacy ``cpu_to_cuda`` flows (``s`` on the op, ``f`` on the kernel)."""
        ts, ok = us_to_ns([e.ts for e in flows])
        ids = int_column([e.id for e in flows])
        ok &= ids >= 0
        thread = np.fromiter((self.threads[(e.pid, e.tid)] for e in flows), np.int64, len(flows))
        is_end = np.array([e.ph == "f" for e in flows], dtype=bool)
        return {"is_end": is_end[ok], "thread": thread[ok], "ts": ts[ok], "id": ids[ok]}

    def _checked(self, values: list, field: str, types: frozenset) -> list:
        """``values`` with those whose type is not in ``types`` replaced by None (counted in
        :attr:`bad_values` under ``field``). One C-speed pass when all are fine."""
        if _all_of_types(values, types):
            return values
        bad = [type(v) not in types for v in values]
        self.bad_values[field] += sum(bad)
        return [None if b else v for v, b in zip(values, bad)]

    def _checked_args(self, events: list[Event]) -> list:
        """The events' ``args``: an :class:`~.decode.Args`, or None (ill-typed: counted)."""
        return self._checked([e.args for e in events], "args", _ARGS)

    def _usable_threads(self, thread_ids: np.ndarray) -> np.ndarray:
        """Row mask: the row's pid and tid are known, ints (in int64 range) or strings; rows
        with an ill-typed or out-of-range pid or tid are counted in :attr:`bad_values`."""
        known = np.array([p is not None and t is not None for p, t in self.threads], dtype=bool)
        out = known[thread_ids]
        for k, which in enumerate(("pid", "tid")):
            big = np.array([_bad_lane(lane[k]) for lane in self.threads], dtype=bool)
            if big.any():
                rows = big[thread_ids]
                self.bad_values[which] += int(rows.sum())
                out &= ~rows
        return out

    def _ids(self, values: list, field: str = "") -> np.ndarray:
        """Intern strings (``None`` -> ``""``) and return their ids; new strings also get
        their kind-as-category and is-a-step-name flags. Ill-typed values (``field``: what
        they are) are interned too, flagged in ``_not_text`` (hashable ones: an int name),
        or replaced by None (unhashable ones: a list)."""
        try:
            ids = np.fromiter(map(self.strings.__getitem__, values), np.int32, len(values))
        except TypeError:
            values = self._checked(values, field, _TEXT)
            ids = np.fromiter(map(self.strings.__getitem__, values), np.int32, len(values))
        for s in list(self.strings)[len(self._kind_of):]:
            text = type(s) is str
            self._kind_of.append(category_kind(s) if text else Kind.OTHER)
            self._is_step.append(bool(STEP_NAME.match(s)) if text else False)
            self._not_text.append(not text and s is not None)
        return ids

    def _text_ok(self, ids: np.ndarray, field: str) -> np.ndarray:
        """Row mask: the interned value is a string or None; others are counted."""
        if not any(self._not_text):
            return np.ones(len(ids), dtype=bool)
        bad = np.array(self._not_text, dtype=bool)[ids]
        if bad.any():
            self.bad_values[field] += int(bad.sum())
        return ~bad

    def _event_columns(self, xs: list[Event]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        n = len(xs)
        cats = [e.cat for e in xs]
        name_ids = self._ids([e.name for e in xs], "name")
        cat_ids = self._ids(cats, "cat")
        ok = (name_ids != self.strings.get(None, -1)) & self._text_ok(name_ids, "name")
        self._text_ok(cat_ids, "cat")  # counted; kind OTHER
        pids = [e.pid for e in xs]
        tids = [e.tid for e in xs]
        try:
            thread_ids = np.fromiter(map(self.threads.__getitem__, zip(pids, tids)), np.int32, n)
        except TypeError:  # an unhashable pid or tid
            pids = self._checked(pids, "pid", _LANE)
            tids = self._checked(tids, "tid", _LANE)
            thread_ids = np.fromiter(map(self.threads.__getitem__, zip(pids, tids)), np.int32, n)
        ok &= self._usable_threads(thread_ids)
        start, ok_ts = us_to_ns([e.ts for e in xs])
        dur, ok_dur = us_to_ns([e.dur for e in xs])
        ok &= ok_ts & ok_dur & (dur >= 0)

        kind = np.array(self._kind_of, dtype=np.uint8)[cat_ids]
        if None in cats:
            _legacy_kinds(kind, cats, pids)
        is_step = np.array(self._is_step, dtype=bool)[name_ids]
        kind[is_step & np.isin(kind, STEP_KINDS)] = Kind.STEP

        args = self._checked_args(xs)
        cols = {
            "kind": kind, "cat": cat_ids, "name": name_ids,
            "thread": thread_ids, "start": start, "dur": dur,
            **_link_columns(args, kind, pids, tids),
            **_kernel_columns(args, kind, self.bad_values),
        }
        rows = np.flatnonzero(np.isin(kind, HOST_KINDS)).tolist()
        cols["shape"], cols["stack"], cols["comm"] = self._host_columns(
            n, rows, [args[i] for i in rows])
        return cols, ok

    def _host_columns(self, n: int, rows: list[int], host: list
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Input shapes (printed as torch prints them), call stacks and ``record_param_comms``
        args (SPEC §4.3) of the ``n`` events; ``host``: the args of the host events at
        ``rows``. A pass over them finds the events that have each; only those are looked at
        one by one (a trace recorded without shapes or stacks: none). Passes without a
        condition per event where they can (issue 19: 2021 x50, 12-25 % of the columns'
        time went here; the builder is about 6 % faster so)."""
        shape = np.full(n, -1, dtype=np.int32)
        stack = np.full(n, -1, dtype=np.int32)
        comm = np.full(n, -1, dtype=np.int32)
        missing = host.count(None)
        if missing == len(host):
            return shape, stack, comm
        if missing:  # events without args: as if their args were empty
            host = [_NO_ARGS if a is None else a for a in host]
        dims = [a.input_dims for a in host]
        if None in dims:  # older traces: "Input dims"
            dims = [a.input_dims_lc if d is None else d for a, d in zip(host, dims)]
        absent = dims.count(None)
        if absent < len(dims):
            at = rows
            if absent:
                at = [i for i, v in zip(rows, dims) if v is not None]
                dims = [v for v in dims if v is not None]
            raws = list(map(bytes, dims))
            sids = list(map(self._raw_shapes.get, raws))
            if None in sids:
                raw_ids, shapes = self._raw_shapes, self.shapes
                for j in [j for j, sid in enumerate(sids) if sid is None]:  # texts new here
                    raw = raws[j]
                    sid = raw_ids.get(raw)  # (new, but maybe met earlier in this chunk)
                    if sid is None:
                        sid = raw_ids[raw] = shapes.setdefault(_format_dims(raw), len(shapes))
                    sids[j] = sid
            shape[at] = sids
        texts = [a.call_stack for a in host]
        if texts.count(None) < len(texts):
            stacks = self.stacks
            for i, v in zip(rows, texts):
                if type(v) is str and v:
                    stack[i] = stacks.setdefault(v, len(stacks))
        names = [a.collective_name for a in host]
        counts = [a.in_nelems for a in host]
        if names.count(None) < len(names) or counts.count(None) < len(counts):
            for i, a in zip(rows, host):
                if a.collective_name is not None or a.in_nelems is not None:
                    pg = a.pg_name if a.pg_name is not None else a.pg_id
                    key = (_text(a.collective_name), _count(a.in_nelems), _count(a.out_nelems),
                           _text(a.dtype),
                           None if pg is None or isinstance(pg, (list, dict)) else str(pg))
                    comm[i] = self.comms.setdefault(key, len(self.comms))
        return shape, stack, comm

    # --- parts built elsewhere (another process) ---------------------------------------

    def export(self) -> Part:
        """What this builder holds, as a :class:`Part` another builder can :meth:`merge`."""
        return Part(self.chunks, self.ok, list(self.strings), list(self.threads),
                    list(self.shapes), list(self.stacks), list(self.comms), self.memory, dict(self.phases),
                    self.entries, dict(self.bad_values), self.non_events, self.flows)

    def merge(self, part: Part) -> None:
        """Append a part built by another builder, renumbering its interned ids."""
        names = np.array([self.strings[s] for s in part.strings] or [0], dtype=np.int32)
        self._ids([])  # record kinds and step flags of strings new to this builder
        threads = np.array([self.threads[t] for t in part.threads] or [0], dtype=np.int32)
        shapes = np.array([self.shapes.setdefault(s, len(self.shapes)) for s in part.shapes]
                          + [-1], dtype=np.int32)  # index -1 (absent) stays -1
        stacks = np.array([self.stacks.setdefault(s, len(self.stacks)) for s in part.stacks]
                          + [-1], dtype=np.int32)
        comms = np.array([self.comms.setdefault(c, len(self.comms)) for c in part.comms]
                         + [-1], dtype=np.int32)
        for cols in part.chunks:
            cols = dict(cols)
            cols["comm"] = comms[cols["comm"]]
            cols["name"], cols["cat"] = names[cols["name"]], names[cols["cat"]]
            cols["thread"] = threads[cols["thread"]]
            cols["shape"], cols["stack"] = shapes[cols["shape"]], stacks[cols["stack"]]
            self.chunks.append(cols)
        self.ok += part.ok
        lanes = np.append(threads, -1)  # index -1 (unknown lane) stays -1
        self.memory += [{**m, "thread": lanes[m["thread"]]} for m in part.memory]
        self.flows += [{**f, "thread": threads[f["thread"]].astype(np.int64)} for f in part.flows]
        self.phases.update(part.phases)
        self.entries += part.entries
        self.bad_values.update(part.bad_values)
        self.non_events += part.non_events

    # --- whole file ----------------------------------------------------------------------

    def finish(self, top: TraceObject, notes: list[Note]) -> Trace:
        """Join the chunks into a :class:`Trace` (origin = earliest kept start)."""
        name = self.name
        paired = self.phases.get("B", 0) + self.phases.get("E", 0)
        if not self.chunks and not self.memory:
            if self.entries and self.non_events == self.entries:
                raise TraceError("no events", f"none of the {self.entries:,} entries of "
                                 f"{name}'s event list is an event (a JSON object with "
                                 "\"ph\", \"name\", \"ts\"...). Is it a profiler trace?",
                                 file=name)
            if paired:
                raise TraceError("no events", f"{name} holds begin/end event pairs "
                                 f"(\"ph\": \"B\"/\"E\", {paired:,} events) but no complete "
                                 "events (\"ph\": \"X\"), which torch.profiler writes and "
                                 "Stepscope reads. Export the trace with torch.profiler "
                                 "(prof.export_chrome_trace).", file=name)
            raise TraceError("no events", f"{name} holds no duration events "
                             f"({self.entries:,} entries in all). Was the profiler stopped "
                             "before the first step?", file=name)
        if paired:
            notes.append(Note("warning", "begin_end_events",
                              f"{name}: ignored {paired:,} begin/end events (\"ph\": \"B\"/"
                              "\"E\"): Stepscope reads complete events (\"ph\": \"X\"), as "
                              "torch.profiler writes them."))
        cols = _concat(self.chunks, EVENT_COLUMNS)
        ok = np.concatenate(self.ok) if self.ok else np.zeros(0, dtype=bool)
        self.chunks, self.ok = [], []
        meta = checked_metadata(top.deviceProperties, top.distributedInfo, {
            k: getattr(top, k) for k in TraceObject.__struct_fields__
            if k not in ("traceEvents", "deviceProperties", "distributedInfo")
            and getattr(top, k) is not None})
        if meta.ignored:
            notes.append(metadata_note(name, meta.ignored))
        start, dur = cols["start"], cols["dur"]
        ill_typed = int((~ok).sum())
        if ok.any():  # absurd timestamps: far from the bulk of the trace
            # the lower median, an event's own start: when the events split in two even
            # groups far apart, the mean of the middle two lay between them, and every
            # event was "absurd"
            kept = start[ok]
            mid = int(np.partition(kept, (len(kept) - 1) // 2)[(len(kept) - 1) // 2])
            absurd = ok & ((np.abs(start - mid) > ABSURD_NS) | (dur > ABSURD_NS))
            if absurd.any():
                notes.append(Note("warning", "absurd_timestamps",
                                  f"{name}: ignored {int(absurd.sum()):,} events with "
                                  "timestamps more than 30 days away from the rest of the trace."))
                ok &= ~absurd
        notes += self._type_notes()
        if ill_typed:  # (the absurd ones have their note: counted once)
            notes.append(Note("warning", "dropped_events",
                              f"{name}: dropped {ill_typed:,} events with missing or "
                              "ill-typed name, pid/tid, ts or dur."))
        dropped = int((~ok).sum())
        if dropped:
            for k in cols:  # one column at a time (peak memory)
                cols[k] = cols[k][ok]
        if not len(cols["kind"]) and not self.memory:
            raise TraceError("no usable events", f"{name}: none of its {len(ok):,} duration "
                             "events has a valid name, pid/tid, ts and dur.", file=name)
        if self.flows:
            _link_legacy_flows(cols, self.flows)
            self.flows = []
        if any(n.code == "truncated" for n in notes):  # (a pass over every event: only then)
            steps = int((cols["kind"] == Kind.STEP).sum())
            notes = [_survivors(n, len(cols["kind"]), steps) if n.code == "truncated" else n
                     for n in notes]
        origin_rel = int(cols["start"].min()) if len(cols["kind"]) else 0
        memory = _concat(self.memory, MEMORY_COLUMNS)
        if len(cols["kind"]) and len(memory["ts"]):  # memory events before the first event:
            # the origin (their times would be negative; not for an absurd one)
            early = memory["ts"][(memory["ts"] < origin_rel) & (memory["ts"] >= origin_rel - ABSURD_NS)]
            if len(early):
                origin_rel = int(early.min())
        cols["start"] -= origin_rel
        memory["ts"] -= origin_rel
        return Trace(
            path=self.path, origin_ns=meta.base_ns + origin_rel, events=cols,
            strings=[s if type(s) is str else "" for s in self.strings],
            threads=[tuple(None if _bad_lane(v) else v for v in lane) for lane in self.threads],
            shapes=list(self.shapes), stacks=list(self.stacks), memory=memory,
            comms=list(self.comms),
            device_properties=meta.device_properties, distributed_info=meta.distributed_info,
            metadata=meta.other,
            notes=notes, phase_counts=dict(self.phases),
        )

    def _type_notes(self) -> list[Note]:
        """Notes counting the entries that are not events and the ill-typed values ignored."""
        out = []
        if self.non_events:
            out.append(Note("warning", "ill_typed_events",
                            f"{self.name}: ignored {self.non_events:,} entries of the event list "
                            "that are not events (not JSON objects)."))
        if self.bad_values:
            total = sum(self.bad_values.values())
            fields = ", ".join(f"{k}: {v:,}" for k, v in sorted(self.bad_values.items()))
            out.append(Note("warning", "ill_typed_values",
                            f"{self.name}: ignored {total:,} ill-typed or out-of-range values "
                            f"({fields}); an event whose name, pid/tid, ts or dur is unusable "
                            "is dropped."))
        return out


def _survivors(note: Note, events: int, steps: int) -> Note:
    """The truncation note, saying what survives (SPEC §1.4)."""
    kept = (f"{events:,} duration events survive, {steps:,} of them complete "
            f"ProfilerStep{'s' if steps != 1 else ''}." if steps else
            f"{events:,} duration events survive, no complete ProfilerStep among them.")
    return Note(note.level, note.code, f"{note.text} {kept}")


#: The args of an event that has none (every field None).
_NO_ARGS = Args()
_TEXT = frozenset({str, type(None)})
_LANE = frozenset({str, int, type(None)})
_ARGS = frozenset({Args, EventArgs, MemoryArgs, type(None)})
_INT = frozenset({int})
_LIST = frozenset({list})
#: phase -> is the end of a flow (``s`` or ``f``)
_FLOW_END = {"s": True, "f": True}


def _of_phase(events: list[Event], phases: list, ph: str, count: int) -> list[Event]:
    """The ``count`` events whose phase is ``ph`` (``phases``: the events' phases). A few
    are found by C-speed scans of ``phases`` (memory instants among other events)."""
    if count == len(events):
        return events
    if count * 16 < len(events):
        out, at = [], -1
        for _ in range(count):
            at = phases.index(ph, at + 1)
            out.append(events[at])
        return out
    return [e for e, p in zip(events, phases) if p == ph]


def _bad_lane(v: object) -> bool:
    """A pid/tid that is neither missing, text nor an int in int64 range."""
    return v is not None and type(v) is not str and not (
        type(v) is int and INT64_MIN <= v <= INT64_MAX)


def _all_of_types(values: Iterable, types: frozenset) -> bool:
    """Is the type of every value in ``types``? (one C-speed pass)"""
    return set(map(type, values)) <= types


def _concat(chunks: list[dict[str, np.ndarray]], spec: dict) -> dict[str, np.ndarray]:
    """The chunks' columns joined, one column at a time: each column's pieces are taken out
    of ``chunks`` (emptied) as it is joined, so the chunks and the whole are never both held
    (issue 19: peak memory)."""
    out = {}
    for k, (dtype, _) in spec.items():
        parts = [c.pop(k) for c in chunks]
        out[k] = (np.concatenate(parts) if parts else np.zeros(0)).astype(dtype, copy=False)
        del parts
    return out


def _link_legacy_flows(cols: dict[str, np.ndarray], flows: list[dict[str, np.ndarray]]) -> None:
    """Legacy exports link an op to its kernels only by ``cpu_to_cuda`` flows: the ``s`` end
    at the op's start on its thread, the ``f`` end at the kernel's start on its lane. Give
    each such op and its kernels one correlation id (the op's smallest flow id), so the
    analysis links them like a runtime call and its kernels (the op is its own launcher).
    Among ops starting together the innermost (shortest) is the launcher."""
    f = {k: np.concatenate([c[k] for c in flows]) for k in ("is_end", "thread", "ts", "id")}
    kind, thread, start = cols["kind"], cols["thread"].astype(np.int64), cols["start"]

    def rows_at(mask: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Row of kind ``mask`` starting at each flow end's (thread, ts), shortest first; -1."""
        rows = np.flatnonzero(mask)
        rows = rows[np.lexsort((cols["dur"][rows], start[rows], thread[rows]))]
        pair = [("t", np.int64), ("s", np.int64)]
        keys = np.empty(len(rows), dtype=pair)
        keys["t"], keys["s"] = thread[rows], start[rows]
        q = np.empty(len(ends), dtype=pair)
        q["t"], q["s"] = f["thread"][ends], f["ts"][ends]
        j = np.minimum(np.searchsorted(keys, q, side="left"), max(len(rows) - 1, 0))
        if not len(rows):
            return np.full(len(ends), -1, dtype=np.int64)
        return np.where(keys[j] == q, rows[j], -1)

    starts, ends = np.flatnonzero(~f["is_end"]), np.flatnonzero(f["is_end"])
    op_of = dict(zip(f["id"][starts].tolist(), rows_at(kind == Kind.HOST_OP, starts).tolist()))
    kernel_rows = rows_at(np.isin(kind, DEVICE_KINDS), ends)
    corr = cols["correlation"]
    for fid, k in zip(f["id"][ends].tolist(), kernel_rows.tolist()):
        o = op_of.get(fid, -1)
        if o < 0 or k < 0:
            continue
        if corr[o] < 0:
            corr[o] = fid
        corr[k] = corr[o]


#: The pid of the kernels in legacy ``torch.autograd.profiler`` exports (their tid is the
#: device index).
LEGACY_DEVICE_PID = "CUDA functions"


def _legacy_kinds(kind: np.ndarray, cats: list[str], pids: list) -> None:
    """Legacy ``torch.autograd.profiler`` exports carry no ``cat``: use the pid label."""
    for i, (c, p) in enumerate(zip(cats, pids)):
        if c is None and isinstance(p, str):
            if p == "CPU functions":
                kind[i] = Kind.HOST_OP
            elif p == LEGACY_DEVICE_PID:
                kind[i] = Kind.KERNEL


def _lane_int(v: Union[int, str, None]) -> int:
    """Device/stream number from an int or a label such as ``"stream 7"``; -1 if none."""
    if type(v) is int:
        return v if INT64_MIN <= v <= INT64_MAX else -1
    m = _STREAM.search(v) if isinstance(v, str) else None
    return int(m.group(1)) if m else -1


def _text(v: Any) -> str | None:
    """A string arg, else None."""
    return v if type(v) is str else None


def _count(v: Any) -> int:
    """A non-negative int arg (element count) within int64, else -1."""
    return v if type(v) is int and 0 <= v <= INT64_MAX else -1


def _link_columns(args: list, kind: np.ndarray, pids: list, tids: list) -> dict:
    corr = int_column([a.correlation if a is not None else None for a in args])
    ext = int_column([(a.external_id if a.external_id is not None else a.external_id_lc)
                      if a is not None else None for a in args])
    device = np.full(len(args), -1, dtype=np.int64)
    stream = np.full(len(args), -1, dtype=np.int64)
    rows = np.flatnonzero(np.isin(kind, DEVICE_KINDS)).tolist()
    sub = [args[i] for i in rows]
    if None not in sub:  # the usual case at C speed: device events with int lanes
        devices, streams = [a.device for a in sub], [a.stream for a in sub]
        ints, odd = rows, []
        if not (_all_of_types(devices, _INT) and _all_of_types(streams, _INT)):
            # a few without (2024: gpu_user_annotation): those one by one below
            usual = [type(d) is int and type(s) is int for d, s in zip(devices, streams)]
            odd = [i for i, u in zip(rows, usual) if not u]
            ints = list(compress(rows, usual))
            devices, streams = list(compress(devices, usual)), list(compress(streams, usual))
        try:
            device[ints], stream[ints] = devices, streams
            rows = odd
        except OverflowError:  # beyond int64: all one by one below
            device[ints], stream[ints] = -1, -1
    try:
        _fill_lanes(device, stream, rows, args, pids, tids, lambda v: True)
    except OverflowError:  # an args.device/stream beyond int64: use pid/tid instead
        _fill_lanes(device, stream, rows, args, pids, tids, lambda v: INT64_MIN <= v <= INT64_MAX)
    return {"correlation": corr, "external_id": ext, "device": device, "stream": stream}


def _fill_lanes(device: np.ndarray, stream: np.ndarray, rows: list[int], args: list,
                pids: list, tids: list, check) -> None:
    """Device and stream of device events: int ``args.device``/``args.stream`` that pass
    ``check``, else the number in pid/tid."""
    for i in rows:
        a = args[i]
        if pids[i] == LEGACY_DEVICE_PID:  # torch 1.x exports: the device is the tid, no stream
            device[i], stream[i] = _lane_int(tids[i]), -1
            continue
        d = a.device if a is not None and type(a.device) is int and check(a.device) \
            else _lane_int(pids[i])
        s = a.stream if a is not None and type(a.stream) is int and check(a.stream) \
            else _lane_int(tids[i])
        device[i], stream[i] = d, s


def _kernel_columns(args: list, kind: np.ndarray, bad: Counter) -> dict:
    """Launch geometry and occupancy of kernels; ill-typed ``grid``/``block`` counted in
    ``bad``."""
    n = len(args)
    blocks = np.full(n, -1, dtype=np.int64)
    tpb = np.full(n, -1, dtype=np.int64)
    bps = np.full(n, np.nan)
    occ = np.full(n, np.nan)
    rows = np.flatnonzero(kind == Kind.KERNEL)
    if len(rows):
        sub = [args[i] for i in rows]
        for col, field in ((blocks, "grid"), (tpb, "block")):
            dims = [getattr(a, field) if a is not None else None for a in sub]
            col[rows] = sizes = _products(dims)
            if (sizes < 0).any() and (unknown := sum(s < 0 and d is not None
                                                     for s, d in zip(sizes.tolist(), dims))):
                bad[field] += unknown

        bps[rows] = float_column([a.blocks_per_sm if a is not None else None for a in sub])
        occ[rows] = float_column([a.occupancy if a is not None else None for a in sub])
        # a percentage outside [0, 100] is not an occupancy (SPEC §2.7): unknown, counted
        out_of_range = (occ < 0) | (occ > 100)
        if out_of_range.any():
            bad["est. achieved occupancy %"] += int(out_of_range.sum())
            occ[out_of_range] = np.nan
    return {"blocks": blocks, "threads_per_block": tpb, "blocks_per_sm": bps, "occupancy": occ}


def _products(dims: list) -> np.ndarray:
    """:func:`_product` of each, at C speed when every one is three ints in ``[0, 2**20)``."""
    if _all_of_types(dims, _LIST) and set(map(len, dims)) <= {3}:
        flat = list(chain.from_iterable(dims))
        if _all_of_types(flat, _INT):
            try:
                xyz = np.array(flat, dtype=np.int64).reshape(len(dims), 3)
            except OverflowError:  # beyond int64
                xyz = None
            if xyz is not None and (not len(xyz) or (xyz.min() >= 0 and xyz.max() < 2**20)):
                return xyz.prod(axis=1)
    return np.array([_product(d) for d in dims], dtype=np.int64)


def _product(dims: object) -> int:
    """Grid/block size: ``[x, y, z]`` -> ``x*y*z``; -1 when unknown or nonsensical (not three
    ints, negative, or absurdly large)."""
    if dims is None:
        return -1
    try:
        x, y, z = dims
    except (TypeError, ValueError):
        return -1
    if type(x) is int is type(y) is type(z) and x >= 0 and y >= 0 and z >= 0:
        out = x * y * z
        if out < 2**62:
            return out
    return -1


def _interner() -> dict:
    """A dict that gives each new key the next id: ``d[key]`` interns ``key``."""
    d: defaultdict = defaultdict()
    d.default_factory = d.__len__
    return d


def _format_dims(raw: bytes) -> str:
    """``b'[[32,3,224,224], []]'`` -> ``"[[32, 3, 224, 224], []]"`` (torch's printing)."""
    try:
        return str(decode_any(raw))
    except Exception:  # noqa: BLE001 - damaged dims text is shown as it is
        return raw.decode("utf-8", "replace")


def _memory_columns(mem: list[Event], args: list, threads: dict) -> dict:
    """Columns of ``[memory]`` instants (``args``: theirs, checked; ``threads``: the
    builder's lane interner); ts in ns relative to the file's time base."""
    ts, ok = us_to_ns([e.ts for e in mem])
    lane = np.array([threads[(e.pid, e.tid)] if type(e.pid) in _LANE and type(e.tid) in _LANE
                     and not _bad_lane(e.pid) and not _bad_lane(e.tid) else -1 for e in mem],
                    dtype=np.int32)

    def col(field: str, missing: int = -1) -> np.ndarray:
        return int_column([getattr(a, field) if a is not None else None for a in args], missing)

    out = {
        "ts": ts, "device_type": col("device_type"), "device_id": col("device_id"),
        "bytes": col("bytes", 0), "total_allocated": col("total_allocated"),
        "total_reserved": col("total_reserved"), "addr": col("addr"), "thread": lane,
    }
    return {k: v[ok] for k, v in out.items()}
