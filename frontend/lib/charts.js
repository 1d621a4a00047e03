// Plotly charts. plotly.js is the copy the server serves from the installed `plotly`
// Python package (vendor/plotly.min.js, a relative URL): nothing is loaded from outside.
// Every string handed to plotly is escaped (plotly renders some HTML tags in labels).
import { escapeHtml, formatDuration, formatPercent, shortenName } from "./format.js";

let plotlyPromise = null;
const plotted = new Set();

/** window.Plotly, loading vendor/plotly.min.js on first use. */
export function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!plotlyPromise) {
    plotlyPromise = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = "vendor/plotly.min.js";
      s.async = true;
      s.onload = () => (window.Plotly ? resolve(window.Plotly)
        : reject(new Error("vendor/plotly.min.js loaded but defined no Plotly")));
      s.onerror = () => {
        plotlyPromise = null;
        reject(new Error("Charts are unavailable: the server did not serve vendor/plotly.min.js "
          + "(is the `plotly` Python package installed?)"));
      };
      document.head.appendChild(s);
    });
  }
  return plotlyPromise;
}

/** Free the plots inside `root` (or the ones no longer in the page). */
export function purgeCharts(root = null) {
  for (const node of [...plotted]) {
    if (!node.isConnected || (root && root.contains(node))) {
      window.Plotly?.purge(node);
      plotted.delete(node);
    }
  }
}

const FONT = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: "#1f2933" };
// Charts have fixed axes; the only tool is "save as PNG" (nothing that links outside).
const CONFIG = { displaylogo: false, responsive: true, modeBarButtons: [["toImage"]],
  showLink: false, showSendToCloud: false, showEditInChartStudio: false };

export async function plot(node, data, layout) {
  const Plotly = await loadPlotly();
  await Plotly.react(node, data, { font: FONT, paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)", hoverlabel: { font: { ...FONT, color: "#fff" }, bgcolor: "#1f2933", align: "left" },
    ...layout }, { ...CONFIG, toImageButtonOptions: { filename: `stepscope-${node.id || "chart"}` } });
  plotted.add(node);
  return node;
}

/** Escaped text cut into lines of about `width` chars at spaces or commas, joined by <br>. */
export function wrapForHover(text, width = 90) {
  const s = String(text);
  const lines = [];
  let rest = s;
  while (rest.length > width) {
    let cut = Math.max(rest.lastIndexOf(" ", width), rest.lastIndexOf(",", width) + 1);
    if (cut < width / 2) cut = width;
    lines.push(rest.slice(0, cut));
    rest = rest.slice(cut).replace(/^ /, "");
  }
  lines.push(rest);
  return lines.map(escapeHtml).join("<br>");
}

/**
 * Pie slices from [[name, value], ...]: the biggest `max - 1` slices, the rest folded into
 * one "Other (N more)" slice (unless only one would be folded). Values <= 0 are dropped.
 * -> [{name, value, count}] sorted descending; count > 1 marks the folded slice.
 */
export function foldTail(rows, max = 10) {
  const items = rows.map(([name, value]) => ({ name: String(name), value: Number(value), count: 1 }))
    .filter((r) => r.value > 0)
    .sort((a, b) => b.value - a.value);
  if (items.length <= max) return items;
  const kept = items.slice(0, max - 1);
  const tail = items.slice(max - 1);
  kept.push({ name: `Other (${tail.length} more)`, value: tail.reduce((s, r) => s + r.value, 0),
    count: tail.length, other: true });
  return kept;
}

/** Short legend labels, made unique (plotly merges slices with equal labels). */
export function uniqueLabels(names, max = 42) {
  const seen = new Map();
  return names.map((name) => {
    const base = shortenName(name, max);
    const n = (seen.get(base) ?? 0) + 1;
    seen.set(base, n);
    return n === 1 ? base : `${base} #${n}`;
  });
}

const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
  "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8"];
const OTHER_COLOR = "#bab0ac";

/**
 * A pie of [[name, value]] (durations in µs unless `format` says otherwise), tail folded
 * into a grey "Other"; `colorOf(name)` fixes slice colours. Legend: short names; hover:
 * the full name, value and share.
 */
export async function drawPie(node, rows, { max = 10, format = formatDuration, colorOf } = {}) {
  const slices = foldTail(rows, max);
  const total = slices.reduce((s, r) => s + r.value, 0);
  const labels = uniqueLabels(slices.map((s) => s.name));
  const share = (s) => (total ? 100 * s.value / total : 0);
  const data = [{
    type: "pie", sort: false, direction: "clockwise", hole: 0.35,
    domain: { x: [0, 0.48], y: [0, 1] },
    labels: labels.map(escapeHtml),
    values: slices.map((s) => s.value),
    text: slices.map((s) => (share(s) >= 3 ? escapeHtml(formatPercent(share(s), 1)) : "")),
    hovertext: slices.map((s) => `${wrapForHover(s.name)}<br>${escapeHtml(format(s.value))} · ${escapeHtml(formatPercent(share(s), 1))}`),
    hoverinfo: "text", textinfo: "text", textposition: "inside", insidetextorientation: "horizontal",
    marker: { colors: slices.map((s, i) => (colorOf ? colorOf(s.name)
      : s.other ? OTHER_COLOR : PALETTE[i % PALETTE.length])) },
  }];
  return plot(node, data, { margin: { l: 10, r: 10, t: 10, b: 10 }, showlegend: true,
    legend: { font: { size: 11 }, x: 0.52, xanchor: "left", y: 0.5, yanchor: "middle" } });
}

/** Step-breakdown colours, one per category (SPEC §2.2 order). */
export const CATEGORY_COLORS = {
  Kernel: "#4e79a7", Memcpy: "#f28e2b", Memset: "#e15759", Communication: "#76b7b2",
  Runtime: "#59a14f", DataLoader: "#edc948", "CPU Exec": "#b07aa1", Other: "#bab0ac",
};

/**
 * Stacked columns, one per step: `steps` names, `categories` [{name, values}], `average`
 * µs (dashed line), `labels` the columns' names (default "Step N"). Each segment's hover:
 * step, total, category time and share.
 */
export async function drawStepChart(node, { steps, categories, average, labels }) {
  const totals = steps.map((_, i) => categories.reduce((s, c) => s + (Number(c.values[i]) || 0), 0));
  const [unit, scale] = axisUnit(Math.max(...totals, 1));
  const x = labels ?? steps.map((s) => `Step ${s}`);
  const data = categories.map((c) => ({
    type: "bar", name: escapeHtml(c.name), x: x.map(escapeHtml), y: c.values.map((v) => v / scale),
    marker: { color: CATEGORY_COLORS[c.name] },
    hovertext: c.values.map((v, i) => [
      escapeHtml(x[i]), `Total: ${escapeHtml(formatDuration(totals[i]))}`,
      `<b>${escapeHtml(c.name)}: ${escapeHtml(formatDuration(v))}</b>`,
      `Percentage: ${escapeHtml(formatPercent(totals[i] ? 100 * v / totals[i] : 0))}`].join("<br>")),
    hoverinfo: "text",
  }));
  const shapes = [];
  const annotations = [];
  if (Number.isFinite(average) && average > 0) {
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: average / scale, y1: average / scale,
      line: { color: "#1f2933", width: 1.5, dash: "dash" } });
    annotations.push({ xref: "paper", x: 1.005, xanchor: "left", y: average / scale, yanchor: "middle",
      showarrow: false, align: "left", text: `Average<br>${escapeHtml(formatDuration(average))}`,
      font: { size: 11, color: "#1f2933" } });
  }
  return plot(node, data, {
    barmode: "stack", bargap: steps.length < 4 ? 0.75 : 0.35, // no slab-wide lone bar
    margin: { l: 64, r: 80, t: 10, b: 40 },
    xaxis: { type: "category", fixedrange: true, automargin: true },
    yaxis: { title: { text: `Step time (${unit})` }, fixedrange: true, gridcolor: "#e4e7eb", rangemode: "tozero" },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", traceorder: "normal" },
    shapes, annotations,
  });
}

/** Most columns a per-step bar chart draws: past it, each column is the mean of a run of
 * consecutive steps (a bar per step froze the page for minutes at 60,000 steps). */
export const MAX_COLUMNS = 200;

/**
 * Columns for `names` (steps, in order), at most `max`: `per` consecutive names each,
 * `starts` the index of each column's first, `labels` "Step 7", or "1–3" (short: the
 * ticks of 200 columns stand on end).
 */
export function columnGroups(names, max = MAX_COLUMNS) {
  const per = Math.max(1, Math.ceil(names.length / max));
  const starts = [];
  for (let i = 0; i < names.length; i += per) starts.push(i);
  const labels = starts.map((i) => {
    const last = Math.min(i + per, names.length) - 1;
    return last === i && per === 1 ? `Step ${names[i]}` : `${names[i]}–${names[last]}`;
  });
  return { per, starts, labels };
}

/** `values` (one per name) as the mean of each column of `groups` ({@link columnGroups}). */
export function columnMeans(values, { per, starts }) {
  return starts.map((i) => {
    const run = values.slice(i, i + per);
    return run.length === 1 ? run[0] : run.reduce((t, v) => t + (Number(v) || 0), 0) / run.length;
  });
}

/** The axis unit for values up to `maxUs` µs: ["ms", 1000] and so on. */
export function axisUnit(maxUs) {
  if (maxUs >= 1e6) return ["s", 1e6];
  if (maxUs >= 1e3) return ["ms", 1e3];
  return ["µs", 1];
}

/**
 * Stacked bars over categories `x` (labels, escaped here): `series` [{name, values (µs),
 * color}], y axis in the unit that fits. `onClick(index)` hears a click on column `index`.
 */
export async function drawStackedBars(node, { x, series, yTitle, onClick }) {
  const totals = x.map((_, i) => series.reduce((s, c) => s + (Number(c.values[i]) || 0), 0));
  const [unit, scale] = axisUnit(Math.max(...totals, 1));
  const labels = x.map((v) => escapeHtml(v));
  const data = series.map((c) => ({
    type: "bar", name: escapeHtml(c.name), x: labels, y: c.values.map((v) => (Number(v) || 0) / scale),
    marker: { color: c.color },
    hovertext: c.values.map((v, i) => [labels[i], `<b>${escapeHtml(c.name)}: ${escapeHtml(formatDuration(v))}</b>`,
      `Share: ${escapeHtml(formatPercent(totals[i] ? 100 * v / totals[i] : 0))}`].join("<br>")),
    hoverinfo: "text",
  }));
  await plot(node, data, {
    barmode: "stack", bargap: x.length < 4 ? 0.6 : 0.3, margin: { l: 64, r: 20, t: 10, b: 40 },
    xaxis: { type: "category", fixedrange: true, automargin: true },
    yaxis: { title: { text: `${yTitle} (${unit})` }, fixedrange: true, gridcolor: "#e4e7eb", rangemode: "tozero" },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", traceorder: "normal" },
  });
  if (onClick && !node.dataset.clickBound) {
    node.dataset.clickBound = "1";
    node.on?.("plotly_click", (ev) => {
      const i = ev?.points?.[0]?.pointIndex;
      if (Number.isInteger(i)) onClick(i);
    });
  }
  return node;
}

/** A heat map of µs values `z[row][col]` (rows `y`, columns `x`, labels escaped here). */
export async function drawHeatmap(node, { x, y, z, title }) {
  const data = [{
    type: "heatmap", x: x.map(escapeHtml), y: y.map(escapeHtml), z, zmin: 0, colorscale: "YlOrRd", reversescale: true,
    hovertemplate: "%{y} · %{x}<br>%{text}<extra></extra>",
    text: z.map((row) => row.map((v) => escapeHtml(formatDuration(v)))),
    colorbar: { title: { text: escapeHtml(title) } },
  }];
  return plot(node, data, { margin: { l: 80, r: 20, t: 10, b: 60 },
    xaxis: { type: "category", fixedrange: true, automargin: true }, yaxis: { type: "category", fixedrange: true, autorange: "reversed" } });
}
