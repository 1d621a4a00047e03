"""The Distributed view (SPEC §4.3): per-rank summaries, combined over a run's ranks.

``summarise(analysis)`` (per trace, in the analysis worker, cached): the rank, its steps
(start, end and computation / communication / overlap / other, ns) and its collectives
(op, process group, start, duration, bytes) as numpy arrays: a few numbers per step and
per collective, never events.

``combine(summaries, failed)`` (in the server): ranks are matched by
``distributedInfo.rank`` (else a trailing integer of the worker name); the k-th collective
of a (process group, op) on each rank is the same collective. Its **transfer** is the
shortest duration over the ranks, the **wait** on a rank is duration - transfer (the
collective's first ``wait`` ns); a rank's wait per step is the union of its wait intervals
in the step. The straggler is the rank with the smallest total wait, named when it is below
half the median wait of the others. Only durations are compared across ranks, never clocks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from ..analysis.collectives import collectives_of, comm_split
from ..analysis.intervals import covered, union
from ..errors import StepscopeError
from ..units import us, us_list
from . import RunAnalysis, RunRoute, TraceSummary

#: nccl-tests' bus bandwidth factors for ``n`` ranks (SPEC §4.3).
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


# -- per trace -------------------------------------------------------------------------------
#: Summary fields that are per-step or per-collective numbers (lists in the cache).
ARRAYS = {"step_start": np.int64, "step_end": np.int64, "computation": np.int64,
          "communication": np.int64, "overlap": np.int64, "other": np.int64,
          "op": np.int32, "group": np.int32, "start": np.int64, "dur": np.int64,
          "bytes": np.int64}


def _rank_of(a: Any) -> dict:
    """The rank, world size and backend of ``distributedInfo`` (None where unusable)."""
    info = a.trace.distributed_info or {}
    rank, world = info.get("rank"), info.get("world_size")
    return {
        "rank": rank if isinstance(rank, int) and rank >= 0 else None,
        "world_size": world if isinstance(world, int) and world > 0 else None,
        "backend": info.get("backend") if isinstance(info.get("backend"), str) else None,
    }


def summarise(a: Any) -> dict:
    """One rank's compact summary: JSON values only (per-step and per-collective numbers
    as int lists, ns), since the cache keeps a span's payloads as JSON."""
    coll = collectives_of(a)
    split = comm_split(a, coll)
    arrays = {
        "step_start": a.steps.start, "step_end": a.steps.end,
        "computation": split.computation, "communication": split.communication,
        "overlap": split.overlap, "other": split.other,
        "op": coll.op, "group": coll.group, "start": coll.start, "dur": coll.dur,
        "bytes": coll.bytes,
    }
    return {
        **_rank_of(a), "steps": list(a.steps.names), "ops": coll.ops, "groups": coll.groups,
        **{k: np.asarray(v).astype(ARRAYS[k]).tolist() for k, v in arrays.items()},
    }


def brief(a: Any) -> dict:
    """The part of :func:`summarise` that :func:`has_data` reads (the rank, the
    collectives' starts), without the per-step split: it is sent with the Overview's
    parts, before the other views (issue 19, x200: 0.2 s instead of the summary's 0.8 s)."""
    return {**_rank_of(a), "start": np.asarray(collectives_of(a).start, np.int64).tolist()}


def _with_arrays(summary: dict) -> dict:
    """A summary with its number lists as numpy arrays (for the combination)."""
    return {**summary, **{k: np.asarray(summary[k], dtype=t) for k, t in ARRAYS.items()}}


def has_data(summary: dict | None, workers: int) -> bool:
    """Whether a span shows the Distributed tab: it has collectives, or it is a rank
    (``distributedInfo``) of a run with >= 2 workers (SPEC §4.3)."""
    if not summary:
        return False
    return len(summary.get("start", ())) > 0 or (workers >= 2 and summary["rank"] is not None)


# -- over the run ----------------------------------------------------------------------------
def _name_ranks(workers: list[str], notes: list[str]) -> dict[str, int]:
    """Ranks of workers without a ``distributedInfo`` rank, from their names: the number
    after ``rank`` or ``worker`` when every name has a distinct one (``rank-3.Jul_15_10_52_41``:
    3, not the timestamp's seconds); else the trailing integer (SPEC §4.3); when that does
    not tell them apart (``worker0_step_12``, ``worker1_step_12``, or names ending in no
    number: ``rank2_host``), the integer at the last place in the names where they differ;
    else the worker's position. Each choice is noted."""
    tagged = {w: int(m.group(1)) for w in workers
              if (m := re.search(r"(?:rank|worker)[-_.]?(\d+)", w, re.IGNORECASE))}
    ints = {w: [int(x) for x in re.findall(r"\d+", w)] for w in workers}
    trailing = {w: int(m.group(1)) for w in workers if (m := re.search(r"(\d+)$", w))}
    places = {len(v) for v in ints.values()}
    by_place = None
    if workers and len(tagged) == len(set(tagged.values())) == len(workers):
        by_place, told = tagged, "the number after rank/worker in its name"
    elif len(set(trailing.values())) < len(workers) and len(places) == 1 and len(workers) > 1:
        for k in reversed(range(places.pop())):  # the last place where the names differ
            values = [ints[w][k] for w in workers]
            if len(set(values)) == len(values):
                by_place, told = dict(zip(workers, values)), ("the number that differs "
                                                              "between the workers' names")
                break
    out, how = {}, {}
    for i, w in enumerate(workers):
        if by_place is not None:
            out[w], how[w] = by_place[w], told
        elif w in trailing:
            out[w], how[w] = trailing[w], "its name"
        else:
            out[w], how[w] = i, "its position: its name ends in no number"
    if len(workers) <= 3:
        notes += [f"worker {w} has no distributedInfo rank: rank {out[w]} is taken from "
                  f"{how[w]}." for w in workers]
    elif workers:  # one note, not one per rank of a big job
        notes.append(f"{len(workers):,} workers have no distributedInfo rank: ranks are taken "
                     f"from {how[workers[0]]} (" + ", ".join(f"{w} -> {out[w]}" for w in workers[:3])
                     + ", ...).")
    return out


def _pick_ranks(summaries: list[TraceSummary], notes: list[str]) -> list[tuple[int, TraceSummary]]:
    """``[(rank, summary)]`` in rank order: one span per worker (its latest, as every route
    of a span defaults to, SPEC §3), one worker per rank."""
    spans: dict[str, list[TraceSummary]] = defaultdict(list)
    for s in summaries:  # (in worker, then numeric span order)
        if not isinstance(s.summary, dict):
            notes.append(f"worker {s.worker} span {s.span} has no distributed summary (analysed "
                         "by an older version: clear the cache) and is left out.")
            continue
        spans[s.worker].append(s)
    by_worker: dict[str, TraceSummary] = {}
    for worker, its in spans.items():
        s = its[-1]
        if len(its) > 1:
            notes.append(f"worker {worker} has {len(its)} spans; the latest, span {s.span}, "
                         f"is shown ({', '.join(o.span for o in its[:-1])} left out).")
        by_worker[worker] = TraceSummary(worker, s.span, _with_arrays(s.summary))
    named = _name_ranks([w for w, s in by_worker.items() if s.summary["rank"] is None], notes)
    picked: dict[int, TraceSummary] = {}
    for worker, s in by_worker.items():
        rank = s.summary["rank"] if s.summary["rank"] is not None else named[worker]
        if rank in picked:
            notes.append(f"workers {picked[rank].worker} and {worker} both claim rank {rank}; "
                         f"{worker} is left out.")
            continue
        picked[rank] = s
    return sorted(picked.items())


def _key_slices(sm: dict, keys: dict[tuple[str, str], int]) -> dict[int, np.ndarray]:
    """``{key id: indices of the rank's collectives of that (group, op), in start order}``;
    new (group, op) pairs are added to ``keys``."""
    pairs = {(g, o): keys.setdefault((sm["groups"][g], sm["ops"][o]), len(keys))
             for g in range(len(sm["groups"])) for o in range(len(sm["ops"]))}
    table = np.array([pairs[(g, o)] for g in range(len(sm["groups"])) for o in range(len(sm["ops"]))]
                     or [0], dtype=np.int64)
    kid = table[sm["group"].astype(np.int64) * max(len(sm["ops"]), 1) + sm["op"]]
    order = np.argsort(kid, kind="stable")  # by key, then start order
    bounds = np.searchsorted(kid[order], np.arange(len(keys) + 1))
    return {k: order[bounds[k]:bounds[k + 1]] for k in range(len(keys)) if bounds[k + 1] > bounds[k]}


def _match(ranks: list[tuple[int, TraceSummary]], notes: list[str]):
    """Per rank: wait (ns) of each of its collectives, and per rank the times it arrived last.

    The k-th collective of a (group, op) on each rank that made one is the same collective:
    when ranks made different numbers of calls, the last ones are matched over the ranks
    that made them (with a note; a call only one rank made is all transfer). Ranks of a run
    with one process group that made no call of an op count in that note too.

    Returns ``(waits, last, calls)``: ``waits[i]`` int64 per collective of rank ``i``;
    ``last[i]`` count; ``calls``: ``{op: [(transfer ns array, bytes array, ranks)]}``.
    """
    keys: dict[tuple[str, str], int] = {}
    slices = [_key_slices(s.summary, keys) for _r, s in ranks]
    waits = [np.zeros(len(s.summary["start"]), dtype=np.int64) for _r, s in ranks]
    last = np.zeros(len(ranks), dtype=np.int64)
    calls: dict[str, list[tuple[np.ndarray, np.ndarray, int]]] = defaultdict(list)
    one_group = len({g for _r, s in ranks for g in s.summary["groups"]}) <= 1
    for (group, op), k in keys.items():
        counts = [len(sl[k]) if k in sl else 0 for sl in slices]
        members = [i for i, c in enumerate(counts) if c]
        if not members:  # a (group, op) pair no rank ran
            continue
        told = range(len(ranks)) if one_group else members  # (every rank is in the group)
        if len({counts[i] for i in told}) > 1:
            detail = ", ".join(f"rank {ranks[i][0]}: {counts[i]}" for i in told)
            notes.append(f"ranks made different numbers of {op} calls in group {group} "
                         f"({detail}); the k-th calls of the ranks that made one are matched, "
                         "so the last calls wait for fewer ranks (one rank's alone: all "
                         "transfer).")
        lo = 0
        for hi in sorted({counts[i] for i in members}):  # calls [lo, hi): ranks with >= hi
            part = [i for i in members if counts[i] >= hi]
            idx = [slices[i][k][lo:hi] for i in part]
            durs = np.stack([ranks[i][1].summary["dur"][ix] for i, ix in zip(part, idx)])
            nbytes = np.stack([ranks[i][1].summary["bytes"][ix]
                               for i, ix in zip(part, idx)]).max(axis=0)
            transfer = durs.min(axis=0)
            for row, (i, ix) in enumerate(zip(part, idx)):
                waits[i][ix] = durs[row] - transfer
            if len(part) > 1:
                alone = (durs == transfer).sum(axis=0) == 1  # one arrived last (ties: none)
                np.add.at(last, np.array(part)[np.argmin(durs, axis=0)[alone]], 1)
            calls[op].append((transfer, nbytes, len(part)))
            lo = hi
    return waits, last.tolist(), calls


def _rank_entry(rank: int, s: TraceSummary, wait: np.ndarray) -> tuple[dict, int]:
    """The ``ranks`` entry of one rank and its total wait (ns) over its steps.

    Waits are unions of wait intervals (concurrent collectives, e.g. two DDP buckets, are
    not counted twice): per step, in total (over the steps; the whole trace without steps)
    and per op (the heat map). A step's transfer is the time in its collectives less its
    wait, so wait + transfer is the time the rank spent in collectives (a union of the
    transfer intervals overlapped the waits of concurrent collectives: more than that)."""
    sm = s.summary
    start, dur = sm["start"], sm["dur"]
    lo, hi = sm["step_start"], sm["step_end"]

    def waited(sel: slice | np.ndarray = slice(None)) -> tuple[np.ndarray, int]:
        """Wait of the collectives ``sel`` per step, and in total."""
        ws, we = union(start[sel], start[sel] + wait[sel])
        per_step = covered(ws, we, lo, hi)
        return per_step, int(per_step.sum() if len(lo) else (we - ws).sum())

    step_wait, total_wait = waited()
    step_transfer = covered(*union(start, start + dur), lo, hi) - step_wait
    steps = [{"step": name, "total_us": us(int(h - low)), "computation_us": c,
              "communication_us": m, "overlap_us": o, "other_us": x, "wait_us": w,
              "transfer_us": t}
             for name, low, h, c, m, o, x, w, t in zip(
                 sm["steps"], lo.tolist(), hi.tolist(), us_list(sm["computation"]),
                 us_list(sm["communication"]), us_list(sm["overlap"]), us_list(sm["other"]),
                 us_list(step_wait), us_list(step_transfer))]
    by_op = {name: waited(mine)[1] for o, name in enumerate(sm["ops"])
             if (mine := sm["op"] == o).any()}
    entry = {"rank": rank, "worker": s.worker, "span": s.span, "steps": steps,
             "total_wait_us": us(total_wait),
             "wait_by_collective_us": {op: us(w) for op, w in sorted(by_op.items())}}
    return entry, total_wait


def _collective_table(calls: dict[str, list[tuple[np.ndarray, np.ndarray, int]]],
                      group_size: int | None) -> dict:
    """Chart table per op: calls, bytes total/avg, transfer total/avg, algbw/busbw (GB/s).
    ``group_size``: how many ranks take part in each collective, for the bus bandwidth's
    factor (None: the ranks present that ran it)."""
    num = lambda n: {"type": "number", "name": n}  # noqa: E731
    columns = [{"type": "string", "name": "Name"}] + [num(n) for n in (
        "Calls", "Total Bytes", "Avg Bytes", "Total Transfer (µs)", "Avg Transfer (µs)",
        "Algorithmic Bandwidth (GB/s)", "Bus Bandwidth (GB/s)")]
    rows = []
    for op, parts in calls.items():
        transfer = np.concatenate([p[0] for p in parts]).astype(np.int64)
        nbytes = np.concatenate([p[1] for p in parts]).astype(np.int64)
        known = nbytes >= 0
        total_b = int(nbytes[known].sum()) if known.any() else None
        avg_b = round(total_b / int(known.sum()), 1) if known.any() else None
        known_t = int(transfer[known].sum())
        algbw = round(total_b / known_t, 3) if known.any() and known_t > 0 else None  # B/ns = GB/s
        n = group_size or max(p[2] for p in parts)
        factor = BUS_FACTOR.get(op, lambda n: 1.0)(n) if n > 1 else 1.0
        busbw = round(total_b / known_t * factor, 3) if algbw is not None else None
        calls_n, total_t = len(transfer), int(transfer.sum())
        rows.append([op, calls_n, total_b, avg_b, us(total_t), round(total_t / calls_n / 1000, 1),
                     algbw, busbw])
    rows.sort(key=lambda r: (-r[4], r[0]))
    return {"columns": columns, "rows": rows}


def _straggler(entries: list[dict], totals: list[int], last: list[int], n_coll: int) -> dict | None:
    """The straggler line of SPEC §4.3, or None (fewer than 2 ranks, or no clear one)."""
    if len(entries) < 2 or not n_coll:
        return None
    ranks = [e["rank"] for e in entries]
    evidence = {"wait_us": {str(r): us(t) for r, t in zip(ranks, totals)},
                "arrived_last": {str(r): c for r, c in zip(ranks, last)},
                "collectives": n_coll}
    least = min(totals)
    slow = [k for k, t in enumerate(totals) if t == least]  # (several when tied)
    others = [t for k, t in enumerate(totals) if t != least]
    # named when they wait less than half the others' median, and are not the majority
    if len(slow) > len(others) or not least < float(np.median(others)) / 2:
        return {"rank": None, "ranks": [], **evidence,
                "text": "no straggler: every rank waits about as long as the others "
                        f"({_span(min(totals), max(totals))})."}
    named = _and([str(ranks[k]) for k in slow])
    steps = len(entries[slow[0]]["steps"])
    text = (f"rank{'s' if len(slow) > 1 else ''} {named} waited {_span(least, least)}"
            + (f" in {steps} step{'s' if steps > 1 else ''}" if steps else "")
            + (f", the other {_span(others[0], others[0])}: it waits" if len(others) == 1 else
               f", the others {_span(min(others), max(others))}: they wait")
            + f" for rank{'s' if len(slow) > 1 else ''} {named}")
    return {"rank": ranks[slow[0]] if len(slow) == 1 else None,
            "ranks": [ranks[k] for k in slow], **evidence, "text": text}


def _and(items: list[str]) -> str:
    """``["0"]`` -> ``0``; ``["0", "1", "2"]`` -> ``0, 1 and 2``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _span(lo_ns: int, hi_ns: int) -> str:
    """``30 µs``, ``0.7 ms``, ``188–227 ms``: one value when both read the same; µs when
    both are below 1 ms (a wait of 30 µs is not "0.0 ms")."""
    if hi_ns < 1_000_000:
        a, b, unit = f"{lo_ns / 1e3:,.0f}", f"{hi_ns / 1e3:,.0f}", "µs"
    else:
        a, b, unit = _ms(lo_ns), _ms(hi_ns), "ms"
    return f"{a} {unit}" if a == b else f"{a}–{b} {unit}"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.0f}" if ns >= 10e6 else f"{ns / 1e6:,.1f}"


def combine(summaries: list[TraceSummary], failed: list[tuple[str, str, str]]) -> dict:
    """The run's distributed payloads from its ranks' summaries (see the module doc)."""
    if failed and not summaries:
        raise StepscopeError("no usable trace", f"none of the run's {len(failed)} trace"
                             f"{'s' if len(failed) > 1 else ''} could be analysed ("
                             + "; ".join(f"worker {w} span {s}: {e}" for w, s, e in failed[:3])
                             + ("; ..." if len(failed) > 3 else "") + ").", status=422)
    notes: list[str] = [f"worker {w} span {s} could not be analysed and is left out: {e}"
                        for w, s, e in failed]
    ranks = _pick_ranks(summaries, notes)
    worlds = {s.summary["world_size"] for _r, s in ranks if s.summary["world_size"]}
    world = max(worlds) if worlds else len(ranks)
    if len(worlds) > 1:
        notes.append(f"ranks disagree on world_size ({', '.join(map(str, sorted(worlds)))}).")
    if worlds:
        missing = sorted(set(range(world)) - {r for r, _s in ranks})
        if missing and len(missing) <= 20:
            notes.append(f"no trace for rank{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} of {world}: waits are over the ranks present.")
        elif missing:
            notes.append(f"traces of {len(missing)} of {world} ranks are missing: waits are "
                         "over the ranks present.")
    if len(ranks) == 1:
        notes.append("a single rank: per-rank breakdown only (wait and straggler need >= 2 ranks).")
    waits, last, calls = _match(ranks, notes)
    entries, totals = [], []
    for (rank, s), wait in zip(ranks, waits):
        entry, total = _rank_entry(rank, s, wait)
        entries.append(entry)
        totals.append(total)
    n_coll = sum(len(p[0]) for parts in calls.values() for p in parts if p[2] > 1)
    # one process group: every rank of the world takes part, traced or not
    groups = {g for _r, s in ranks for g in s.summary["groups"]}
    return {
        "ranks": {"world_size": world, "ranks": entries, "notes": notes},
        "collectives": _collective_table(calls, world if worlds and len(groups) <= 1 else None),
        "straggler": _straggler(entries, totals, last, n_coll),
    }


DISTRIBUTED = RunAnalysis(
    name="distributed", summarise=summarise, combine=combine, brief=brief,
    routes=(
        RunRoute("distributed/ranks", lambda c, p: c["ranks"]),
        RunRoute("distributed/collectives", lambda c, p: c["collectives"]),
        RunRoute("distributed/straggler", lambda c, p: c["straggler"]),
    ))

__all__ = ["DISTRIBUTED", "brief", "combine", "has_data", "summarise"]
