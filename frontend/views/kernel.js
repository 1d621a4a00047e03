// Kernel view: time per kernel (pie), the kernel table grouped by kernel or kernel +
// operator, and the Tensor Core share (pie), from kernel, kernel/table, kernel/tc_pie
// (SPEC §2.5).
import { drawPie } from "../lib/charts.js";
import { card, el, setChildren } from "../lib/dom.js";
import { formatDuration, formatPercent } from "../lib/format.js";
import { GPU_HINT, emptyState, errorPanel, loadingLine } from "../lib/status.js";
import { createTable, tableState } from "../lib/table.js";
import { chartTableRows } from "../lib/table_model.js";
import { choice } from "../lib/urlstate.js";

export const GROUPS = { Kernel: "Kernel", KernelNameAndOpName: "Kernel + operator" };

const HELP = {
  "Mean Blocks Per SM": "Mean blocks per SM: thread blocks per streaming multiprocessor (grid size / number of SMs), duration-weighted.",
  "Mean Est. Achieved Occupancy (%)": "Mean est. achieved occupancy: active warps per SM relative to the maximum, duration-weighted.",
  "Total Duration (us)": "Total duration of all calls.",
  "Mean Duration (us)": "Mean duration of one call.",
  "Max Duration (us)": "Longest call.",
  "Min Duration (us)": "Shortest call.",
  "Tensor Cores Used": "Whether the kernel runs on Tensor Cores (recognised by its name).",
  "Matrix Cores Used": "Whether the kernel runs on the Matrix Cores, AMD's MFMA units (recognised by its name).",
};

const LABELS = {
  "Total Duration (us)": "Total", "Mean Duration (us)": "Mean", "Max Duration (us)": "Max",
  "Min Duration (us)": "Min", "Mean Blocks Per SM": "Blocks/SM",
  "Mean Est. Achieved Occupancy (%)": "Occupancy", "Tensor Cores Used": "Tensor cores",
  "Matrix Cores Used": "Matrix cores",
};

/** "Matrix Core" on ROCm traces (the server names the pie's rows "Using Matrix Cores"), else "Tensor Core". */
export function coreName(rows) {
  return (rows ?? []).some((r) => /matrix cores/i.test(String(r?.[0]))) ? "Matrix Core" : "Tensor Core";
}

/** Table columns from the chart-table columns of kernel/table (short labels, full name on hover). */
export function kernelColumns(columns) {
  return columns.map((c) => {
    const label = LABELS[c.name] ?? c.name.replace(/\s*\(us\)$/, "");
    let kind = c.type === "number" ? "number" : "text";
    if (/\(us\)$/.test(c.name)) kind = "duration";
    else if (/\(%\)$/.test(c.name)) kind = "percent";
    else if (c.name === "Calls") kind = "count";
    const col = { key: c.key, label: label.replace(/\s*\(%\)$/, ""), kind, title: c.name,
      help: HELP[c.name] };
    if (c.name === "Name") Object.assign(col, { shorten: 120, width: "22em" });
    if (c.name === "Operator") Object.assign(col, { shorten: 60, width: "12em" });
    return col;
  });
}

function pieCard(title, id, promise, empty, options, retitle) {
  const box = el("div", { className: "chart pie-chart", id });
  const section = card(title, box);
  promise.then((body) => {
    const rows = body?.total?.rows ?? [];
    if (retitle) section.querySelector("h2").textContent = retitle(rows);
    if (!rows.some((r) => Number(r[1]) > 0)) {
      box.classList.remove("chart");
      setChildren(box, emptyState(...empty));
      return null;
    }
    return drawPie(box, rows, options);
  }).catch((err) => { box.classList.remove("chart"); setChildren(box, errorPanel(err)); });
  return section;
}

/**
 * {used, total, share, core} from kernel/tc_pie's rows ("Using Tensor Cores" /
 * "Not Using ..."), or null when it has no kernel time.
 */
export function coreShare(rows) {
  let used = 0;
  let total = 0;
  for (const [name, value] of rows ?? []) {
    const v = Number(value) || 0;
    total += v;
    if (/^using/i.test(String(name))) used += v;
  }
  return total > 0 ? { used, total, share: (100 * used) / total, core: coreName(rows) } : null;
}

/** One line and a bar instead of a pie: "Tensor Cores: 12.3% of kernel time (1.2 ms of 9.8 ms)". */
function coreCard(promise) {
  const body = el("div", { className: "core-share", id: "tc-share" }, loadingLine("Loading…"));
  const section = card("Tensor Core usage", body);
  promise.then((answer) => {
    const s = coreShare(answer?.total?.rows);
    if (!s) {
      setChildren(body, el("p", { className: "muted" }, "Tensor Core usage is unknown for this trace."));
      return;
    }
    section.querySelector("h2").textContent = `${s.core} usage`;
    setChildren(body,
      el("div", { className: "core-figure" }, el("strong", {}, formatPercent(s.share, 1)),
        ` of kernel time in ${s.core} kernels (${formatDuration(s.used)} of ${formatDuration(s.total)})`),
      el("div", { className: "core-bar", role: "img", "aria-label": `${formatPercent(s.share, 1)} ${s.core}` },
        el("span", { style: { width: `${Math.min(100, Math.max(0, s.share))}%` } })));
  }).catch((err) => setChildren(body, errorPanel(err)));
  return section;
}

function groupSelect(ctx, groupBy) {
  return el("label", { className: "inline-control" }, "Group by ",
    el("select", { id: "kernel-group-by", on: { change: (e) => { ctx.update({ kernel_group_by: e.target.value, search: null, sort: null, dir: null, page: null }); ctx.rerender(); } } },
      Object.entries(GROUPS).map(([v, label]) => el("option", { value: v, selected: v === groupBy }, label))));
}

/** Render the kernel view of ctx.client's span into `root`. */
export async function render(root, ctx) {
  const groupBy = choice(GROUPS, ctx.state.kernel_group_by, "Kernel");
  setChildren(root, loadingLine("Loading kernels…"));
  const kernelPie = ctx.client.get("kernel", { group_by: "Kernel" }); // in parallel with the table
  const tcPie = ctx.client.get("kernel/tc_pie");
  const body = await ctx.client.get("kernel/table", { group_by: groupBy });
  if (!ctx.alive()) return;
  const { columns, rows } = chartTableRows(body?.data);
  if (!rows.length) {
    setChildren(root, card("Kernels", emptyState("This trace has no GPU kernels",
      `The profile recorded host activity only (CPU run, or ProfilerActivity.CUDA was not enabled). ${GPU_HINT}`)));
    return;
  }
  const nameKey = columns[0]?.key ?? "name";
  const tableCard = card("Kernels", el("div", { className: "card-tools" }, groupSelect(ctx, groupBy)),
    createTable({
      columns: kernelColumns(columns), rows, noun: "kernels",
      searchKeys: columns.filter((c) => c.type !== "number").map((c) => c.key),
      searchPlaceholder: "Search kernels or operators…",
      ...tableState(ctx),
      rowKey: (r) => JSON.stringify(columns.filter((c) => c.type !== "number").map((c) => r[c.key] ?? r[nameKey])),
    }).element);
  tableCard.id = "kernel-table";
  const pie = pieCard("Time per kernel", "kernel-pie", kernelPie,
    ["No kernel time", "No kernel ran for a measurable time."]);
  setChildren(root, el("div", { className: "stack-layout" }, tableCard, coreCard(tcPie), pie));
}
