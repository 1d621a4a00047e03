"""Regenerate the bundled sample traces in ``samples/logs`` with ``torch.profiler`` on CPU.

Usage::

    python samples/make_samples.py [--out samples/logs]

Each run profiles a tiny conv + linear classifier trained on a synthetic ``TensorDataset``
through a ``DataLoader`` and writes what ``tensorboard_trace_handler`` writes for a real job:
``<out>/<run>/<worker>.<span>.pt.trace.json.gz`` (span = the handler's nanosecond time stamp,
one file per schedule cycle). The traces hold ``ProfilerStep#N`` ranges, ``enumerate(DataLoader)
#...__next__`` ops, the ``record_function`` ranges ``forward`` / ``backward`` / ``optimizer`` and
``cpu_op`` events with input shapes.

Inputs and weights are seeded, so every regeneration has the same runs, workers, span count,
ops and shapes; durations and time stamps are measured, so the bytes differ.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "logs")
SEED = 0
WORKER = "worker0"
TRACE_GLOB = "*.pt.trace.json*"


@dataclass(frozen=True)
class RunConfig:
    """One sample run: a folder under ``--out`` and how to profile it."""

    name: str
    batch_size: int
    num_workers: int  # DataLoader worker processes (0 = load on the main thread)
    repeat: int  # profiler schedule cycles = span files written
    with_stack: bool = False
    profile_memory: bool = False


# Two runs so the dashboard has something to compare: the second loads data in worker
# processes, uses a bigger batch, records call stacks and memory, and writes two spans.
RUNS = (
    RunConfig("cpu_train_num_workers_0", batch_size=32, num_workers=0, repeat=1),
    RunConfig(
        "cpu_train_num_workers_2",
        batch_size=64,
        num_workers=2,
        repeat=2,
        with_stack=True,
        profile_memory=True,
    ),
)

# schedule(wait=1, warmup=1, active=3, repeat=N): 5 iterations per cycle.
WAIT, WARMUP, ACTIVE = 1, 1, 3


def _build_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 32),
        nn.ReLU(),
        nn.Linear(32, 10),
    )


def profile_run(cfg: RunConfig, out_dir: str) -> list[str]:
    """Profile one training loop into ``out_dir/cfg.name``; return the trace files written.

    Trace files already in that folder are removed first, so the folder holds exactly
    ``cfg.repeat`` spans of one worker afterwards.
    """
    import torch
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )
    from torch.utils.data import DataLoader, TensorDataset

    run_dir = os.path.join(out_dir, cfg.name)
    os.makedirs(run_dir, exist_ok=True)
    for old in glob.glob(os.path.join(run_dir, TRACE_GLOB)):
        os.remove(old)

    torch.manual_seed(SEED)
    steps = (WAIT + WARMUP + ACTIVE) * cfg.repeat
    images = torch.randn(steps * cfg.batch_size, 3, 16, 16)
    labels = torch.randint(0, 10, (steps * cfg.batch_size,))
    loader = DataLoader(
        TensorDataset(images, labels),
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=cfg.num_workers,
        generator=torch.Generator().manual_seed(SEED),
    )
    model = _build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=cfg.repeat),
        on_trace_ready=tensorboard_trace_handler(run_dir, worker_name=WORKER, use_gzip=True),
        record_shapes=True,
        with_stack=cfg.with_stack,
        profile_memory=cfg.profile_memory,
    ) as prof:
        for x, y in loader:
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
            prof.step()

    return sorted(glob.glob(os.path.join(run_dir, TRACE_GLOB)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help="log directory to write runs into (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(
            "make_samples.py needs torch: pip install torch==2.13.0 (CPU build is enough)",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(1)  # small, steady traces: one intra-op thread

    total = 0
    for cfg in RUNS:
        for path in profile_run(cfg, args.out):
            size = os.path.getsize(path)
            total += size
            print(f"wrote {os.path.relpath(path)} ({size:,} bytes)")
    print(f"{len(RUNS)} runs, {total:,} bytes in {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
