// The dashboard's whole state lives in the page's query string (SPEC §3.2), so a copied
// URL reopens the same view. Pure helpers over query strings plus two tiny history writers.

/** Known keys in the order they are written; other keys (e.g. the timeline's) follow. */
export const KEYS = ["run", "worker", "span", "view", "op_group_by", "op_pie",
  "kernel_group_by", "mem_device", "mem_group_by", "search", "sort", "dir", "page", "rows",
  "start", "end",
  "event", "mem_row", "stats_search", "stats_sort", "stats_dir", "stats_page", "diff_run",
  "diff_worker", "diff_span"];

/** Keys that belong to one view: dropped when the view, run, worker or span changes. */
export const VIEW_KEYS = ["search", "sort", "dir", "page", "rows", "start", "end", "event",
  "mem_row", "stats_search", "stats_sort", "stats_dir", "stats_page", "stats_rows",
  "kdiff_search", "kdiff_sort", "kdiff_dir", "kdiff_page", "kdiff_rows", "mod_step",
  "mod_focus", "mod_search", "mod_search_r", "mod_sort", "mod_dir", "mod_r_page", "mod_r_rows",
  "rank_search", "rank_sort", "rank_dir", "rank_page", "rank_rows"];

/** "?run=a&view=Kernel" -> {run: "a", view: "Kernel"} (empty values dropped). */
export function parseState(search) {
  const out = {};
  for (const [k, v] of new URLSearchParams(search)) {
    if (v !== "") out[k] = v;
  }
  return out;
}

/** {run: "a", view: "Kernel"} -> "?run=a&view=Kernel", known keys first, empties dropped. */
export function buildQuery(state) {
  const params = new URLSearchParams();
  const keys = [...KEYS, ...Object.keys(state).filter((k) => !KEYS.includes(k)).sort()];
  for (const k of keys) {
    const v = state[k];
    if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
  }
  const q = params.toString();
  return q ? `?${q}` : "";
}

/** `value` (from the URL) when it is one of `options`' own keys, else `fallback`: names
 * every object has (`toString`, `constructor`, `__proto__`) are not options. */
export function choice(options, value, fallback) {
  return Object.hasOwn(options, value ?? "") ? value : fallback;
}

/** `state` with `patch` applied; a null, undefined or "" value removes the key. */
export function withPatch(state, patch) {
  const out = { ...state };
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined || v === null || v === "") delete out[k];
    else out[k] = String(v);
  }
  return out;
}

/** `state` without the per-view keys (used when the view or the trace changes). */
export function withoutViewKeys(state) {
  const out = { ...state };
  for (const k of VIEW_KEYS) delete out[k];
  return out;
}

/** The current page's URL for `state` (same path, new query, no hash). */
export function urlFor(state, loc = window.location) {
  return `${loc.origin}${loc.pathname}${buildQuery(state)}`;
}

/** Write `state` into the address bar: a history entry when `push`, else in place. */
export function writeState(state, { push = false } = {}) {
  const url = `${window.location.pathname}${buildQuery(state)}`;
  if (url === `${window.location.pathname}${window.location.search}`) return;
  if (push) window.history.pushState(null, "", url);
  else window.history.replaceState(null, "", url);
}
