"""Counter lanes of the timeline: GPU utilization and allocated memory (issue 6).

- ``counter:GPU <d> Utilization``: per pixel, the share of the pixel covered by the union of
  that GPU's kernel intervals (SPEC §2.3: kernels only), as a fraction 0..1. One point per
  pixel ``[pixel start µs, fraction]``; computed from a prefix sum of covered time, so any
  window costs O(width log n).
- ``counter:<device> Memory Allocated``: the ``Total Allocated`` bytes of the ``[memory]``
  instant events of one device (the running sum of ``Bytes`` where a trace lacks it), a
  step function; devices and labels as in the Memory view
  (:func:`~stepscope.analysis.memory.device_parts`). Downsampled to the minimum and maximum
  sample of each pixel (plus its last sample when that is neither, so the value held after
  the pixel is right), preceded by the value held at the window start.

Example: kernels ``[0, 5) [3, 8)`` µs, window ``[0, 10)`` at width 2 -> points
``[[0, 1.0], [5, 0.6]]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analysis.intervals import coverage_before, cumulative_lengths, union
from ..analysis.memory import device_parts
from ..model import Trace
from ..taxonomy import Kind


@dataclass
class Utilization:
    """Union of one GPU's kernel intervals, with the covered time before each one starts."""

    id: str
    name: str
    ms: np.ndarray   # disjoint sorted interval starts (ns)
    me: np.ndarray   # their ends
    cum: np.ndarray  # covered ns before ms[i] (length len(ms) + 1): cumulative_lengths
    #: what the points' values are: the busy share of each pixel, 0..1
    unit = "ratio"

    def points(self, s: int, e: int, width: int) -> list[list[float]]:
        edges = pixel_edges(s, e, width)
        cov = np.diff(coverage_before(self.ms, self.me, edges, self.cum))
        frac = np.round(cov / np.maximum(np.diff(edges), 1), 4)
        return [list(p) for p in zip((edges[:-1] / 1000).tolist(), frac.tolist())]


def pixel_edges(s: int, e: int, width: int) -> np.ndarray:
    """The ``width + 1`` edges of ``width`` pixels over ``[s, e)`` (int ns):
    ``s + (k * (e - s)) // width``, computed so that no product leaves int64 (a window of
    days times 10,000 pixels did: negative utilization, times out of order)."""
    k = np.arange(width + 1, dtype=np.int64)
    step, rest = divmod(e - s, width)
    return s + k * step + (k * rest) // width


@dataclass
class Memory:
    """One device's ``Total Allocated`` samples, sorted by time (file order on ties)."""

    id: str
    name: str
    ts: np.ndarray
    value: np.ndarray
    #: allocated bytes
    unit = "bytes"

    def points(self, s: int, e: int, width: int) -> list[list[float]]:
        lo = int(np.searchsorted(self.ts, s, side="left"))
        hi = int(np.searchsorted(self.ts, e, side="left"))
        out: list[list[float]] = []
        if lo > 0:
            out.append([s / 1000, int(self.value[lo - 1])])
        if hi <= lo:
            return out
        ts, val = self.ts[lo:hi], self.value[lo:hi]
        pixel = np.searchsorted(pixel_edges(s, e, width), ts, side="right") - 1
        brk = np.r_[True, pixel[1:] != pixel[:-1]]
        heads = np.flatnonzero(brk)
        last = np.append(heads[1:], len(ts)) - 1
        seg = np.cumsum(brk) - 1
        picks = [last]
        for red in (np.minimum, np.maximum):
            ext = red.reduceat(val, heads)
            cand = np.flatnonzero(val == ext[seg])
            picks.append(cand[np.r_[True, seg[cand][1:] != seg[cand][:-1]]])
        keep = np.unique(np.concatenate(picks))
        out += [list(p) for p in zip((ts[keep] / 1000).tolist(), val[keep].tolist())]
        return out


def build_counters(trace: Trace) -> list[Utilization | Memory]:
    """Counter series of ``trace``: utilization per GPU with kernels, memory per device."""
    out: list[Utilization | Memory] = []
    kernels = np.flatnonzero(trace.kind == Kind.KERNEL)
    devices = trace.device[kernels]
    for d in np.unique(devices).tolist():
        rows = kernels[devices == d]
        ms, me = union(trace.start[rows], trace.start[rows] + trace.dur[rows])
        cum = cumulative_lengths(ms, me)
        name = f"GPU {d} Utilization"  # (as the device lanes: GPU 0 stream 7)
        out.append(Utilization(f"counter:{name}", name, ms, me, cum))
    for p in device_parts(trace.memory):
        name = f"{p.label} Memory Allocated"
        out.append(Memory(f"counter:{name}", name, trace.memory["ts"][p.rows], p.allocated))
    return out
