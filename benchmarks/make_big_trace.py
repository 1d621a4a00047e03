"""Make a big trace by replicating the steps of a real one (for benchmarks, not tests).

Copy ``k`` of the source trace is shifted in time by ``k x (trace length + gap)``; its
``External id``/``external id``, ``correlation`` and flow ids are offset so every copy links
only to itself, and ``ProfilerStep#N`` is renumbered so step names stay unique. Metadata
events and top-level keys are written once. Output is Kineto-formatted JSON (``.json``) or
gzip level 1 (``.json.gz``).

    python benchmarks/make_big_trace.py SOURCE OUT --times 10
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
HERE = os.path.dirname(os.path.abspath(__file__))
#: the shared trace every benchmark scales up
SOURCE = os.path.join(HERE, "..", "..", "shared", "traces", "kineto_resnet50",
                      "resnet50_num_workers_0", "worker0.pt.trace.json.gz")


def replica(times: int, path: str) -> str:
    """``path``, holding ``times`` copies of :data:`SOURCE` (made on first use)."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".partial" + (".gz" if path.endswith(".gz") else "")
        main([SOURCE, tmp, "--times", str(times)])
        os.replace(tmp, path)  # an interrupted run leaves no half-written replica
    return path


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read())
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _max(events: list, key: str) -> int:
    vals = [e["args"][key] for e in events
            if isinstance(e.get("args"), dict) and isinstance(e["args"].get(key), int)]
    return max(vals, default=0)


def replicate(doc: dict, times: int, out) -> int:
    """Write ``times`` copies of ``doc``'s events to the text stream ``out``; return the count."""
    events = doc["traceEvents"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = int(t1 - t0) + 1000
    ext = max(_max(events, "External id"), _max(events, "external id")) + 1
    corr = _max(events, "correlation") + 1
    flow = max((e.get("id", 0) for e in events if isinstance(e.get("id"), int)), default=0) + 1
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
                if "ts" in e and isinstance(e["ts"], (int, float)):
                    e["ts"] = e["ts"] + k * shift
                if isinstance(e.get("id"), int):
                    e["id"] += k * flow
                m = _STEP.match(str(e.get("name", "")))
                if m:
                    e["name"] = f"ProfilerStep#{int(m.group(1)) + k * nsteps}"
                if isinstance(e.get("args"), dict):
                    a = e["args"] = dict(e["args"])
                    for key, off in (("External id", ext), ("external id", ext),
                                     ("correlation", corr)):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += k * off
            out.write(("" if first else ",\n") + "  " + json.dumps(e))
            first = False
            n += 1
    out.write("\n]}\n")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("out", help="output path (.json or .json.gz)")
    ap.add_argument("--times", type=int, default=10)
    args = ap.parse_args(argv)
    doc = load(args.source)
    if args.out.endswith(".gz"):
        with gzip.open(args.out, "wt", compresslevel=1, encoding="utf-8") as f:
            n = replicate(doc, args.times, f)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            n = replicate(doc, args.times, f)
    print(f"wrote {args.out}: {n:,} events (x{args.times})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
