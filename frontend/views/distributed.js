// Distributed view (SPEC §4.3): a run-level view over every rank of the selected run, from
// distributed/ranks, distributed/collectives and distributed/straggler (run only: the same
// whatever worker/span is selected). Per-rank step breakdown (one stacked bar per rank, for
// one step or the average: `dist_step` in the URL), overlap, wait vs transfer, a
// rank x collective heat map of wait, the per-rank table (the same step), the collectives
// table and the straggler line.
// Clicking a rank (a bar or its link) opens that rank's overview.
import { drawHeatmap, drawStackedBars } from "../lib/charts.js";
import { card, el, setChildren } from "../lib/dom.js";
import { emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { createTable, csvButton, tableState } from "../lib/table.js";
import { chartTableRows } from "../lib/table_model.js";
import { buildQuery, withoutViewKeys } from "../lib/urlstate.js";

export const PARTS = [
  ["computation_us", "Computation", "#4e79a7"], ["overlap_us", "Overlap", "#9c755f"],
  ["communication_us", "Communication", "#76b7b2"], ["other_us", "Other", "#bab0ac"],
];
export const AVERAGE = "avg";

/** Step names in the order the ranks list them (first seen first). */
export function stepNames(ranks) {
  const out = [];
  for (const r of ranks ?? []) for (const s of r.steps ?? []) if (!out.includes(s.step)) out.push(s.step);
  return out;
}

/** A rank's value of `key` (µs) in step `step`, or its mean over its steps for AVERAGE. */
export function stepValue(rank, step, key) {
  const steps = rank.steps ?? [];
  if (step === AVERAGE) {
    return steps.length ? steps.reduce((s, x) => s + (Number(x[key]) || 0), 0) / steps.length : 0;
  }
  return Number(steps.find((s) => s.step === step)?.[key]) || 0;
}

/** The query string of a rank's overview (the same run, that rank's worker and span). */
export function rankQuery(state, rank) {
  const keep = withoutViewKeys({ run: state.run, worker: rank.worker, span: rank.span, view: "Overview" });
  return buildQuery(keep);
}

/** {x: op names, y: rank labels, z: µs of wait per rank and op} for the heat map. */
export function heatmapData(ranks) {
  const ops = [...new Set((ranks ?? []).flatMap((r) => Object.keys(r.wait_by_collective_us ?? {})))].sort();
  return {
    x: ops, y: (ranks ?? []).map((r) => `rank ${r.rank}`),
    z: (ranks ?? []).map((r) => ops.map((op) => Number(r.wait_by_collective_us?.[op]) || 0)),
  };
}

function openRank(ctx, rank) {
  window.history.pushState(null, "", `${window.location.pathname}${rankQuery(ctx.state, rank)}`);
  window.dispatchEvent(new PopStateEvent("popstate")); // the shell navigates on popstate
}

function chartCard(title, id, draw) {
  const box = el("div", { className: "chart", id });
  const section = card(title, box);
  Promise.resolve().then(() => draw(box)).catch((err) => { box.classList.remove("chart"); setChildren(box, errorPanel(err)); });
  return section;
}

function stepSelect(ctx, names, current) {
  return el("label", { className: "inline-control" }, "Step ",
    el("select", { id: "dist-step", on: { change: (e) => { ctx.update({ dist_step: e.target.value === AVERAGE ? null : e.target.value }); ctx.rerender(); } } },
      el("option", { value: AVERAGE, selected: current === AVERAGE }, "Average over steps"),
      names.map((n) => el("option", { value: n, selected: n === current }, `Step ${n}`))));
}

/** Columns of the per-rank table (SPEC §4.3), the µs values of `stepValue`. */
export const RANK_COLUMNS = [
  ["total_us", "Step time"], ["computation_us", "Computation"], ["communication_us", "Communication"],
  ["overlap_us", "Overlap"], ["other_us", "Other"], ["wait_us", "Wait"], ["transfer_us", "Transfer"],
];

/** The per-rank table for `step` (or AVERAGE: means over each rank's steps, rounded to µs). */
export function rankRows(ranks, step) {
  const columns = [{ key: "rank", label: "Rank", kind: "count" }, { key: "worker", label: "Worker", kind: "text" },
    { key: "steps", label: "Steps", kind: "count" },
    ...RANK_COLUMNS.map(([key, label]) => ({ key, label, kind: "duration" }))];
  const rows = (ranks ?? []).filter((r) => step === AVERAGE || (r.steps ?? []).some((s) => s.step === step))
    .map((r) => ({ rank: r.rank, worker: r.worker, steps: (r.steps ?? []).length,
      ...Object.fromEntries(RANK_COLUMNS.map(([key]) => [key, Math.round(stepValue(r, step, key))])) }));
  return { columns, rows };
}

/** The straggler evidence table as shown, for its CSV: one row per rank (wait in µs). */
export function evidenceRows(straggler) {
  const columns = [{ key: "rank", label: "Rank", kind: "text" }, { key: "wait_us", label: "Total wait", kind: "duration" },
    { key: "arrived_last", label: "Arrived last (times)", kind: "count" }];
  const rows = Object.keys(straggler?.wait_us ?? {}).map((r) => ({ rank: r, wait_us: straggler.wait_us[r],
    arrived_last: straggler.arrived_last?.[r] ?? 0 }));
  return { columns, rows };
}

function stragglerCard(straggler) {
  if (!straggler) {
    return card("Straggler", el("p", { id: "dist-straggler", className: "muted" },
      "No straggler analysis: it needs at least two ranks with collectives."));
  }
  const ranks = Object.keys(straggler.wait_us ?? {});
  const named = new Set((straggler.ranks ?? [straggler.rank]).map(String));
  const evidence = el("table", { className: "data-table compact", id: "dist-evidence" },
    el("thead", {}, el("tr", {}, el("th", {}, "Rank"), el("th", { className: "num" }, "Total wait (µs)"), el("th", { className: "num" }, "Arrived last (times)"))),
    el("tbody", {}, ranks.map((r) => el("tr", { className: named.has(r) ? "highlight" : "" },
      el("td", {}, r), el("td", { className: "num" }, String(straggler.wait_us[r])),
      el("td", { className: "num" }, String(straggler.arrived_last?.[r] ?? 0))))));
  return card("Straggler", el("p", { id: "dist-straggler" }, el("strong", {}, straggler.text)),
    el("p", { className: "muted" }, `Over ${straggler.collectives} matched collectives. The straggler is the rank the others wait for (the smallest total wait); "arrived last" alone misleads with tree collectives such as gloo's broadcast.`),
    el("div", { className: "card-tools" }, csvButton("straggler_evidence.csv",
      "Download this table (wait in µs per rank) as CSV", () => evidenceRows(straggler), "dist-evidence-csv")),
    evidence);
}

function rankTableCard(ctx, ranks, step) {
  const { columns, rows } = rankRows(ranks, step);
  const table = createTable({ columns, rows, noun: "ranks", csvName: "ranks.csv", searchKeys: ["worker"],
    searchPlaceholder: "Search workers…",
    rowKey: (r) => String(r.rank), onRowClick: (row) => openRank(ctx, ranks.find((r) => r.rank === row.rank)),
    ...tableState(ctx, "rank_") });
  const section = card(step === AVERAGE ? "Per rank (average over its steps, µs)" : `Per rank (step ${step}, µs)`,
    table.element);
  section.id = "dist-rank-table";
  return section;
}

function collectivesCard(ctx, body) {
  const { columns, rows } = chartTableRows(body);
  if (!rows.length) return card("Collectives", emptyState("No collectives", "No rank of this run ran a collective."));
  const cols = columns.map((c) => ({ key: c.key, label: c.name, kind: c.type === "number" ? (c.name === "Calls" ? "count" : "number") : "text" }));
  const section = card("Collectives", createTable({ columns: cols, rows, noun: "collectives",
    ...tableState(ctx) }).element);
  section.id = "dist-collectives";
  return section;
}

/** Render the Distributed view of ctx.client's run into `root`. */
export async function render(root, ctx) {
  setChildren(root, loadingLine("Combining the ranks…"));
  const collectives = ctx.client.get("distributed/collectives");
  const straggler = ctx.client.get("distributed/straggler");
  const body = await ctx.client.get("distributed/ranks");
  if (!ctx.alive()) return;
  const ranks = body?.ranks ?? [];
  const notes = (body?.notes ?? []).length
    ? el("div", { className: "banner", id: "dist-notes" }, el("ul", {}, body.notes.map((n) => el("li", {}, n)))) : null;
  if (!ranks.length) {
    setChildren(root, notes, card("Distributed", emptyState("No rank of this run could be analysed")));
    return;
  }
  const names = stepNames(ranks);
  const step = names.includes(ctx.state.dist_step) ? ctx.state.dist_step : AVERAGE;
  const labels = ranks.map((r) => `rank ${r.rank}`);
  const click = (i) => openRank(ctx, ranks[i]);
  const series = (parts) => parts.map(([key, name, color]) => ({ name, color, values: ranks.map((r) => stepValue(r, step, key)) }));
  const breakdown = chartCard("Step time per rank", "dist-breakdown",
    (box) => drawStackedBars(box, { x: labels, series: series(PARTS), yTitle: "Step time", onClick: click }));
  breakdown.insertBefore(el("div", { className: "card-tools" }, stepSelect(ctx, names, step)), breakdown.children[1]);
  const overlap = chartCard("Communication overlapped with computation", "dist-overlap",
    (box) => drawStackedBars(box, { x: labels, series: series([PARTS[1], PARTS[2]]), yTitle: "Communication", onClick: click }));
  const wait = chartCard("Wait vs transfer", "dist-wait",
    (box) => drawStackedBars(box, { x: labels, yTitle: "Collective time", onClick: click,
      series: series([["wait_us", "Wait", "#e15759"], ["transfer_us", "Transfer", "#59a14f"]]) }));
  const heat = heatmapData(ranks);
  const heatCard = heat.x.length && ranks.length > 1 ? chartCard("Wait per rank and collective", "dist-heatmap",
    (box) => drawHeatmap(box, { ...heat, title: "wait" })) : null;
  const links = card("Ranks", el("p", { id: "dist-ranks" }, "Open a rank's overview: ",
    ranks.map((r, i) => [i ? " · " : "", el("a", { href: rankQuery(ctx.state, r) || "?", dataset: { rank: String(r.rank) },
      on: { click: (e) => { if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) return; e.preventDefault(); openRank(ctx, r); } } },
    `rank ${r.rank} (${r.worker})`)])));
  const stragglerBox = el("div", {}, loadingLine("Finding the straggler…"));
  const tableBox = el("div", {}, loadingLine("Loading collectives…"));
  const rankTable = rankTableCard(ctx, ranks, step);
  setChildren(root, el("div", { className: "stack-layout" }, notes, stragglerBox, breakdown, rankTable, overlap, wait, heatCard, tableBox, links));
  straggler.then((s) => ctx.alive() && setChildren(stragglerBox, stragglerCard(s)))
    .catch((err) => setChildren(stragglerBox, errorPanel(err)));
  collectives.then((c) => ctx.alive() && setChildren(tableBox, collectivesCard(ctx, c)))
    .catch((err) => setChildren(tableBox, errorPanel(err)));
}
