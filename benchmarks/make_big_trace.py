"""Make a big trace by replicating the steps of a real one (for benchmarks, not tests).

Copy ``k`` of the source trace is shifted in time by ``k x (trace length + gap)``; its
``External id``/``external id``, ``correlation`` and flow ids are offset so every copy links
only to itself, and ``ProfilerStep#N`` is renumbered so step names stay unique. Metadata
events and top-level keys are written once. Output is Kineto-formatted JSON (``.json``) or
gzip level 1 (``.json.gz``).

``--memory`` first adds ``[memory]`` instants to a source without them, in the proportion
``profile_memory=True`` writes them (the shared profile_memory trace: one allocation per 4
host ops (``cpu_op``, ``Operator`` in 2021 files), each freed later: 0.5 memory events per
op; ~5 % on the CPU, the rest on GPU0), with exact running ``Total Allocated`` /
``Total Reserved``.

    python benchmarks/make_big_trace.py SOURCE OUT --times 10 [--memory]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
from decimal import Decimal

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
HERE = os.path.dirname(os.path.abspath(__file__))
#: the shared trace every benchmark scales up
SOURCE = os.path.join(HERE, "..", "..", "shared", "traces", "kineto_resnet50",
                      "resnet50_num_workers_0", "worker0.pt.trace.json.gz")
#: the 2024 format (epoch µs with ns fractions): the shared HTA ResNet trace
SOURCE_2024 = os.path.join(HERE, "..", "..", "shared", "traces", "hta_v100_resnet_ns_2024",
                           "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")


def need(path: str) -> str:
    """``path``, or exit with one line saying what is missing: the default inputs are the
    development traces of ``../shared/traces`` beside the checkout."""
    if not os.path.exists(path):
        sys.exit(f"{os.path.basename(sys.argv[0])}: {os.path.normpath(path)} not found: the "
                 "default input is one of the development traces in ../shared/traces beside "
                 "the checkout; give a trace of your own (see --help)")
    return path


def replica(times: int, path: str, memory: bool = False, source: str = SOURCE) -> str:
    """``path``, holding ``times`` copies of ``source`` (made on first use), with
    ``[memory]`` events added when ``memory``."""
    if not os.path.exists(path):
        need(source)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".partial" + (".gz" if path.endswith(".gz") else "")
        n = make(source, tmp, times, memory)
        os.replace(tmp, path)  # an interrupted run leaves no half-written replica
        with open(path + ".events", "w") as f:  # for events_of
            f.write(str(n))
        print(f"wrote {path}: {n:,} events (x{times})", file=sys.stderr)
    return path


def events_of(path: str) -> int | None:
    """How many events :func:`replica` wrote to ``path``; None for a replica made before it
    recorded the count."""
    try:
        with open(path + ".events") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


_NUMBER = (int, float, Decimal)
_NS = Decimal("0.001")
_DECIMAL = re.compile(r'"\\u0000D([-+0-9.eE]+)\\u0000"')


def _dumps(e: dict) -> str:
    """``json.dumps`` writing each :class:`~decimal.Decimal` as its exact digits."""
    text = json.dumps(e, default=lambda v: f"\0D{v}\0" if isinstance(v, Decimal) else v)
    return _DECIMAL.sub(r"\1", text) if "\\u0000D" in text else text


def _max(events: list, key: str) -> int:
    vals = [e["args"][key] for e in events
            if isinstance(e.get("args"), dict) and isinstance(e["args"].get(key), int)]
    return max(vals, default=0)


#: one allocation per this many cpu_op events (the shared profile_memory trace: 56,680 ops,
#: 14,005 allocations)
OPS_PER_ALLOCATION = 4
#: share of the allocations on the CPU (that trace: 620 of 14,005)
CPU_SHARE = 0.05


def add_memory_events(doc: dict, seed: int = 0) -> int:
    """Append ``[memory]`` alloc/free pairs to ``doc``'s events (see the module doc); return
    how many were added. Each allocation happens inside its op (at its midpoint, on its
    thread) and is freed after a random lifetime (the op's duration up to 50 ms), or never
    when that falls past the trace's end (as a profile window cuts live tensors)."""
    rng = random.Random(seed)
    events = doc["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")
           and isinstance(e.get("ts"), _NUMBER) and isinstance(e.get("dur"), _NUMBER)]
    t_end = max(e["ts"] + e["dur"] for e in ops) if ops else 0
    raw = []  # (ts, device type, device id, addr, bytes, pid, tid)
    for i, e in enumerate(ops[::OPS_PER_ALLOCATION]):
        dtype, did = (0, -1) if rng.random() < CPU_SHARE else (1, 0)
        size = 512 * rng.randint(1, 1 << 14)
        t = Decimal(e["ts"]) + Decimal(e["dur"]) / 2  # exact (Decimal for 2024 sources)
        addr = 0x7F0000000000 + i * (1 << 26)
        raw.append((t, dtype, did, addr, size, e["pid"], e["tid"]))
        free = t + Decimal(f"{rng.uniform(max(e['dur'], 1), 50_000):.3f}")
        if free < t_end:
            raw.append((free, dtype, did, addr, -size, e["pid"], e["tid"]))
    raw.sort(key=lambda r: r[0])
    allocated: dict = {}
    reserved: dict = {}
    for t, dtype, did, addr, b, pid, tid in raw:
        key = (dtype, did)
        allocated[key] = allocated.get(key, 0) + b
        reserved[key] = max(reserved.get(key, 0), -(-allocated[key] * 5 // 4 // (2 << 20)) * (2 << 20))
        events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                       "pid": pid, "tid": tid, "ts": t.quantize(_NS),
                       "args": {"Device Type": dtype, "Device Id": did, "Addr": addr, "Bytes": b,
                                "Total Allocated": allocated[key],
                                "Total Reserved": reserved[key]}})
    doc["profile_memory"] = 1
    return len(raw)


def replicate(doc: dict, times: int, out) -> int:
    """Write ``times`` copies of ``doc``'s events to the text stream ``out``; return the count."""
    events = doc["traceEvents"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), _NUMBER)]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = int(t1 - t0) + 1000
    ext = max(_max(events, "External id"), _max(events, "external id")) + 1
    flow = max((e.get("id", 0) for e in events if isinstance(e.get("id"), int)), default=0)
    corr = flow = max(_max(events, "correlation"), flow) + 1  # ac2g flow id = correlation
    ev_idx = _max(events, "Ev Idx") + 1
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    nsteps = (max(steps) - min(steps) + 1) if steps else 0
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    out.write(json.dumps(head, indent=2)[:-2] + (',\n' if head else '') + '  "traceEvents": [\n')
    n = 0
    first = True
    for k in range(times):
        for e in events:
            if e.get("ph") == "M" and k:
                continue
            e = dict(e)
            if k:
                if "ts" in e and isinstance(e["ts"], _NUMBER):
                    e["ts"] = e["ts"] + k * shift
                if isinstance(e.get("id"), int):
                    e["id"] += k * flow
                m = _STEP.match(str(e.get("name", "")))
                if m:
                    e["name"] = f"ProfilerStep#{int(m.group(1)) + k * nsteps}"
                if isinstance(e.get("args"), dict):
                    a = e["args"] = dict(e["args"])
                    for key, off in (("External id", ext), ("external id", ext),
                                     ("correlation", corr), ("Ev Idx", ev_idx)):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += k * off
            out.write(("" if first else ",\n") + "  " + _dumps(e))
            first = False
            n += 1
    out.write("\n]}\n")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("out", help="output path (.json or .json.gz)")
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--memory", action="store_true",
                    help="add [memory] events as profile_memory=True writes them")
    args = ap.parse_args(argv)
    n = make(args.source, args.out, args.times, args.memory)
    print(f"wrote {args.out}: {n:,} events (x{args.times})", file=sys.stderr)
    return 0


def make(source: str, out: str, times: int, memory: bool = False) -> int:
    """Write ``times`` copies of ``source`` to ``out`` (gzip when it ends in .gz); the
    number of events written."""
    doc = load(source)
    if memory and not any(e.get("name") == "[memory]" for e in doc["traceEvents"]):
        print(f"added {add_memory_events(doc):,} [memory] events per copy", file=sys.stderr)
    if out.endswith(".gz"):
        with gzip.open(out, "wt", compresslevel=1, encoding="utf-8") as f:
            return replicate(doc, times, f)
    with open(out, "w", encoding="utf-8") as f:
        return replicate(doc, times, f)


if __name__ == "__main__":
    sys.exit(main())
