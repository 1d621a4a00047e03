"""Regenerate the bundled sample traces in ``samples/logs`` with ``torch.profiler`` on CPU.

Usage::

    python samples/make_samples.py [--out samples/logs]

Each run profiles a tiny conv + linear classifier trained on a synthetic ``TensorDataset``
through a ``DataLoader`` and writes what ``tensorboard_trace_handler`` writes for a real job:
``<out>/<run>/<worker>.<span>.pt.trace.json.gz`` (span = the handler's nanosecond time stamp,
one file per schedule cycle). Everything a CPU-only profiler can record is on: input shapes,
memory (``profile_memory``), ``nn.Module`` scopes (``with_modules``), Python call stacks
(``with_stack``), and the ``record_function`` ranges ``forward`` / ``backward`` /
``optimizer``. One run writes two spans (schedule ``repeat=2``) and one run has two workers
(two processes training with ``DistributedDataParallel`` over gloo, ranks 0 and 1).

Inputs and weights are seeded, so every regeneration has the same runs, workers, span count,
ops and shapes; durations and time stamps are measured, so the bytes differ.
"""

from __future__ import annotations

import argparse
import glob
import os
import socket
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "logs")
SEED = 0
TRACE_GLOB = "*.pt.trace.json*"


@dataclass(frozen=True)
class RunConfig:
    """One sample run: a folder under ``--out`` and how to profile it."""

    name: str
    batch_size: int
    num_workers: int  # DataLoader worker processes (0 = load on the main thread)
    repeat: int  # profiler schedule cycles = span files written per worker
    world_size: int = 1  # processes (ranks) training together; each one is a worker


# Three runs so the dashboard has something to compare: the second loads data in worker
# processes, uses a bigger batch and writes two spans; the third is a two-rank DDP job
# (two workers, gloo all-reduce).
RUNS = (
    RunConfig("cpu_train_num_workers_0", batch_size=32, num_workers=0, repeat=1),
    RunConfig("cpu_train_num_workers_2", batch_size=64, num_workers=2, repeat=2),
    RunConfig("cpu_ddp_2_workers", batch_size=32, num_workers=0, repeat=1, world_size=2),
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
    """Profile one training job into ``out_dir/cfg.name``; return the trace files written.

    Trace files already in that folder are removed first, so the folder holds exactly
    ``cfg.repeat`` spans of each of ``cfg.world_size`` workers afterwards.
    """
    run_dir = os.path.join(out_dir, cfg.name)
    os.makedirs(run_dir, exist_ok=True)
    for old in glob.glob(os.path.join(run_dir, TRACE_GLOB)):
        os.remove(old)
    if cfg.world_size == 1:
        _train(0, cfg, run_dir, None)
    else:
        import torch.multiprocessing as mp

        mp.spawn(_train, args=(cfg, run_dir, _free_port()), nprocs=cfg.world_size, join=True)
    return sorted(glob.glob(os.path.join(run_dir, TRACE_GLOB)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(rank: int, cfg: RunConfig, run_dir: str, port: int | None) -> None:
    """Train and profile as worker ``worker<rank>``; with ``port``, as one rank of a gloo
    DDP job of ``cfg.world_size`` processes (the profiler then records ``distributedInfo``
    and the gradient all-reduces)."""
    import torch
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.set_num_threads(1)  # small, steady traces: one intra-op thread
    torch.manual_seed(SEED)
    steps = (WAIT + WARMUP + ACTIVE) * cfg.repeat
    n = steps * cfg.batch_size * cfg.world_size
    images = torch.randn(n, 3, 16, 16)
    labels = torch.randint(0, 10, (n,))
    data = TensorDataset(images, labels)
    model = _build_model()
    if port is None:
        loader = DataLoader(data, batch_size=cfg.batch_size, shuffle=True,
                            num_workers=cfg.num_workers,
                            generator=torch.Generator().manual_seed(SEED))
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=cfg.world_size)
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = DistributedSampler(data, num_replicas=cfg.world_size, rank=rank, seed=SEED)
        loader = DataLoader(data, batch_size=cfg.batch_size, sampler=sampler,
                            num_workers=cfg.num_workers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=cfg.repeat),
        on_trace_ready=tensorboard_trace_handler(run_dir, worker_name=f"worker{rank}",
                                                 use_gzip=True),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_modules=True,
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
    if port is not None:
        import torch.distributed as dist

        dist.barrier()  # no rank tears its connections down while another still uses them
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help="log directory to write runs into (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401  (only checks that torch is installed)
    except ImportError:
        print(
            "make_samples.py needs torch: pip install torch==2.13.0 (CPU build is enough)",
            file=sys.stderr,
        )
        return 2
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
