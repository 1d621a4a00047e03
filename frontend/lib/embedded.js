// Answers of a `stepscope report` file (SPEC §4.5): the page carries the server's answers
// as gzip-compressed JSON (written by stepscope/share/report.py), which report_boot.js
// unpacks into window.STEPSCOPE_EMBEDDED before the dashboard starts; api.js asks this
// module instead of the network. Pure functions, unit-tested with node.

import { columnKey, filterRows, sortRows } from "./table_model.js";

const SPAN_KEYS = ["run", "worker", "span"];

/** Query parameters as strings, empty ones dropped (as endpoint() drops them). */
function cleaned(params) {
  const out = {};
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v !== undefined && v !== null && v !== "") out[k] = String(v);
  }
  return out;
}

function sameParams(a, b) {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => b[k] === a[k]);
}

function notFound(error, detail) {
  return { status: 404, body: { error, detail } };
}

/**
 * A windowed answer (memory/curve) cut to [start, end] µs: the rows inside plus the one
 * before (the level at the window's start), start_us/end_us set, window_peak the largest
 * `allocated` among the rows inside and that level (the embedded curve is downsampled: at most 2 points
 * per pixel of the report's width, each bucket's extremes kept).
 */
export function windowAnswer(body, start, end) {
  if (start === null && end === null) return body;
  const s = start ?? 0;
  const e = end ?? body.range?.[1] ?? body.end_us;
  const rows = body.rows ?? [];
  const inside = [];
  let before = null;
  for (const r of rows) {
    if (r[0] < s) before = r;
    else if (r[0] <= e) inside.push(r);
  }
  let peak = null;
  for (const r of inside) if (peak === null || r[1] > peak[1]) peak = r;
  // the level the window opens at counts, at `start` (as on the server)
  if (before && (peak === null || before[1] > peak[1])) peak = [s, before[1]];
  return { ...body, rows: before ? [before, ...inside] : inside, start_us: s, end_us: e,
    window_peak: peak ? { allocated: peak[1], ts_us: peak[0] } : null };
}

/** The query keys of a paged memory/events answer (SPEC §4.7; views/memory.py on the server). */
const PAGE_KEYS = ["start", "end", "search", "sort", "dir", "offset", "limit"];

/**
 * One page of an embedded memory/events answer (every row of the span, or the report's
 * largest ones with their `index`), cut as the server would: allocations live in
 * [start, end] µs, rows holding every `search` term in operator or status, sorted by `sort`
 * (stable, rows without a release last), `offset`/`limit`.
 */
export function eventsPage(body, q) {
  const cols = (body.columns ?? []).map((c) => columnKey(c.name));
  const start = num(q.start);
  const end = num(q.end);
  let rows = (body.rows ?? []).map((r, i) => {
    const o = Object.fromEntries(cols.map((k, j) => [k, r[j]]));
    return { ...o, status: o.release_time === null ? "never freed" : "freed", _row: r, _idx: body.index ? body.index[i] : i };
  });
  rows = rows.filter((r) => (end === null || r.allocation_time <= end)
    && (start === null || r.release_time === null || r.release_time >= start));
  const total = rows.length;
  rows = sortRows(filterRows(rows, q.search, ["operator", "status"]), q.sort, q.dir === "asc" ? "asc" : "desc");
  const offset = Math.max(0, Math.floor(num(q.offset) ?? 0));
  const limit = num(q.limit);
  const page = rows.slice(offset, limit === null ? undefined : offset + limit);
  return { columns: body.columns, rows: page.map((r) => r._row), total, matched: rows.length, offset,
    index: page.map((r) => r._idx) };
}

function num(v) {
  if (v === undefined) return null;
  const x = Number(v);
  return Number.isFinite(x) ? x : null;
}

/**
 * The answer to GET `path` with `params` from the embedded `data`:
 * {status: 200, body} or {status: 404, body: {error, detail}}.
 */
export function embeddedAnswer(data, path, params = {}) {
  const p = cleaned(params);
  if (path === "runs") return { status: 200, body: data.runs };
  if (path === "version") return { status: 200, body: { version: data.version, report: true } };
  if (path === "workers") {
    const w = data.workers?.[p.run];
    return w ? { status: 200, body: w } : notFound(`unknown run ${JSON.stringify(p.run ?? "")}`, "");
  }
  if (path === "spans") {
    const s = data.spans?.[p.run]?.[p.worker];
    return s ? { status: 200, body: s } : notFound(`unknown worker ${JSON.stringify(p.worker ?? "")}`, "");
  }
  const span = data.data?.[p.run]?.[p.worker]?.[p.span];
  if (!span) return notFound("unknown run, worker or span", "This report does not hold that trace.");
  if (path === "views") return { status: 200, body: span.views };
  if (path === "notes") return { status: 200, body: span.notes };
  const defaults = data.routes?.[path];
  const entries = span.answers?.[path];
  if (!defaults || !entries) {
    return notFound(`${path} is not in this report`,
      "A report holds the overview, operator, kernel, memory and module views; open the trace with `stepscope DIR` for the rest.");
  }
  const want = {};
  for (const [k, v] of Object.entries(defaults)) if (v !== null && v !== "") want[k] = v;
  for (const [k, v] of Object.entries(p)) if (!SPAN_KEYS.includes(k)) want[k] = v;
  const paged = path === "memory/events" && PAGE_KEYS.some((k) => k in p) ? { ...want } : null;
  if (paged) for (const k of PAGE_KEYS) delete want[k];
  const windowed = (data.windowed ?? []).includes(path);
  let start = null;
  let end = null;
  if (windowed) {
    start = num(want.start);
    end = num(want.end);
    delete want.start;
    delete want.end;
    delete want.width;
  }
  for (const [q, body] of entries) {
    const have = { ...q };
    if (windowed) delete have.width;
    if (sameParams(have, want)) {
      if (paged) return { status: 200, body: eventsPage(body, paged) };
      return { status: 200, body: windowed ? windowAnswer(body, start, end) : body };
    }
  }
  return notFound(`${path} with these parameters is not in this report`,
    "Open the trace with `stepscope DIR` to see it.");
}
