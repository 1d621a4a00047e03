// Module view (SPEC §4.2): phases per step (stacked bars + table), user ranges (tree or flat
// table), the nn.Module tree, and flame graphs of host self time / device time launched
// (canvas icicle, click to zoom, search highlights, collapsed-stacks download). State in
// the URL: mod_tab, mod_step, mod_range_view, mod_flame_metric, mod_focus, mod_search and
// the flat range table's mod_search_r / mod_sort / mod_dir / mod_r_page / mod_r_rows.
import { MAX_COLUMNS, columnGroups, columnMeans, drawStackedBars } from "../lib/charts.js";
import { card, el, setChildren } from "../lib/dom.js";
import { formatCount, formatDuration, formatPercent } from "../lib/format.js";
import { ROW, draw, layout, matchedTotal, matches, tipLines } from "../lib/flame.js";
import { emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { createTable, csvButton, saveCsv, tableState } from "../lib/table.js";
import { treeRows } from "../lib/table_model.js";
import { buildQuery, choice } from "../lib/urlstate.js";

export const TABS = { phases: "Phases", ranges: "User ranges", modules: "Modules", flame: "Flame graph" };
export const METRICS = { host_self: "Host self time", device: "Device time launched" };
export const PHASE_COLORS = { DataLoader: "#edc948", Forward: "#4e79a7", Backward: "#f28e2b",
  Optimizer: "#59a14f", Other: "#bab0ac" };
export const AVERAGE = "average";

/**
 * Series of the stacked phase chart: columns are the steps then "Average". Past
 * `maxColumns` steps a column is the mean of `per` consecutive steps ("1–300",
 * {@link columnGroups}). `starts[i]`: index of column i's first step.
 */
export function phaseSeries(body, which = "host_us", maxColumns = MAX_COLUMNS) {
  const groups = columnGroups(body.steps.map((s) => s.step), maxColumns);
  const series = body.phases.map((p) => ({ name: p, color: PHASE_COLORS[p],
    values: [...columnMeans(body.steps.map((s) => s[which][p]), groups), body.average[which][p]] }));
  return { x: [...groups.labels, "Average"], series, starts: groups.starts, per: groups.per };
}

/** The phases entry of `step` (a step name, or "average"). */
export function phaseEntry(body, step) {
  return step === AVERAGE || step === undefined ? body.average
    : body.steps.find((s) => s.step === step) ?? body.average;
}

/** A URL of this page with `patch` applied and the other views' keys left out. */
export function linkTo(state, patch) {
  const keep = Object.fromEntries(Object.entries(state).filter(([k]) => ["run", "worker", "span"].includes(k)));
  return buildQuery({ ...keep, ...patch }) || "?";
}

function tabBar(ctx, current) {
  return el("div", { className: "segmented", role: "tablist", id: "module-tabs" },
    Object.entries(TABS).map(([k, label]) => el("button", { type: "button", className: k === current ? "active" : "",
      "aria-pressed": String(k === current), dataset: { tab: k },
      on: { click: () => { ctx.update({ mod_tab: k }); ctx.rerender(); } } }, label)));
}

function notesList(notes, codes) {
  const shown = (notes ?? []).filter((n) => !codes || codes.includes(n.code));
  return shown.length ? el("ul", { className: "notes module-notes" },
    shown.map((n) => el("li", { className: `note note-${n.level === "warning" ? "warning" : "info"}`,
      dataset: { code: n.code } }, n.text))) : null;
}

/**
 * The Phase table as shown, for its CSV: one row per phase then the "Step" total row; µs
 * and %. Without `device` the Device columns are left out (as on screen).
 */
export function phaseRows(body, entry, device = true) {
  const columns = [{ key: "phase", label: "Phase", kind: "text" },
    { key: "host_us", label: "Host", kind: "duration" }, { key: "host_pct", label: "Host", kind: "percent" },
    ...(device ? [{ key: "device_us", label: "Device", kind: "duration" },
      { key: "device_pct", label: "Device", kind: "percent" }] : [])];
  const rows = body.phases.map((p) => ({ phase: p, host_us: entry.host_us[p], host_pct: entry.host_pct[p],
    device_us: entry.device_us[p], device_pct: entry.device_pct[p] }));
  rows.push({ phase: "Step", host_us: entry.host_total_us, device_us: entry.device_total_us });
  return { columns, rows };
}

/** A tree's CSV: every node (expanded on screen or not), with its depth and path. */
export function treeCsv(columns, roots) {
  return { columns: [{ key: "depth", label: "Depth", kind: "count" }, { key: "path", label: "Path", kind: "text" },
    { key: "name", label: "Name", kind: "text" }, ...columns.map(({ key, label, kind }) => ({ key, label, kind }))],
  rows: treeRows(roots) };
}

function treeCsvButton(name, cols, roots, id) {
  return csvButton(name, "Download every node of the tree (expanded or not, with its depth and path) as CSV",
    () => treeCsv(cols, roots), id);
}

async function phasesTab(ctx, box, summary) {
  const body = await ctx.client.get("module/phases");
  if (!ctx.alive()) return;
  if (!body.steps.length) {
    setChildren(box, card("Phases", emptyState("No steps", "This span has no host events to split into phases.")));
    return;
  }
  const step = ctx.state.mod_step ?? AVERAGE;
  const chart = el("div", { className: "chart", id: "module-phase-chart" });
  const devChart = el("div", { className: "chart", id: "module-phase-device-chart" });
  const table = el("div", { id: "module-phase-table" });
  const source = Object.entries(body.source).map(([p, s]) => `${p}: ${s === "record_function" ? "your record_function ranges" : "inferred"}`).join(" · ");
  const hasDevice = body.steps.some((s) => s.device_total_us > 0);
  const host = phaseSeries(body, "host_us");
  const means = host.per > 1 ? el("p", { className: "muted", id: "module-phase-means" },
    `${formatCount(body.steps.length)} steps: each column is the mean of ${formatCount(host.per)} consecutive `
    + "steps, named first–last (click one for its first step; the table below has every step).") : null;
  setChildren(box, card("Phases per step (host time)", el("p", { className: "muted" }, source), means,
    notesList(summary.notes, ["phases_inferred", "steps_without_forward", "no_steps"]), chart),
  hasDevice ? card("Phases per step (device time launched)", devChart) : null,
  card("Phase table", table));
  const pick = (i) => { // a column: its (first) step, or the average
    ctx.update({ mod_step: i < host.starts.length ? body.steps[host.starts[i]].step : AVERAGE });
    ctx.rerender();
  };
  drawStackedBars(chart, { ...host, yTitle: "Host time", onClick: pick }).catch((e) => setChildren(chart, errorPanel(e)));
  if (hasDevice) {
    drawStackedBars(devChart, { ...phaseSeries(body, "device_us"), yTitle: "Device time", onClick: pick })
      .catch((e) => setChildren(devChart, errorPanel(e)));
  }
  const entry = phaseEntry(body, step);
  const select = el("select", { id: "module-step", on: { change: (e) => { ctx.update({ mod_step: e.target.value }); ctx.rerender(); } } },
    el("option", { value: AVERAGE, selected: step === AVERAGE }, "Average over steps"),
    body.steps.map((s) => el("option", { value: s.step, selected: s.step === step }, `Step ${s.step}`)));
  const csv = csvButton(`phases_${step}.csv`, "Download this table (the step picked, µs and %) as CSV",
    () => phaseRows(body, entry, hasDevice), "module-phase-csv");
  const heads = hasDevice ? ["Phase", "Host", "Host %", "Device", "Device %"] : ["Phase", "Host", "Host %"];
  const num = (v, f) => el("td", { className: "num" }, f(v));
  setChildren(table, el("div", { className: "card-tools" }, el("label", { className: "inline-control" }, "Step ", select), csv),
    el("table", { className: "data-table phase-table" },
      el("thead", {}, el("tr", {}, heads.map((h, i) => el("th", { className: i ? "num" : "" }, h)))),
      el("tbody", {}, body.phases.map((p) => el("tr", { dataset: { phase: p } }, el("td", {}, p),
        num(entry.host_us[p], formatDuration), num(entry.host_pct[p], formatPercent),
        hasDevice ? [num(entry.device_us[p], formatDuration), num(entry.device_pct[p], formatPercent)] : null)),
      el("tr", { className: "total" }, el("td", {}, "Step"), num(entry.host_total_us, formatDuration), el("td", {}, ""),
        hasDevice ? [num(entry.device_total_us, formatDuration), el("td", {}, "")] : null))),
    hasDevice ? el("p", { className: "muted", id: "module-phase-step-note" }, "“Step” here is the ProfilerStep "
      + "range on the host; the Overview times each step by the GPU work it launched, so its step time can differ.") : null);
}

/**
 * An expandable tree table: `columns` [{key, label, format}], `roots` nested nodes with
 * `children`; the first `open` levels start expanded. Rows are built when expanded.
 */
export function treeTable(columns, roots, { open = 1, id } = {}) {
  const rowsFor = (nodes, depth) => {
    const out = [];
    for (const node of nodes) {
      const kids = node.children ?? [];
      const toggle = el("button", { type: "button", className: "tree-toggle", "aria-label": "expand",
        disabled: !kids.length }, kids.length ? "▸" : "·");
      const tr = el("tr", { className: node.remainder ? "remainder" : "", dataset: { depth: String(depth) } },
        el("td", { className: "name", style: { paddingLeft: `${6 + depth * 16}px` }, title: node.name }, toggle, " ", node.name),
        columns.map((c) => el("td", { className: "num" }, c.format(node[c.key]))));
      let expanded = false;
      toggle.addEventListener("click", () => {
        if (expanded) { // drop every row below this one that is deeper
          for (let r = tr.nextElementSibling; r && Number(r.dataset.depth) > depth;) {
            const next = r.nextElementSibling;
            r.remove();
            r = next;
          }
        } else tr.after(...rowsFor(kids, depth + 1));
        expanded = !expanded;
        toggle.textContent = expanded ? "▾" : "▸";
      });
      out.push(tr);
      if (kids.length && depth + 1 < open) {
        expanded = true;
        toggle.textContent = "▾";
        out.push(...rowsFor(kids, depth + 1));
      }
    }
    return out;
  };
  return el("table", { className: "data-table tree-table", id },
    el("thead", {}, el("tr", {}, el("th", {}, "Name"), columns.map((c) => el("th", { className: "num" }, c.label)))),
    el("tbody", {}, rowsFor(roots, 0)));
}

async function rangesTab(ctx, box, summary) {
  const flat = ctx.state.mod_range_view === "flat";
  const body = await ctx.client.get("module/ranges", flat ? { flat: "1" } : {});
  if (!ctx.alive()) return;
  const toggle = el("div", { className: "segmented", id: "module-range-view" },
    [["tree", "Nested"], ["flat", "Flat table"]].map(([k, label]) => el("button", { type: "button",
      className: (k === "flat") === flat ? "active" : "", dataset: { view: k },
      on: { click: () => { ctx.update({ mod_range_view: k === "flat" ? "flat" : null }); ctx.rerender(); } } }, label)));
  if (!summary.has_ranges) {
    setChildren(box, card("User ranges", emptyState("No record_function ranges in this span",
      "Wrap parts of your step in torch.profiler.record_function(\"name\") to see them here.")));
    return;
  }
  const cols = [
    { key: "calls", label: "Calls", format: formatCount, kind: "count" },
    { key: "host_total_us", label: "Host total", format: formatDuration, kind: "duration" },
    { key: "host_avg_us", label: "Host avg", format: formatDuration, kind: "duration" },
    { key: "host_min_us", label: "Host min", format: formatDuration, kind: "duration" },
    { key: "host_max_us", label: "Host max", format: formatDuration, kind: "duration" },
    { key: "device_us", label: "Device launched", format: formatDuration, kind: "duration" },
  ];
  let content;
  if (flat) {
    content = createTable({
      columns: [{ key: "name", label: "Range", kind: "text", shorten: 80, width: "16em" }, ...cols.map(({ key, label, kind }) => ({ key, label, kind }))],
      rows: body, noun: "ranges", searchKeys: ["name"], searchPlaceholder: "Search ranges…",
      ...tableState(ctx, "mod_r_", { search: "mod_search_r", sort: "mod_sort", dir: "mod_dir" }),
      rowKey: (r) => r.name,
    }).element;
  } else {
    content = treeTable(cols, body, { open: 2, id: "module-range-tree" });
  }
  const tools = el("div", { className: "card-tools" }, toggle,
    flat ? null : treeCsvButton("ranges_tree.csv", cols, body, "module-range-csv"));
  setChildren(box, card("User ranges (record_function)", tools,
    notesList(summary.notes, ["ranges_device_time_own_thread"]), content));
}

async function modulesTab(ctx, box, summary) {
  const body = await ctx.client.get("module/tree");
  if (!ctx.alive()) return;
  if (!body.length) {
    setChildren(box, card("Modules", emptyState("No nn.Module frames in this span",
      "Profile with torch.profiler.profile(with_stack=True) to record which nn.Module each "
      + "operator ran in (with_modules=True alone records no module frames in eager mode).")));
    return;
  }
  const cols = [
    { key: "occurrences", label: "Occurrences", format: formatCount, kind: "count" },
    { key: "host_total_us", label: "Host total", format: formatDuration, kind: "duration" },
    { key: "host_self_us", label: "Host self", format: formatDuration, kind: "duration" },
    { key: "device_total_us", label: "Device total", format: formatDuration, kind: "duration" },
  ];
  setChildren(box, card("nn.Module tree", notesList(summary.notes, ["deep_tree"]),
    el("div", { className: "card-tools" }, treeCsvButton("module_tree.csv", cols, body, "module-tree-csv")),
    treeTable(cols, body, { open: 2, id: "module-tree" })));
}

async function flameTab(ctx, box) {
  const metric = choice(METRICS, ctx.state.mod_flame_metric, "host_self");
  const flame = await ctx.client.get("module/flame", { metric });
  if (!ctx.alive()) return;
  const unit = metric === "device" ? "Device" : "Host";
  const metricBar = el("div", { className: "segmented", id: "module-flame-metric" },
    Object.entries(METRICS).map(([k, label]) => el("button", { type: "button", className: k === metric ? "active" : "",
      dataset: { metric: k }, on: { click: () => { ctx.update({ mod_flame_metric: k, mod_focus: null }); ctx.rerender(); } } }, label)));
  const download = el("a", { className: "button", id: "module-flame-download",
    href: ctx.client.url("stacks/collapsed", { metric }), download: `stacks_${metric}.txt`,
    title: "Collapsed stacks (frame;frame;leaf µs): open in speedscope or flamegraph.pl",
    on: { click: (e) => { // a report file has the text inside it: no server to link to
      if (!globalThis.STEPSCOPE_EMBEDDED) return;
      e.preventDefault();
      ctx.client.get("stacks/collapsed", { metric })
        .then((text) => saveCsv(`stacks_${metric}.txt`, String(text), "text/plain;charset=utf-8"));
    } } }, "Download collapsed stacks");
  if (!flame.name.length) {
    setChildren(box, card("Flame graph", metricBar, emptyState(metric === "device" ? "No device time launched in this span" : "No host frames in this span")));
    return;
  }
  const lay = layout(flame);
  let focus = Number.isInteger(Number(ctx.state.mod_focus)) && Number(ctx.state.mod_focus) < flame.name.length ? Number(ctx.state.mod_focus) : -1;
  let query = ctx.state.mod_search ?? "";
  const search = el("input", { type: "search", id: "module-flame-search", placeholder: "Highlight frames…", value: query });
  const matchText = el("span", { className: "muted", id: "module-flame-matched" });
  const reset = el("button", { type: "button", className: "button", id: "module-flame-reset" }, "Reset zoom");
  const canvas = el("canvas", { className: "flame-canvas", id: "module-flame-canvas", tabindex: "0" });
  const tip = el("div", { className: "trace-tooltip", hidden: true });
  const wrap = el("div", { className: "flame-wrap" }, canvas, tip);
  const detail = el("div", { className: "flame-detail", id: "module-flame-detail" });
  setChildren(box, card(`Flame graph — ${METRICS[metric]}`,
    el("div", { className: "card-tools" }, metricBar, search, matchText, reset, download),
    el("p", { className: "muted" }, "Click a frame to zoom into it; click a frame above it to zoom out. Frames are merged by their path across steps; width = total time."),
    wrap, detail));
  let pick = () => -1;
  const redraw = () => {
    const hit = matches(flame, query);
    matchText.textContent = hit ? `Matched ${formatDuration(matchedTotal(flame, hit))} (${formatPercent(100 * matchedTotal(flame, hit) / (flame.total_us || 1))})` : "";
    pick = draw(canvas, flame, lay, { focus, hit, cssWidth: Math.max(300, wrap.clientWidth || 900) });
    showDetail();
  };
  const showDetail = () => {
    if (focus < 0) { setChildren(detail); return; }
    const name = flame.labels[flame.name[focus]];
    setChildren(detail, el("div", {}, el("b", {}, name)), el("div", { className: "muted" }, tipLines(flame, focus, unit).slice(1).join(" · ")),
      el("a", { href: linkTo(ctx.state, { view: "Operator", search: name }), id: "module-flame-to-operator" }, "Find in the Operator view"));
  };
  const setFocus = (i) => { focus = i; ctx.update({ mod_focus: i >= 0 ? i : null }); redraw(); };
  canvas.addEventListener("click", (e) => {
    const r = canvas.getBoundingClientRect();
    const i = pick(e.clientX - r.left, e.clientY - r.top);
    if (i >= 0) setFocus(i === focus ? flame.parent[i] : i);
  });
  canvas.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect();
    const i = pick(e.clientX - r.left, e.clientY - r.top);
    if (i < 0) { tip.hidden = true; return; }
    setChildren(tip, tipLines(flame, i, unit).map((t, k) => el("div", { className: k ? "muted" : "tip-name" }, t)));
    tip.hidden = false;
    tip.style.left = `${Math.min(e.clientX - r.left + 12, r.width - 300)}px`;
    tip.style.top = `${e.clientY - r.top + ROW}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  reset.addEventListener("click", () => setFocus(-1));
  search.addEventListener("input", () => { query = search.value; ctx.update({ mod_search: query || null }); redraw(); });
  redraw();
}

/** Render the module view of ctx.client's span into `root`. */
export async function render(root, ctx) {
  setChildren(root, loadingLine("Loading modules…"));
  const summary = await ctx.client.get("module/summary");
  if (!ctx.alive()) return;
  const tab = choice(TABS, ctx.state.mod_tab, "phases");
  const box = el("div", { className: "stack-layout", id: "module-body" }, loadingLine());
  setChildren(root, el("div", { className: "stack-layout" }, tabBar(ctx, tab), box));
  const run = { phases: phasesTab, ranges: rangesTab, modules: modulesTab, flame: flameTab }[tab];
  await run(ctx, box, summary).catch((err) => { if (ctx.alive()) setChildren(box, errorPanel(err)); });
}
