"""Details of one event for the timeline's detail panel (``trace/event``, issue 6).

Links are the analysis's (:mod:`stepscope.analysis.links`, SPEC §1.3, never flow events): a
device activity and the runtime call that launched it share ``correlation``; a runtime call
belongs to the host op whose ``External id`` equals its own. A host event
"launched" the device activities of every runtime call nested inside it on its thread, so an
outer op such as ``aten::conv2d`` shows the kernels of the ``aten::cudnn_convolution`` below it.

Example: kernel 9 (correlation 42) -> ``runtime`` 4 (``cudaLaunchKernel``, correlation 42,
External id 7) -> ``op`` 2 (``aten::add``, External id 7); ``event(2)["launched"]`` lists 9.

The model keeps only the args it reads (not the file's raw args), so ``args`` holds those.
"""

from __future__ import annotations

import math

import numpy as np

from ..analysis.links import Links
from ..errors import NotFound
from ..model import Trace
from ..taxonomy import DEVICE_ACTIVITY_KINDS, HOST_KINDS, Kind
from .lanes import Layout

#: at most this many launched activities are listed (a whole step launches thousands)
MAX_LAUNCHED = 2000


class EventIndex:
    """Link tables built once; :meth:`details` answers one event."""

    def __init__(self, trace: Trace, layout: Layout, links: Links):
        self.trace = trace
        self.layout = layout
        self.links = links
        acts = links.activity_rows[links.launcher[links.activity_rows] >= 0]
        launcher = links.launcher[acts]
        order = np.argsort(launcher, kind="stable")
        #: device activities sorted by the runtime call that launched them
        self.act_launcher, self.act_rows = launcher[order], acts[order]
        # all runtime calls, by (thread, start), to find those nested in a host event
        rt = links.runtime_rows
        order = np.lexsort((trace.start[rt], trace.thread[rt]))
        self.rt_rows = rt[order]
        self.rt_thread, self.rt_start = trace.thread[self.rt_rows], trace.start[self.rt_rows]

    # --- small views -------------------------------------------------------------------------

    def _brief(self, i: int) -> dict:
        t, lay = self.trace, self.layout
        return {"id": i, "name": t.name_of(i), "kind": Kind(int(t.kind[i])).name.lower(),
                "lane": lay.lanes[int(lay.lane[i])].id, "depth": int(lay.row[i]),
                "start": int(t.start[i]) / 1000, "dur": int(t.dur[i]) / 1000}

    def launched_by_runtime(self, r: int) -> np.ndarray:
        lo = np.searchsorted(self.act_launcher, r, side="left")
        hi = np.searchsorted(self.act_launcher, r, side="right")
        return self.act_rows[lo:hi]

    def nested_runtime(self, i: int) -> np.ndarray:
        """Runtime calls on ``i``'s thread lying inside ``i`` (start and end)."""
        t = self.trace
        s, e = int(t.start[i]), int(t.start[i] + t.dur[i])
        a = np.searchsorted(self.rt_thread, t.thread[i], side="left")
        b = np.searchsorted(self.rt_thread, t.thread[i], side="right")
        starts = self.rt_start[a:b]
        rows = self.rt_rows[a + np.searchsorted(starts, s, side="left"):
                            a + np.searchsorted(starts, e, side="right")]
        return rows[t.start[rows] + t.dur[rows] <= e]

    # --- the answer ----------------------------------------------------------------------------

    def details(self, event_id: int) -> dict:
        t = self.trace
        try:
            i = int(event_id)
        except (TypeError, ValueError):
            raise NotFound("unknown event", f"Event id {event_id!r} is not a number.") from None
        if not 0 <= i < len(t):
            raise NotFound("unknown event", f"No event {i} in this trace (ids are 0.."
                           f"{len(t) - 1}). Reload the timeline.")
        kind = Kind(int(t.kind[i]))
        out = self._brief(i)
        vis_end = int(self.layout.vis_end[i])
        out.update({
            "category": t.strings[int(t.cat[i])],
            "end": (int(t.start[i]) + int(t.dur[i])) / 1000,
            "thread": list(t.threads[int(t.thread[i])]),
            "correlation": _opt(t.correlation[i]),
            "external_id": _opt(t.external_id[i]),
            "input_shape": t.shapes[int(t.shape[i])] if t.shape[i] >= 0 else None,
            "call_stack": [f for f in t.stacks[int(t.stack[i])].split(";") if f]
            if t.stack[i] >= 0 else [],
            "args": self._args(i),
            "runtime": None, "op": None, "launched": [], "launched_count": 0,
        })
        if vis_end != int(t.start[i] + t.dur[i]):
            out["clipped_end"] = vis_end / 1000  # drawn clipped: partial overlap (SPEC §2.4)
        runtimes: np.ndarray = np.zeros(0, dtype=np.int64)
        launcher, owner = self.links.launcher, self.links.owner
        if kind in DEVICE_ACTIVITY_KINDS:
            r = int(launcher[i])
            if r >= 0:
                out["runtime"] = self._brief(r)
                op = int(owner[r])
                out["op"] = self._brief(op) if op >= 0 else None
        elif kind == Kind.RUNTIME:
            op = int(owner[i])
            out["op"] = self._brief(op) if op >= 0 else None
            runtimes = np.array([i], dtype=np.int64)
        elif kind in HOST_KINDS:
            runtimes = self.nested_runtime(i)
        if len(runtimes):
            launched = [self.launched_by_runtime(int(r)) for r in runtimes]
            sizes = [len(a) for a in launched]
            acts = np.concatenate(launched)
            via = np.repeat(runtimes, sizes)
            out["launched_count"] = int(len(acts))
            out["launched"] = [dict(self._brief(a), runtime=r) for a, r in
                               zip(acts[:MAX_LAUNCHED].tolist(), via[:MAX_LAUNCHED].tolist())]
        return out

    def _args(self, i: int) -> dict:
        t = self.trace
        args: dict = {}
        for key, col in (("device", "device"), ("stream", "stream"), ("correlation", "correlation"),
                         ("External id", "external_id"), ("grid blocks", "blocks"),
                         ("threads per block", "threads_per_block")):
            v = int(t.events[col][i])
            if v >= 0:
                args[key] = v
        for key, col in (("blocks per SM", "blocks_per_sm"),
                         ("est. achieved occupancy %", "occupancy")):
            v = float(t.events[col][i])
            if not math.isnan(v):
                args[key] = v
        if t.shape[i] >= 0:
            args["Input Dims"] = t.shapes[int(t.shape[i])]
        return args


def _opt(v) -> int | None:
    v = int(v)
    return v if v >= 0 else None
