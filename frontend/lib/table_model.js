// Search, sort and paging of table rows: pure functions over arrays of row objects, shared
// by every table (the DOM side is table.js). Unit-tested with node.

/** Compare two cell values: numbers numerically, text case-insensitively; empty last. */
export function compareValues(a, b) {
  const aEmpty = a === null || a === undefined || a === "";
  const bEmpty = b === null || b === undefined || b === "";
  if (aEmpty || bEmpty) return aEmpty === bEmpty ? 0 : aEmpty ? 1 : -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "boolean" && typeof b === "boolean") return Number(a) - Number(b);
  const x = String(a).toLowerCase();
  const y = String(b).toLowerCase();
  if (x !== y) return x < y ? -1 : 1;
  return String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
}

/**
 * Rows sorted by `key` ("asc" or "desc"; stable, empty values always last). Without a key
 * the rows keep their order (the API's: device self time, or total kernel time, descending).
 */
export function sortRows(rows, key, dir = "desc") {
  if (!key) return rows.slice();
  const sign = dir === "asc" ? 1 : -1;
  return rows
    .map((row, i) => [row, i])
    .sort(([ra, ia], [rb, ib]) => {
      const a = ra[key];
      const b = rb[key];
      const aEmpty = a === null || a === undefined || a === "";
      const bEmpty = b === null || b === undefined || b === "";
      if (aEmpty || bEmpty) return aEmpty === bEmpty ? ia - ib : aEmpty ? 1 : -1;
      return sign * compareValues(a, b) || ia - ib;
    })
    .map(([row]) => row);
}

/**
 * Rows whose `keys` contain every whitespace-separated term of `query`, case-insensitive:
 * "conv backward" keeps "aten::cudnn_convolution_backward".
 */
export function filterRows(rows, query, keys) {
  const terms = String(query ?? "").toLowerCase().split(/\s+/).filter(Boolean);
  if (!terms.length) return rows.slice();
  return rows.filter((row) => {
    const text = keys.map((k) => (row[k] ?? "")).join("\u0000").toLowerCase();
    return terms.every((t) => text.includes(t));
  });
}

/** Page `page` (0-based, clamped) of `total` rows in pages of `size`. */
export function paginate(total, page, size) {
  const pages = Math.max(1, Math.ceil(total / size));
  const p = Math.min(Math.max(0, Math.floor(Number(page) || 0)), pages - 1);
  return { page: p, pages, start: p * size, end: Math.min(total, (p + 1) * size) };
}

/**
 * What a table shows: filter, then sort, then cut one page.
 * -> {rows (this page), matched (rows after search), total, page, pages, start, end}.
 */
export function tableView(rows, { search = "", searchKeys = [], sort = "", dir = "desc",
  page = 0, pageSize = 25 } = {}) {
  const matched = sortRows(filterRows(rows, search, searchKeys), sort, dir);
  const pg = paginate(matched.length, page, pageSize);
  return { rows: matched.slice(pg.start, pg.end), matched: matched.length, total: rows.length,
    ...pg };
}

/** A column's key for URLs: "Total Duration (us)" -> "total_duration_us". */
export function columnKey(name) {
  return String(name).toLowerCase().replace(/[^a-z0-9]+/g, "_").replace(/^_+|_+$/g, "");
}

/**
 * Chart-table shape {columns, rows} (SPEC §3) -> {columns: [{key, name}], rows: [objects]};
 * tooltip columns are dropped.
 */
export function chartTableRows(table) {
  const columns = [];
  (table?.columns ?? []).forEach((c, i) => {
    if (c.role !== "tooltip") columns.push({ key: columnKey(c.name), name: c.name, type: c.type, index: i });
  });
  const rows = (table?.rows ?? []).map((r) => {
    const o = {};
    for (const c of columns) o[c.key] = r[c.index];
    return o;
  });
  return { columns, rows };
}

/** Column kinds whose CSV cells are raw numbers, and the unit their header then names. */
const CSV_UNITS = { duration: "us", percent: "%", bytes: "bytes", count: "", number: "" };

/** One CSV field (RFC 4180 quoting); text that a spreadsheet would run as a formula
 * (= + - @ first; names in traces are untrusted) gets a leading apostrophe. */
export function csvField(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : "";
  let s = String(value);
  if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/**
 * CSV of `rows` under `columns` ({key, label, kind}): numbers raw (µs, %, bytes; the unit
 * in the header: "Host self (us)"), yes/no columns as Yes / No, text in full. CRLF lines.
 */
export function csvText(columns, rows) {
  const header = columns.map((c) => {
    const unit = CSV_UNITS[c.kind];
    return csvField(unit ? `${c.label} (${unit})` : c.label);
  });
  const lines = [header.join(",")];
  for (const row of rows) {
    lines.push(columns.map((c) => {
      const v = row[c.key];
      if (c.kind === "bool") return csvField(v === true ? "Yes" : v === false ? "No" : v);
      if (c.kind in CSV_UNITS && typeof v !== "number") return csvField(v ?? "");
      return csvField(v);
    }).join(","));
  }
  return `${lines.join("\r\n")}\r\n`;
}

/** The rows a table shows across all its pages: filtered by `search`, in its sort. */
export function shownRows(rows, { search = "", searchKeys = [], sort = "", dir = "desc" } = {}) {
  return sortRows(filterRows(rows, search, searchKeys), sort, dir);
}

/**
 * Every node of a tree (nested `children`), depth first, as flat rows for a CSV: each row
 * is the node's fields plus `depth` (0 = root) and `path` (the names from the root, joined
 * by " / "), whether or not the node is expanded on screen.
 */
export function treeRows(roots, depth = 0, prefix = "") {
  const out = [];
  for (const node of roots ?? []) {
    const path = prefix ? `${prefix} / ${node.name}` : String(node.name);
    const { children, ...fields } = node;
    out.push({ ...fields, depth, path });
    out.push(...treeRows(children, depth + 1, path));
  }
  return out;
}
