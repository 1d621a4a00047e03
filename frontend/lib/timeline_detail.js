// The detail panel of one timeline event (a trace/event answer), as DOM built from text
// nodes only: names, args and call stacks from the trace are never parsed as HTML.
// Related events (launching runtime call and operator, launched kernels) are links: a plain
// click selects and shows them in the timeline, a middle click opens their own URL.
import { breakable, el } from "./dom.js";
import { formatCount, formatDuration, shortenName } from "./format.js";
import { formatTime } from "./timeline_window.js";

const KIND_LABELS = {
  host_op: "Operator", runtime: "Runtime call", kernel: "Kernel", memcpy: "Memcpy", memset: "Memset",
  step: "Step", user_range: "User range", python: "Python function", gpu_range: "GPU range",
  sync: "Synchronization", trace_span: "Trace span", other: "Other",
};
/** Launched activities listed before "Show all". */
const FIRST_LAUNCHED = 50;

export function kindLabel(kind) {
  return KIND_LABELS[kind] ?? String(kind ?? "").replace(/_/g, " ");
}

/** A value of the args dict as text: strings as they are, the rest as JSON. */
export function argText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * The panel for `detail` (trace/event answer). `opts`: {laneName(id) -> str, hrefFor(brief)
 * -> relative URL, onJump(brief), onClose()}.
 */
export function detailPanel(detail, opts) {
  const link = (brief, text = brief.name) => el("a", {
    href: opts.hrefFor(brief), className: "event-link", title: brief.name,
    dataset: { eventId: String(brief.id) },
    on: { click: (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) return;
      e.preventDefault();
      opts.onJump(brief);
    } },
  }, shortenName(text, 90));
  const facts = [
    ["Kind", kindLabel(detail.kind)],
    ["Category", detail.category],
    ["Start", formatTime(detail.start)],
    ["Duration", formatTime(detail.dur)], // exact to the ns, as Start and End
    ["End", formatTime(detail.end)],
    ["Lane", opts.laneName(detail.lane)],
    ["Thread", Array.isArray(detail.thread) ? detail.thread.join(" / ") : null],
    ["Row", detail.depth],
    ["Correlation", detail.correlation],
    ["External id", detail.external_id],
    ["Input shape", detail.input_shape || null],
    ["Drawn until", detail.clipped_end != null ? `${formatTime(detail.clipped_end)} (overlaps its parent; clipped)` : null],
  ].filter(([, v]) => v !== null && v !== undefined && v !== "");
  const sections = [
    el("div", { className: "event-name" }, breakable(detail.name)),
    el("dl", { className: "event-facts" }, facts.map(([k, v]) => el("div", { className: String(v).length > 28 ? "wide" : null },
      el("dt", {}, k), el("dd", {}, String(v))))),
  ];
  const launchedBy = [
    detail.runtime ? el("li", {}, el("span", { className: "muted" }, "Runtime call: "), link(detail.runtime),
      ` (${formatDuration(detail.runtime.dur)})`) : null,
    detail.op ? el("li", {}, el("span", { className: "muted" }, "Operator: "), link(detail.op),
      ` (${formatDuration(detail.op.dur)})`) : null,
  ].filter(Boolean);
  if (launchedBy.length) sections.push(section("Launched by", el("ul", { className: "event-links" }, launchedBy)));
  if (detail.launched?.length) sections.push(launchedSection(detail, link));
  const args = Object.entries(detail.args ?? {});
  if (args.length) {
    sections.push(section("Args", el("table", { className: "event-args" }, el("tbody", {},
      args.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, argText(v))))))));
  }
  if (detail.call_stack?.length) {
    sections.push(section("Call stack", el("ol", { className: "event-stack" },
      detail.call_stack.map((f) => el("li", {}, f)))));
  }
  return el("section", { className: "card trace-detail", id: "trace-detail", dataset: { eventId: String(detail.id) } },
    el("div", { className: "card-head" }, el("h2", {}, "Selected event"),
      el("button", { type: "button", className: "button close", "aria-label": "Close the details",
        title: "Close (Esc)", on: { click: () => opts.onClose() } }, "×")),
    sections);
}

function section(title, body) {
  return el("div", { className: "event-section" }, el("h3", {}, title), body);
}

function launchedSection(detail, link) {
  const all = detail.launched;
  const total = detail.launched_count ?? all.length;
  const kernelTime = all.reduce((s, a) => s + (a.dur || 0), 0);
  const list = el("ul", { className: "event-links launched" });
  const fill = (n) => list.replaceChildren(...all.slice(0, n).map((a) => el("li", {},
    link(a), el("span", { className: "muted" }, ` ${formatDuration(a.dur)} at ${formatTime(a.start)}`))));
  fill(FIRST_LAUNCHED);
  const more = all.length > FIRST_LAUNCHED ? el("button", { type: "button", className: "button", on: {
    click: (e) => { fill(all.length); e.currentTarget.remove(); } } }, `Show all ${formatCount(all.length)}`) : null;
  const head = total > all.length
    ? `${formatCount(total)} device activities (first ${formatCount(all.length)} listed, ${formatDuration(kernelTime)} in those)`
    : `${formatCount(total)} device ${total === 1 ? "activity" : "activities"}, ${formatDuration(kernelTime)} in all`;
  return section("Launched on the device", el("div", {}, el("div", { className: "muted" }, head), list, more));
}
