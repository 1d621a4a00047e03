"""Overview payload (SPEC §2.2, §2.3, §2.6, §3): steps table, performance summary, GPU
summary, recommendations and data-quality notes."""

from __future__ import annotations

import dataclasses
import html

from ..analysis import Analysis
from ..analysis.gpu_metrics import DEFINITIONS, GpuSummary
from ..analysis.recommendations import DOCS, Item
from ..units import div_round, pct, us
from .registry import Route, View

_TOOLTIP = ('<div class="visualization-tooltip" style="white-space: nowrap;">'
            "Step {step}<br>Total: {total}us<br><b>{cat}: {value}us</b><br>"
            "Percentage: {share}%</div>")


def steps_table(a: Analysis) -> dict:
    """Chart table: one row per kept step, a value and a tooltip column per category."""
    bd = a.breakdown
    columns = [{"type": "string", "name": "Step"}]
    for cat in bd.categories:
        columns.append({"type": "number", "name": cat})
        columns.append({"type": "string", "role": "tooltip", "p": {"html": "true"}})
    rows = []
    for i, step in enumerate(a.steps.names):
        total_ns = int(bd.totals[i])
        row: list = [step]
        for k, cat in enumerate(bd.categories):
            v = int(bd.values[i, k])
            row.append(us(v))
            row.append(_TOOLTIP.format(step=step, total=us(total_ns), cat=cat, value=us(v),
                                       share=pct(v, total_ns)))
        rows.append(row)
    return {"columns": columns, "rows": rows}


def performance(a: Analysis) -> list[dict]:
    """Average step time and each category's average (rounded once) and share."""
    bd = a.breakdown
    n = len(a.steps)
    if not n:
        return []
    total = int(bd.totals.sum())
    children = []
    for k, cat in enumerate(bd.categories):
        part = int(bd.values[:, k].sum())
        children.append({"name": cat, "description": "", "value": div_round(part, n * 1000),
                         "extra": pct(part, total)})
    return [{"name": "Average Step Time", "description": "", "value": div_round(total, n * 1000),
             "extra": 100, "children": children}]


def environments(a: Analysis) -> list[dict]:
    """Legacy key/value list: workers, device type, utilization per GPU."""
    world = a.trace.distributed_info.get("world_size")
    out = [{"title": "Number of Worker(s)", "value": str(world if isinstance(world, int)
                                                         and world > 0 else 1)},
           {"title": "Device Type", "value": "GPU" if a.gpu else "CPU"}]
    for g in a.gpus:
        u = g.metrics.get("GPU Utilization")
        if u is not None:
            out.append({"title": f"GPU Utilization of GPU{g.id}", "value": f"{round(u, 2):.2f} %"})
    return out


def notes(a: Analysis) -> list[dict]:
    """Data-quality notes: the reader's, then the analyses'."""
    return [n.to_json() for n in (*a.trace.notes, *a.notes)]


def gpu_json(g: GpuSummary) -> dict:
    """A GPU of ``gpu_metrics.gpus`` (SPEC §2.3): metrics in percent, two decimals."""
    out = {"id": g.id, "name": g.name, "memory_bytes": g.memory_bytes,
           "compute_capability": g.compute_capability,
           "metrics": [{"name": k, "value": round(v, 2), "unit": "%",
                        "definition": DEFINITIONS[k]} for k, v in g.metrics.items()]}
    if g.arch:
        out["arch"] = g.arch
    return out


def to_html(items: list[Item]) -> str:
    """Legacy HTML list: escaped text plus a doc link per item (``N/A`` when none)."""
    if not items:
        return "<ul><li>N/A</li></ul>"
    lis = []
    for it in items:
        url, title = DOCS[it.id]
        lis.append(f"<li>{html.escape(it.text)} Reference: <a href =\"{html.escape(url)}\" "
                   f"target=\"_blank\">{html.escape(title)}</a></li>")
    return "<ul>" + "".join(lis) + "</ul>"


def overview_payload(a: Analysis) -> dict:
    """The ``overview`` route's payload."""
    steps = a.steps
    return {
        "steps": steps_table(a),
        "performance": performance(a),
        "recommendations": to_html(a.items),
        "recommendation_items": [dataclasses.asdict(it) for it in a.items],
        "environments": environments(a),
        "gpu_metrics": {"gpus": [gpu_json(g) for g in a.gpus]},
        "notes": notes(a),
        "step_summary": {"kept": len(steps), "found": steps.found, "dropped": steps.dropped,
                         "whole_trace": steps.synthetic},
    }


VIEW = View(
    name="Overview", frontend="overview",
    build=overview_payload,
    # a device-only trace (kernels, no host events) still has GPU metrics and a breakdown
    has_data=lambda a: a.has_host or a.gpu,
    routes=(Route("overview", lambda v, p: v.payload("Overview")),),
)
