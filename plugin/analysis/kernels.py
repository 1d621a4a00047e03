"""Kernel grouping (SPEC §2.5): which kernels the kernel view aggregates, in ns.

Every kernel of the trace counts, inside the kept steps or not. The view
(:mod:`stepscope.views.kernel`) sums durations in ns and rounds to µs once.
"""

from __future__ import annotations

import numpy as np

from ..model import Trace
from ..taxonomy import Kind
from .links import Links

GROUP_BY = ("Kernel", "KernelNameAndOpName")
NO_OP = "N/A"


def kernel_rows(trace: Trace) -> np.ndarray:
    """Rows of the trace's kernels (device activities of kind KERNEL), in file order."""
    return np.flatnonzero(trace.kind == Kind.KERNEL)


def launching_op_names(trace: Trace, links: Links, rows: np.ndarray) -> np.ndarray:
    """Per kernel row, the interned name of its launching operator, -1 when none."""
    op = links.launching_op(rows)
    return np.where(op >= 0, trace.name[np.maximum(op, 0)], -1).astype(np.int64)
