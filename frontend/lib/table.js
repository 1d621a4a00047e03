// The table component every view uses: search box, sortable headers, paging and
// optionally expandable rows. Logic lives in table_model.js; this file only builds DOM.
import { breakable, el, helpIcon, setChildren } from "./dom.js";
import { formatBytes, formatCount, formatDuration, formatPercent, shortenName } from "./format.js";
import { csvText, paginate, shownRows, tableView } from "./table_model.js";
import { errorPanel, loadingLine } from "./status.js";

/** Save `text` as the file `name` (CSV unless `type` says otherwise): a download from the
 * page, no request. */
export function saveCsv(name, text, type = "text/csv;charset=utf-8") {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = el("a", { href: url, download: name, className: "offscreen" });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/**
 * A "CSV" button for a table not built by createTable: on click, `table()` -> {columns
 * ({key, label, kind} as csvText takes them), rows} is saved as `name`. `title` says what
 * is in the file.
 */
export function csvButton(name, title, table, id) {
  return el("button", { type: "button", className: "button table-csv", title, id,
    on: { click: () => { const t = table(); saveCsv(name, csvText(t.columns, t.rows)); } } }, "CSV");
}

export const PAGE_SIZES = [10, 25, 50, 100];
/** The table's own state keys (createTable's `state` and `onStateChange` patches). */
const STATE_KEYS = ["search", "sort", "dir", "page", "rows"];

/**
 * A table's `state` and `onStateChange` over the view's URL state `ctx`: each key of
 * STATE_KEYS is the URL key `prefix + key` ("stats_" -> stats_search, ..., stats_rows), or
 * its name in `renamed` ({search: "mod_search_r"}). Every key a patch holds is written, and
 * only those (a search no longer clears the sort, paging no longer writes `undefined=2`).
 */
export function tableState(ctx, prefix = "", renamed = {}) {
  const name = (k) => renamed[k] ?? `${prefix}${k}`;
  return {
    state: Object.fromEntries(STATE_KEYS.map((k) => [k, ctx.state[name(k)]])),
    onStateChange: (patch) => ctx.update(Object.fromEntries(
      Object.entries(patch).map(([k, v]) => [name(k), v]))),
  };
}
const NUMERIC = new Set(["count", "duration", "percent", "number", "bytes"]);

/** A cell's display text by column kind. */
export function cellText(value, kind) {
  switch (kind) {
    case "duration": return formatDuration(value);
    case "count": return formatCount(value);
    case "percent": return formatPercent(value);
    case "bytes": return formatBytes(value);
    case "number": return typeof value === "number" ? formatCount(value) : String(value ?? "–");
    case "bool": return value === true ? "Yes" : value === false ? "No" : String(value ?? "–");
    default: return value === null || value === undefined ? "" : String(value);
  }
}

function cell(row, col) {
  const value = row[col.key];
  const text = col.format ? col.format(value) : cellText(value, col.kind);
  const numeric = NUMERIC.has(col.kind);
  if (col.shorten) { // long names: shortened, full text on hover, wrapping allowed
    const short = text.length > col.shorten ? shortenName(text, col.shorten, { outer: false }) : text;
    return el("td", { className: "name", title: short === text ? null : text }, breakable(short));
  }
  const extra = col.cellClass ? col.cellClass(value) : "";
  return el("td", { className: [numeric ? "num" : col.kind === "code" ? "code" : "", extra].filter(Boolean).join(" "),
    title: col.kind === "duration" && typeof value === "number" ? `${formatCount(value)} µs` : null }, text);
}

/**
 * createTable(options) -> {element, setRows(rows)}.
 * options: columns [{key, label, kind: "text"|"code"|"count"|"duration"|"percent"|"number"|"bool",
 *   help?, shorten? (max chars, full text on hover), width? (CSS min-width), format?(value)
 *   (display text instead of the kind's), cellClass?(value) (extra class names)}], rows, searchKeys,
 *   state {search, sort, dir, page (1-based), rows (per page)}, onStateChange(patch) (to
 *   mirror them into the URL; page 1 and the default page size are written as null;
 *   tableState() maps them to a view's URL keys),
 *   rowKey(row), expandable(row), renderDetail(row) -> Promise<Node>, noun ("operators"),
 *   pageSize, onRowClick(row) (rows become clickable), rowClass(row) -> extra class names,
 *   csvName (file name of the CSV download; default `${noun}.csv`),
 *   fetchPage({search, sort, dir, page, pageSize}) -> Promise<{rows, matched, total}>: a
 *   server-side table (search, sort and paging done by the server; `rows` is then unused and
 *   setRows() just asks again).
 * The "CSV" button downloads the rows shown (search applied, every page, in the table's
 * sort) with the columns shown (csvText in table_model.js); a server-side table asks for
 * every matched row in one page first.
 */
export function createTable(options) {
  const { columns, searchKeys = [columns[0].key], onStateChange, noun = "rows",
    expandable = () => false, renderDetail, rowKey = (r) => JSON.stringify(r), onRowClick,
    rowClass = () => "" } = options;
  let rows = options.rows ?? [];
  const st = { search: options.state?.search ?? "", sort: options.state?.sort ?? "",
    dir: options.state?.dir === "asc" ? "asc" : "desc",
    page: Math.max(0, Math.floor(Number(options.state?.page) || 1) - 1),
    pageSize: options.pageSize ?? 25 };
  if (st.sort && !columns.some((c) => c.key === st.sort)) st.sort = "";
  const defaultSize = st.pageSize;
  const given = options.state ?? {};
  if (PAGE_SIZES.includes(Number(given.rows))) st.pageSize = Number(given.rows); // from the URL
  // values from the URL this table cannot use leave it (a copied link then shows the same)
  const unusable = {};
  if (given.sort && !st.sort) unusable.sort = null;
  if (given.dir && given.dir !== "asc" && given.dir !== "desc") unusable.dir = null;
  if (given.rows && !PAGE_SIZES.includes(Number(given.rows))) unusable.rows = null;
  if (Object.keys(unusable).length) onStateChange?.(unusable);
  /** The page the URL holds (1-based text; null: the first): show() writes the shown one. */
  let urlPage = given.page ?? null;
  const expanded = new Set();
  const details = new Map(); // rowKey -> Promise<Node>

  const search = el("input", { type: "search", className: "table-search",
    placeholder: options.searchPlaceholder ?? "Search names…", "aria-label": `Search ${noun}`,
    value: st.search });
  const count = el("span", { className: "table-count muted" });
  const csvButton = el("button", { type: "button", className: "button table-csv",
    title: `Download the ${noun} shown (every page, search applied) as CSV`,
    on: { click: () => downloadCsv() } }, "CSV");
  const thead = el("thead");
  const tbody = el("tbody");
  const pager = el("div", { className: "pager" });
  const element = el("div", { className: "table-wrap" },
    el("div", { className: "table-tools" }, search, count, csvButton),
    el("div", { className: "table-scroll" }, el("table", { className: "data-table" }, thead, tbody)),
    pager);

  let typing = null;
  search.addEventListener("input", () => {
    st.search = search.value;
    st.page = 0;
    onStateChange?.({ search: st.search });
    clearTimeout(typing); // a server-side table asks once typing pauses
    if (options.fetchPage) typing = setTimeout(render, 200);
    else render();
  });

  function sortBy(col) {
    if (st.sort === col.key) st.dir = st.dir === "desc" ? "asc" : "desc";
    else {
      st.sort = col.key;
      st.dir = NUMERIC.has(col.kind) ? "desc" : "asc";
    }
    st.page = 0;
    onStateChange?.({ sort: st.sort, dir: st.dir });
    render();
  }

  function header() {
    const ths = columns.map((col) => {
      const active = st.sort === col.key;
      const arrow = active ? (st.dir === "asc" ? "▲" : "▼") : "";
      return el("th", { className: NUMERIC.has(col.kind) ? "num" : "", style: col.width ? { minWidth: col.width } : null,
        "aria-sort": active ? (st.dir === "asc" ? "ascending" : "descending") : "none" },
      el("button", { type: "button", className: "sort", dataset: { key: col.key },
        title: `Sort by ${col.title ?? col.label}`, on: { click: () => sortBy(col) } },
      col.label, el("span", { className: "arrow", "aria-hidden": "true" }, arrow)),
      helpIcon(col.help));
    });
    setChildren(thead, el("tr", {}, ths));
  }

  function detailRow(key, row) {
    const td = el("td", { colspan: String(columns.length) }, loadingLine("Loading call stacks…"));
    if (!details.has(key)) details.set(key, Promise.resolve().then(() => renderDetail(row)));
    details.get(key).then((node) => setChildren(td, node),
      (err) => { details.delete(key); setChildren(td, errorPanel(err)); });
    return el("tr", { className: "detail-row" }, td);
  }

  function bodyRows(view) {
    const out = [];
    for (const row of view.rows) {
      const key = rowKey(row);
      const cells = columns.map((col) => cell(row, col));
      cells[0].classList.add("first");
      if (renderDetail && expandable(row)) {
        const open = expanded.has(key);
        // the arrow is CSS (::before), so the cell's text stays the name alone
        const btn = el("button", { type: "button", className: "expand", "aria-expanded": String(open),
          title: open ? "Hide call stacks" : "Show call stacks",
          "aria-label": open ? "Hide call stacks" : "Show call stacks",
          on: { click: () => { if (open) expanded.delete(key); else expanded.add(key); render(); } } });
        cells[0].prepend(btn);
      }
      if (renderDetail) cells[0].classList.add("has-toggle"); // room for the toggle, aligned
      const cls = [expanded.has(key) ? "expanded" : "", onRowClick ? "clickable" : "", rowClass(row)];
      out.push(el("tr", { className: cls.filter(Boolean).join(" "),
        on: onRowClick ? { click: (e) => { if (!e.target.closest("button")) onRowClick(row); } } : {} },
      cells));
      if (renderDetail && expanded.has(key) && expandable(row)) out.push(detailRow(key, row));
    }
    if (!out.length) {
      out.push(el("tr", {}, el("td", { colspan: String(columns.length), className: "muted empty-row" },
        st.search ? `No ${noun} match “${st.search}”.` : `No ${noun}.`)));
    }
    return out;
  }

  function pagerControls(view) {
    const size = el("select", { "aria-label": "Rows per page",
      on: { change: () => {
        st.pageSize = Number(size.value);
        onStateChange?.({ rows: st.pageSize === defaultSize ? null : String(st.pageSize) });
        go(0);
      } } },
    PAGE_SIZES.map((n) => el("option", { value: String(n), selected: n === st.pageSize }, String(n))));
    const go = (p) => {
      st.page = p;
      render(); // (show() writes the page into the URL)
    };
    const range = view.matched ? `${formatCount(view.start + 1)}–${formatCount(view.end)} of ${formatCount(view.matched)}` : "0 of 0";
    setChildren(pager,
      el("label", {}, "Rows per page ", size),
      el("span", { className: "pager-range" }, range),
      el("button", { type: "button", className: "page-prev", disabled: view.page === 0,
        on: { click: () => go(view.page - 1) } }, "‹ Prev"),
      el("span", { className: "pager-page" }, `Page ${view.page + 1} of ${view.pages}`),
      el("button", { type: "button", className: "page-next", disabled: view.page >= view.pages - 1,
        on: { click: () => go(view.page + 1) } }, "Next ›"));
  }

  let asked = 0; // the latest server-side page request (older answers are dropped)

  function render() {
    if (!options.fetchPage) {
      show(tableView(rows, { search: st.search, searchKeys, sort: st.sort, dir: st.dir,
        page: st.page, pageSize: st.pageSize }));
      return;
    }
    const mine = ++asked;
    count.textContent = "Loading…";
    options.fetchPage({ search: st.search, sort: st.sort, dir: st.dir, page: st.page, pageSize: st.pageSize })
      .then((ans) => {
        if (mine !== asked) return;
        const pg = paginate(ans.matched, st.page, st.pageSize);
        if (pg.page !== st.page && ans.matched) { st.page = pg.page; render(); return; }
        show({ rows: ans.rows, matched: ans.matched, total: ans.total, ...pg });
      })
      .catch((err) => {
        if (mine !== asked) return;
        count.textContent = ""; // not "Loading…" under an error
        setChildren(tbody, el("tr", {}, el("td", { colspan: String(columns.length) }, errorPanel(err))));
      });
  }

  let shown = null; // the view on screen (redraw() restyles it without asking again)

  function show(view) {
    shown = view;
    st.page = view.page;
    const page = view.page > 0 ? String(view.page + 1) : null; // page 999 of 3: 3
    if (page !== urlPage) {
      urlPage = page;
      onStateChange?.({ page });
    }
    header();
    setChildren(tbody, bodyRows(view));
    count.textContent = view.matched === view.total ? `${formatCount(view.total)} ${noun}`
      : `${formatCount(view.matched)} of ${formatCount(view.total)} ${noun}`;
    pagerControls(view);
  }

  async function downloadCsv() {
    const all = options.fetchPage
      ? (await options.fetchPage({ search: st.search, sort: st.sort, dir: st.dir, page: 0,
        pageSize: Math.max(1, shown?.matched ?? 0) })).rows
      : shownRows(rows, { search: st.search, searchKeys, sort: st.sort, dir: st.dir });
    saveCsv(options.csvName ?? `${noun}.csv`, csvText(columns, all));
  }

  render();
  return {
    element,
    setRows(newRows) {
      rows = newRows;
      expanded.clear();
      details.clear();
      render();
    },
    /** Back to the first page and ask again (a server-side table's filter changed). */
    reload() {
      st.page = 0;
      render();
    },
    /** Draw the rows on screen again (after rowClass() changed), without asking again. */
    redraw() {
      if (shown) show(shown);
    },
  };
}
