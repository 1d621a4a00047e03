// Small DOM pieces of the Trace view: the hover tooltip, the search results list and the
// toolbar's window readout. Text only (textContent): trace names are never parsed as HTML.
import { el, setChildren } from "./dom.js";
import { counterValue } from "./timeline_axes.js";
import { formatCount, formatDuration, shortenName } from "./format.js";
import { B_COUNT, B_DUR, B_NAME, B_START } from "./timeline_layout.js";
import { formatTime, formatTimeAt } from "./timeline_window.js";

/** Lines of the tooltip of a block: name, start, duration, count, lane. */
export function blockTip(answer, box, block) {
  const count = block[B_COUNT];
  return [
    { text: shortenName(answer.names[block[B_NAME]], 160), className: "tip-name" },
    { text: `Start ${formatTime(block[B_START])}` },
    { text: count > 1 ? `${formatCount(count)} events over ${formatDuration(block[B_DUR])}` : `Duration ${formatDuration(block[B_DUR])}` },
    count > 1 ? { text: "Merged at this zoom (named after the longest). Zoom in or click to see them.", className: "muted" }
      : { text: "Click for details", className: "muted" },
    { text: box.lane.name, className: "muted" },
  ];
}

/**
 * What a step of the Steps band stands for: [name, start, end, hostStart, hostEnd, hostId]
 * (µs). The band shows the step as the breakdown counts it (SPEC §2.1), which differs from
 * its ProfilerStep#N host span: each step's GPU work is charged to it, so it starts where
 * the previous step's GPU work ends and ends with its own.
 */
export function stepLines(step) {
  const [name, s, e, hs = s, he = e, hostId = null] = step;
  const span = (a, b) => `${formatTime(a)} – ${formatTime(b)} (${formatDuration(b - a)})`;
  const lines = [
    { text: `Step ${name}`, className: "tip-name" },
    { text: `Step time: ${span(s, e)}` },
    { text: `ProfilerStep#${name} on the host: ${span(hs, he)}` },
  ];
  if (Math.abs(s - hs) > 1e-3 || Math.abs(e - he) > 1e-3) {
    lines.push({ text: `The step is counted from ${s > hs ? "the end of the previous step's GPU work" : "its host start"} `
      + `to ${e > he ? "the end of the GPU work it launched" : "its host end"}: GPU work belongs to the step `
      + `that launched it, so this bar ${s > hs ? `starts ${formatDuration(s - hs)} after` : "starts with"} ProfilerStep#${name}`
      + `${e > he ? ` and ends ${formatDuration(e - he)} after it` : ""}.`, className: "muted step-why" });
  } else {
    lines.push({ text: "Same span as its ProfilerStep host event.", className: "muted step-why" });
  }
  if (hostId === null) lines.push({ text: "(No ProfilerStep event in this trace: the whole trace is one step.)", className: "muted" });
  return lines;
}

/** Lines of the tooltip of a counter lane at a point [t, value]. */
export function counterTip(box, point) {
  const [t, v] = point;
  return [
    { text: box.lane.name, className: "tip-name" },
    { text: counterValue(box.lane, v) },
    { text: `at ${formatTime(t)}`, className: "muted" },
  ];
}

/** Lines of the tooltip over a lane name. */
export function laneTip(box) {
  const lines = [{ text: box.lane.name, className: "tip-name" }, { text: box.lane.id, className: "muted" }];
  if (box.rows > 1) lines.push({ text: `${box.rows} rows; click to ${box.shown < box.rows ? "unfold" : "fold"}`, className: "muted" });
  return lines;
}

/** Show `lines` in the tooltip node near (x, y) inside a `w` x `h` area; null lines hide it. */
export function showTip(node, lines, x, y, w, h) {
  if (!lines) {
    node.hidden = true;
    return;
  }
  setChildren(node, lines.map((l) => el("div", { className: l.className ?? null }, l.text)));
  node.hidden = false;
  const tw = node.offsetWidth;
  const th = node.offsetHeight;
  const left = x + 14 + tw > w ? Math.max(0, x - 14 - tw) : x + 14;
  const top = y + 16 + th > h ? Math.max(0, y - 8 - th) : y + 16;
  node.style.left = `${left}px`;
  node.style.top = `${top}px`;
}

/** "100.000 ms – 102.000 ms (2.000 ms shown of 928.952 ms)". */
export function windowText(win, range) {
  const span = win.end - win.start;
  return `${formatTimeAt(win.start, span)} – ${formatTimeAt(win.end, span)} (${formatDuration(win.end - win.start)} of ${formatDuration(range[1] - range[0])})`;
}
