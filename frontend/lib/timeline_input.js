// Mouse and keyboard on the timeline canvas, turned into intents for the view: wheel zooms
// around the cursor (Shift+wheel, or the wheel over the lane names, scrolls the lanes;
// a sideways wheel pans), dragging pans in time and scrolls the lanes, a click without
// movement selects; W/S zoom in/out and A/D pan, as in Perfetto, Esc clears the selection.
import { wheelFactor } from "./timeline_window.js";

/** A press that moved less than this (css px) is a click, not a drag. */
const CLICK_SLOP = 4;
/** Keyboard steps: zoom factor per W/S press, share of the window per A/D press. */
export const KEY_ZOOM = 0.8;
export const KEY_PAN = 0.15;

const KEYS = { w: "in", s: "out", a: "left", d: "right", escape: "escape" };

/** True when a key press belongs to a text field, not to the timeline. */
function typing(target) {
  const tag = target?.tagName;
  return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || target?.isContentEditable;
}

/**
 * Listen on `canvas` (and the document, for keys) until `signal` aborts. `h`: {gutter() ->
 * css px, zoom(factor, anchorPx), pan(share), dragStart(), dragMove(dx, dy), scroll(dy),
 * hover(x, y), leave(), click(x, y), gutterClick(x, y), key(action, anchorPx|null)}; x, y in
 * css px from the canvas's top left corner.
 */
export function bindInput(canvas, h, signal) {
  const opts = { signal };
  let press = null; // {x, y, id, dragging}
  let mouse = null; // last pointer position over the canvas, anchors W/S like the wheel
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };

  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const { x } = at(e);
    const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    const dx = e.deltaMode === 1 ? e.deltaX * 16 : e.deltaX;
    if (e.shiftKey || x < h.gutter()) h.scroll(dy || dx);
    else if (Math.abs(dx) > Math.abs(dy)) h.pan(dx / Math.max(1, canvas.clientWidth - h.gutter()));
    else h.zoom(wheelFactor(e.deltaY, e.deltaMode), x);
  }, { ...opts, passive: false });

  canvas.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    const p = at(e);
    press = { ...p, id: e.pointerId, dragging: false };
    canvas.setPointerCapture(e.pointerId);
  }, opts);

  canvas.addEventListener("pointermove", (e) => {
    const p = at(e);
    mouse = p;
    if (press && press.id === e.pointerId) {
      const dx = p.x - press.x;
      const dy = p.y - press.y;
      if (!press.dragging && Math.hypot(dx, dy) >= CLICK_SLOP && press.x >= h.gutter()) {
        press.dragging = true;
        canvas.classList.add("dragging");
        h.leave();
        h.dragStart();
      }
      if (press.dragging) h.dragMove(dx, dy);
      return;
    }
    h.hover(p.x, p.y);
  }, opts);

  const release = (e, cancelled) => {
    if (!press || press.id !== e.pointerId) return;
    const p = at(e);
    const was = press;
    press = null;
    canvas.classList.remove("dragging");
    if (cancelled || was.dragging) return;
    if (was.x < h.gutter()) h.gutterClick(p.x, p.y);
    else h.click(p.x, p.y);
  };
  canvas.addEventListener("pointerup", (e) => release(e, false), opts);
  canvas.addEventListener("pointercancel", (e) => release(e, true), opts);
  canvas.addEventListener("pointerleave", () => {
    mouse = null;
    if (!press) h.leave();
  }, opts);

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const action = KEYS[e.key.toLowerCase()];
    if (!action || !canvas.isConnected) return;
    e.preventDefault();
    h.key(action, mouse && mouse.x >= h.gutter() ? mouse.x : null);
  }, opts);
}
