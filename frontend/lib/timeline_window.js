// The timeline's visible window: times in µs from the trace origin (as trace/timeline
// speaks them), zoom / pan arithmetic, axis ticks, time labels and the URL keys `start`,
// `end` (SPEC §3.2). Pure functions, no DOM: unit-tested with node
// (tests/frontend/timeline.test.mjs).

/** The narrowest window (µs): 100 ns, well above the 1 ns the API rounds to. */
export const MIN_SPAN = 0.1;
/** How far past either end of the trace the window may go, as a share of the range. */
const MARGIN = 0.05;

/** A window [start, end) kept inside the trace (plus a margin) and at least MIN_SPAN wide. */
export function clampWindow({ start, end }, range) {
  const [r0, r1] = range;
  const full = Math.max(r1 - r0, MIN_SPAN);
  const lo = r0 - full * MARGIN;
  const hi = r1 + full * MARGIN;
  let span = Math.min(Math.max(end - start, MIN_SPAN), hi - lo);
  let s = Math.min(Math.max(start, lo), hi - span);
  if (!Number.isFinite(s)) s = r0;
  if (!Number.isFinite(span)) span = full;
  return { start: s, end: s + span };
}

/** Does `win` reach past where the view may go (the trace and its margin, {@link clampWindow})
 * by more than rounding? (a link's window of days over a trace of seconds) */
export function reachesBeyond(win, range) {
  const clamped = clampWindow(win, range);
  const slack = 1e-6 * Math.max(range[1] - range[0], MIN_SPAN);
  return clamped.start > win.start + slack || clamped.end < win.end - slack;
}

/**
 * Zoom by `factor` (< 1 zooms in) keeping the time under `anchor` (0..1 across the plot)
 * where it is: zoomAt({start: 0, end: 100}, 0.5, 0.5) -> {start: 25, end: 75}.
 */
export function zoomAt(win, factor, anchor, range) {
  const span = win.end - win.start;
  const t = win.start + span * anchor;
  const next = span * factor;
  return clampWindow({ start: t - next * anchor, end: t - next * anchor + next }, range);
}

/** Pan by `share` of the window (positive moves later in time). */
export function panBy(win, share, range) {
  const d = (win.end - win.start) * share;
  return clampWindow({ start: win.start + d, end: win.end + d }, range);
}

/** Zoom factor of a wheel event's deltaY (pixels): 100 px of wheel ≈ 1.25x. */
export function wheelFactor(deltaY, deltaMode = 0) {
  const px = deltaMode === 1 ? deltaY * 16 : deltaMode === 2 ? deltaY * 400 : deltaY;
  return Math.exp(Math.max(-400, Math.min(400, px)) * 0.0022);
}

/** A window that shows [t0, t1] with `pad` (share of its length) on both sides. */
export function windowAround(t0, t1, range, pad = 0.25, minSpan = 10) {
  const dur = Math.max(t1 - t0, 0);
  const span = Math.max(dur * (1 + 2 * pad), minSpan);
  const mid = (t0 + t1) / 2;
  return clampWindow({ start: mid - span / 2, end: mid + span / 2 }, range);
}

/** Time `us` as an x position (css px) in a plot `width` wide showing `win`. */
export function timeToX(us, win, width) {
  return ((us - win.start) / (win.end - win.start)) * width;
}

/** x position (css px) in the plot back to µs. */
export function xToTime(x, win, width) {
  return win.start + (x / width) * (win.end - win.start);
}

/** `us` rounded for the URL: 3 decimals (1 ns), trailing zeros dropped. */
export function roundTime(us) {
  return Number(Number(us).toFixed(3));
}

/**
 * The window named by the URL's `start` / `end`, or null when they are missing or make no
 * window: {start: "10", end: "20.5"} -> {start: 10, end: 20.5}.
 */
export function windowFromState(state) {
  if (state.start === undefined || state.end === undefined) return null;
  const start = Number(state.start);
  const end = Number(state.end);
  if (!Number.isFinite(start) || !Number.isFinite(end) || !(end > start)) return null;
  return { start, end };
}

/** The URL keys for a window: {start: "12.5", end: "80"}. */
export function windowToState(win) {
  return { start: String(roundTime(win.start)), end: String(roundTime(win.end)) };
}

/** Unit for labels of a time step (µs): [divisor, suffix]. */
function unitFor(step) {
  if (step >= 1e6) return [1e6, "s"];
  if (step >= 1e3) return [1e3, "ms"];
  if (step >= 1) return [1, "µs"];
  return [1e-3, "ns"];
}

/**
 * Axis ticks every 1, 2 or 5 x 10^k µs, about `spacing` px apart:
 * ticks({start: 0, end: 1000}, 1000, 100) -> {step: 100, ticks: [{t: 0, label: "0.0 ms"}, ...]}
 * (labels in the unit of the window's times: "100.2 ms", not "100200 µs").
 */
export function ticks(win, width, spacing = 110) {
  const span = win.end - win.start;
  const want = span / Math.max(1, width / spacing);
  const pow = 10 ** Math.floor(Math.log10(want));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= want) ?? 10 * pow;
  const [div, unit] = unitFor(Math.max(step, Math.abs(win.start), Math.abs(win.end)));
  const decimals = Math.max(0, Math.ceil(-Math.log10(step / div) - 1e-9));
  const out = [];
  const first = Math.ceil(win.start / step) * step;
  for (let t = first, i = 0; t < win.end && i < 1000; i += 1, t = first + i * step) {
    const v = t / div;
    out.push({ t, label: `${(Math.abs(v) < 1e-12 ? 0 : v).toFixed(decimals)} ${unit}` });
  }
  return { step, ticks: out };
}

/**
 * A time shown with a precision that suits a window `span` µs long (about 5 significant
 * digits of the span): formatTimeAt(364932.406, 27496) -> "364.93 ms".
 */
export function formatTimeAt(us, span) {
  const [div, unit] = unitFor(Math.max(Math.abs(us), span));
  const decimals = Math.min(9, Math.max(0, Math.ceil(-Math.log10(span / div / 1e3))));
  return `${(us / div).toFixed(decimals)} ${unit}`;
}

/**
 * A time since the trace origin, to the nanosecond when it has one:
 * 100017 -> "100.017 ms", 5.25 -> "5.250 µs", 2500000 -> "2.500000 s".
 */
export function formatTime(us) {
  if (us === null || us === undefined || us === "") return "–";
  const v = Number(us);
  if (!Number.isFinite(v)) return "–";
  const frac = Math.abs(v - Math.round(v)) > 5e-4;
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(frac ? 9 : 6)} s`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(frac ? 6 : 3)} ms`;
  return `${v.toFixed(frac ? 3 : 0)} µs`;
}
