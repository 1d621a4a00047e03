// Trace view: the timeline (trace/timeline, trace/event) is built in its own issue. This
// module is its slot: render(root, ctx) like every view; ctx.state carries the timeline's
// URL keys (start, end, event) and ctx.update(patch) writes them.
import { card, el, setChildren } from "../lib/dom.js";
import { emptyState } from "../lib/status.js";

/** Render the (placeholder) trace view into `root`. */
export async function render(root, ctx) {
  setChildren(root, card("Trace",
    emptyState("The timeline view is not built yet",
      "Open the trace file in Perfetto (ui.perfetto.dev) or chrome://tracing meanwhile."),
    el("p", { className: "muted" }, `Trace: ${ctx.client.run} / ${ctx.client.worker} / span ${ctx.client.span}`)));
}
