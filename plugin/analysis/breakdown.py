"""Step-time breakdown (SPEC §2.2).

Every instant of a re-timed step ``[start, end)`` is charged to the first active category
in :data:`~stepscope.taxonomy.BREAKDOWN_ORDER`. With ``U_k`` the union of the intervals of
the first ``k`` categories, category ``k`` gets ``|U_k ∩ step| - |U_{k-1} ∩ step|``; Other
gets the rest. All sums are integer ns.

Example: kernel ``[0, 4)``, runtime ``[2, 6)``, step ``[0, 10)`` -> Kernel 4, Runtime 2,
Other 4.

In a CPU trace (no runtime or device event) host collectives (``gloo:all_reduce``,
``c10d::allreduce_``, ...) and everything nested in them are Communication: the time a gloo
job waits for its peers. In GPU traces those ranges only launch the collective kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Trace
from ..taxonomy import (
    BREAKDOWN_ORDER,
    COLLECTIVE_OP_NAME,
    DATALOADER_NAME,
    GPU_BREAKDOWN_CATEGORIES,
    Kind,
)
from .intervals import covered, sorted_unique, union
from .links import Links
from .steps import Steps


@dataclass
class Breakdown:
    """``values[i, k]``: ns of step ``i`` charged to ``categories[k]``."""

    categories: tuple[str, ...]
    values: np.ndarray   # (steps, categories) int64 ns
    totals: np.ndarray   # (steps,) int64 ns
    #: ns of the steps' Other time in which launched device work had not started yet
    #: (:func:`waiting_for_device`; measured only when Other is over a tenth of the steps)
    device_wait: int = 0

    def check(self) -> None:
        assert (self.values >= 0).all()
        assert (self.values.sum(axis=1) == self.totals).all(), "categories sum to the step"


def name_mask(trace: Trace, pattern, among: np.ndarray | None = None) -> np.ndarray:
    """Row mask: event name matches ``pattern`` (evaluated once per distinct string, and
    once per trace: the analyses ask for the same patterns several times). With ``among``
    (a row mask), only rows of ``among`` can match, and only their names are evaluated
    (a costly pattern meant for kernel names need not scan every string of the trace)."""
    if not len(trace.strings):
        return np.zeros(len(trace), dtype=bool)
    if among is None:
        return string_hits(trace, pattern)[trace.name]
    memo = trace.__dict__.get("_string_hits", {}).get((pattern, len(trace.strings)))
    if memo is not None:
        return among & memo[trace.name]
    hit = np.zeros(len(trace.strings), dtype=bool)
    ids = sorted_unique(trace.name[among]).tolist()
    hit[ids] = [bool(pattern.search(trace.strings[i])) for i in ids]
    return among & hit[trace.name]


def string_hits(trace: Trace, pattern) -> np.ndarray:
    """``hit[i]``: ``trace.strings[i]`` matches ``pattern`` (read-only; remembered on the
    trace, keyed by the pattern and the number of strings)."""
    memo = trace.__dict__.setdefault("_string_hits", {})  # not a field: never compared
    key = (pattern, len(trace.strings))
    hit = memo.get(key)
    if hit is None:
        hit = np.fromiter((bool(pattern.search(s)) for s in trace.strings), bool,
                          len(trace.strings))
        hit.flags.writeable = False
        memo[key] = hit
    return hit


def category_masks(trace: Trace, comm_kernel: np.ndarray, gpu: bool = True) -> dict[str, np.ndarray]:
    """Row mask of the events of each category (before priority). Communication: the
    communication kernels, or in a CPU trace (``gpu`` false) the host collectives (their
    intervals cover everything nested in them)."""
    kind = trace.kind
    kernel = kind == Kind.KERNEL
    host = np.isin(kind, np.array([Kind.HOST_OP, Kind.USER_RANGE, Kind.PYTHON], np.uint8))
    op_or_range = (kind == Kind.HOST_OP) | (kind == Kind.USER_RANGE)
    loader = host & name_mask(trace, DATALOADER_NAME) & (kind != Kind.PYTHON)
    comm = kernel & comm_kernel if gpu else op_or_range & name_mask(trace, COLLECTIVE_OP_NAME)
    return {
        "Kernel": kernel & ~comm_kernel,
        "Memcpy": kind == Kind.MEMCPY,
        "Memset": kind == Kind.MEMSET,
        "Communication": comm,
        "Runtime": kind == Kind.RUNTIME,
        "DataLoader": loader,
        "CPU Exec": host & ~loader,
    }


def step_breakdown(trace: Trace, steps: Steps, comm_kernel: np.ndarray,
                   gpu: bool = True, links: Links | None = None) -> Breakdown:
    """Charge each step's time to categories by priority (GPU categories only if ``gpu``; a
    CPU trace shows Communication when it has host collectives). With ``links``, how much
    of a large Other waited for launched device work (:attr:`Breakdown.device_wait`)."""
    masks = category_masks(trace, comm_kernel, gpu)
    cpu_comm = not gpu and bool(masks["Communication"].any())
    cats = tuple(c for c in BREAKDOWN_ORDER if gpu or c not in GPU_BREAKDOWN_CATEGORIES
                 or (c == "Communication" and cpu_comm))
    lo, hi = steps.start, steps.end
    totals = (hi - lo).astype(np.int64)
    values = np.zeros((len(lo), len(cats)), dtype=np.int64)
    start, end = trace.start, trace.end()
    acc_s = np.zeros(0, dtype=np.int64)
    acc_e = np.zeros(0, dtype=np.int64)
    prev = np.zeros(len(lo), dtype=np.int64)
    for k, cat in enumerate(cats):
        if cat == "Other":
            values[:, k] = totals - values[:, :k].sum(axis=1)
            continue
        m = masks[cat]
        if not m.any():
            continue
        acc_s, acc_e = union(np.concatenate((acc_s, start[m])), np.concatenate((acc_e, end[m])))
        cov = covered(acc_s, acc_e, lo, hi)
        values[:, k] = cov - prev
        prev = cov
    other = values[:, cats.index("Other")].sum()
    wait = (waiting_for_device(trace, links, (acc_s, acc_e), lo, hi)
            if links is not None and gpu and 10 * other > totals.sum() else 0)
    return Breakdown(categories=cats, values=values, totals=totals, device_wait=wait)


def waiting_for_device(trace: Trace, links: Links, busy: tuple[np.ndarray, np.ndarray],
                       lo: np.ndarray, hi: np.ndarray) -> int:
    """ns of ``[lo, hi)`` (the steps) outside ``busy`` (every charged interval: this is
    Other time) in which launched device work had not started yet, from the end of its
    launching call to its start: the GPU still ran work queued earlier (e.g. before the
    profiler started), or the host and device clocks disagree. A vLLM graph replay on
    MI300X: the host done 2.4 ms into the step, its first copy started at 8.4 ms."""
    act = links.activity_rows
    rt = links.launcher[act]
    ok = rt >= 0
    ps = trace.start[rt[ok]] + trace.dur[rt[ok]]
    pe = trace.start[act[ok]]
    keep = pe > ps
    if not keep.any():
        return 0
    both = union(np.concatenate((busy[0], ps[keep])), np.concatenate((busy[1], pe[keep])))
    return int(covered(*both, lo, hi).sum() - covered(*busy, lo, hi).sum())
