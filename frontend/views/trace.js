// Trace view: a canvas timeline that keeps the trace on the server. Every zoom or pan asks
// trace/timeline for just the window on screen, at the plot's pixel width (debounced,
// stale requests aborted; the previous answer stays drawn, scaled, meanwhile). A click on a
// single event opens its trace/event details. The window and the selection live in the
// URL keys `start`, `end`, `event` (SPEC §3.2). Issue 6.
//
// Test hook: window.__stepscopeTrace = {requests, answers, lastAnswer, window, plot, drawn,
// paintMs, selected, findBlock(kind, name)} (see tests/test_trace_view_browser.py).
import { ApiError, getJSON, isAbort } from "../lib/api.js";
import { card, el, setChildren } from "../lib/dom.js";
import { errorPanel, loadingLine, progressPanel } from "../lib/status.js";
import { buildQuery } from "../lib/urlstate.js";
import { detailPanel } from "../lib/timeline_detail.js";
import { KEY_PAN, KEY_ZOOM, bindInput } from "../lib/timeline_input.js";
import { B_COUNT, B_DEPTH, B_DUR, B_ID, B_START, boxOf } from "../lib/timeline_layout.js";
import { createLoader } from "../lib/timeline_loader.js";
import { createScene } from "../lib/timeline_scene.js";
import { createSearch } from "../lib/timeline_search.js";
import { AXIS_H, HEADER_H } from "../lib/timeline_axes.js";
import { blockTip, counterTip, laneTip, showTip, stepLines, windowText } from "../lib/timeline_widgets.js";
import { MIN_SPAN, clampWindow, panBy, reachesBeyond, roundTime, windowAround, windowFromState, windowToState,
  zoomAt } from "../lib/timeline_window.js";

/** Render the Trace view of ctx.client's span into `root`. */
export async function render(root, ctx) {
  const api = (path, params, opts = {}) => getJSON(path, { run: ctx.client.run, worker: ctx.client.worker,
    span: ctx.client.span, ...params }, { ...opts, signal: anySignal(opts.signal, ctx.client.signal) });
  const hook = { requests: [], answers: 0, lastAnswer: null, window: null, plot: null, drawn: 0, selected: null };
  window.__stepscopeTrace = hook;

  // -- DOM ----------------------------------------------------------------------------------
  const canvas = el("canvas", { className: "trace-canvas", id: "trace-canvas", tabindex: "0",
    "aria-label": "Trace timeline: wheel or W/S to zoom, drag or A/D to pan, click an event for details" });
  const tip = el("div", { className: "trace-tooltip", role: "tooltip", hidden: true });
  const badge = el("div", { className: "trace-badge", hidden: true });
  const wrap = el("div", { className: "trace-wrap" }, canvas, tip, badge);
  const status = el("div", { className: "trace-status" });
  const readout = el("span", { className: "trace-readout muted" });
  const search = el("input", { type: "search", className: "trace-search-input", id: "trace-search",
    placeholder: "Search the whole trace…", "aria-label": "Search event names in the whole trace",
    title: "Events whose name contains this text, in the whole trace. Enter: next match, Shift+Enter: previous",
    value: ctx.state.search ?? "" });
  const below = el("div", { className: "trace-below" });
  const tool = (text, title, fn) => el("button", { type: "button", className: "button", title, on: { click: fn } }, text);
  const toolbar = el("div", { className: "card-tools trace-tools" }, search,
    tool("−", "Zoom out (S)", () => zoomBy(1 / KEY_ZOOM)), tool("+", "Zoom in (W)", () => zoomBy(KEY_ZOOM)),
    tool("Whole trace", "Show the whole trace", () => setWindow({ start: range[0], end: range[1] })), readout,
    el("a", { className: "button download", id: "trace-download", href: ctx.client.url("trace/download"), download: "",
      title: "The original trace file, for Perfetto or chrome://tracing" }, "Download trace"));
  const help = el("div", { className: "muted trace-help" }, "Wheel or W/S: zoom · drag or A/D: pan · "
    + "Shift+wheel: scroll lanes · click an event for details, a lane name to fold it · Esc: clear");

  // -- state ----------------------------------------------------------------------------------
  let range = [0, 1];
  let win = null; // the window on screen; answers catch up with it
  let drag = null;
  let userMoved = false; // the URL gets start/end once the user moved
  let detailCtl = null;
  let detailNode = null; // the cards under the timeline: selected event, search results
  const finder = createSearch({
    fetchPage: (q, offset, limit) => api("trace/search", { q, offset, limit }),
    onJump: (m) => selectEvent(m.id, { brief: m, jump: true }),
    onError: (err) => { finder.node = errorPanel(err, "Search failed"); showBelow(); },
  });
  const life = new AbortController();
  const scene = createScene(canvas, wrap, { getWindow: () => win, onPaint: (s, w) => {
    Object.assign(hook, { drawn: s.drawn, paintMs: s.paintMs, window: { ...w }, plot: { ...s.size } });
    readout.textContent = windowText(w, range);
  } });
  hook.findBlock = (kind, name) => scene.findBlock(kind, name);
  const requestWidth = () => Math.min(10000, Math.max(1, Math.round(scene.plotW())));
  const keyed = (w) => {
    const start = roundTime(w.start);
    const end = Math.max(roundTime(w.end), start + 0.001);
    return { start, end, width: requestWidth(), key: `${start}|${end}|${requestWidth()}` };
  };
  const loader = createLoader({
    fetch: (w, signal) => {
      hook.requests.push({ start: w.start, end: w.end, width: w.width });
      if (hook.requests.length > 1000) hook.requests.splice(0, 500);
      if (userMoved) ctx.update({ start: String(w.start), end: String(w.end) });
      return api("trace/timeline", { start: w.start, end: w.end, width: w.width }, { signal,
        onProgress: (b) => { badge.hidden = false; setChildren(badge, progressPanel(b)); } });
    },
    onAnswer: (a, w) => { setChildren(status); setAnswer(a, w.width); },
    onError: (err) => setChildren(status, errorPanel(err, "Could not load this window")),
    onBusy: (busy) => { badge.hidden = !busy; setChildren(badge, busy ? "Loading…" : null); },
  });

  // -- first answer: the page is laid out first, so the request has the plot's real width ------
  const linkNote = el("p", { className: "muted", id: "trace-window-note" }); // a link's window set right
  setChildren(root, card(null, toolbar, status, linkNote, wrap, help), below);
  scene.resize();
  badge.hidden = false;
  setChildren(badge, "Loading the timeline…");
  const urlWin = windowFromState(ctx.state);
  let first;
  try {
    first = await firstAnswer(urlWin);
  } catch (err) {
    if (!ctx.alive() || isAbort(err)) return;
    setChildren(root, card("Trace", errorPanel(err, "Could not load the timeline")));
    return;
  }
  if (!ctx.alive()) return;
  badge.hidden = true;
  setAnswer(first.answer, first.width);
  checkLinkWindow(first.refused);
  bindInput(canvas, { gutter: () => scene.size.gutter, zoom: zoomBy, pan: (s) => setWindow(panBy(win, s, range)),
    dragStart: () => { drag = { win, scrollY: scene.scrollY }; }, dragMove, scroll: (dy) => scene.setScroll(scene.scrollY + dy),
    hover: onHover, leave: () => { scene.hover = null; showTip(tip, null); scene.invalidate(); }, click: onClick,
    gutterClick: (x, y) => { scene.toggleFold(y); onHover(x, y); }, key: onKey }, life.signal);
  const sizes = new ResizeObserver(() => scene.resize() && loader.request(keyed(win)));
  sizes.observe(wrap);
  life.signal.addEventListener("abort", () => { loader.cancel(); sizes.disconnect(); });
  const watch = setInterval(() => { if (!ctx.alive() || !canvas.isConnected) { clearInterval(watch); life.abort(); } }, 1000);
  search.addEventListener("input", debounce(() => applySearch(true), 300), { signal: life.signal });
  search.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    if (finder.state.q !== search.value.trim()) applySearch(true).then(() => finder.step(1));
    else finder.step(e.shiftKey ? -1 : 1);
  }, { signal: life.signal });
  hook.search = finder.state;
  applySearch(false);
  if (ctx.state.event !== undefined) selectEvent(Number(ctx.state.event), { jump: !urlWin });

  async function firstAnswer(w) {
    const width = requestWidth();
    const params = w ? { start: w.start, end: w.end, width } : { width };
    hook.requests.push(params);
    const progress = (b) => setChildren(badge, progressPanel(b));
    try {
      return { answer: await api("trace/timeline", params, { onProgress: progress }), width };
    } catch (err) {
      if (!(w && err instanceof ApiError && err.status === 400)) throw err;
      hook.requests.push({ width }); // a URL window the server refuses: show the whole trace
      return { answer: await api("trace/timeline", { width }, { onProgress: progress }), width,
        refused: true };
    }
  }

  /** A link's start/end that is not a window (start after end, text, one missing, refused by
   * the server) or lies outside the trace: say so, show the whole trace or the nearest
   * window, and write what is shown into the URL (a copied link then shows it too). */
  function checkLinkWindow(refused) {
    if (ctx.state.start === undefined && ctx.state.end === undefined) return;
    const asked = `${ctx.state.start ?? "…"} – ${ctx.state.end ?? "…"} µs`;
    if (!urlWin || refused) {
      linkNote.textContent = `The link's window (${asked}) is not a window of this trace: showing the whole trace.`;
      ctx.update({ start: null, end: null });
    } else if (urlWin.end <= range[0] || urlWin.start >= range[1]) {
      setWindow(clampWindow(urlWin, range)); // (its fetch writes the window into the URL)
      linkNote.textContent = `The link's window (${asked}) lies outside this trace `
        + `(${range[0]} – ${range[1]} µs): showing the nearest part.`;
    } else if (reachesBeyond(urlWin, range)) {
      setWindow(clampWindow(urlWin, range));
      linkNote.textContent = `The link's window (${asked}) reaches far beyond this trace `
        + `(${range[0]} – ${range[1]} µs): showing the whole trace.`;
    }
  }

  function setAnswer(a, width) {
    range = a.range;
    if (!win) win = { start: a.start, end: a.end };
    scene.setAnswer(a, search.value);
    hook.answers += 1;
    hook.lastAnswer = a;
    if (Math.abs(a.start - win.start) > 1e-3 || Math.abs(a.end - win.end) > 1e-3 || width !== requestWidth()) {
      loader.request(keyed(win)); // the window moved on meanwhile, or the plot changed width
    }
  }

  // -- moving around ------------------------------------------------------------------------------------
  function setWindow(next) {
    if (!win) return; // no answer yet
    win = clampWindow(next, range);
    userMoved = true;
    scene.hover = null; // what lies under the pointer has moved
    showTip(tip, null);
    scene.invalidate();
    loader.request(keyed(win));
  }

  function zoomBy(factor, x = null) {
    if (!win) return;
    const anchor = x === null ? 0.5 : Math.min(1, Math.max(0, (x - scene.size.gutter) / scene.plotW()));
    setWindow(zoomAt(win, factor, anchor, range));
  }

  function dragMove(dx, dy) {
    const shift = (dx / scene.plotW()) * (drag.win.end - drag.win.start);
    setWindow({ start: drag.win.start - shift, end: drag.win.end - shift });
    scene.setScroll(drag.scrollY - dy);
  }

  function onKey(action, x) {
    if (action === "in") zoomBy(KEY_ZOOM, x);
    else if (action === "out") zoomBy(1 / KEY_ZOOM, x);
    else if (action === "left") setWindow(panBy(win, -KEY_PAN, range));
    else if (action === "right") setWindow(panBy(win, KEY_PAN, range));
    else if (action === "escape") clearSelection();
  }

  /** Bring an event {lane, depth, start, dur} into view, keeping the zoom when it fits. */
  function focus(brief) {
    const end = brief.start + brief.dur;
    const span = win.end - win.start;
    const mid = (brief.start + end) / 2;
    if (brief.start < win.start || end > win.end) {
      setWindow(span >= brief.dur * 1.5 ? { start: mid - span / 2, end: mid + span / 2 }
        : windowAround(brief.start, end, range, 0.25, MIN_SPAN * 10));
    }
    scene.reveal(brief);
  }

  function zoomTo(b) {
    setWindow(windowAround(b[B_START], b[B_START] + b[B_DUR], range, 0.05, MIN_SPAN * 10));
  }

  // -- pointer --------------------------------------------------------------------------------------------
  /** The step of the Steps band under (x, y), or null. */
  function stepAt(x, y) {
    if (y < AXIS_H || y >= HEADER_H || x < scene.size.gutter || !win) return null;
    const t = win.start + ((x - scene.size.gutter) / scene.plotW()) * (win.end - win.start);
    return (scene.answer?.steps ?? []).find(([, s, e]) => s <= t && t < e) ?? null;
  }

  function onHover(x, y) {
    let lines = null;
    scene.hover = null;
    const step = stepAt(x, y);
    if (step) {
      lines = [...stepLines(step), { text: "Click for details", className: "muted" }];
    } else if (x < scene.size.gutter) {
      const box = scene.laneAt(y);
      lines = box ? laneTip(box) : null;
    } else {
      const hit = scene.pick(x, y);
      if (hit?.block) scene.hover = hit;
      lines = hit?.block ? blockTip(scene.answer, hit.box, hit.block) : hit?.point ? counterTip(hit.box, hit.point) : null;
    }
    showTip(tip, lines, x, y, scene.size.width, scene.size.height);
    canvas.style.cursor = scene.hover || step ? "pointer" : "";
    scene.invalidate();
  }

  function onClick(x, y) {
    const step = stepAt(x, y);
    if (step) {
      showStep(step);
      return;
    }
    const hit = scene.pick(x, y);
    if (!hit?.block) return;
    const b = hit.block;
    if (b[B_COUNT] === 1 && b.length > B_ID) selectEvent(b[B_ID], { brief: briefOf(hit.box.lane.id, b) });
    else zoomTo(b); // a merged block: zoom in until its events come apart
  }

  function briefOf(lane, b) {
    return { id: b[B_ID], lane, depth: b[B_DEPTH], start: b[B_START], dur: b[B_DUR] };
  }

  // -- selection and details ------------------------------------------------------------------------------------
  async function selectEvent(id, { brief = null, jump = false } = {}) {
    if (!Number.isInteger(id) || id < 0) {
      linkNote.textContent = [linkNote.textContent, `The link's event (${ctx.state.event}) is not an `
        + "event id: nothing is selected."].filter(Boolean).join(" ");
      ctx.update({ event: null });
      return;
    }
    detailCtl?.abort();
    const mine = detailCtl = new AbortController();
    ctx.update({ event: String(id) });
    Object.assign(scene, { selected: brief, related: [] });
    hook.selected = id;
    scene.invalidate();
    setDetail(detailCard(loadingLine("Loading the event…")));
    try {
      const d = await api("trace/event", { id }, { signal: mine.signal });
      if (mine !== detailCtl || !ctx.alive()) return;
      scene.selected = d;
      scene.related = [d.runtime, d.op, ...(d.launched ?? [])].filter(Boolean);
      setDetail(detailPanel(d, { laneName: (lane) => boxOf(scene.layout, lane)?.lane.name ?? lane,
        hrefFor: (b) => buildQuery({ ...ctx.state, event: b.id,
          ...windowToState(windowAround(b.start, b.start + b.dur, range, 2, MIN_SPAN * 10)) }),
        onJump: (b) => selectEvent(b.id, { brief: b, jump: true }), onClose: clearSelection }));
      if (jump) focus(d);
      scene.invalidate();
    } catch (err) {
      if (mine !== detailCtl || isAbort(err)) return;
      setDetail(detailCard(errorPanel(err, `Event ${id}`)));
    }
  }

  /** The card of a step of the Steps band: its two spans, why they differ, links. */
  function showStep(step) {
    detailCtl?.abort();
    Object.assign(scene, { selected: null, related: [] });
    hook.selected = null;
    scene.invalidate();
    const [name, s, e, hs = s, he = e, hostId = null] = step;
    const lines = stepLines(step);
    setDetail(el("section", { className: "card trace-detail trace-step", id: "trace-detail", dataset: { step: name } },
      el("div", { className: "card-head" }, el("h2", {}, lines[0].text),
        el("button", { type: "button", className: "button close", "aria-label": "Close the details", title: "Close (Esc)",
          on: { click: clearSelection } }, "×")),
      lines.slice(1).map((l) => el("p", { className: l.className ?? null }, l.text)),
      el("div", { className: "card-tools" },
        tool("Zoom to the step", "Show this step across the timeline",
          () => setWindow(windowAround(Math.min(s, hs), Math.max(e, he), range, 0.05, MIN_SPAN * 10))),
        hostId === null ? null : tool(`ProfilerStep#${name} event`, "Open the host event's details",
          () => selectEvent(hostId, { jump: true })))));
  }

  /** The detail card while the event loads, or when it cannot be shown. */
  function detailCard(body) {
    return el("section", { className: "card trace-detail", id: "trace-detail", dataset: { state: "pending" } },
      el("div", { className: "card-head" }, el("h2", {}, "Selected event"),
        el("button", { type: "button", className: "button close", "aria-label": "Close the details", title: "Close (Esc)",
          on: { click: clearSelection } }, "×")), body);
  }

  function clearSelection() {
    detailCtl?.abort();
    detailCtl = null;
    Object.assign(scene, { selected: null, related: [] });
    hook.selected = null;
    ctx.update({ event: null });
    setDetail(null);
    scene.invalidate();
  }

  function setDetail(node) {
    detailNode = node;
    showBelow();
  }

  function showBelow() {
    setChildren(below, detailNode, finder.node);
  }

  /** Highlight the matching events on screen and list the matches of the whole trace. */
  async function applySearch(write) {
    const q = search.value.trim();
    if (write) ctx.update({ search: q || null });
    scene.setQuery(q);
    const pending = finder.set(q);
    showBelow();
    await pending;
  }
}

/** An AbortSignal that aborts with either of two (either may be missing). */
function anySignal(a, b) {
  if (!a || !b) return a ?? b;
  if (AbortSignal.any) return AbortSignal.any([a, b]);
  const c = new AbortController();
  for (const s of [a, b]) s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  return c.signal;
}

function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}
