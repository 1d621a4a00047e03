"""A :class:`~stepscope.views.ViewSet` read back from the disk cache.

Its payloads are plain JSON and load at once; its timeline (all of the entry's numpy
arrays: hundreds of MB for a big trace) loads only when a ``trace/*`` route first asks,
memory-mapped, and only a few timelines stay loaded at a time (:class:`TimelineSlots`,
least recently used first out). So a server over many traces keeps its memory and open
files bounded (each memory map holds a file descriptor).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .cache import Entry
from .errors import StepscopeError
from .packing import unpack

log = logging.getLogger(__name__)

#: Timelines kept loaded at once, per server.
LOADED_TIMELINES = 4


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
    """Stands for the ``Timeline`` of a cache entry: loads it on first use.

    ``reload()`` returns a fresh entry when this one is gone or corrupt (evicted from the
    cache by another server, say): it re-runs the analysis in a worker process.
    """

    def __init__(self, entry: Entry, state: Any, slots: TimelineSlots,
                 reload: Callable[[], Entry]):
        self.entry = entry
        self.state = state
        self.slots = slots
        self.reload = reload
        self._timeline: Any = None

    def get(self) -> Any:
        with self.slots.lock:
            if self._timeline is None:
                self._timeline = self._load()
            self.slots.use(self)
            return self._timeline

    def _load(self) -> Any:
        try:
            return unpack(self.state, self.entry.arrays())
        except (OSError, ValueError, KeyError) as e:
            log.warning("cached timeline in %s is unusable (%s); analysing again",
                        self.entry.folder, e)
        try:
            self.entry = self.reload()
            self.state = self.entry.meta["state"]["d"]["timeline"]
            return unpack(self.state, self.entry.arrays())
        except (OSError, ValueError, KeyError) as e:
            raise StepscopeError("timeline unavailable", "The analysed timeline of this trace "
                                 "is no longer in the cache and could not be rebuilt; reload "
                                 "the page in a moment.", status=503) from e

    def unload(self) -> None:
        """Drop the timeline and its memory maps (they close once no request uses them)."""
        self._timeline = None
        self.entry.drop_arrays()

    def query(self, *args, **kwargs) -> dict:
        return self.get().query(*args, **kwargs)

    def event(self, event_id: int) -> dict:
        return self.get().event(event_id)


def load_views(entry: Entry, slots: TimelineSlots, reload: Callable[[], Entry]) -> Any:
    """The ViewSet stored in ``entry``, with a :class:`LazyTimeline` for its timeline."""
    state = entry.meta["state"]
    fields = dict(state["d"])
    timeline = fields.pop("timeline")
    views = unpack({**state, "d": fields}, {})  # payloads only: no arrays needed
    views.timeline = LazyTimeline(entry, timeline, slots, reload)
    return views
