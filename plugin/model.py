"""The normalized, columnar trace model every analysis reads.

A :class:`Trace` is one trace file (one worker span) after reading. Duration events
(``ph: "X"``) are stored as parallel numpy columns in **file order** (row ``i`` is the
``i``-th kept duration event of the file; the row index is the event id used by the API).
Why columns: analyses are vectorised interval arithmetic over millions of events, and one
Python object per event would cost ~10x the memory.

Units: every time is an **integer nanosecond** (``int64``) relative to ``origin_ns``,
the earliest start of any kept duration event (absolute epoch ns = ``origin_ns + start``).
Timestamps are decoded exactly from their decimal text (SPEC §1.3), never through a float.
Missing integers are ``-1``; missing floats are ``nan``.

Strings are interned: ``name`` and ``cat`` index :attr:`Trace.strings`; ``thread`` indexes
:attr:`Trace.threads` (the raw ``(pid, tid)`` pair, ints or strings as in the file);
``shape`` indexes :attr:`Trace.shapes` (input dims printed as torch prints them) and
``stack`` indexes :attr:`Trace.stacks` (``;``-separated python call stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .taxonomy import Kind

#: Event columns: name -> (dtype, meaning). The reader fills exactly these.
EVENT_COLUMNS: dict[str, tuple[type, str]] = {
    "kind": (np.uint8, "taxonomy.Kind of the event"),
    "cat": (np.int32, "raw category, index into strings"),
    "name": (np.int32, "event name, index into strings"),
    "thread": (np.int32, "(pid, tid) lane, index into threads"),
    "start": (np.int64, "start, ns relative to origin_ns"),
    "dur": (np.int64, "duration, ns (>= 0)"),
    "correlation": (np.int64, "args.correlation: links a runtime call to its device work; -1"),
    "external_id": (np.int64, "args['External id'|'external id']: links host op -> runtime; -1"),
    "device": (np.int32, "device id of device events (args.device, else int pid); -1"),
    "stream": (np.int64, "stream of device events (args.stream, else int tid); -1"),
    "blocks": (np.int64, "kernel grid size = product of args.grid; -1"),
    "threads_per_block": (np.int64, "product of args.block; -1"),
    "blocks_per_sm": (np.float64, "args['blocks per SM']; nan"),
    "occupancy": (np.float64, "args['est. achieved occupancy %'] in percent; nan"),
    "shape": (np.int32, "input dims, index into shapes; -1 when absent"),
    "stack": (np.int32, "call stack, index into stacks; -1 when absent"),
    "comm": (np.int32, "record_param_comms args, index into comms; -1 when absent"),
}

#: Memory instant events (``[memory]``), columns of equal length, in file order.
MEMORY_COLUMNS: dict[str, tuple[type, str]] = {
    "ts": (np.int64, "time, ns relative to origin_ns"),
    "device_type": (np.int32, "args['Device Type'] (0 CPU, 1 CUDA, ...); -1"),
    "device_id": (np.int32, "args['Device Id']; -1"),
    "bytes": (np.int64, "args.Bytes: > 0 alloc, < 0 free; 0 when missing"),
    "total_allocated": (np.int64, "args['Total Allocated'] after the event, bytes; -1"),
    "total_reserved": (np.int64, "args['Total Reserved'] after the event, bytes; -1"),
    "addr": (np.int64, "args.Addr: the block's address (pairs an alloc with its free); -1"),
    "thread": (np.int32, "(pid, tid) lane of the allocating thread, index into threads; -1"),
}


@dataclass
class Note:
    """A data-quality note shown to the user (SPEC §1.4, notes endpoint)."""

    level: str  # "info" | "warning"
    code: str   # stable machine-readable id, e.g. "truncated", "dropped_events"
    text: str   # plain words, says what was repaired and what survives

    def to_json(self) -> dict:
        return {"level": self.level, "code": self.code, "text": self.text}


@dataclass
class Trace:
    """One read trace file. Columns are documented in :data:`EVENT_COLUMNS`."""

    path: str
    origin_ns: int
    events: dict[str, np.ndarray]
    strings: list[str]
    threads: list[tuple[int | str, int | str]]
    shapes: list[str]
    stacks: list[str]
    memory: dict[str, np.ndarray]
    #: top-level ``deviceProperties`` list (dicts as in the file, less the fields of the wrong
    #: type and the ints beyond int64: :mod:`stepscope.read.metadata`), possibly empty
    device_properties: list[dict] = field(default_factory=list)
    #: top-level ``distributedInfo`` (rank, world_size, backend, ...; checked likewise),
    #: possibly empty
    distributed_info: dict = field(default_factory=dict)
    #: other top-level scalars (schemaVersion, with_stack, profile_memory, traceName, ...)
    metadata: dict = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    #: how many events of each ``ph`` the file held, including those not kept
    phase_counts: dict[str, int] = field(default_factory=dict)
    #: ``(collective name, in msg nelems, out msg nelems, dtype, process group)`` of
    #: ``record_param_comms`` events (None / -1 where absent), indexed by the ``comm`` column
    comms: list[tuple] = field(default_factory=list)

    def __getstate__(self) -> dict:
        """The fields (what :mod:`~stepscope.store.packing` caches): without the analyses'
        memos (``_string_hits`` of :func:`~stepscope.analysis.breakdown.string_hits`)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __len__(self) -> int:
        return len(self.events["kind"])

    def __getattr__(self, column: str) -> np.ndarray:
        """``trace.start`` is ``trace.events["start"]``."""
        events = self.__dict__.get("events")
        if events is not None and column in events:
            return events[column]
        raise AttributeError(column)

    def mask(self, *kinds: Kind) -> np.ndarray:
        """Boolean row mask of events whose kind is one of ``kinds``."""
        hit = np.zeros(256, dtype=bool)  # per uint8 kind (a lookup: twice np.isin's speed)
        hit[np.array(kinds, dtype=np.uint8)] = True
        return hit[self.events["kind"]]

    def end(self) -> np.ndarray:
        """End times in ns (start + dur)."""
        return self.events["start"] + self.events["dur"]

    def name_of(self, row: int) -> str:
        return self.strings[int(self.events["name"][row])]

    def kind_counts(self) -> dict[str, int]:
        """Events per kind name, e.g. ``{"KERNEL": 9564, ...}`` (kinds with 0 left out)."""
        counts = np.bincount(self.events["kind"], minlength=len(Kind))
        return {k.name: int(counts[k]) for k in Kind if counts[k]}

    def check(self) -> None:
        """Assert the model's invariants (tests call this)."""
        n = len(self)
        for col, (dtype, _) in EVENT_COLUMNS.items():
            arr = self.events[col]
            assert arr.dtype == dtype and arr.shape == (n,), col
        assert (self.events["dur"] >= 0).all(), "negative duration"
        if n:
            assert self.events["start"].min() == 0, "origin is the earliest start"
        for col, lim in (("name", len(self.strings)), ("cat", len(self.strings)),
                         ("thread", len(self.threads))):
            assert n == 0 or (0 <= self.events[col].min() and self.events[col].max() < lim), col
        for col, table in (("shape", self.shapes), ("stack", self.stacks), ("comm", self.comms)):
            assert n == 0 or self.events[col].max() < len(table), col
        m = len(self.memory["ts"])
        for col, (dtype, _) in MEMORY_COLUMNS.items():
            assert self.memory[col].dtype == dtype and self.memory[col].shape == (m,), col
