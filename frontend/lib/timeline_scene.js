// What the timeline canvas shows and where: the answer drawn, its lane layout (with folded
// lanes), name colors, search matches, vertical scroll, canvas size (css px x device pixel
// ratio), the selected event, its related events and the hovered block. Paints at most
// once per animation frame. Coordinates passed in are css px from the canvas's top left.
import { HEADER_H, drawTimeline } from "./timeline_draw.js";
import {
  B_COUNT, B_DEPTH, B_DUR, B_ID, B_NAME, B_START, boxAt, boxOf, hitTest, layoutLanes, matchingNames, nameColor, rowTop,
} from "./timeline_layout.js";

/** The gutter (lane names) takes 16 % of the width, within these bounds. */
const GUTTER_MIN = 150;
const GUTTER_MAX = 240;

/**
 * createScene(canvas, wrap, {getWindow() -> {start, end}, onPaint(scene)}) -> scene.
 * `wrap` is the canvas's box: the canvas takes its width.
 */
export function createScene(canvas, wrap, { getWindow, onPaint }) {
  let frame = 0;
  const scene = {
    answer: null, layout: { boxes: [], height: 0 }, colors: [], matches: null, collapsed: new Set(),
    scrollY: 0, size: { width: 0, height: 0, gutter: GUTTER_MIN }, selected: null, related: [], hover: null, drawn: 0,
    paintMs: 0,

    plotW: () => Math.max(1, scene.size.width - scene.size.gutter),

    /** Show answer `a` (names colored, matches of `query` marked). */
    setAnswer(a, query) {
      scene.answer = a;
      scene.colors = a.names.map(nameColor);
      scene.matches = matchingNames(a.names, query);
      scene.relayout();
    },

    setQuery(query) {
      scene.matches = scene.answer ? matchingNames(scene.answer.names, query) : null;
      scene.invalidate();
    },

    relayout() {
      scene.layout = layoutLanes(scene.answer?.lanes ?? [], scene.collapsed);
      scene.resize();
      scene.invalidate();
    },

    /** Fit the canvas to its box; true when the plot's width changed (refetch at the new width). */
    resize() {
      if (!wrap.isConnected || !wrap.clientWidth) return false;
      const width = Math.max(300, Math.floor(wrap.clientWidth));
      const maxH = Math.max(260, Math.round(window.innerHeight * 0.66));
      const height = Math.min(maxH, HEADER_H + Math.max(scene.layout.height, 60));
      const gutter = Math.round(Math.min(GUTTER_MAX, Math.max(GUTTER_MIN, width * 0.16)));
      const old = scene.size;
      if (width === old.width && height === old.height) return false;
      scene.size = { width, height, gutter };
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.height = `${height}px`;
      scene.setScroll(scene.scrollY);
      return width - gutter !== old.width - old.gutter;
    },

    invalidate() {
      if (!frame) frame = requestAnimationFrame(paint);
    },

    setScroll(y) {
      const max = Math.max(0, scene.layout.height - (scene.size.height - HEADER_H));
      scene.scrollY = Math.min(max, Math.max(0, y));
      scene.invalidate();
    },

    /** What is under (x, y) in the plot: see hitTest; null over the gutter or the header. */
    pick(x, y) {
      const { gutter } = scene.size;
      if (x < gutter || y < HEADER_H || !scene.answer) return null;
      return hitTest(scene.layout, x - gutter, y - HEADER_H + scene.scrollY, getWindow(), scene.plotW());
    },

    /** The lane box at canvas y (for the gutter), or null. */
    laneAt: (y) => (y < HEADER_H ? null : boxAt(scene.layout, y - HEADER_H + scene.scrollY)),

    /** Fold or unfold the lane at canvas y (lanes with one row do not fold). */
    toggleFold(y) {
      const box = scene.laneAt(y);
      if (!box || box.rows < 2) return;
      if (scene.collapsed.has(box.lane.id)) scene.collapsed.delete(box.lane.id);
      else scene.collapsed.add(box.lane.id);
      scene.relayout();
    },

    /** Scroll the lanes so that an event {lane, depth} is in view. */
    reveal(brief) {
      const box = boxOf(scene.layout, brief.lane);
      if (!box) return;
      const y = rowTop(box, Math.min(brief.depth ?? 0, box.shown - 1));
      const view = scene.size.height - HEADER_H;
      if (y < scene.scrollY || y + 20 > scene.scrollY + view) scene.setScroll(y - view / 3);
    },

    /** Test hook: canvas position of the widest single event shown in a lane of `kind`. */
    findBlock(kind, nameIncludes = "") {
      const win = getWindow();
      const { gutter, height } = scene.size;
      let best = null;
      for (const box of scene.layout.boxes) {
        if (box.lane.kind !== kind) continue;
        for (const b of box.lane.blocks ?? []) {
          const t0 = Math.max(win.start, b[B_START]);
          const t1 = Math.min(win.end, b[B_START] + b[B_DUR]);
          const name = scene.answer.names[b[B_NAME]];
          if (b[B_COUNT] !== 1 || b[B_DEPTH] >= box.shown || t1 <= t0 || (best && t1 - t0 <= best.w)) continue;
          const y = HEADER_H + rowTop(box, b[B_DEPTH]) + 8 - scene.scrollY;
          if (name.includes(nameIncludes) && y > HEADER_H && y < height) best = { w: t1 - t0, t: (t0 + t1) / 2, y, id: b[B_ID], name };
        }
      }
      return best && { x: gutter + ((best.t - win.start) / (win.end - win.start)) * scene.plotW(), y: best.y,
        id: best.id, name: best.name };
    },
  };

  function paint() {
    frame = 0;
    const win = getWindow();
    if (!scene.answer || !win) return;
    const { size } = scene;
    const t0 = performance.now();
    scene.drawn = drawTimeline(canvas, { answer: scene.answer, layout: scene.layout, win, gutter: size.gutter,
      width: size.width, height: size.height, scrollY: scene.scrollY, colors: scene.colors, matches: scene.matches,
      selected: scene.selected, related: scene.related, hover: scene.hover?.block ?? null,
      hoverBox: scene.hover?.box ?? null });
    scene.paintMs = performance.now() - t0;
    onPaint?.(scene, win);
  }

  return scene;
}
