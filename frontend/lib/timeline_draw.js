// Painting the timeline on a canvas: lanes with their blocks (merged ones lighter and
// striped), counter lanes as area charts, search dimming, step boundaries, the selected
// event and its related events outlined and linked; then the frame (timeline_axes.js).
// Trace strings are only ever drawn as canvas text here (never put into the DOM).
import {
  COLORS, FONT, HEADER_H, drawGutter, drawHeader, drawScrollbar, fitText, visible, xOf,
} from "./timeline_axes.js";
import { B_COUNT, B_DEPTH, B_DUR, B_NAME, B_START, COUNTER_H, ROW_H, boxOf, counterMax, rowTop } from "./timeline_layout.js";

export { HEADER_H, counterLabel, fitText } from "./timeline_axes.js";

let stripes = null;
/** A shared diagonal-stripe pattern laid over merged blocks. */
function stripePattern(ctx) {
  if (stripes) return stripes;
  const tile = document.createElement("canvas");
  tile.width = 6;
  tile.height = 6;
  const t = tile.getContext("2d");
  t.strokeStyle = "rgba(255, 255, 255, 0.6)";
  t.lineWidth = 1.5;
  t.beginPath();
  t.moveTo(-1, 7);
  t.lineTo(7, -1);
  t.moveTo(5, 7);
  t.lineTo(7, 5);
  t.stroke();
  stripes = ctx.createPattern(tile, "repeat");
  return stripes;
}

/**
 * Paint one frame. `scene`: {answer, layout, win, gutter, width, height (css px), scrollY,
 * colors (per name index), matches (Set of name indices | null), selected, related (event
 * briefs {lane, depth, start, dur}), hover (block | null), hoverBox}. Returns blocks drawn.
 */
export function drawTimeline(canvas, scene) {
  const dpr = window.devicePixelRatio || 1;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = COLORS.bg;
  ctx.fillRect(0, 0, scene.width, scene.height);
  const plotW = scene.width - scene.gutter;
  let drawn = 0;
  ctx.save();
  ctx.beginPath();
  ctx.rect(scene.gutter, HEADER_H, plotW, scene.height - HEADER_H);
  ctx.clip();
  ctx.translate(scene.gutter, HEADER_H - scene.scrollY);
  drawn = drawLanes(ctx, scene, plotW);
  drawStepLines(ctx, scene, plotW);
  drawMarks(ctx, scene, plotW);
  ctx.restore();
  drawGutter(ctx, scene);
  drawHeader(ctx, scene, plotW);
  drawScrollbar(ctx, scene);
  return drawn;
}

function drawLanes(ctx, scene, plotW) {
  let drawn = 0;
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  scene.layout.boxes.forEach((box, i) => {
    if (!visible(box, scene)) return;
    if (i % 2) {
      ctx.fillStyle = COLORS.band;
      ctx.fillRect(0, box.y, plotW, box.h);
    }
    ctx.fillStyle = COLORS.grid;
    ctx.fillRect(0, box.y + box.h - 1, plotW, 1);
    if (box.lane.kind === "counter") drawCounter(ctx, box, scene, plotW);
    else drawn += drawBlocks(ctx, box, scene, plotW);
  });
  return drawn;
}

function drawBlocks(ctx, box, scene, plotW) {
  let drawn = 0;
  const { colors, matches } = scene;
  const perUs = plotW / (scene.win.end - scene.win.start);
  for (const b of box.lane.blocks ?? []) {
    const depth = b[B_DEPTH];
    if (depth >= box.shown) continue;
    let x0 = (b[B_START] - scene.win.start) * perUs;
    let x1 = x0 + b[B_DUR] * perUs;
    if (x1 < -1 || x0 > plotW + 1) continue;
    x0 = Math.max(x0, -2);
    x1 = Math.min(Math.max(x1, x0 + 1), plotW + 2);
    const y = rowTop(box, depth);
    const w = x1 - x0;
    const color = colors[b[B_NAME]];
    const merged = b[B_COUNT] > 1;
    ctx.globalAlpha = matches && !matches.has(b[B_NAME]) ? 0.18 : 1;
    ctx.fillStyle = merged ? color.light : color.fill;
    ctx.fillRect(x0, y + 1, w, ROW_H - 2);
    if (merged && w > 3) {
      ctx.fillStyle = stripePattern(ctx);
      ctx.fillRect(x0, y + 1, w, ROW_H - 2);
    }
    if (w > 22) {
      const label = fitText(scene.answer.names[b[B_NAME]], w - 6);
      if (label) {
        ctx.fillStyle = COLORS.text;
        ctx.fillText(label, Math.max(x0, 0) + 3, y + ROW_H / 2);
      }
    }
    drawn += 1;
  }
  ctx.globalAlpha = 1;
  return drawn;
}

/**
 * The corners of a counter drawn as a step function: each value holds until the next
 * point (memory allocated since its event, utilization over its pixel), the last one to x
 * `end` (the window's or the trace's end). Drawn point to point, an allocation looked like a
 * slow ramp. `x(t)`, `y(v)`: plot coordinates.
 * Example: points [[0, 1], [10, 3]], end 20 (x, y identity) -> [[0,1], [10,1], [10,3], [20,3]].
 */
export function stepPoints(points, x, y, end) {
  const out = [];
  points.forEach(([t, v], i) => {
    const px = x(t);
    if (i) out.push([px, out[out.length - 1][1]]);
    out.push([px, y(v)]);
  });
  if (out.length) out.push([Math.max(end, out[out.length - 1][0]), out[out.length - 1][1]]);
  return out;
}

function drawCounter(ctx, box, scene, plotW) {
  const points = box.lane.points ?? [];
  if (!points.length) return;
  const max = counterMax(points);
  const top = box.y + 4;
  const base = box.y + COUNTER_H - 3;
  const yOf = (v) => base - (Math.max(0, v) / max) * (base - top);
  const end = Math.min(plotW, xOf(scene.answer?.range?.[1] ?? scene.win.end, scene, plotW));
  const steps = stepPoints(points, (t) => xOf(t, scene, plotW), yOf, end);
  ctx.beginPath();
  ctx.moveTo(steps[0][0], base);
  for (const [x, y] of steps) ctx.lineTo(x, y);
  ctx.lineTo(steps[steps.length - 1][0], base);
  ctx.closePath();
  ctx.fillStyle = COLORS.counterFill;
  ctx.fill();
  ctx.beginPath();
  steps.forEach(([x, y], i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, x, y));
  ctx.strokeStyle = COLORS.counter;
  ctx.lineWidth = 1;
  ctx.stroke();
}

/** Step starts as faint lines across the lanes; left out where steps are too dense to help. */
function drawStepLines(ctx, scene, plotW) {
  const steps = scene.answer.steps ?? [];
  if (steps.length > 1 && plotW / steps.length < 16) return;
  ctx.fillStyle = "rgba(97, 110, 124, 0.35)";
  for (const [, s] of steps) {
    const x = xOf(s, scene, plotW);
    if (x >= 0 && x <= plotW) ctx.fillRect(Math.round(x), scene.scrollY, 1, scene.height);
  }
}

/** Rectangle of an event brief {lane, depth, start, dur} in plot coordinates, or null. */
function briefRect(brief, scene, plotW) {
  const box = boxOf(scene.layout, brief.lane);
  if (!box || box.lane.kind === "counter") return null;
  const depth = Math.min(brief.depth ?? 0, box.shown - 1);
  let x0 = xOf(brief.start, scene, plotW);
  let x1 = xOf(brief.start + brief.dur, scene, plotW);
  if (x1 - x0 < 3) {
    const mid = (x0 + x1) / 2;
    x0 = mid - 1.5;
    x1 = mid + 1.5;
  }
  return { x: x0, y: rowTop(box, depth), w: x1 - x0, h: ROW_H };
}

function drawMarks(ctx, scene, plotW) {
  const sel = scene.selected ? briefRect(scene.selected, scene, plotW) : null;
  const related = (scene.related ?? []).slice(0, 500).map((r) => briefRect(r, scene, plotW)).filter(Boolean);
  ctx.lineWidth = 1.5;
  if (sel && related.length && related.length <= 64) { // links to a whole step's kernels would be noise
    ctx.strokeStyle = "rgba(217, 72, 15, 0.55)";
    ctx.beginPath();
    for (const r of related) {
      const down = r.y > sel.y;
      const rx = r.x + Math.min(r.w, 4) / 2;
      ctx.moveTo(Math.min(Math.max(rx, sel.x), sel.x + sel.w), down ? sel.y + sel.h : sel.y);
      ctx.lineTo(rx, down ? r.y : r.y + r.h);
    }
    ctx.stroke();
  }
  ctx.strokeStyle = COLORS.related;
  ctx.lineWidth = 2;
  for (const r of related) ctx.strokeRect(r.x, r.y + 0.5, r.w, r.h - 1);
  if (sel) {
    ctx.strokeStyle = COLORS.select;
    ctx.lineWidth = 2.5;
    ctx.strokeRect(sel.x, sel.y + 0.5, sel.w, sel.h - 1);
  }
  if (scene.hover && scene.hoverBox) {
    const b = scene.hover;
    const r = briefRect({ lane: scene.hoverBox.lane.id, depth: b[B_DEPTH], start: b[B_START], dur: b[B_DUR] }, scene, plotW);
    if (r) {
      ctx.strokeStyle = COLORS.hover;
      ctx.lineWidth = 1;
      ctx.strokeRect(r.x + 0.5, r.y + 1, r.w - 1, r.h - 2);
    }
  }
}

