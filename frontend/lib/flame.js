// A flame graph (icicle: roots on top) on a canvas, written for module/flame's flat arrays
// (parents before children, siblings heaviest first). Pure layout helpers plus one
// drawer: click a frame to zoom into it (its ancestors stay above, full width), hover for
// the numbers, matches of a search highlighted. Works for any depth (no recursion).
import { formatDuration, formatPercent } from "./format.js";

export const ROW = 18;

/** {x, depth, maxDepth} per node: x in µs from the left edge of all roots, thread roots at depth 0. */
export function layout(flame) {
  const n = flame.name.length;
  const x = new Float64Array(n);
  const next = new Float64Array(n);
  const depth = new Int32Array(n);
  let rootX = 0;
  let maxDepth = 0;
  for (let i = 0; i < n; i += 1) {
    const p = flame.parent[i];
    if (p < 0) {
      x[i] = rootX;
      rootX += flame.total[i];
      depth[i] = 0;
    } else {
      x[i] = next[p];
      next[p] += flame.total[i];
      depth[i] = depth[p] + 1;
    }
    next[i] = x[i];
    if (depth[i] > maxDepth) maxDepth = depth[i];
  }
  return { x, depth, maxDepth, width: rootX };
}

/** Node i's ancestors, outermost first. */
export function ancestors(flame, i) {
  const out = [];
  for (let p = flame.parent[i]; p >= 0; p = flame.parent[p]) out.push(p);
  return out.reverse();
}

/** Per node: does its label contain `query` (case-insensitive)? null for an empty query. */
export function matches(flame, query) {
  const q = String(query ?? "").trim().toLowerCase();
  if (!q) return null;
  const hitLabel = flame.labels.map((s) => String(s).toLowerCase().includes(q));
  return flame.name.map((k) => hitLabel[k]);
}

/** Total µs under matching frames, each counted once (not again under a matching ancestor). */
export function matchedTotal(flame, hit) {
  if (!hit) return 0;
  const covered = new Uint8Array(hit.length);
  let sum = 0;
  for (let i = 0; i < hit.length; i += 1) {
    const p = flame.parent[i];
    const up = p >= 0 && covered[p];
    covered[i] = up || hit[i] ? 1 : 0;
    if (hit[i] && !up) sum += flame.total[i];
  }
  return sum;
}

/** A warm colour per label (stable across redraws). */
export function colorOf(label) {
  let h = 0;
  const s = String(label);
  for (let i = 0; i < s.length; i += 1) h = (h * 31 + s.charCodeAt(i)) >>> 0;
  return `hsl(${10 + (h % 45)}, ${70 + (h % 20)}%, ${58 + ((h >> 8) % 14)}%)`;
}

/**
 * Draw `flame` into `canvas` zoomed to node `focus` (-1: everything). Returns a picker
 * (px, py) -> node index or -1 for the same geometry.
 */
export function draw(canvas, flame, lay, { focus = -1, hit = null, cssWidth }) {
  const dpr = window.devicePixelRatio || 1;
  const anc = focus >= 0 ? ancestors(flame, focus) : [];
  const x0 = focus >= 0 ? lay.x[focus] : 0;
  const span = focus >= 0 ? flame.total[focus] : lay.width;
  const top = focus >= 0 ? lay.depth[focus] : 0;
  const rows = lay.maxDepth - top + 1 + anc.length;
  const height = Math.max(ROW * Math.min(rows, 400), ROW * 4);
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${height}px`;
  canvas.width = Math.round(cssWidth * dpr);
  canvas.height = Math.round(height * dpr);
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, cssWidth, height);
  g.font = "11px system-ui, sans-serif";
  g.textBaseline = "middle";
  const scale = span > 0 ? cssWidth / span : 0;
  const boxes = [];
  const box = (i, px, w, row, dim) => {
    const y = row * ROW;
    if (y > height) return;
    const label = flame.labels[flame.name[i]];
    g.fillStyle = hit ? (hit[i] ? "#b07aa1" : "#d9dde2") : colorOf(label);
    if (dim) g.globalAlpha = 0.55;
    g.fillRect(px, y, Math.max(w - 0.5, 0.5), ROW - 1);
    g.globalAlpha = 1;
    if (w > 28) {
      g.fillStyle = "#1f2933";
      g.save();
      g.beginPath();
      g.rect(px, y, w - 2, ROW);
      g.clip();
      g.fillText(label, px + 3, y + ROW / 2);
      g.restore();
    }
    boxes.push([i, px, y, w]);
  };
  anc.forEach((a, r) => box(a, 0, cssWidth, r, true));
  const base = anc.length - top;
  for (let i = 0; i < flame.name.length; i += 1) {
    const d = lay.depth[i];
    if (d < top || (focus >= 0 && d === top && i !== focus)) continue;
    const xi = lay.x[i];
    if (xi < x0 || xi >= x0 + span) continue;
    const w = flame.total[i] * scale;
    if (w < 0.3) continue;
    box(i, (xi - x0) * scale, w, d + base, false);
  }
  return (px, py) => {
    for (let k = boxes.length - 1; k >= 0; k -= 1) {
      const [i, bx, by, bw] = boxes[k];
      if (px >= bx && px < bx + bw && py >= by && py < by + ROW) return i;
    }
    return -1;
  };
}

/** Plain-text tooltip lines of node i (`unit` names the weight). */
export function tipLines(flame, i, unit) {
  const root = flame.total_us || 1;
  return [flame.labels[flame.name[i]],
    `${unit} total ${formatDuration(flame.total[i])} (${formatPercent(100 * flame.total[i] / root)})`,
    `${unit} self ${formatDuration(flame.self[i])}`];
}
