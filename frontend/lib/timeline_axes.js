// The timeline's frame, painted over the lanes: the time axis and the step band on top,
// lane names in the left gutter (folded lanes marked), a scrollbar when the lanes do not
// fit. Shared drawing constants live here too. Trace strings are canvas text only.
import { formatBytes } from "./format.js";
import { LANE_PAD, ROW_H, counterMax } from "./timeline_layout.js";
import { ticks } from "./timeline_window.js";

export const AXIS_H = 20;
export const STEPS_H = 18;
export const HEADER_H = AXIS_H + STEPS_H;
export const FONT = "11px system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";
export const BOLD = `600 ${FONT}`;
const CHAR_W = 6.3; // a safe average glyph width of FONT, to cut labels without measuring
export const COLORS = { bg: "#fff", band: "#f7f9fb", grid: "#e6eaee", text: "#1f2933", muted: "#616e7c",
  gutter: "#fafbfc", border: "#d9dee3", select: "#0b3d91", related: "#d9480f", hover: "#1f2933",
  counter: "#2f6fb3", counterFill: "rgba(47, 111, 179, 0.25)", step: "#eef1f4", stepAlt: "#e2e7ec" };

/** `text` cut with "…" to fit `px` (estimated), "" when not even 3 characters fit. */
export function fitText(text, px) {
  const max = Math.floor(px / CHAR_W);
  const s = String(text);
  if (max < 3) return "";
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

/** `text` cut with "…" to fit `px` as measured in the context's current font. */
function fitMeasured(ctx, text, px) {
  let s = String(text);
  if (ctx.measureText(s).width <= px) return s;
  let lo = 0;
  let hi = s.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${s.slice(0, mid)}…`).width <= px) lo = mid;
    else hi = mid - 1;
  }
  return `${s.slice(0, lo)}…`;
}

/** x (css px in the plot) of time `t` in the scene's window. */
export function xOf(t, scene, plotW) {
  return ((t - scene.win.start) / (scene.win.end - scene.win.start)) * plotW;
}

/** Whether a lane box is at least partly inside the scrolled view. */
export function visible(box, scene) {
  return box.y + box.h >= scene.scrollY && box.y <= scene.scrollY + scene.height - HEADER_H;
}

/** Lane names (bold, cut to fit), fold arrows and row counts in the left gutter. */
export function drawGutter(ctx, scene) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, HEADER_H, scene.gutter, scene.height - HEADER_H);
  ctx.clip();
  ctx.fillStyle = COLORS.gutter;
  ctx.fillRect(0, HEADER_H, scene.gutter, scene.height - HEADER_H);
  ctx.translate(0, HEADER_H - scene.scrollY);
  ctx.textBaseline = "middle";
  for (const box of scene.layout.boxes) {
    if (!visible(box, scene)) continue;
    ctx.fillStyle = COLORS.grid;
    ctx.fillRect(0, box.y + box.h - 1, scene.gutter, 1);
    const foldable = box.rows > 1;
    const y = box.lane.kind === "counter" ? box.y + 12 : box.y + LANE_PAD + ROW_H / 2;
    ctx.fillStyle = COLORS.muted;
    ctx.font = FONT;
    if (foldable) ctx.fillText(box.shown < box.rows ? "▸" : "▾", 6, y);
    ctx.fillStyle = COLORS.text;
    ctx.font = BOLD;
    ctx.fillText(fitMeasured(ctx, box.lane.name, scene.gutter - 24), 18, y);
    ctx.font = FONT;
    ctx.fillStyle = COLORS.muted;
    const sub = box.lane.kind === "counter" ? counterLabel(box.lane)
      : box.shown < box.rows ? `${box.rows} rows (folded)` : box.rows > 1 ? `${box.rows} rows` : "";
    if (sub && box.h >= 30) ctx.fillText(fitText(sub, scene.gutter - 26), 18, y + 14);
  }
  ctx.restore();
  ctx.fillStyle = COLORS.border;
  ctx.fillRect(scene.gutter - 1, 0, 1, scene.height);
}

/** The unit of a counter lane's values: the API's `unit`, else guessed from its name. */
export function counterUnit(lane) {
  if (lane.unit) return lane.unit;
  if (/utili[sz]ation/i.test(lane.name)) return "ratio";
  return /memory/i.test(lane.name) ? "bytes" : "";
}

/** A counter value with its unit: 0.97 -> "97.0%" (ratio), 2e9 -> "1.86 GiB" (bytes). */
export function counterValue(lane, v, digits = 1) {
  const unit = counterUnit(lane);
  if (unit === "ratio") return `${(v * 100).toFixed(digits)}%`;
  if (unit === "bytes") return formatBytes(v);
  return `${Number(Number(v).toPrecision(6))}`;
}

/** "max 97%" for utilization counters, "max 1.86 GiB" for memory. */
export function counterLabel(lane) {
  const max = counterMax(lane.points);
  if (!lane.points?.length) return "";
  return `max ${counterValue(lane, max, 0)}`;
}

/** The time axis (ticks labelled in the window's unit) and the band of steps. */
export function drawHeader(ctx, scene, plotW) {
  ctx.fillStyle = COLORS.bg;
  ctx.fillRect(0, 0, scene.width, HEADER_H);
  ctx.fillStyle = COLORS.gutter;
  ctx.fillRect(0, 0, scene.gutter, HEADER_H);
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  ctx.fillStyle = COLORS.muted;
  ctx.fillText("Time from trace start", 8, AXIS_H / 2);
  ctx.fillText("Steps", 8, AXIS_H + STEPS_H / 2);
  ctx.save();
  ctx.beginPath();
  ctx.rect(scene.gutter, 0, plotW, HEADER_H);
  ctx.clip();
  ctx.translate(scene.gutter, 0);
  for (const { t, label } of ticks(scene.win, plotW).ticks) {
    const x = Math.round(xOf(t, scene, plotW));
    ctx.fillStyle = COLORS.border;
    ctx.fillRect(x, AXIS_H - 6, 1, 6);
    ctx.fillStyle = COLORS.muted;
    if (x + 3 + ctx.measureText(label).width <= plotW) ctx.fillText(label, x + 3, AXIS_H / 2 - 1);
  }
  (scene.answer.steps ?? []).forEach(([name, s, e], i) => {
    const x0 = xOf(s, scene, plotW);
    const x1 = xOf(e, scene, plotW);
    ctx.fillStyle = i % 2 ? COLORS.stepAlt : COLORS.step;
    ctx.fillRect(x0, AXIS_H + 1, Math.max(1, x1 - x0 - 1), STEPS_H - 2);
    const label = fitText(`Step ${name}`, Math.min(x1, plotW) - Math.max(x0, 0) - 8);
    if (label) {
      ctx.fillStyle = COLORS.text;
      ctx.fillText(label, Math.max(x0, 0) + 4, AXIS_H + STEPS_H / 2);
    }
  });
  ctx.restore();
  ctx.fillStyle = COLORS.border;
  ctx.fillRect(0, HEADER_H - 1, scene.width, 1);
  ctx.fillRect(0, AXIS_H, scene.width, 1);
}

/** A thin scrollbar on the right when the lanes are taller than the view. */
export function drawScrollbar(ctx, scene) {
  const view = scene.height - HEADER_H;
  const total = scene.layout.height;
  if (total <= view) return;
  const h = Math.max(20, (view / total) * view);
  const y = HEADER_H + (scene.scrollY / (total - view)) * (view - h);
  ctx.fillStyle = "rgba(97, 110, 124, 0.45)";
  ctx.fillRect(scene.width - 6, y, 4, h);
}
