// Operator view: four pies (device/host x self/total time, tail folded into "Other") and
// the operator table with call-stack rows, from operation, operation/table and
// operation/stack (SPEC §2.4).
import { drawPie } from "../lib/charts.js";
import { card, el, setChildren } from "../lib/dom.js";
import { formatDuration } from "../lib/format.js";
import { emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { createTable, tableState } from "../lib/table.js";
import { buildQuery, choice } from "../lib/urlstate.js";
import { coreName } from "./kernel.js";

export const GROUPS = { Operation: "Operator", OperationAndInputShape: "Operator + input shape" };
export const PIES = {
  device_self_time: "Device self time", device_total_time: "Device total time",
  host_self_time: "Host self time", host_total_time: "Host total time",
};

const DURATIONS = [
  ["device_self_duration", "Device self", "Time of the GPU work this operator launched itself (kernels, memcpy, memset)."],
  ["device_total_duration", "Device total", "Device self time plus that of the operators it called."],
  ["host_self_duration", "Host self", "Host time inside the operator, minus its child operators and runtime calls."],
  ["host_total_duration", "Host total", "Host (CPU) time from the operator's start to its end."],
];

/** Table columns for the operator rows present (device columns only when there is GPU time). */
export function operatorColumns(rows, groupBy, core = "Tensor Core") {
  const has = (k) => rows.some((r) => r[k] !== undefined && r[k] !== null);
  const gpu = rows.some((r) => Number(r.device_total_duration) > 0 || Number(r.device_self_duration) > 0);
  const cols = [{ key: "name", label: "Operator", kind: "text", shorten: 80, width: "16em" }];
  if (groupBy === "OperationAndInputShape") cols.push({ key: "input_shape", label: "Input shape", kind: "code", width: "15em" });
  if (rows.some((r) => r.kind === "range")) cols.push({ key: "kind", label: "Row", kind: "text",
    help: "range: device time launched directly under a user range, python frame or step, outside any operator (SPEC §2.4.8)." });
  cols.push({ key: "calls", label: "Calls", kind: "count" });
  for (const [key, label, help] of DURATIONS) {
    if (has(key) && (gpu || !key.startsWith("device"))) cols.push({ key, label, kind: "duration", help });
  }
  // tc_*_ratio are percentages (0-100) in the API. `core`: "Matrix Core" on ROCm (AMD's MFMA units).
  const abbr = core === "Matrix Core" ? "MC" : "TC";
  if (gpu && has("tc_eligible")) cols.push({ key: "tc_eligible", label: `${abbr} eligible`, kind: "bool",
    help: `${core} eligible: operators that can run on ${core}s (convolutions, matrix multiplies, attention).` });
  if (gpu && has("tc_self_ratio")) cols.push({ key: "tc_self_ratio", label: `${abbr} self`, kind: "percent",
    help: `Share of this operator's own device time spent in ${core} kernels.` });
  // (tc_total_ratio is left out: with TC self it made the table too wide to read)
  return cols;
}

/** Call-stack frames from a `call_stack` value (list, or text split on ";" / newlines). */
export function stackFrames(stack) {
  if (Array.isArray(stack)) return stack.map(String).filter(Boolean);
  return String(stack ?? "").split(/;|\n/).map((s) => s.trim()).filter(Boolean);
}

/** The Module view's flame graph with `name` highlighted (same run / worker / span). */
export function flameLink(state, name) {
  return buildQuery({ run: state.run, worker: state.worker, span: state.span, view: "Module",
    mod_tab: "flame", mod_search: name }) || "?";
}

async function stackDetail(ctx, groupBy, row) {
  const link = el("a", { className: "flame-link", href: flameLink(ctx.state, row.name) }, "Show in the flame graph");
  const rows = await ctx.client.get("operation/stack", { group_by: groupBy, op_name: row.name,
    input_shape: groupBy === "OperationAndInputShape" ? row.input_shape ?? "" : undefined });
  const list = Array.isArray(rows) ? rows : rows?.data ?? [];
  if (!list.length) return el("div", {}, el("p", { className: "muted" }, "No call stacks recorded for this operator."), link);
  return el("div", { className: "stacks" }, link, list.map((s) => el("div", { className: "stack" },
    el("div", { className: "stack-head" },
      `${s.calls ?? "?"} call${s.calls === 1 ? "" : "s"}`,
      s.device_self_duration ? ` · device self ${formatDuration(s.device_self_duration)}` : "",
      s.host_self_duration !== undefined ? ` · host self ${formatDuration(s.host_self_duration)}` : "",
      s.host_total_duration !== undefined ? ` · host total ${formatDuration(s.host_total_duration)}` : ""),
    el("pre", { className: "stack-frames" }, stackFrames(s.call_stack).join("\n") || "(empty call stack)"))));
}

function pieSection(ctx, pies, groupBy) {
  const available = Object.keys(PIES).filter((k) => pies?.[k]?.rows?.length);
  const box = el("div", { className: "chart pie-chart", id: "operator-pie" });
  const buttons = el("div", { className: "segmented", role: "group", "aria-label": "Pie" });
  // by input shape, hundreds of (operator, shape) pairs made one grey "Other" slice: the
  // pie stays by operator, the table below lists the shapes
  const note = groupBy === "OperationAndInputShape"
    ? el("p", { className: "muted pie-note" }, "The pie groups by operator; the table lists each input shape.") : null;
  const section = card("Operator time", buttons, note, box);
  if (!available.length) {
    setChildren(box, emptyState("No operator time", "This trace has no host operators."));
    return section;
  }
  let current = available.includes(ctx.state.op_pie) ? ctx.state.op_pie
    : available.includes("device_self_time") ? "device_self_time" : available[0];
  const draw = () => {
    setChildren(buttons, Object.entries(PIES).map(([k, label]) => el("button", { type: "button",
      className: k === current ? "active" : "", disabled: !available.includes(k),
      title: available.includes(k) ? null : "No data (no GPU kernels in this trace)",
      "aria-pressed": String(k === current), dataset: { pie: k },
      on: { click: () => { current = k; ctx.update({ op_pie: k }); draw(); } } }, label)));
    drawPie(box, pies[current].rows).catch((err) => setChildren(box, errorPanel(err)));
  };
  draw();
  return section;
}

function groupSelect(ctx, groupBy) {
  return el("label", { className: "inline-control" }, "Group by ",
    el("select", { id: "op-group-by", on: { change: (e) => { ctx.update({ op_group_by: e.target.value, search: null, sort: null, dir: null, page: null }); ctx.rerender(); } } },
      Object.entries(GROUPS).map(([v, label]) => el("option", { value: v, selected: v === groupBy }, label))));
}

/** Render the operator view of ctx.client's span into `root`. */
export async function render(root, ctx) {
  const groupBy = choice(GROUPS, ctx.state.op_group_by, "Operation");
  setChildren(root, loadingLine("Loading operators…"));
  const [pies, table] = await Promise.all([
    ctx.client.get("operation", { group_by: "Operation" }),
    ctx.client.get("operation/table", { group_by: groupBy }),
  ]);
  if (!ctx.alive()) return;
  const rows = Array.isArray(table) ? table : table?.data ?? [];
  // ROCm traces name their tensor-core share "Matrix Cores" (kernel/tc_pie's rows)
  const core = rows.some((r) => r.tc_eligible !== undefined)
    ? coreName((await ctx.client.get("kernel/tc_pie").catch(() => null))?.total?.rows) : "Tensor Core";
  if (!ctx.alive()) return;
  const tableCard = card("Operators", el("div", { className: "card-tools" }, groupSelect(ctx, groupBy)));
  if (!rows.length) {
    tableCard.append(emptyState("No operators", "This span has no host operators (cpu_op events)."));
  } else {
    tableCard.append(createTable({
      columns: operatorColumns(rows, groupBy, core), rows, noun: "operators",
      searchKeys: ["name", "input_shape"], searchPlaceholder: "Search operators or shapes…",
      ...tableState(ctx),
      rowKey: (r) => `${r.name}\u0000${r.input_shape ?? ""}${r.kind ? `\u0000${r.kind}` : ""}`,
      expandable: (r) => !!r.has_call_stack,
      renderDetail: rows.some((r) => r.has_call_stack) ? (r) => stackDetail(ctx, groupBy, r) : null,
    }).element);
  }
  setChildren(root, el("div", { className: "stack-layout" }, pieSection(ctx, pies, groupBy), tableCard));
}
