"""Pure analyses over a :class:`~stepscope.model.Trace` (SPEC §2).

Each module is one concept and takes plain arrays in, plain data out; no I/O, no globals:

- :mod:`.links`      runtime call <-> device activity (correlation) <-> host op (External id)
- :mod:`.tree`       per-thread nesting of host events, same-name collapse, ancestor flags
- :mod:`.steps`      ProfilerStep detection, device-aware re-timing, trailing-step drop
- :mod:`.breakdown`  step-time breakdown by category priority
- :mod:`.gpu_metrics` utilization, est. SM efficiency, est. occupancy, tensor-core share
- :mod:`.operators`  operator table, pies and call stacks
- :mod:`.kernels`    kernel table and pies
- :mod:`.recommendations` plain-language advice with its evidence

:func:`analyze` runs them all once; the views only format its result.
"""

from __future__ import annotations

from .analyze import Analysis, analyze

__all__ = ["Analysis", "analyze"]
