// Memory view (SPEC §4.1): per device, the Total Allocated / Total Reserved curve with step
// markers and the peak (drag to zoom: the server sends that window only, downsampled), the
// memory recommendations, the allocations live in the window (click one to mark it on the
// curve) and the per-operator memory table. State in the URL: mem_device, start/end (µs),
// mem_row, search/sort/dir (allocations), stats_search/stats_sort/stats_dir, mem_group_by.
// The allocation table is paged by the server (a big span has hundreds of thousands).
import { escapeHtml, formatBytes, formatDuration } from "../lib/format.js";
import { plot } from "../lib/charts.js";
import { card, el, safeLink, setChildren } from "../lib/dom.js";
import { emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { createTable, tableState } from "../lib/table.js";
import { chartTableRows } from "../lib/table_model.js";
import { choice } from "../lib/urlstate.js";

export const GROUPS = { Operation: "Operator", OperationAndInputShape: "Operator + input shape" };
const NEVER = "never freed";

/** A finite number from a URL value, else null. */
export function num(v) {
  if (v === null || v === undefined || v === "") return null;
  const x = Number(v);
  return Number.isFinite(x) ? x : null;
}

/** memory/events chart table -> row objects with a `status` and a stable `idx` (the row's
 * position in allocation order: the answer's `index` when paged, else its place). */
export function allocationRows(table) {
  const { rows } = chartTableRows(table);
  return rows.map((r, i) => ({ ...r, idx: table.index ? table.index[i] : i, status: r.release_time === null ? NEVER : "freed" }));
}

/** memory/events query of one table page: the zoomed window, search, sort, page (SPEC §4.7). */
export function pageQuery(device, start, end, { search, sort, dir, page, pageSize }) {
  const q = { device, offset: String(page * pageSize), limit: String(pageSize) };
  if (start !== null) q.start = String(start);
  if (end !== null) q.end = String(end);
  if (search) q.search = search;
  if (sort) { q.sort = sort; q.dir = dir; }
  return q;
}

/** The binary unit to plot bytes up to `max` in: ["GiB", 2**30] and so on. */
export function byteUnit(max) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (i < units.length - 1 && max >= 1024 ** (i + 1)) i += 1;
  return [units[i], 1024 ** i];
}

/** Most step markers the curve draws (a line and a label each). */
export const MAX_STEP_MARKS = 60;

/** Plotly traces + shapes of a memory/curve answer (x in ms from the trace start, y in
 * `unit`: the binary unit of the largest value shown; raw bytes in customdata). */
export function curveFigure(curve, marked = null) {
  const rows = curve.rows ?? [];
  const top = Math.max(1, curve.capacity_bytes ?? 0, ...rows.map((r) => Math.max(r[1] ?? 0, r[2] ?? 0)));
  const [unit, scale] = byteUnit(top);
  const y = (v) => (v === null || v === undefined ? null : v / scale);
  const x = rows.map((r) => r[0] / 1000);
  const hover = rows.map((r) => [`Time: ${escapeHtml(formatDuration(r[0]))}`,
    `Allocated: ${escapeHtml(formatBytes(r[1]))}`,
    `Reserved: ${r[2] === null ? "–" : escapeHtml(formatBytes(r[2]))}`].join("<br>"));
  const data = [
    { type: "scatter", mode: "lines", name: "Allocated", x, y: rows.map((r) => y(r[1])), customdata: rows.map((r) => r[1]), line: { shape: "hv", color: "#4e79a7" },
      hovertext: hover, hoverinfo: "text" },
    { type: "scatter", mode: "lines", name: "Reserved", x, y: rows.map((r) => y(r[2])), customdata: rows.map((r) => r[2]), line: { shape: "hv", color: "#f28e2b" },
      hovertext: hover, hoverinfo: "text" },
  ];
  const shapes = [];
  const annotations = [];
  const [s, e] = [curve.start_us, curve.end_us];
  // a line and a label per step in the window, at most MAX_STEP_MARKS of them (every k-th):
  // one per step froze the page for 25 s at 5,000 steps and for good at 60,000
  const inWindow = (curve.steps ?? []).filter(([, st]) => st >= s && st <= e);
  const every = Math.max(1, Math.ceil(inWindow.length / MAX_STEP_MARKS));
  for (const [name, st] of inWindow.filter((_, i) => i % every === 0)) {
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: st / 1000, x1: st / 1000, y0: 0, y1: 1,
      line: { color: "#9aa5b1", width: 1, dash: "dot" } });
    annotations.push({ xref: "x", yref: "paper", x: st / 1000, y: 1, yanchor: "bottom", showarrow: false,
      text: escapeHtml(String(name).replace(/^ProfilerStep#/, "#")), font: { size: 10, color: "#616e7c" } });
  }
  const peak = curve.peak;
  if (peak && peak.ts_us >= s && peak.ts_us <= e) {
    data.push({ type: "scatter", mode: "markers", name: "Peak", x: [peak.ts_us / 1000], y: [y(peak.allocated)], customdata: [peak.allocated],
      marker: { color: "#e15759", size: 9, symbol: "diamond" }, hoverinfo: "text",
      hovertext: [`Peak allocated: ${escapeHtml(formatBytes(peak.allocated))}<br>at ${escapeHtml(formatDuration(peak.ts_us))}`] });
    annotations.push({ x: peak.ts_us / 1000, y: y(peak.allocated), xref: "x", yref: "y", ax: 0, ay: -26,
      text: `Peak ${escapeHtml(formatBytes(peak.allocated))} @ ${escapeHtml(formatDuration(peak.ts_us))}`,
      font: { size: 11, color: "#e15759" }, arrowcolor: "#e15759" });
  }
  if (curve.capacity_bytes) {
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: y(curve.capacity_bytes), y1: y(curve.capacity_bytes),
      line: { color: "#e15759", width: 1, dash: "dash" } });
    annotations.push({ xref: "paper", x: 0, xanchor: "left", y: y(curve.capacity_bytes), yanchor: "bottom", showarrow: false,
      text: `Capacity ${escapeHtml(formatBytes(curve.capacity_bytes))}`, font: { size: 10, color: "#e15759" } });
  }
  if (marked) {
    const end = marked.release_time ?? e;
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0: marked.allocation_time / 1000, x1: end / 1000, y0: 0, y1: 1,
      fillcolor: "rgba(89,161,79,0.18)", line: { color: "#59a14f", width: 1 } });
    annotations.push({ xref: "x", yref: "paper", x: marked.allocation_time / 1000, y: 0, yanchor: "top", xanchor: "left",
      showarrow: false, font: { size: 11, color: "#2f6b2a" },
      text: `${escapeHtml(marked.operator)} ${escapeHtml(formatBytes(marked.size))}${marked.release_time === null ? ` (${NEVER})` : ""}` });
  }
  return { data, shapes, annotations, unit };
}

function deviceSelect(ctx, devices, current) {
  return el("label", { className: "inline-control" }, "Device ",
    el("select", { id: "memory-device", on: { change: (e) => { ctx.update({ mem_device: e.target.value, start: null, end: null, mem_row: null }); ctx.rerender(); } } },
      devices.map((d) => el("option", { value: d.device, selected: d.device === current },
        `${d.device} (peak ${formatBytes(d.peak_allocated)}${d.capacity_bytes ? ` of ${formatBytes(d.capacity_bytes)}` : ""})`))));
}

function recommendationsCard(promise) {
  const box = el("div", {}, loadingLine("Loading recommendations…"));
  promise.then((ov) => {
    const items = (ov?.recommendation_items ?? []).filter((r) => /^memory/.test(r.id ?? ""));
    setChildren(box, items.length
      ? el("ul", { className: "recommendations" }, items.map((r) => el("li", { dataset: { id: r.id } },
        el("div", {}, r.text), r.evidence ? el("div", { className: "muted evidence" }, r.evidence) : null,
        r.doc_url ? el("div", {}, safeLink(r.doc_url, "Read more in the PyTorch docs ↗")) : null)))
      : el("p", { className: "muted" }, "Memory is not near capacity and not fragmented in this span."));
  }).catch((err) => setChildren(box, errorPanel(err)));
  const c = card("Memory recommendations", box);
  c.id = "memory-recommendations";
  return c;
}

const ALLOC_COLUMNS = [
  { key: "operator", label: "Operator", kind: "text", shorten: 60, width: "14em" },
  { key: "size", label: "Size", kind: "bytes" },
  { key: "allocation_time", label: "Allocated at", kind: "duration", help: "Time of the allocation, from the trace start." },
  { key: "release_time", label: "Released at", kind: "duration", help: "Time of the free, from the trace start; – when not freed inside the span." },
  { key: "duration", label: "Lifetime", kind: "duration" },
  { key: "status", label: "Freed", kind: "text", help: "“never freed” when the span holds no free of this block." },
];

function statsColumns(columns) {
  return columns.map((c) => {
    if (c.name === "Name") return { key: c.key, label: "Operator", kind: "text", shorten: 80, width: "16em" };
    if (c.name === "Input Shape") return { key: c.key, label: "Input shape", kind: "text", shorten: 60 };
    const count = /Count|Calls/.test(c.name);
    return { key: c.key, label: c.name, kind: count ? "count" : "bytes", title: c.name };
  });
}

/** The device shown when the URL names none: the accelerator with the largest peak (a GPU
 * trace's CPU device often holds a few bytes), else the first device. */
export function defaultDevice(devices) {
  const accel = devices.filter((d) => d.type !== 0);
  if (!accel.length) return devices[0].device;
  return accel.reduce((a, b) => (b.peak_allocated > a.peak_allocated ? b : a)).device;
}

/** Render the memory view of ctx.client's span into `root`. */
export async function render(root, ctx) {
  setChildren(root, loadingLine("Loading memory…"));
  const devices = await ctx.client.get("memory/devices");
  if (!ctx.alive()) return;
  if (!devices.length) {
    setChildren(root, card("Memory", emptyState("This span has no memory events",
      "Profile with torch.profiler.profile(profile_memory=True) to record allocations.")));
    return;
  }
  const device = devices.some((d) => d.device === ctx.state.mem_device) ? ctx.state.mem_device : defaultDevice(devices);
  const groupBy = choice(GROUPS, ctx.state.mem_group_by, "Operation");
  const overview = ctx.client.get("overview");
  const statsP = ctx.client.get("memory/stats", { device, group_by: groupBy });

  const chart = el("div", { className: "chart memory-curve", id: "memory-curve" });
  const windowText = el("span", { className: "muted", id: "memory-window" });
  const reset = el("button", { type: "button", id: "memory-reset", on: { click: () => setWindow(null, null) } }, "Whole span");
  const curveError = el("div", { id: "memory-curve-error" }); // beside the plot, not in it
  const curveCard = card(`Memory over time — ${device}`,
    el("div", { className: "card-tools" }, deviceSelect(ctx, devices, device), windowText, reset,
      el("span", { className: "muted" }, "Drag across the curve to zoom.")), chart, curveError);
  curveCard.id = "memory-curve-card";

  const allocBox = el("div", {}, loadingLine("Loading allocations…"));
  const allocCard = card("Allocations", allocBox);
  allocCard.id = "memory-events";
  const statsBox = el("div", {}, loadingLine("Loading operators…"));
  const groupSel = el("label", { className: "inline-control" }, "Group by ",
    el("select", { id: "memory-group-by", on: { change: (e) => { ctx.update({ mem_group_by: e.target.value, stats_search: null, stats_sort: null, stats_dir: null, stats_page: null }); ctx.rerender(); } } },
      Object.entries(GROUPS).map(([v, label]) => el("option", { value: v, selected: v === groupBy }, label))));
  const statsCard = card("Memory per operator", el("div", { className: "card-tools" }, groupSel), statsBox);
  statsCard.id = "memory-stats";
  setChildren(root, el("div", { className: "stack-layout" }, curveCard, recommendationsCard(overview), allocCard, statsCard));

  let start = num(ctx.state.start);
  let end = num(ctx.state.end);
  let marked = null;
  let curve = null;
  let table = null;
  let drawing = false;
  let request = 0;

  async function drawCurve() {
    const mine = ++request;
    const params = { device, width: String(Math.max(100, Math.round(chart.clientWidth || 1000))) };
    if (start !== null) params.start = String(start);
    if (end !== null) params.end = String(end);
    const body = await ctx.client.get("memory/curve", params);
    if (!ctx.alive() || mine !== request) return;
    setChildren(curveError); // the last window's error, if any, is over
    chart.hidden = false;
    curve = body;
    windowText.textContent = `Window ${formatDuration(body.start_us)} – ${formatDuration(body.end_us)}`
      + (body.window_peak ? `, peak ${formatBytes(body.window_peak.allocated)} at ${formatDuration(body.window_peak.ts_us)}` : "");
    const fig = curveFigure(body, marked);
    const shownMark = marked;
    drawing = true;
    try {
      await plot(chart, fig.data, {
        margin: { l: 72, r: 16, t: 24, b: 40 }, height: 340, dragmode: "zoom", hovermode: "closest",
        xaxis: { title: { text: "Time from the trace start (ms)" }, range: [body.start_us / 1000, body.end_us / 1000], gridcolor: "#e4e7eb" },
        yaxis: { title: { text: `Memory (${fig.unit})` }, fixedrange: true, rangemode: "tozero", gridcolor: "#e4e7eb" },
        legend: { orientation: "h", x: 0, y: -0.22 }, shapes: fig.shapes, annotations: fig.annotations,
      });
    } finally {
      drawing = false;
    }
    if (marked !== shownMark) remark(marked); // marked while the plot was drawn
    if (!chart.dataset.bound) {
      chart.dataset.bound = "1";
      chart.on?.("plotly_relayout", (ev) => {
        if (drawing) return;
        if (ev["xaxis.autorange"]) setWindow(null, null);
        else if (ev["xaxis.range[0]"] !== undefined) setWindow(ev["xaxis.range[0]"] * 1000, ev["xaxis.range[1]"] * 1000);
      });
    }
  }

  function setWindow(s, e) {
    start = s === null ? null : Math.max(0, Math.round(s * 1000) / 1000);
    end = e === null ? null : Math.round(e * 1000) / 1000;
    if (start !== null && end !== null && end <= start) end = start + 0.001;
    ctx.update({ start, end });
    table?.reload(); // the allocations live in the new window
    drawCurve().catch(curveFailed);
  }

  /** A window the server refused (start after end, ...): said under the card's tools; the
   * plot is hidden until a window is drawn (it stayed, with the message inside it). */
  function curveFailed(err) {
    if (!ctx.alive()) return;
    chart.hidden = true;
    setChildren(curveError, errorPanel(err));
  }

  drawCurve().catch(curveFailed);

  /** Mark `row` (or nothing) on the curve; while a plot is being drawn, drawCurve marks it
   * when done (a relayout during Plotly.react would be lost). */
  function remark(row) {
    marked = row;
    if (curve && !drawing) {
      const fig = curveFigure(curve, marked);
      window.Plotly?.relayout(chart, { shapes: fig.shapes, annotations: fig.annotations });
    }
  }

  table = createTable({
    columns: ALLOC_COLUMNS, rows: [], noun: "allocations", searchKeys: ["operator", "status"],
    searchPlaceholder: "Search operators (or “never freed”)…",
    ...tableState(ctx),
    rowKey: (r) => String(r.idx),
    rowClass: (r) => [r.release_time === null ? "never-freed" : "", marked && r.idx === marked.idx ? "selected" : ""].join(" ").trim(),
    fetchPage: async (st) => {
      const body = await ctx.client.get("memory/events", pageQuery(device, start, end, st));
      const zoomed = start !== null || end !== null;
      allocCard.querySelector("h2").textContent = zoomed
        ? `Allocations live in the window (${body.total.toLocaleString("en-US")})`
        : `Allocations (${body.total.toLocaleString("en-US")})`;
      return { rows: allocationRows(body), matched: body.matched, total: body.total };
    },
    onRowClick: (r) => {
      const same = marked && marked.idx === r.idx;
      ctx.update({ mem_row: same ? null : r.idx });
      remark(same ? null : r);
      table.redraw();
    },
  });
  setChildren(allocBox, table.element);
  const sel = num(ctx.state.mem_row);
  if (sel !== null && sel >= 0) {   // a deep link's marked allocation: fetch that row by its id
    ctx.client.get("memory/events", { device, offset: String(Math.floor(sel)), limit: "1" })
      .then((body) => {
        if (!ctx.alive()) return;
        const row = allocationRows(body)[0] ?? null;
        if (!row) ctx.update({ mem_row: null }); // no such allocation: not in a copied link
        remark(row);
        table.redraw();
      })
      .catch(() => {});
  } else if (ctx.state.mem_row !== undefined) {
    ctx.update({ mem_row: null }); // not an allocation's number ("abc", -1)
  }

  statsP.then((body) => {
    if (!ctx.alive()) return;
    const { columns, rows } = chartTableRows(body);
    const t = createTable({
      columns: statsColumns(columns), rows, noun: "operators",
      searchKeys: columns.filter((c) => c.type !== "number").map((c) => c.key),
      searchPlaceholder: "Search operators…",
      ...tableState(ctx, "stats_"),
      rowKey: (r) => JSON.stringify(columns.filter((c) => c.type !== "number").map((c) => r[c.key])),
    });
    setChildren(statsBox, t.element);
  }).catch((err) => setChildren(statsBox, errorPanel(err)));
}
