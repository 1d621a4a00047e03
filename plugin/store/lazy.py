"""A :class:`~stepscope.views.ViewSet` read back from the disk cache, and the one served
ahead of it (:class:`FirstViews`: the Overview tab alone, while a worker builds the rest).

A trace has two cache entries: its view payloads (plain JSON, loaded at once) and its
timeline (all of the numpy arrays: hundreds of MB for a big trace), under
:func:`timeline_key`. The analysis worker stores the payloads first, so the overview is
served while it still builds the timeline; until then the ``trace/*`` routes answer 202
(:class:`~stepscope.errors.NotReady`: phase ``analyse``, fraction from 0.95 on).

The timeline loads only when a ``trace/*`` route first asks, memory-mapped, and only a few
timelines stay loaded at a time (:class:`TimelineSlots`, least recently used first out). So
a server over many traces keeps its memory and open files bounded (each memory map holds a
file descriptor). It loads in two parts: what a window draws, then its per-event tables when
an event or a search first needs them (``Timeline._UNPACK_LATER``), from files held open
meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from ..errors import Loading, NotReady, StepscopeError
from ..views import ViewSet
from .cache import Entry
from .packing import LaterError, unpack

log = logging.getLogger(__name__)

#: Timelines kept loaded at once, per server.
LOADED_TIMELINES = 4


def timeline_key(key: str) -> str:
    """Cache key of a trace's timeline entry, from the key of its payload entry."""
    return key + "-timeline"


class Building(Protocol):
    """A timeline a worker process is still building (see :class:`~stepscope.store.pool.Task`)."""

    def done(self) -> bool: ...
    def loading(self) -> Loading: ...
    def error(self) -> StepscopeError | None: ...  # waits for the worker to end


class TimelineSlots:
    """The loaded timelines, most recently used last; at most ``size`` of them."""

    def __init__(self, size: int = LOADED_TIMELINES):
        self.size = size
        self.lock = threading.Lock()
        self._loaded: OrderedDict[int, LazyTimeline] = OrderedDict()

    def use(self, lazy: LazyTimeline) -> None:
        """Mark ``lazy`` used (lock held); unload the least recently used beyond ``size``."""
        self._loaded[id(lazy)] = lazy
        self._loaded.move_to_end(id(lazy))
        while len(self._loaded) > self.size:
            _, old = self._loaded.popitem(last=False)
            old.unload()


class LazyTimeline:
    """Stands for the ``Timeline`` of a cached trace: loads it on first use.

    ``fetch()`` returns the timeline's cache entry (None when it is missing or corrupt);
    ``rebuild()`` starts analysing the trace again in the background (a timeline evicted
    by another server, say) and returns its :class:`Building`; meanwhile the routes answer
    202. ``building``: the worker still building it, if any; its error (the trace needs
    more memory than there is, say) stays this timeline's answer, except when the worker
    pool broke under it (maybe killed for another trace): then it is built once more.
    """

    def __init__(self, fetch: Callable[[], Entry | None], rebuild: Callable[[], Building],
                 slots: TimelineSlots, building: Building | None = None):
        self.fetch = fetch
        self.rebuild = rebuild
        self.slots = slots
        self.building = building
        self.entry: Entry | None = None
        self._timeline: Any = None
        self._error: StepscopeError | None = None
        self._rebuilt = False

    def get(self) -> Any:
        """The timeline; raises NotReady while it is built, or the error that stopped it."""
        with self.slots.lock:
            if self._timeline is None:
                self._timeline = self._load()
            self.slots.use(self)
            return self._timeline

    def _load(self) -> Any:
        if self.building is not None:
            if not self.building.done():
                raise NotReady(self.building.loading())
            error, self.building = self.building.error(), None
            if error is not None and not (getattr(error, "retry", False) and not self._rebuilt):
                self._error = error
        if self._error is not None:
            raise self._error.with_traceback(None)  # (a re-raise would grow its traceback)
        self.entry = self.fetch()
        if self.entry is not None:
            try:
                # its per-event tables are unpacked when first used (Timeline._UNPACK_LATER):
                # their files are held open meanwhile, in case the entry is evicted
                self.entry.hold_files()
                timeline = unpack(self.entry.meta["state"], self.entry)
                self._rebuilt = False  # evicted again later: may be rebuilt again
                return timeline
            except (OSError, ValueError, KeyError) as e:
                self._unusable(e)
        if self._rebuilt:  # analysed again, and still nothing in the cache
            raise StepscopeError("timeline unavailable", "The analysed timeline of this trace "
                                 "is not in the cache (is the cache folder full, or shared "
                                 "with a server that evicts it?). Reload the page, or use a "
                                 "bigger --cache-dir.", status=503)
        self._rebuilt = True
        self.building = self.rebuild()
        raise NotReady(self.building.loading())

    def _unusable(self, error: Exception) -> None:
        """The cached timeline cannot be read back (corrupt): remove it, so that analysing
        the trace again replaces it."""
        log.warning("cached timeline in %s is unusable (%s); analysing again",
                    self.entry.folder, error)
        self.entry.drop_arrays()
        shutil.rmtree(self.entry.folder, ignore_errors=True)

    def _answer(self, method: str, args: tuple, kwargs: dict, again: bool = False) -> Any:
        """``timeline.method(*args, **kwargs)``. When a part unpacked on first use cannot be
        read, the timeline is loaded once more; when it is corrupt, the entry is removed
        first, so the trace is analysed again (meanwhile: :class:`NotReady`). A second
        failure answers 503."""
        timeline = self.get()
        try:
            return getattr(timeline, method)(*args, **kwargs)
        except LaterError as e:
            if again:
                raise StepscopeError("timeline unavailable", "The cached timeline of this trace "
                                     f"cannot be read ({e}). Reload the page; if this persists, "
                                     "remove the cache folder.", status=503) from None
            with self.slots.lock:
                if self._timeline is timeline:
                    self._timeline = None
                    if e.corrupt:
                        self._unusable(e)
            return self._answer(method, args, kwargs, again=True)

    def wait(self) -> None:
        """Wait until the worker building the timeline (if any) has ended."""
        if self.building is not None:
            self.building.error()  # waits for the worker's answer

    def unload(self) -> None:
        """Drop the timeline and its cache entry: its memory maps and held files close once
        no request uses them (one may still unpack a part from the held files)."""
        self._timeline = None
        self.entry = None

    def query(self, *args, **kwargs) -> dict:
        return self._answer("query", args, kwargs)

    def event(self, event_id: int) -> dict:
        return self._answer("event", (event_id,), {})

    def search(self, *args, **kwargs) -> dict:
        return self._answer("search", args, kwargs)


#: JSON bytes of unpacked view payloads the server keeps at once (all traces together);
#: Python objects take several times that. Beyond it the least recently used go back to
#: their compressed form (:class:`PayloadSlots`).
LOADED_PAYLOAD_BYTES = 64 << 20
#: zlib level of the payloads kept compressed in the server (1: fast, ~5x smaller JSON).
PAYLOAD_ZLIB_LEVEL = 1
_ids = itertools.count()


#: How many traces' payloads :class:`PayloadSlots` keeps whatever their size: the last ones
#: asked for (a diff reads two).
IN_USE = 2


class PayloadSlots:
    """The unpacked view payloads most recently used, weighed by their JSON size; beyond
    ``max_bytes``, the least recently used are dropped (their owner keeps them compressed),
    except those of the :data:`IN_USE` traces asked for last (a diff reads two). So the
    payloads of a trace in use never push each other out: 100,000 operator names make an
    Operator payload of 62 MB of JSON, and each switch between the Operator and Kernel tabs
    unpacked it again (2.3-3.7 s), each ``diff/overview`` of two such traces both (9-11 s)."""

    def __init__(self, max_bytes: int = LOADED_PAYLOAD_BYTES):
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self._loaded: OrderedDict[tuple[int, str], tuple[Any, int]] = OrderedDict()
        self._in_use: list[int] = []  # serials of the traces asked for last, latest first
        self.bytes = 0

    def get(self, owner: CachedViews, view: str) -> Any:
        key = (owner.serial, view)
        with self.lock:
            self._in_use = [owner.serial, *(s for s in self._in_use if s != owner.serial)]
            del self._in_use[IN_USE:]
            hit = self._loaded.get(key)
            if hit is not None:
                self._loaded.move_to_end(key)
                return hit[0]
        payload, size = owner.unpack_payload(view)  # outside the lock: may take a while
        with self.lock:
            if key not in self._loaded:
                self._loaded[key] = (payload, size)
                self.bytes += size
            others = [k for k in self._loaded if k[0] not in self._in_use]  # oldest first
            for old in others:
                if self.bytes <= self.max_bytes:
                    break
                self.bytes -= self._loaded.pop(old)[1]
        return payload


class CachedViews(ViewSet):
    """A cached trace's views as the server holds them (issue 12: memory per name).

    Names, notes and run-level summaries are at hand; each view's payloads stay as
    compressed JSON and are unpacked on use, kept in a shared :class:`PayloadSlots` (an LRU
    by size), so a server over many big traces holds the hot payloads only. Routes answer
    exactly as :class:`~stepscope.views.ViewSet` does (it is one).
    """

    def __init__(self, entry: Entry, timeline: Any, notes: list[dict], slots: PayloadSlots):
        fields = entry.meta["state"]["d"]
        self.serial = next(_ids)
        self._slots = slots
        self._arrays = {n: entry.array(n) for n in entry.names()}  # payload arrays (if any)
        self._names = unpack(fields["_names"], {})
        self._notes = [*notes, *unpack(fields["_notes"], {})]
        self.summaries = unpack(fields.get("summaries", {}), self._arrays)
        self._packed = {}
        for view, state in fields["_payloads"].items():
            raw = orjson.dumps(state)
            self._packed[view] = (zlib.compress(raw, PAYLOAD_ZLIB_LEVEL), len(raw))
        self.timeline = timeline
        self.analysis = None

    def payload(self, view: str) -> Any:
        return self._slots.get(self, view)

    def unpack_payload(self, view: str) -> tuple[Any, int]:
        """``(payload, JSON size in bytes)`` of ``view``, from its compressed form."""
        blob, size = self._packed[view]
        return unpack(orjson.loads(zlib.decompress(blob)), self._arrays), size

    def packed_bytes(self) -> int:
        """What this trace's payloads take in the server while not in use (bytes)."""
        return sum(len(blob) for blob, _ in self._packed.values())


class FirstViews(ViewSet):
    """The views of a trace whose worker is still building them: the Overview tab's parts
    (:class:`~stepscope.views.FirstParts`, sent ahead of the others), with the server's
    ``notes`` before the trace's own. Routes of the other views and the timeline raise
    :class:`~stepscope.errors.NotReady` with ``loading()`` (how far the analysis is) until
    the complete views replace these."""

    def __init__(self, parts: Any, notes: list[dict], loading: Callable[[], Loading]):
        self._payloads = parts.payloads
        self._names = parts.names
        self._notes = [*notes, *parts.notes]
        self.summaries = parts.briefs  # enough for ``views`` (the run-level tabs shown)
        self.analysis = None
        self._loading = loading

    def payload(self, view: str) -> Any:
        if view not in self._payloads:
            raise NotReady(self._loading())
        return self._payloads[view]

    @property
    def timeline(self) -> Any:
        raise NotReady(self._loading())


def load_views(entry: Entry, timeline: LazyTimeline, notes: list[dict] = (),
               slots: PayloadSlots | None = None) -> CachedViews:
    """The views stored in the payload ``entry``, with ``timeline`` attached and ``notes``
    (the server's, e.g. an unwritable cache) before its own data-quality notes."""
    return CachedViews(entry, timeline, list(notes), slots or PayloadSlots())
