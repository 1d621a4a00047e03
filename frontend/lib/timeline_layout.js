// Where the timeline's lanes and blocks sit (in css px) and what lies under the mouse;
// name colors and name search over one trace/timeline answer. Pure functions, no DOM:
// unit-tested with node (tests/frontend/timeline.test.mjs).
//
// A block is the API's array [start_us, dur_us, name_index, depth, count(, event_id)].

/** Height of one nested row of a host thread or device stream lane. */
export const ROW_H = 17;
/** Space above and below a lane's rows. */
export const LANE_PAD = 4;
/** Height of a counter lane (area chart). */
export const COUNTER_H = 40;

export const B_START = 0;
export const B_DUR = 1;
export const B_NAME = 2;
export const B_DEPTH = 3;
export const B_COUNT = 4;
export const B_ID = 5;

/** 32-bit FNV-1a hash of a string: the same name gets the same color in every answer. */
export function hashName(name) {
  let h = 0x811c9dc5;
  const s = String(name);
  for (let i = 0; i < s.length; i += 1) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * A stable pastel color per name, light enough for dark text on it:
 * {fill: "hsl(212 55% 68%)", light: "hsl(212 45% 84%)"} (`light` for merged blocks).
 * Step markers ("ProfilerStep#12") share one grey so every step looks alike.
 */
export function nameColor(name) {
  if (/^ProfilerStep#\d+$/.test(String(name))) return { fill: "hsl(210 12% 78%)", light: "hsl(210 12% 86%)" };
  const h = hashName(name);
  const hue = h % 360;
  const sat = 45 + ((h >>> 9) % 25);
  const lum = 62 + ((h >>> 17) % 12);
  return { fill: `hsl(${hue} ${sat}% ${lum}%)`, light: `hsl(${hue} ${sat - 8}% ${Math.min(lum + 10, 86)}%)` };
}

/** Rows a lane needs: the API's `rows`, else the deepest block + 1 (at least 1). */
export function laneRows(lane) {
  if (lane.kind === "counter") return 0;
  if (Number.isInteger(lane.rows) && lane.rows > 0) return lane.rows;
  let deepest = 0;
  for (const b of lane.blocks ?? []) deepest = Math.max(deepest, b[B_DEPTH]);
  return deepest + 1;
}

/**
 * Vertical layout of the answer's lanes from y = 0 down: [{lane, y, h, rows, shown}] and the
 * total height. A collapsed lane (its id in `collapsed`) shows its first row only.
 */
export function layoutLanes(lanes, collapsed = new Set()) {
  const boxes = [];
  let y = 0;
  for (const lane of lanes ?? []) {
    const rows = laneRows(lane);
    const shown = collapsed.has(lane.id) ? Math.min(rows, 1) : rows;
    const h = lane.kind === "counter" ? COUNTER_H : shown * ROW_H + 2 * LANE_PAD;
    boxes.push({ lane, y, h, rows, shown });
    y += h;
  }
  return { boxes, height: y };
}

/** The y (css px, layout coordinates) of the top of `depth`'s row in a lane box. */
export function rowTop(box, depth) {
  return box.y + LANE_PAD + depth * ROW_H;
}

/** The lane box at layout y, or null. */
export function boxAt(layout, y) {
  for (const box of layout.boxes) if (y >= box.y && y < box.y + box.h) return box;
  return null;
}

/** The lane box of a lane id, or null. */
export function boxOf(layout, laneId) {
  return layout.boxes.find((b) => b.lane.id === laneId) ?? null;
}

/**
 * What lies at plot x / layout y: {box, block} for a block (within `slop` px, the nearest
 * wins), {box, point} for a counter lane, {box} over a lane's empty space, or null.
 */
export function hitTest(layout, x, y, win, width, slop = 2) {
  const box = boxAt(layout, y);
  if (!box) return null;
  const perPx = (win.end - win.start) / width;
  const t = win.start + x * perPx;
  if (box.lane.kind === "counter") {
    const point = pointAt(box.lane.points ?? [], t);
    return point ? { box, point } : { box };
  }
  const depth = Math.floor((y - box.y - LANE_PAD) / ROW_H);
  if (depth < 0 || depth >= box.shown) return { box };
  let best = null;
  let bestGap = Infinity;
  for (const b of box.lane.blocks ?? []) {
    if (b[B_DEPTH] !== depth) continue;
    const x0 = (b[B_START] - win.start) / perPx;
    const x1 = Math.max(x0 + 1, (b[B_START] + b[B_DUR] - win.start) / perPx);
    const gap = x < x0 ? x0 - x : x > x1 ? x - x1 : 0;
    if (gap <= slop && (gap < bestGap || (gap === bestGap && b[B_DUR] < best[B_DUR]))) {
      best = b;
      bestGap = gap;
    }
  }
  return best ? { box, block: best } : { box };
}

/** The last counter point at or before `t` (points sorted by time), or null. */
export function pointAt(points, t) {
  let lo = 0;
  let hi = points.length - 1;
  if (hi < 0 || t < points[0][0]) return null;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (points[mid][0] <= t) lo = mid;
    else hi = mid - 1;
  }
  return points[lo];
}

/** Name indices whose name contains `query` (case-insensitive); null for an empty query. */
export function matchingNames(names, query) {
  const q = String(query ?? "").trim().toLowerCase();
  if (!q) return null;
  const out = new Set();
  names.forEach((n, i) => {
    if (String(n).toLowerCase().includes(q)) out.add(i);
  });
  return out;
}

/** Largest value of a counter lane's points (for its y scale); 1 when it has none above 0. */
export function counterMax(points) {
  let m = 0;
  for (const p of points ?? []) if (p[1] > m) m = p[1];
  return m > 0 ? m : 1;
}
