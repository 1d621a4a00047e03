// Overview: GPU summary, execution summary, step-time breakdown chart, recommendations
// and data-quality notes, from the `overview` endpoint (SPEC §2.2, §2.3, §2.6).
import { CATEGORY_COLORS, columnGroups, columnMeans, drawStepChart } from "../lib/charts.js";
import { card, el, helpIcon, safeLink, setChildren } from "../lib/dom.js";
import { formatBytes, formatCount, formatDuration, formatPercent, formatValue } from "../lib/format.js";
import { GPU_HINT, emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { csvButton } from "../lib/table.js";

const CATEGORY_HELP = {
  Kernel: "GPU kernels, except communication kernels.",
  Memcpy: "GPU memory copies (host to device, device to host, device to device).",
  Memset: "GPU memory sets.",
  Communication: "Collective communication (NCCL/RCCL kernels, c10d and gloo collectives).",
  Runtime: "CUDA runtime and driver calls on the host (kernel launches, syncs, events).",
  DataLoader: "Host time in DataLoader __next__ (loading and preparing input batches).",
  "CPU Exec": "Other host work: operators, user ranges, Python.",
  Other: "Step time covered by none of the above (idle).",
};

/**
 * Step rows of the `steps` chart-table -> {steps, categories: [{name, values}]}. The
 * category of each value column is read from its tooltip when it names one ("<b>Memset:"):
 * an older tool's headers list Communication before Memset while its values do not.
 */
export function stepSeries(table) {
  const cols = table?.columns ?? [];
  const rows = table?.rows ?? [];
  const series = [];
  cols.forEach((c, i) => {
    if (i === 0 || c.role === "tooltip" || c.type !== "number") return;
    series.push({ index: i, name: c.name, tip: cols[i + 1]?.role === "tooltip" ? i + 1 : -1 });
  });
  const categories = series.map((s) => {
    const fromTip = rows.length && s.tip >= 0
      ? /<b>([^<:]+):/.exec(String(rows[0][s.tip] ?? ""))?.[1]?.trim() : null;
    return { name: fromTip && Object.hasOwn(CATEGORY_COLORS, fromTip) ? fromTip : s.name,
      values: rows.map((r) => Number(r[s.index]) || 0) };
  });
  const order = Object.keys(CATEGORY_COLORS);
  categories.sort((a, b) => (order.indexOf(a.name) + 1 || 99) - (order.indexOf(b.name) + 1 || 99));
  return { steps: rows.map((r) => String(r[0])), categories };
}

/** "gfx90a" on ROCm (its compute major/minor is no CUDA compute capability), else
 * "compute capability 8.0"; "" when unknown. */
export function gpuArch(g) {
  if (g?.arch) return String(g.arch);
  if (/\b(AMD|Instinct|Radeon)\b/i.test(String(g?.name ?? ""))) return ""; // no CUDA capability
  return g?.compute_capability ? `compute capability ${g.compute_capability}` : "";
}

/** "GPU2": a GPU's label as every view and the recommendations write it. */
export function gpuLabel(g) {
  return `GPU${g.id}`;
}

function gpuCards(overview) {
  const gpus = overview.gpu_metrics?.gpus ?? [];
  const envs = overview.environments ?? [];
  const envRow = el("dl", { className: "env-list" }, envs.filter((e) => !/^GPU Utilization of/.test(e.title))
    .map((e) => el("div", {}, el("dt", {}, e.title), el("dd", {}, String(e.value)))));
  if (!gpus.length) {
    // Older payloads carry GPU utilization only as an environment line.
    const utils = envs.filter((e) => /^GPU Utilization of/.test(e.title));
    return card("GPU Summary", envRow, utils.length ? el("div", { className: "metric-grid" },
      utils.map((e) => metricCard(e.title, String(e.value), "Share of the steps' time in which the GPU ran a kernel.")))
      : emptyState("No GPU activity", `This trace has no GPU kernels: the time is all on the host. ${GPU_HINT}`));
  }
  return card("GPU Summary", envRow, gpus.map((g) => el("div", { className: "gpu" },
    el("div", { className: "gpu-head" },
      el("strong", {}, gpuLabel(g)), g.name ? ` · ${g.name}` : "",
      g.memory_bytes ? el("span", { className: "muted" }, ` · ${formatBytes(g.memory_bytes)}`) : null,
      gpuArch(g) ? el("span", { className: "muted" }, ` · ${gpuArch(g)}`) : null),
    el("div", { className: "metric-grid" },
      (g.metrics ?? []).map((m) => metricCard(m.name, formatValue(m.value, m.unit), m.definition))))));
}

function metricCard(name, value, definition) {
  return el("div", { className: "metric" },
    el("div", { className: "metric-name" }, name, helpIcon(definition)),
    el("div", { className: "metric-value" }, value));
}

/**
 * The Execution Summary as shown, for its CSV: one row per category then the step-time
 * row; time per step in µs, share in %.
 */
export function executionRows(perf) {
  const columns = [{ key: "category", label: "Category", kind: "text" },
    { key: "time_us", label: "Time per step", kind: "duration" }, { key: "share", label: "Share", kind: "percent" }];
  const rows = (perf?.children ?? []).map((c) => ({ category: c.name, time_us: c.value, share: c.extra }));
  if (perf) rows.push({ category: perf.name || "Average Step Time", time_us: perf.value, share: perf.extra ?? 100 });
  return { columns, rows };
}

function executionSummary(overview) {
  const perf = overview.performance?.[0];
  if (!perf) return null;
  const rows = (perf.children ?? []).map((c) => el("tr", {},
    el("td", {}, el("span", { className: "swatch", style: { background: CATEGORY_COLORS[c.name] ?? "#999" } }),
      c.name, helpIcon(c.description || CATEGORY_HELP[c.name])),
    el("td", { className: "num", title: `${c.value} µs` }, formatDuration(c.value)),
    el("td", { className: "num" }, formatPercent(c.extra))));
  return card("Execution Summary",
    el("div", { className: "card-tools" }, csvButton("execution_summary.csv",
      "Download this table (categories and step time, µs and %) as CSV", () => executionRows(perf), "overview-summary-csv")),
    el("table", { className: "data-table summary-table" },
      el("thead", {}, el("tr", {}, el("th", {}, "Category"), el("th", { className: "num" }, "Time per step"),
        el("th", { className: "num" }, "Share"))),
      el("tbody", {}, rows),
      el("tfoot", {}, el("tr", {}, el("th", {}, perf.name || "Average Step Time"),
        el("th", { className: "num", title: `${perf.value} µs` }, formatDuration(perf.value)),
        el("th", { className: "num" }, formatPercent(perf.extra ?? 100))))));
}

function stepChart(overview) {
  const { steps, categories } = stepSeries(overview.steps);
  const box = el("div", { className: "chart step-chart", id: "step-chart" });
  // a trace without ProfilerStep is one step "0" spanning it (SPEC §2.1.1): say so
  const whole = Boolean(overview.step_summary?.whole_trace);
  const section = card(whole ? "Step Time Breakdown (whole trace: no ProfilerStep)"
    : `Step Time Breakdown (${steps.length} step${steps.length === 1 ? "" : "s"})`, box);
  if (!steps.length) {
    setChildren(box, emptyState("No steps", "This trace has no ProfilerStep ranges and no host events."));
    box.className = "";
    return section;
  }
  const average = Number(overview.performance?.[0]?.value);
  // past MAX_COLUMNS steps a column is the mean of a run of them (one bar each froze the page)
  const groups = columnGroups(steps);
  const labels = whole ? steps.map(() => "Whole trace") : groups.labels;
  const means = groups.per > 1 ? categories.map((c) => ({ ...c, values: columnMeans(c.values, groups) })) : categories;
  if (groups.per > 1) {
    section.insertBefore(el("p", { className: "muted", id: "step-chart-means" },
      `${formatCount(steps.length)} steps: each column is the mean of ${formatCount(groups.per)} consecutive steps, named first–last.`), box);
  }
  drawStepChart(box, { steps: groups.starts.map((i) => steps[i]), categories: means, average, labels }).catch((err) => setChildren(box, errorPanel(err)));
  return section;
}

function recommendations(overview) {
  const items = overview.recommendation_items ?? [];
  return card("Recommendations", items.length
    ? el("ul", { className: "recommendations" }, items.map((r) => el("li", { dataset: { id: r.id ?? "" } },
      el("div", {}, r.text),
      r.evidence ? el("div", { className: "muted evidence" }, r.evidence) : null,
      r.doc_url ? el("div", {}, safeLink(r.doc_url, "Read more in the PyTorch docs ↗")) : null)))
    : el("p", { className: "muted" }, "No performance issue detected in this span."));
}

function notes(overview) {
  const list = overview.notes ?? [];
  if (!list.length) return null;
  return card("Data Quality", el("ul", { className: "notes" }, list.map((n) =>
    el("li", { className: `note note-${n.level === "warning" ? "warning" : "info"}` },
      el("span", { className: "note-level" }, n.level === "warning" ? "Warning" : "Note"), n.text))));
}

/** Render the overview of ctx.client's span into `root`. */
export async function render(root, ctx) {
  setChildren(root, loadingLine("Loading overview…"));
  const overview = await ctx.client.get("overview");
  if (!ctx.alive()) return;
  setChildren(root, el("div", { className: "overview-grid" },
    el("div", { className: "col-main" }, stepChart(overview), recommendations(overview), notes(overview)),
    el("div", { className: "col-side" }, gpuCards(overview), executionSummary(overview))));
}
