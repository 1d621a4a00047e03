// The dashboard shell: run / worker / span selectors, view tabs, "Copy link", and the
// URL <-> state round trip (SPEC §3.2; inside TensorBoard also TensorBoard's own URL, see
// lib/tbhost.js). Views are modules in views/, each exporting render(root, ctx); this file
// picks the trace, then hands the page to one of them.
import { getJSON, isAbort, spanClient } from "./lib/api.js";
import { purgeCharts } from "./lib/charts.js";
import { el, setChildren } from "./lib/dom.js";
import { middleEllipsis, spanLabels, spanTitle } from "./lib/format.js";
import { emptyState, errorPanel, loadingLine, progressPanel } from "./lib/status.js";
import { tensorboardHost } from "./lib/tbhost.js";
import { VIEW_KEYS, buildQuery, parseState, urlFor, withPatch, withoutViewKeys, writeState } from "./lib/urlstate.js";

// A view's module is views/<name in lower case>.js (the server's view registry, which
// lists the views of a span in `views`, declares the same module name for each).
const VIEW_NAME = /^[A-Za-z]+$/;
const loadView = (name) => (VIEW_NAME.test(name) ? import(`./views/${name.toLowerCase()}.js`) : null);
const RUNS_REFRESH_MS = 10000;

const $ = (id) => document.getElementById(id);
const ui = {
  run: $("run"), worker: $("worker"), span: $("span"), tabs: $("tabs"), copy: $("copy-link"),
  banner: $("banner"), progress: $("progress"), main: $("view"), toast: $("toast"),
};

// Inside TensorBoard our own URL is lost on reload: the state there lives in TensorBoard's hash.
const host = tensorboardHost();
let state = host?.read() ?? parseState(window.location.search);
let client = null; // spanClient of the shown span
let views = [];
let navToken = 0; // bumped by every navigation: stale async work checks it and stops

// -- selectors ----------------------------------------------------------------------
/** Longest option text; longer names lose their middle (full name on hover). */
// A span label with milliseconds ("2026-11-25 12:24:05.650 UTC") is 27 characters: never cut.
const OPTION_CHARS = { run: 32, worker: 26, span: 27 };
const OPTION_CHARS_NARROW = { run: 26, worker: 19, span: 27 }; // <= 1100 px (style.css)

/**
 * Fill a selector. Long labels are shortened in the middle, so names that share a long
 * prefix stay apart; each option and the select itself carry the full text as a tooltip.
 * `labels`: values -> shown labels; `title`: value -> tooltip.
 */
function fillSelect(select, values, current, labels = (vs) => vs, title = (v, l) => l) {
  const shown = labels(values);
  const filled = JSON.stringify([values, shown, current]);
  if (select.dataset.filled === filled) return; // as it is (a refresh found nothing new)
  select.dataset.filled = filled;
  const max = (window.innerWidth <= 1100 ? OPTION_CHARS_NARROW : OPTION_CHARS)[select.id] ?? 30;
  setChildren(select, values.map((v, i) => el("option", {
    value: v, selected: v === current, title: title(v, shown[i]),
  }, middleEllipsis(shown[i], max))));
  select.disabled = values.length === 0;
  const i = values.indexOf(current);
  select.title = i >= 0 ? title(current, shown[i]) : "";
  fitHeader();
}

/** One header row while the tabs fit beside the selectors, else the tabs get their own row. */
function fitHeader() {
  const bar = ui.tabs.parentElement;
  bar.classList.remove("two-rows");
  if (ui.tabs.scrollWidth > ui.tabs.clientWidth + 1) bar.classList.add("two-rows");
}
window.addEventListener("resize", fitHeader);

/**
 * `[values, labels]` for a selector: `values` plus `current` when a refresh no longer lists
 * it (the page still shows it), labelled "(removed)", so the selector says what is shown.
 */
function keepShown(values, current, labels = (vs) => vs) {
  if (current === undefined || current === null || values.includes(current)) return [values, labels];
  return [[...values, current], (vs) => [...labels(vs.slice(0, -1)), `${current} (removed)`]];
}

/** Run names as listed; a run whose every file failed says so (that state is stable). */
function runLabel(status) {
  return (runs) => runs.map((run) => {
    const s = status?.[run];
    return s && s.failed && !s.ready && !s.loading ? `${run} (failed)` : run;
  });
}

const spanTip = (span, label) => spanTitle(span, label);

function banner(text) {
  setChildren(ui.banner, text ? el("div", { className: "banner" }, text) : null);
}

// -- progress of 202 answers ----------------------------------------------------------
const loading = new Map();
function onProgress(key, body) {
  if (body) loading.set(key, body);
  else loading.delete(key);
  const latest = [...loading.values()].pop();
  setChildren(ui.progress, latest ? progressPanel(latest) : null);
}

// -- navigation -----------------------------------------------------------------------
/** Write the state into the page's query string and, inside TensorBoard, into its hash. */
function saveState(next, options) {
  writeState(next, options);
  host?.write(next);
}

async function fetchRuns(token) {
  for (;;) {
    const body = await getJSON("runs");
    if (token !== navToken) return null;
    if (body.runs?.length || !body.loading) return body;
    setChildren(ui.main, loadingLine("Looking for trace files…"));
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** Resolve run / worker / span from `state` (falling back to the first / latest), then show the view. */
async function navigate() {
  const token = ++navToken;
  banner("");
  try {
    const runs = await fetchRuns(token);
    if (!runs) return;
    if (!runs.runs.length) {
      for (const s of [ui.run, ui.worker, ui.span]) fillSelect(s, [], "");
      setChildren(ui.tabs);
      showClient(null);
      setChildren(ui.main, emptyState("No traces found in the log directory",
        "Write traces with torch.profiler and tensorboard_trace_handler(\"<logdir>/<run>\"); "
        + "new files show up here within a few seconds."));
      return;
    }
    const notes = [];
    let run = state.run;
    if (!runs.runs.includes(run)) {
      if (run) notes.push(`Run “${run}” is not in this log directory.`);
      run = runs.runs[0];
    }
    fillSelect(ui.run, runs.runs, run, runLabel(runs.status));
    const workers = await getJSON("workers", { run });
    if (token !== navToken) return;
    let worker = state.worker;
    if (!workers.includes(worker)) {
      if (worker) notes.push(`Worker “${worker}” is not in run “${run}”.`);
      worker = workers[0];
    }
    fillSelect(ui.worker, workers, worker);
    const spans = worker === undefined ? [] : await getJSON("spans", { run, worker });
    if (token !== navToken) return;
    let span = state.span;
    if (!spans.includes(span)) {
      if (span) notes.push(`Span “${span}” not found in worker “${worker}”: showing the latest span.`);
      span = spans[spans.length - 1];
    }
    fillSelect(ui.span, spans, span, spanLabels, spanTip);
    if (notes.length) {
      const at = span ? ` / ${spanLabels(spans)[spans.indexOf(span)]}` : "";
      banner(`${notes.join(" ")} Showing ${run} / ${worker}${at} instead.`);
    }
    state = withPatch(state, { run, worker, span }); // span always written explicitly
    saveState(state);
    if (worker === undefined || span === undefined) {
      showClient(null);
      setChildren(ui.main, emptyState("No trace files in this run"));
      return;
    }
    if (!client || client.run !== run || client.worker !== worker || client.span !== span) {
      const next = spanClient({ run, worker, span }, {
        onProgress: (key, body) => client === next && onProgress(key, body), // not a closed one's
      });
      showClient(next);
    }
    setChildren(ui.tabs);
    setChildren(ui.main, loadingLine("Loading the trace…"));
    views = await client.get("views");
    if (token !== navToken) return;
    await showView(token);
  } catch (err) {
    if (token !== navToken || isAbort(err)) return;
    setChildren(ui.tabs);
    setChildren(ui.main, errorPanel(err));
  }
}

function showClient(next) {
  if (client && client !== next) client.close();
  client = next;
  loading.clear();
  setChildren(ui.progress);
}

/** Per view, its URL keys (window, selection, sort, search...) when the user left its tab. */
const left = new Map();
const spanKey = (st) => JSON.stringify([st.run, st.worker, st.span]);
const viewKeysOf = (st) => Object.fromEntries(VIEW_KEYS.filter((k) => k in st).map((k) => [k, st[k]]));

function renderTabs(current) {
  setChildren(ui.tabs, views.map((v) => el("a", {
    href: buildQuery(withoutViewKeys({ ...state, view: v })) || "?", role: "tab",
    className: v === current ? "tab active" : "tab", "aria-selected": String(v === current),
    dataset: { view: v },
    on: { click: (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) return; // new tab: let the browser go
      e.preventDefault();
      if (v === state.view) return;
      banner(""); // a note about the last view (its fallback) is not about this one
      left.set(state.view, { span: spanKey(state), keys: viewKeysOf(state) });
      const back = left.get(v); // coming back to a view of this span: as it was left
      state = withoutViewKeys(withPatch(state, { view: v }));
      if (back?.span === spanKey(state)) state = withPatch(state, back.keys);
      saveState(state, { push: true });
      showView(++navToken);
    } },
  }, v)));
  fitHeader();
}

/** Show state.view (or the first view with data) of the current span. */
async function showView(token) {
  if (!views.length) {
    setChildren(ui.tabs);
    setChildren(ui.main, emptyState("Nothing to show for this trace",
      "It has no host events and no GPU activity."));
    return;
  }
  let view = state.view;
  if (!views.includes(view)) {
    if (view) banner(`No “${view}” view for this trace (it has ${views.join(", ")}); showing ${views[0]}.`);
    view = views[0];
    state = withoutViewKeys(withPatch(state, { view }));
  }
  saveState(state);
  renderTabs(view);
  document.title = `${view} · ${state.run} — Stepscope`;
  purgeCharts(ui.main);
  const root = el("div", { className: "view-root", dataset: { view } });
  setChildren(ui.main, root);
  const ctx = {
    client,
    state: { ...state },
    alive: () => token === navToken,
    update(patch) {
      if (token !== navToken) return;
      state = withPatch(state, patch);
      ctx.state = { ...state };
      saveState(state);
      renderTabs(view);
    },
    rerender: () => showView(++navToken),
  };
  try {
    const loader = loadView(view);
    if (!loader) {
      setChildren(root, emptyState(`The ${view} view is not available in this version of the dashboard`));
      return;
    }
    const module = await loader;
    if (!ctx.alive()) return;
    await module.render(root, ctx);
  } catch (err) {
    if (!ctx.alive() || isAbort(err)) return;
    setChildren(root, errorPanel(err));
  }
}

// -- controls ---------------------------------------------------------------------------
function choose(patch) {
  state = withoutViewKeys(withPatch(state, patch));
  saveState(state, { push: true });
  purgeCharts(ui.main);
  setChildren(ui.tabs); // the old trace's page goes at once, not when the new one is ready
  setChildren(ui.main, loadingLine("Loading the trace…"));
  navigate();
}

ui.run.addEventListener("change", () => choose({ run: ui.run.value, worker: null, span: null }));
ui.worker.addEventListener("change", () => choose({ worker: ui.worker.value }));
ui.span.addEventListener("change", () => choose({ span: ui.span.value }));
window.addEventListener("popstate", () => {
  state = parseState(window.location.search);
  navigate();
});
host?.onChange((next) => { // the user edited TensorBoard's URL (its history has the entry)
  if (buildQuery(next) === buildQuery(state)) return;
  state = next;
  saveState(state);
  navigate();
});

function toast(text) {
  ui.toast.textContent = text;
  ui.toast.classList.add("show");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => ui.toast.classList.remove("show"), 2500);
}

/** Copy with the Clipboard API, else the old execCommand way (plain http, iframes). */
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = el("textarea", { readonly: true, className: "offscreen" });
    area.value = text;
    document.body.appendChild(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    area.remove();
    return ok;
  }
}

ui.copy.addEventListener("click", async () => {
  const url = host ? host.linkFor(state) : urlFor(state);
  ui.copy.dataset.url = url;
  if (await copyText(url)) toast(host ? "Link copied: it opens this exact view in TensorBoard." : "Link copied: it opens this exact view.");
  else window.prompt("Copy this link:", url);
});

/**
 * Follow the log directory while the page is open (the server rescans it): new runs, new
 * workers and spans of the shown run (tensorboard_trace_handler writes a span per profiling
 * cycle), "(failed)" labels; a run, worker or span shown that is gone stays in its selector
 * as "(removed)", with a banner, until another is picked.
 */
async function refreshRuns() {
  if (document.visibilityState !== "visible") return;
  const token = navToken;
  const { run, worker, span } = state;
  try {
    const body = await getJSON("runs");
    if (token !== navToken) return;
    if (!run) {
      if (body.runs.length) navigate();
      return;
    }
    const [runs, runLabels] = keepShown(body.runs, run, runLabel(body.status));
    fillSelect(ui.run, runs, run, runLabels);
    let gone = body.runs.includes(run) ? null : `Run “${run}”`;
    if (!gone && worker !== undefined) {
      const workers = await getJSON("workers", { run });
      if (token !== navToken) return;
      const [values, labels] = keepShown(workers, worker);
      fillSelect(ui.worker, values, worker, labels);
      if (!workers.includes(worker)) gone = `Worker “${worker}”`;
      else if (span !== undefined) {
        const spans = await getJSON("spans", { run, worker });
        if (token !== navToken) return;
        const [values, labels] = keepShown(spans, span, spanLabels);
        fillSelect(ui.span, values, span, labels, spanTip);
        if (!spans.includes(span)) gone = `Span “${span}”`;
      }
    }
    if (gone) {
      banner(`${gone} is no longer in the log directory (deleted, moved or unreadable): this `
        + "page shows it as it was loaded. Pick another to go on.");
    }
  } catch {
    // the next refresh tries again; navigation shows errors
  }
}

setInterval(refreshRuns, RUNS_REFRESH_MS);
navigate();
