// Trace view search over the whole trace: the server's trace/search lists, by start time,
// every event whose name contains the text (paged); this panel shows the count, the page of
// matches, and steps through them one by one (Enter / Shift+Enter, or the arrows), asking
// for the next page when the step leaves the one loaded.
import { el, setChildren } from "./dom.js";
import { formatCount, formatDuration, shortenName } from "./format.js";
import { formatTime } from "./timeline_window.js";

export const SEARCH_PAGE = 100;

/** "1 event" / "1,234 events". */
export function countText(n) {
  return `${formatCount(n)} ${n === 1 ? "event" : "events"}`;
}

/**
 * The search panel. `fetchPage(q, offset, limit)` -> promise of a trace/search answer;
 * `onJump(match)` shows one match (a trace/event brief: id, name, lane, depth, start, dur).
 * Returns {node, set(q), step(+1|-1), state}; `node` is null while the text is empty.
 */
export function createSearch({ fetchPage, onJump, onError = () => {} }) {
  const state = { q: "", total: 0, offset: 0, matches: [], index: -1, loading: false };
  let token = 0;
  const panel = el("section", { className: "card trace-search", id: "trace-search-results" });
  const api = { node: null, state, set, step };

  async function load(offset) {
    const mine = ++token;
    state.loading = true;
    render();
    try {
      const a = await fetchPage(state.q, offset, SEARCH_PAGE);
      if (mine !== token) return false;
      Object.assign(state, { total: a.total, offset: a.offset, matches: a.matches, loading: false });
      render();
      return true;
    } catch (err) {
      if (mine === token) {
        state.loading = false;
        onError(err);
      }
      return false;
    }
  }

  /** Search for `q` (trimmed); resolves once the first page is in. */
  async function set(q) {
    state.q = String(q ?? "").trim();
    Object.assign(state, { total: 0, offset: 0, matches: [], index: -1 });
    api.node = state.q ? panel : null;
    if (!state.q) {
      token += 1;
      return;
    }
    await load(0);
  }

  /** Go to match index + `dir` (wrapping), loading its page when needed, and show it. */
  async function step(dir) {
    if (!state.total) return;
    await goTo((state.index + dir + state.total) % state.total);
  }

  async function goTo(index) {
    if (index < state.offset || index >= state.offset + state.matches.length) {
      if (!(await load(Math.floor(index / SEARCH_PAGE) * SEARCH_PAGE))) return;
    }
    state.index = index;
    render();
    const m = state.matches[index - state.offset];
    if (m) onJump(m);
  }

  function render() {
    const { q, total, offset, matches, index, loading } = state;
    const head = loading && !matches.length ? "Searching the whole trace…"
      : total === 0 ? `No event named like “${q}” in this trace.`
        : `${countText(total)} named like “${q}” in the whole trace${total > matches.length
          ? ` (showing ${formatCount(offset + 1)}–${formatCount(offset + matches.length)})` : ""}.`;
    const nav = (text, title, fn, disabled) => el("button", { type: "button", className: "button", title,
      disabled, on: { click: fn } }, text);
    setChildren(panel,
      el("div", { className: "card-head" }, el("h2", {}, "Search"),
        total ? el("div", { className: "search-nav" },
          nav("‹ Previous", "Previous match (Shift+Enter)", () => step(-1), false),
          el("span", { className: "search-position", id: "trace-search-position" },
            index >= 0 ? `${formatCount(index + 1)} of ${formatCount(total)}` : `${formatCount(total)} match${total === 1 ? "" : "es"}`),
          nav("Next ›", "Next match (Enter)", () => step(1), false)) : null),
      el("div", { className: "muted", id: "trace-search-count" }, head),
      matches.length ? el("ol", { className: "match-list", start: offset + 1 }, matches.map((m, i) =>
        el("li", { className: offset + i === index ? "current" : "" },
          el("button", { type: "button", className: "match", title: m.name,
            on: { click: () => goTo(offset + i) } },
          el("span", { className: "match-name" }, shortenName(m.name, 70)),
          el("span", { className: "muted" }, ` ${formatTime(m.start)} · ${formatDuration(m.dur)}`))))) : null,
      total > matches.length ? el("div", { className: "search-pages" },
        nav("‹ Earlier", "The previous page of matches", () => load(Math.max(0, offset - SEARCH_PAGE)), offset === 0),
        nav("Later ›", "The next page of matches", () => load(offset + SEARCH_PAGE),
          offset + matches.length >= total)) : null);
  }

  return api;
}
