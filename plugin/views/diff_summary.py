"""The "what changed most" line of the Diff view (SPEC §4.4), in words, with its evidence.

Input: the breakdown diff of :func:`stepscope.views.diff.diff_overview` and the operator and
kernel diff rows. Table values are span totals; the summary divides each side's totals by
that side's step count, so spans with different numbers of steps compare fairly::

    {"text": "Step time +12.3 ms per step (+8.27 %, 148.7 ms -> 161.0 ms), mostly Kernel +10.1 ms.",
     "evidence": [{"kind": "operator", "name": "aten::copy_", "metric": "device_self_us",
                   "delta_per_step_us": 38012.5, "calls_delta_per_step": 412.0,
                   "text": "aten::copy_: device self +38.0 ms per step (+412 calls per step)"}]}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: categories whose time comes from device work: the evidence is device time then
DEVICE_TIME = frozenset({"Kernel", "Memcpy", "Memset", "Communication"})
LABELS = {"device_self_us": "device self", "host_self_us": "host self",
          "host_total_us": "host total", "total_us": "total"}
EVIDENCE = 3


def fmt_us(v: float, signed: bool = False) -> str:
    """µs for a reader: ``38012.5 -> "38.0 ms"``, ``-512 -> "-512 µs"``, ``2.5e6 -> "2.50 s"``."""
    a = abs(v)
    if a < 1000:
        text = f"{round(a, 1):g} µs"
    elif a < 1e6:
        text = f"{a / 1e3:.1f} ms"
    else:
        text = f"{a / 1e6:.2f} s"
    sign = "-" if v < 0 else "+" if signed else ""
    return sign + text


def _count(v: float) -> str:
    r = round(v, 1)
    return f"{'+' if r > 0 else ''}{r:g}"


def _per_step(row: dict, field: str, steps: dict) -> tuple[float | None, float | None]:
    """(delta per step of ``field``, delta per step of calls) of a diff row."""
    b, e = row["baseline"][field], row["experiment"][field]
    if b is None or e is None:
        return None, None
    nb, ne = steps["baseline"] or 1, steps["experiment"] or 1
    calls = row["experiment"]["calls"] / ne - row["baseline"]["calls"] / nb
    return e / ne - b / nb, calls


def evidence(rows: list[dict], kind: str, field: str, steps: dict, sign: int) -> list[dict]:
    """The rows whose ``field`` changed most per step, those that moved the way the step
    time did (``sign``) first."""
    items = []
    for r in rows:
        d, calls = _per_step(r, field, steps)
        if not d:
            continue
        items.append({"kind": kind, "name": r["name"], "metric": field,
                      "delta_per_step_us": round(d, 1), "calls_delta_per_step": round(calls, 1),
                      "text": f"{r['name']}: {LABELS[field]} {fmt_us(d, True)} per step"
                              + (f" ({_count(calls)} call{'' if abs(round(calls, 1)) == 1 else 's'}"
                                 " per step)" if round(calls, 1) else "")})
    items.sort(key=lambda x: (sign * x["delta_per_step_us"] <= 0, -abs(x["delta_per_step_us"]),
                              x["name"]))
    return items[:EVIDENCE]


def change(b: Any, e: Any) -> float:
    """``e - b``, a side without the value (null: the device time of a CPU-only side) counted
    as 0, as it ran none: what moved a GPU trace away from a CPU-only one."""
    return (e or 0) - (b or 0)


def summary(ov: dict, operators: list[dict], kernels: list[dict],
            ranges: Callable[[], list[dict]] = list) -> dict[str, Any]:
    """``{"text", "evidence": [...]}``: the step-time change, the categories that moved it
    most, and the operators (and kernels) that changed most per step. When host collectives
    moved it most (Communication, not both sides on a GPU: gloo), the user ranges
    (``ranges()``: their diff rows) whose host total changed most come first: the time lies
    in ``gloo:*`` ranges, and the collective ops themselves only enqueue the work."""
    b, e = ov["baseline"].get("Total"), ov["experiment"].get("Total")
    steps = ov["steps"]
    if b is None or e is None:
        side = "baseline" if b is None else "experiment"
        return {"text": f"The {side} has no steps to compare.", "evidence": []}
    d = e - b
    pct = f", {100 * d / b:+.2f} %" if b else ""
    if d:
        text = (f"Step time {fmt_us(d, True)} per step ({'slower' if d > 0 else 'faster'}"
                f"{pct}, {fmt_us(b)} -> {fmt_us(e)})")
    else:
        text = f"Step time unchanged ({fmt_us(b)} per step)"
    moved = sorted(((c, v) for c in ov["categories"]
                    if (v := change(ov["baseline"][c], ov["experiment"][c]))),
                   key=lambda x: (-abs(x[1]), x[0]))
    sign = (1 if d > 0 else -1) if d else (1 if moved and moved[0][1] > 0 else -1)
    top = [(c, v) for c, v in moved if v * sign > 0][:2] or moved[:1]
    if top:
        text += ", mostly " + ", ".join(f"{c} {fmt_us(v, True)}" for c, v in top)
        against = [(c, v) for c, v in moved if v * sign < 0]
        if against and abs(top[0][1]) > 2 * abs(d):  # most of it cancelled out elsewhere
            text += f", offset by {against[0][0]} {fmt_us(against[0][1], True)}"
    text += "."
    if steps["baseline"] != steps["experiment"]:
        text += (f" The baseline has {steps['baseline']} steps, the experiment "
                 f"{steps['experiment']}: the tables compare span totals.")
    device = (bool(top) and top[0][0] in DEVICE_TIME
              and ov["device"]["baseline"] == ov["device"]["experiment"] == "GPU")
    field = "device_self_us" if device else "host_self_us"
    items = evidence(operators, "operator", field, steps, sign)
    if top and top[0][0] == "Communication" and not device:
        items = (evidence(ranges(), "range", "host_total_us", steps, sign)[:2] + items)[:EVIDENCE]
    if device:
        items += evidence(kernels, "kernel", "total_us", steps, sign)[:2]
    return {"text": text, "evidence": items}
