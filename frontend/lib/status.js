// Loading, error and empty states, as DOM nodes (plain text only).
import { ApiError, NetworkError, describeError } from "./api.js";
import { el } from "./dom.js";

const PHASES = {
  queued: "Waiting for its turn",
  read: "Reading the trace file",
  analyse: "Analysing",
  cache: "Loading cached results",
};

/** "Analysing… 42% (3.1 s)" progress bar from a 202 body {phase, fraction, elapsed_s}. */
export function progressPanel(body) {
  const fraction = Math.min(1, Math.max(0, Number(body?.fraction) || 0));
  const pct = Math.round(fraction * 100);
  const phase = PHASES[body?.phase] || "Preparing the trace";
  const elapsed = Number(body?.elapsed_s);
  return el("div", { className: "progress-panel", role: "status", "aria-live": "polite" },
    el("div", { className: "progress-label" },
      `${phase}… ${pct}%`,
      Number.isFinite(elapsed) ? el("span", { className: "muted" }, ` (${elapsed.toFixed(1)} s)`) : null),
    el("div", { className: "progress-track", role: "progressbar", "aria-valuemin": "0",
      "aria-valuemax": "100", "aria-valuenow": String(pct) },
    el("div", { className: "progress-bar", style: { width: `${pct}%` } })));
}

/** A spinner line for short waits. */
export function loadingLine(text = "Loading…") {
  return el("div", { className: "loading-line", role: "status" }, el("span", { className: "spinner" }), text);
}

/** An error answer in plain words, naming the file and the position when known. */
export function errorPanel(err, context = "") {
  if (!(err instanceof ApiError || err instanceof NetworkError)) console.error(err); // a bug: keep its stack
  const d = describeError(err);
  return el("div", { className: "error-panel", role: "alert" },
    el("div", { className: "error-title" }, context ? `${context}: ${d.title}` : d.title),
    d.file ? el("div", {}, "File: ", el("code", {}, d.file), d.where ? ` (at ${d.where})` : "") : null,
    d.detail ? el("div", { className: "error-detail" }, d.detail) : null);
}

/** A friendly "nothing to show" box instead of a blank chart. */
export function emptyState(title, detail = "") {
  return el("div", { className: "empty-state" }, el("div", { className: "empty-title" }, title),
    detail ? el("div", { className: "muted" }, detail) : null);
}

/** What a GPU trace adds and how to record one (the empty states of CPU-only traces). */
export const GPU_HINT = "A GPU trace adds the GPU summary (utilization, SM efficiency, occupancy, "
  + "tensor-core share), the Kernel view, GPU lanes in the timeline and device time per operator. "
  + "Record one on a machine with a GPU with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] "
  + "in torch.profiler.profile (see the README, \u201cProfile your own job\u201d).";
