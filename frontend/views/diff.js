// Diff view (SPEC §4.4): the page's span (the baseline) against another one (the
// experiment, picked here; `diff_run`, `diff_worker`, `diff_span` in the URL). What changed
// most in words at the top, the step-time breakdown of both side by side with the delta
// per category, then operator and kernel delta tables (both sides and the delta, sorted by
// the largest |delta|), from diff/overview, diff/operators and diff/kernels.
import { CATEGORY_COLORS, drawStackedBars } from "../lib/charts.js";
import { ApiError, getJSON } from "../lib/api.js";
import { card, el, setChildren } from "../lib/dom.js";
import { formatDuration, formatPercent, spanLabel } from "../lib/format.js";
import { emptyState, errorPanel, loadingLine, progressPanel } from "../lib/status.js";
import { cellText, createTable, tableState } from "../lib/table.js";
import { buildQuery, withoutViewKeys } from "../lib/urlstate.js";

export const SIDES = { baseline: "Baseline", experiment: "Experiment" };
export const OP_FIELDS = [
  ["calls", "Calls", "count"], ["host_self_us", "Host self", "duration"],
  ["host_total_us", "Host total", "duration"], ["device_self_us", "Device self", "duration"],
  ["device_total_us", "Device total", "duration"],
];
export const KERNEL_FIELDS = [
  ["calls", "Calls", "count"], ["total_us", "Total", "duration"], ["mean_us", "Mean", "duration"],
];
const NO_DEVICE = "No device activity on this side (a CPU-only trace): blank, not 0.";

/** "run / worker / span" of a side. */
export function sideLabel({ run, worker, span }) {
  const part = (v, text = String) => (v === undefined || v === null || v === "" ? "…" : text(v));
  return `${part(run)} / ${part(worker)} / ${part(span, spanLabel)}`;
}

/** The run after `run` in `runs` (wrapping), or null when there is no other run. */
export function nextRun(runs, run) {
  if (runs.length < 2) return null;
  const i = runs.indexOf(run);
  return runs[(i + 1) % runs.length] === run ? runs[(i + 2) % runs.length] : runs[(i + 1) % runs.length];
}

/** Another span than `span` of a worker: the one before it, else the one after; null if none. */
export function otherSpan(spans, span) {
  const i = spans.indexOf(span);
  if (spans.length < 2) return null;
  return i > 0 ? spans[i - 1] : spans[i + 1] ?? spans[0];
}

/** Diff rows -> flat table rows: {name, kind, b_<f>, e_<f>, d_<f>} per field. */
export function flatRows(rows, fields) {
  return (rows ?? []).map((r) => {
    const o = { name: r.name, kind: r.kind ?? "" };
    for (const [f] of fields) {
      o[`b_${f}`] = r.baseline?.[f] ?? null;
      o[`e_${f}`] = r.experiment?.[f] ?? null;
      o[`d_${f}`] = r.delta?.[f] ?? null;
    }
    return o;
  });
}

/** Class of a delta cell: more time / calls reads as "up" (worse), less as "down". */
export function deltaClass(v) {
  return typeof v !== "number" || v === 0 ? "" : v > 0 ? "delta-up" : "delta-down";
}

/** A signed duration: 1500 -> "+1.500 ms"; null -> "" (a side without the value). */
export function signedDuration(v) {
  if (v === null || v === undefined) return "";
  return `${v > 0 ? "+" : ""}${formatDuration(v)}`;
}

const plainDuration = (v) => (v === null || v === undefined ? "" : formatDuration(v));

/** A side's value: blank for null (no device activity on that side), never "0". */
export const sideText = (kind) => (v) => (v === null || v === undefined ? "" : cellText(v, kind));
/** A delta: signed ("+1.500 ms", "+12"), blank for null. */
export const deltaText = (kind) => (v) => {
  if (v === null || v === undefined) return "";
  return `${v > 0 ? "+" : ""}${cellText(v, kind)}`;
};

function tableColumns(fields, nameLabel) {
  const cols = [{ key: "name", label: nameLabel, kind: "text", shorten: 80, width: "16em" }];
  for (const [f, label, kind] of fields) {
    const help = f.startsWith("device") ? NO_DEVICE : null;
    cols.push({ key: `b_${f}`, label: `${label} (B)`, kind, format: sideText(kind), help });
    cols.push({ key: `e_${f}`, label: `${label} (E)`, kind, format: sideText(kind), help });
    cols.push({ key: `d_${f}`, label: `Δ ${label}`, kind, format: deltaText(kind), cellClass: deltaClass });
  }
  return cols;
}

/** The experiment side: from the URL, else a sensible other span (another run first). */
async function experimentOf(ctx, runs) {
  const st = ctx.state;
  if (st.diff_run && st.diff_worker) {
    let span = st.diff_span;
    if (!span) { // a link without diff_span: the latest, as the API takes it
      const spans = await getJSON("spans", { run: st.diff_run, worker: st.diff_worker }).catch(() => []);
      span = spans[spans.length - 1] ?? null;
    }
    return { run: st.diff_run, worker: st.diff_worker, span };
  }
  const base = { run: st.run, worker: st.worker, span: st.span };
  const run = nextRun(runs, base.run);
  if (run) {
    const workers = await getJSON("workers", { run });
    const worker = workers.includes(base.worker) ? base.worker : workers[0];
    const spans = await getJSON("spans", { run, worker });
    return { run, worker, span: spans[spans.length - 1] };
  }
  const spans = await getJSON("spans", { run: base.run, worker: base.worker });
  const span = otherSpan(spans, base.span);
  if (span) return { run: base.run, worker: base.worker, span };
  const workers = (await getJSON("workers", { run: base.run })).filter((w) => w !== base.worker);
  if (!workers.length) return null;
  const other = await getJSON("spans", { run: base.run, worker: workers[0] });
  return { run: base.run, worker: workers[0], span: other[other.length - 1] };
}

function select(id, label, values, current, onChange, text = (v) => v) {
  // a value from the link that is not among the choices is shown as such (not the first
  // choice, which then could not be chosen: picking the option shown fires no change)
  const missing = values.includes(current) ? [] : [el("option", { value: "", selected: true,
    disabled: true }, current ? `${current} (not found)` : "—")];
  return el("label", { className: "inline-control" }, label,
    el("select", { id, on: { change: (e) => onChange(e.target.value) } },
      missing, values.map((v) => el("option", { value: v, selected: v === current }, text(v)))));
}

async function pickerCard(ctx, runs, exp) {
  const [workers, spans] = await Promise.all([
    getJSON("workers", { run: exp.run }).catch(() => []),
    getJSON("spans", { run: exp.run, worker: exp.worker }).catch(() => []),
  ]);
  const choose = (patch) => { ctx.update(patch); ctx.rerender(); };
  const onRun = async (run) => {
    const ws = await getJSON("workers", { run });
    const worker = ws.includes(exp.worker) ? exp.worker : ws[0];
    const ss = await getJSON("spans", { run, worker });
    choose({ diff_run: run, diff_worker: worker, diff_span: ss[ss.length - 1] });
  };
  const onWorker = async (worker) => {
    const ss = await getJSON("spans", { run: exp.run, worker });
    choose({ diff_worker: worker, diff_span: ss[ss.length - 1] });
  };
  const swap = () => { // the experiment becomes the page's span, and the other way round
    const st = withoutViewKeys({ ...ctx.state, run: exp.run, worker: exp.worker, span: exp.span,
      diff_run: ctx.state.run, diff_worker: ctx.state.worker, diff_span: ctx.state.span });
    window.history.pushState(null, "", `${window.location.pathname}${buildQuery(st)}`);
    window.dispatchEvent(new PopStateEvent("popstate")); // the shell navigates on popstate
  };
  return card("Compare",
    el("div", { className: "diff-side", id: "diff-baseline" }, el("strong", {}, "Baseline (B): "),
      sideLabel(ctx.state), el("span", { className: "muted" }, " — the run, worker and span chosen at the top")),
    el("div", { className: "diff-side card-tools", id: "diff-experiment" }, el("strong", {}, "Experiment (E): "),
      select("diff-run", "Run", runs, exp.run, onRun),
      select("diff-worker", "Worker", workers, exp.worker, onWorker),
      select("diff-span", "Span", spans, exp.span, (span) => choose({ diff_span: span }), spanLabel),
      el("button", { type: "button", id: "diff-swap", on: { click: swap } }, "Swap sides")));
}

function summaryCard(body) {
  const s = body.summary ?? {};
  return card("What changed most",
    el("p", { id: "diff-summary" }, el("strong", {}, s.text ?? "")),
    s.evidence?.length ? el("ul", { id: "diff-evidence" }, s.evidence.map((e) => el("li", {}, e.text))) : null);
}

function breakdownCard(body, base, exp) {
  const cats = body.categories ?? [];
  const box = el("div", { className: "chart", id: "diff-breakdown-chart" });
  const rows = [...cats, "Total"].map((c) => el("tr", { className: c === "Total" ? "total" : "" },
    el("td", {}, c),
    el("td", { className: "num" }, plainDuration(body.baseline[c])),
    el("td", { className: "num" }, plainDuration(body.experiment[c])),
    el("td", { className: `num ${deltaClass(body.delta[c])}` }, signedDuration(body.delta[c])),
    el("td", { className: `num ${deltaClass(body.delta[c])}` },
      body.delta_pct[c] === null ? "" : `${body.delta_pct[c] > 0 ? "+" : ""}${formatPercent(body.delta_pct[c])}`)));
  const table = el("table", { className: "data-table compact", id: "diff-breakdown" },
    el("thead", {}, el("tr", {}, ["Category", "Baseline", "Experiment", "Δ", "Δ %"].map((h, i) =>
      el("th", { className: i ? "num" : "" }, h)))),
    el("tbody", {}, rows));
  const steps = body.steps ?? {};
  const section = card("Average step time",
    el("p", { className: "muted" }, `Per-step averages over ${steps.baseline ?? "?"} (B) and ${steps.experiment ?? "?"} (E) steps; Δ = E − B, Δ % of B. A blank value: that side has no device activity.`),
    el("div", { className: "diff-breakdown-layout" }, box, table));
  const series = cats.map((c) => ({ name: c, color: CATEGORY_COLORS[c],
    values: [body.baseline[c] ?? 0, body.experiment[c] ?? 0] }));
  drawStackedBars(box, { x: [`B: ${sideLabel(base)}`, `E: ${sideLabel(exp)}`], series, yTitle: "Average step time" })
    .catch((err) => { box.classList.remove("chart"); setChildren(box, errorPanel(err)); });
  return section;
}

function deltaTable(ctx, { title, id, rows, fields, nameLabel, noun, prefix, note }) {
  const section = card(title, el("p", { className: "muted" }, `Span totals of each side (B, E) and Δ = E − B, largest |Δ| first. ${note}`));
  section.id = id;
  if (!rows.length) {
    section.append(emptyState(`No ${noun} on either side`));
    return section;
  }
  section.append(createTable({
    columns: tableColumns(fields, nameLabel), rows: flatRows(rows, fields), noun,
    searchKeys: ["name"], searchPlaceholder: `Search ${noun}…`,
    ...tableState(ctx, prefix),
    rowKey: (r) => `${r.name}\u0000${r.kind}`,
  }).element);
  return section;
}

/** A diff route for both sides; 202 answers show which side is still being analysed. */
function fetchDiff(ctx, path, exp, progressBox) {
  const params = { run: ctx.state.run, worker: ctx.state.worker, span: ctx.state.span,
    diff_run: exp.run, diff_worker: exp.worker, diff_span: exp.span };
  return getJSON(path, params, { signal: ctx.client.signal, onProgress: (body) => {
    if (!ctx.alive()) return;
    const side = body.side === "experiment" ? exp : ctx.state;
    setChildren(progressBox, el("div", { id: "diff-loading", dataset: { side: body.side ?? "" } },
      loadingLine(`Waiting for the ${body.side ?? "traces"} (${sideLabel(side)}) to be analysed…`), progressPanel(body)));
  } });
}

/** Render the Diff view into `root`: ctx.client's span against the experiment. */
export async function render(root, ctx) {
  setChildren(root, loadingLine("Loading the runs…"));
  const runs = (await getJSON("runs")).runs ?? [];
  const exp = await experimentOf(ctx, runs);
  if (!ctx.alive()) return;
  if (!exp) {
    setChildren(root, emptyState("Nothing to compare", "The Diff view needs a second span: another run, worker or profiler cycle."));
    return;
  }
  if (ctx.state.diff_run !== exp.run || ctx.state.diff_worker !== exp.worker || ctx.state.diff_span !== exp.span) {
    ctx.update({ diff_run: exp.run, diff_worker: exp.worker, diff_span: exp.span });
  }
  const picker = await pickerCard(ctx, runs, exp);
  if (!ctx.alive()) return;
  const content = el("div", {}, loadingLine("Comparing…"));
  setChildren(root, el("div", { className: "stack-layout" }, picker, content));
  try {
    const overview = await fetchDiff(ctx, "diff/overview", exp, content);
    const [operators, kernels] = await Promise.all([
      fetchDiff(ctx, "diff/operators", exp, content), fetchDiff(ctx, "diff/kernels", exp, content)]);
    if (!ctx.alive()) return;
    setChildren(content, summaryCard(overview), breakdownCard(overview, ctx.state, exp),
      deltaTable(ctx, { title: "Operators", id: "diff-operators", rows: operators, fields: OP_FIELDS,
        nameLabel: "Operator", noun: "operators", prefix: "",
        note: "Device columns are blank for a side without device activity." }),
      deltaTable(ctx, { title: "Kernels", id: "diff-kernels", rows: kernels, fields: KERNEL_FIELDS,
        nameLabel: "Kernel", noun: "kernels", prefix: "kdiff_",
        note: "A side without device activity is blank; a kernel one side lacks is 0 there." }));
  } catch (err) {
    if (!ctx.alive() || err?.name === "AbortError") return;
    const side = err instanceof ApiError ? err.body?.side : null;
    const label = side === "experiment" ? sideLabel(exp) : sideLabel(ctx.state);
    // the panel names the side once: "The experiment (r / w / s): This trace file cannot be shown: ..."
    const shown = side ? new ApiError(err.status, { ...err.body, error: String(err.body.error ?? "").replace(`${side}: `, "") }, err.url) : err;
    setChildren(content, el("div", { id: "diff-error", dataset: { side: side ?? "" } },
      errorPanel(shown, side ? `The ${side} (${label})` : "Cannot compare")));
  }
}
