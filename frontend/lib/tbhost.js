// Inside TensorBoard the dashboard page sits two iframes deep: TensorBoard's page (its URL
// in the address bar, e.g. http://host:6006/#stepscope) holds data/plugin_entry.html?name=
// stepscope, whose module (tb_entry.js) holds our index.html. Our own query string is lost
// when the user reloads, and a copied index.html URL opens the bare dashboard. So there the
// state is mirrored into TensorBoard's hash, written the way TensorBoard writes its own:
// "#stepscope&run=a&view=Kernel" (the key without "=" is TensorBoard's active plugin; keys
// and values percent-encoded with encodeURIComponent, as TensorBoard's tf_storage reads them).

import { KEYS } from "./urlstate.js";

export const PLUGIN = "stepscope";
const ENTRY_PAGE = "/data/plugin_entry.html";

/** "#stepscope&run=a%20b&view=Kernel" -> {tab: "stepscope", state: {run: "a b", view: "Kernel"}}
 *  (TensorBoard's parsing: the part without "=" is the tab; empty values dropped). */
export function parseHash(hash) {
  const out = { tab: "", state: {} };
  const body = (hash || "").replace(/^#/, "");
  if (!body) return out;
  for (const part of body.split("&")) {
    const kv = part.split("=");
    try {
      if (kv.length === 1) out.tab = decodeURIComponent(kv[0]);
      else if (kv.length === 2 && kv[1] !== "") out.state[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1]);
    } catch {
      // a malformed escape: TensorBoard would throw; we skip that part
    }
  }
  return out;
}

/** ("stepscope", {view: "Kernel", run: "a b"}) -> "#stepscope&run=a%20b&view=Kernel": known keys
 *  first (urlstate's order), then the others sorted; empty values dropped. */
export function buildHash(tab, state) {
  const keys = [...KEYS, ...Object.keys(state).filter((k) => !KEYS.includes(k)).sort()];
  const parts = tab ? [encodeURIComponent(tab)] : [];
  for (const k of keys) {
    const v = state[k];
    if (v !== undefined && v !== null && v !== "") parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  }
  return parts.length ? `#${parts.join("&")}` : "";
}

/**
 * TensorBoard's top window when `win` is our page inside TensorBoard's plugin iframe (the
 * parent is data/plugin_entry.html?name=stepscope on the same origin), else null. Any
 * cross-origin access throws, so a page framed by another site counts as standalone.
 */
export function tensorboardTop(win = window) {
  try {
    const parent = win.parent;
    if (!parent || parent === win) return null;
    const at = parent.location;
    if (!at.pathname.endsWith(ENTRY_PAGE)) return null;
    if (new URLSearchParams(at.search).get("name") !== PLUGIN) return null;
    const top = parent.parent;
    if (!top || top === parent || top.location.origin !== win.location.origin) return null;
    return top;
  } catch {
    return null;
  }
}

/**
 * The TensorBoard host of `win`, or null when standalone:
 * - `read()`: the state in TensorBoard's hash when its tab is ours and it has any, else null;
 * - `write(state)`: put `state` into TensorBoard's hash in place (replaceState: no history
 *   entry, no hashchange, so TensorBoard does not react); skipped while another plugin's tab
 *   is active (this page keeps running, hidden, when the user switches tabs);
 * - `linkFor(state)`: TensorBoard's URL that opens this view in TensorBoard;
 * - `onChange(fn)`: call `fn(state)` when the user edits TensorBoard's hash by hand.
 */
export function tensorboardHost(win = window) {
  const top = tensorboardTop(win);
  if (!top) return null;
  const ours = (tab) => tab === PLUGIN;
  const base = () => `${top.location.origin}${top.location.pathname}${top.location.search}`;
  return {
    read() {
      const { tab, state } = parseHash(top.location.hash);
      return ours(tab) && Object.keys(state).length ? state : null;
    },
    write(state) {
      const { tab } = parseHash(top.location.hash);
      if (tab && !ours(tab)) return;
      const hash = buildHash(PLUGIN, state);
      if (hash === top.location.hash) return;
      top.history.replaceState(top.history.state, "", `${top.location.pathname}${top.location.search}${hash}`);
    },
    linkFor: (state) => `${base()}${buildHash(PLUGIN, state)}`,
    onChange(fn) {
      top.addEventListener("hashchange", () => {
        const { tab, state } = parseHash(top.location.hash);
        if (ours(tab)) fn(state);
      });
    },
  };
}
