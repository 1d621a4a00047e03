"""Steps (iterations) and their device-aware re-timing (SPEC §2.1).

Host steps are the ``ProfilerStep#N`` events (host categories only), in time order; without
any, the whole trace is one step ``"0"``. GPU work is charged to the step that launched it:
each step is stretched to cover the device activities launched by runtime calls lying
entirely inside it, starting no earlier than where the previous step ended. Trailing steps
whose device work was not fully captured are dropped.

Example: host steps ``[0, 10) [10, 20)`` whose kernels run ``[8, 14)`` and ``[21, 25)``
become ``[0, 14) [14, 25)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import Note, Trace
from ..taxonomy import HOST_KINDS, STEP_NAME, TRAILING_STEP_RATIO, Kind
from .links import Links


@dataclass
class Steps:
    """Kept steps after re-timing, plus what was dropped (all times int ns)."""

    names: list[str]
    start: np.ndarray
    end: np.ndarray
    host_start: np.ndarray
    host_end: np.ndarray
    #: device activities launched from inside each kept step
    activities: np.ndarray
    #: number of host steps found (before the trailing drop)
    found: int = 0
    #: the whole trace stands for one step (no ProfilerStep in it)
    synthetic: bool = False
    notes: list[Note] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def dropped(self) -> int:
        return self.found - len(self.names)

    def window(self) -> tuple[int, int]:
        """``[first step start, last step end)``; ``(0, 0)`` without steps."""
        if not len(self.names):
            return 0, 0
        return int(self.start[0]), int(self.end[-1])

    def check(self) -> None:
        assert (self.end >= self.start).all()
        assert (self.start[1:] >= self.end[:-1]).all(), "re-timed steps do not overlap"


def host_steps(trace: Trace, notes: list[Note] | None = None
               ) -> tuple[list[str], np.ndarray, np.ndarray, bool]:
    """``(names, start, end, synthetic)`` of the host steps, in time order.

    A step number seen twice (e.g. on two threads) keeps its first occurrence in time.
    ``notes`` (when given) gets a warning for a number seen again after its first
    occurrence ended, and for steps that overlap.
    """
    notes = notes if notes is not None else []
    rows = np.flatnonzero(trace.kind == Kind.STEP)
    if len(rows):
        rows = rows[np.lexsort((rows, trace.start[rows]))]
        names = [STEP_NAME.match(trace.strings[i]).group(1)
                 for i in trace.name[rows].tolist()]
        first: dict[str, int] = {}
        keep, again = [], []
        for k, nm in enumerate(names):
            if nm not in first:
                first[nm] = k
                keep.append(k)
            elif trace.start[rows[k]] >= trace.start[rows[first[nm]]] + trace.dur[rows[first[nm]]]:
                again.append(nm)  # not the same step on another thread: a later one
        rows = rows[keep]
        names = [names[k] for k in keep]
        start = trace.start[rows]
        end = start + trace.dur[rows]
        if again:
            notes.append(Note("warning", "repeated_steps",
                              f"{len(again):,} ProfilerStep{'s' if len(again) > 1 else ''} "
                              f"({', '.join(f'#{nm}' for nm in again[:5])}"
                              f"{', ...' if len(again) > 5 else ''}) started again after "
                              "the step of that number ended (two profiling sessions in one "
                              "trace?); only the first of each number is shown."))
        overlap = int(np.count_nonzero(start[1:] < np.maximum.accumulate(end)[:-1]))
        if overlap:
            notes.append(Note("warning", "overlapping_steps",
                              f"{overlap:,} of {len(rows):,} ProfilerSteps start before an "
                              "earlier step ends (nested or overlapping steps): each is shown "
                              "from where the one before it ends, so the inner one can shrink "
                              "to nothing."))
        return names, start, end, False
    host = np.flatnonzero(trace.mask(*HOST_KINDS))
    if not len(host):
        host = np.flatnonzero(trace.kind != Kind.TRACE_SPAN)
    if not len(host):
        empty = np.zeros(0, dtype=np.int64)
        return [], empty, empty, True
    start = int(trace.start[host].min())
    end = int((trace.start[host] + trace.dur[host]).max())
    return ["0"], np.array([start], dtype=np.int64), np.array([end], dtype=np.int64), True


def _last_with_operators(trace: Trace, hs: np.ndarray, he: np.ndarray) -> int:
    """Index of the last host step ``[hs, he)`` (sorted by start) in which a host operator
    starts; -1 if none. Without device work, SPEC §2.1.4 drops no step, which keeps the
    empty step torch records between the last ``prof.step()`` and the profiler's exit: on
    CPU traces it halved the average step (6,444 and 74 µs -> 3,259 µs)."""
    ops = trace.start[trace.kind == Kind.HOST_OP]
    k = np.searchsorted(hs, ops, side="right") - 1
    inside = k[(k >= 0) & (ops < he[np.maximum(k, 0)])]
    return int(inside.max()) if len(inside) else -1


def containing_step(hs: np.ndarray, he: np.ndarray, start: np.ndarray, end: np.ndarray,
                    valid: np.ndarray) -> np.ndarray:
    """Per call ``[start, end)``: index of the latest-starting host step ``[hs, he)`` (sorted
    by start) that contains it entirely, -1 if none (or not ``valid``).

    Vectorised for the usual case (the latest step starting before the call contains it);
    only calls that step misses (host steps that overlap or nest) walk back over the
    earlier steps. Example: steps ``[0, 100) [10, 30)``, call ``[50, 51)`` -> 0.
    """
    k = np.searchsorted(hs, start, side="right") - 1
    k_c = np.maximum(k, 0)
    out = np.where(valid & (k >= 0) & (end <= he[k_c]), k_c, -1)
    todo = np.flatnonzero(valid & (k >= 1) & (out < 0))
    # an earlier step can only contain the call if its end reaches past the call's end
    reach = np.maximum.accumulate(he)
    for j in range(int(k[todo].max()) - 1 if len(todo) else -1, -1, -1):
        todo = todo[reach[j] >= end[todo]]   # reach only shrinks as j goes down
        if not len(todo):
            break
        hit = todo[(k[todo] > j) & (hs[j] <= start[todo]) & (end[todo] <= he[j])]
        out[hit] = j
        todo = todo[out[todo] < 0]
    return out


def find_steps(trace: Trace, links: Links) -> Steps:
    """Host steps, re-timed to the device work they launched, trailing steps dropped."""
    notes: list[Note] = []
    names, hs, he, synthetic = host_steps(trace, notes)
    n = len(names)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return Steps([], empty, empty, empty, empty, empty, 0, synthetic, notes)

    # step of each launching runtime call: the one whose host span contains it entirely
    acts = links.activity_rows
    act_start = trace.start[acts]
    act_end = act_start + trace.dur[acts]
    rt = links.launcher[acts]
    rt_c = np.maximum(rt, 0)
    rt_start = trace.start[rt_c]
    step_of = containing_step(hs, he, rt_start, rt_start + trace.dur[rt_c], rt >= 0)
    inside = step_of >= 0

    counts = np.bincount(step_of[inside], minlength=n).astype(np.int64)
    dev_start = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    dev_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(dev_start, step_of[inside], act_start[inside])
    np.maximum.at(dev_end, step_of[inside], act_end[inside])
    launched = counts > 0

    start = hs.copy()
    end = he.copy()
    prev_end = int(hs[0])
    if launched[0]:
        # seed: device work queued before the first step (not launched from inside a step)
        # that ends before the first step's own device work starts (SPEC §2.1.3; a first
        # step without device work has no such start: a later step's would let work
        # queued during the first steps move their starts)
        outside = ~inside & (act_end <= int(dev_start[0]))
        if outside.any():
            prev_end = max(prev_end, int(act_end[outside].max()))
    # one pass over steps (few), the per-event work is above; without device work this only
    # moves the start of a step whose host range overlaps the previous one (never overlap)
    for i in range(n):
        s = max(prev_end, int(hs[i]))
        e = max(int(he[i]), int(dev_end[i]), s) if launched[i] else max(int(he[i]), s)
        start[i], end[i] = s, e
        prev_end = e

    keep, reason = n, ""
    if launched.any():
        last = int(np.flatnonzero(launched)[-1])
        keep = last + 1
        reason = "{} launched no GPU work"
        if last >= 1 and counts[last - 1] > TRAILING_STEP_RATIO * counts[last]:
            keep = last
            reason = (f"the last step with GPU work launched {counts[last]:,} device "
                      f"activities against {counts[last - 1]:,} in the step before it, so its "
                      "GPU work was probably not fully captured")
    elif n > 1 and not synthetic:
        keep = _last_with_operators(trace, hs, he) + 1 or n
        reason = ("{} ran no operator (torch records the time from the last prof.step() "
                  "to the profiler's exit as one more step)")
    if keep < n:
        dropped = n - keep
        which = ", ".join(names[keep:])
        notes.append(Note("info", "dropped_steps",
                          f"Dropped {dropped} trailing step{'s' if dropped > 1 else ''} "
                          f"({which}) from the overview: "
                          f"{reason.format('they' if dropped > 1 else 'it')}."))
    if synthetic:
        notes.append(Note("info", "no_steps", "No ProfilerStep in this trace: the whole trace "
                          "is shown as one step. Use torch.profiler's schedule and call "
                          "prof.step() every iteration to see steps."))
    return Steps(names=names[:keep], start=start[:keep], end=end[:keep], host_start=hs[:keep],
                 host_end=he[:keep], activities=counts[:keep], found=n, synthetic=synthetic,
                 notes=notes)
