// Formatting of numbers, durations and names for display. Pure functions, no DOM:
// unit-tested with node (tests/frontend/format.test.mjs).

const NBSP = "\u00a0";

/**
 * `x` with `sig` significant digits (at least the integer part): 148.736 -> "148.7",
 * 27 -> "27.00" (kept, so a column of values reads evenly), 12345.6 -> "12346".
 */
function sigDigits(x, sig, trim = false) {
  if (x === 0) return "0";
  const digits = Math.max(0, sig - 1 - Math.floor(Math.log10(Math.abs(x))));
  const s = x.toFixed(Math.min(digits, 6));
  return trim ? String(Number(s)) : s;
}

/**
 * A duration given in microseconds, in µs, ms or s with four significant digits.
 * 69 -> "69 µs", 0.25 -> "0.25 µs", 148736 -> "148.7 ms", 2500000 -> "2.500 s"; null/NaN -> "–".
 */
export function formatDuration(us) {
  if (us === null || us === undefined || us === "" || !Number.isFinite(Number(us))) return "–";
  const v = Number(us);
  const a = Math.abs(v);
  if (a < 1000) return `${Number.isInteger(v) ? v : sigDigits(v, 4, true)}${NBSP}µs`;
  if (a < 1e6) return `${sigDigits(v / 1e3, 4)}${NBSP}ms`;
  return `${sigDigits(v / 1e6, 4)}${NBSP}s`;
}

/** A percentage given as 0-100: 67.8234 -> "67.82%", 21 -> "21.00%" (`digits` decimals). */
export function formatPercent(p, digits = 2) {
  if (p === null || p === undefined || p === "" || !Number.isFinite(Number(p))) return "–";
  return `${Number(p).toFixed(digits)}%`;
}

/** An integer count with thousands separators: 2994 -> "2,994". */
export function formatCount(n) {
  if (n === null || n === undefined || n === "" || !Number.isFinite(Number(n))) return "–";
  const v = Number(n);
  const [int, frac] = String(Number.isInteger(v) ? v : Number(v.toFixed(2))).split(".");
  const sign = int.startsWith("-") ? "-" : "";
  const grouped = int.replace("-", "").replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return sign + grouped + (frac ? `.${frac}` : "");
}

/** Bytes in binary units: 17179869184 -> "16 GiB". */
export function formatBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(Number(n))) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? v : sigDigits(v, 3, true)}${NBSP}${units[i]}`;
}

/** A value with a unit as the API gives it ({value, unit}): "%" -> percent, "us" -> duration. */
export function formatValue(value, unit) {
  if (unit === "%") return formatPercent(value);
  if (unit === "us" || unit === "µs") return formatDuration(value);
  if (unit === "bytes" || unit === "B") return formatBytes(value);
  const text = typeof value === "number" ? formatCount(value) : String(value ?? "–");
  return unit ? `${text}${NBSP}${unit}` : text;
}

/**
 * Escape text for plotly labels and hover text: plotly renders a few HTML-like tags (<b>,
 * <br>, <a>...) in strings, so trace names such as `at::Array<char*, 3>` must arrive as
 * entities (plotly decodes &lt; &gt; &amp; and numeric ones such as &#34; back for display).
 */
export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&#34;") // (plotly decodes numeric entities, not &quot;)
    .replace(/'/g, "&#39;");
}

/**
 * A long C++ kernel or operator name made readable, each step only while it is still
 * longer than `max`: drop a leading "void "; the trailing parameter list becomes "(…)";
 * nested template arguments become "<…>"; then (with `outer`, for legends) the outermost
 * ones too; last, the middle is cut. Pair the result with the full name on hover.
 * "void at::native::kernel<float>(int, float*)" -> "at::native::kernel<float>(…)".
 */
export function shortenName(name, max = 60, { outer = true } = {}) {
  let s = String(name ?? "");
  if (s.length <= max) return s;
  s = s.replace(/^void\s+/, "");
  if (s.endsWith(")")) {
    let depth = 0;
    for (let i = s.length - 1; i >= 0; i -= 1) {
      const c = s[i];
      if (c === ")") depth += 1;
      else if (c === "(") {
        depth -= 1;
        if (depth === 0) {
          if (i > 0 && i < s.length - 2) s = `${s.slice(0, i)}(…)`;
          break;
        }
      }
    }
  }
  if (s.length > max) s = collapseTemplates(s, 2);
  if (s.length > max && outer) s = collapseTemplates(s, 1);
  if (s.length <= max) return s;
  const head = Math.ceil((max - 1) * 0.7);
  const tail = max - 1 - head;
  return `${s.slice(0, head)}…${tail > 0 ? s.slice(s.length - tail) : ""}`;
}

/**
 * Template argument lists at nesting depth >= `depth` replaced by "<…>":
 * "f<a<b>, c>::g<d>" -> "f<…>::g<…>" (depth 1), "f<a<…>, c>::g<d>" (depth 2).
 * Unbalanced names (operator<, ->) come back unchanged.
 */
export function collapseTemplates(name, depth = 1) {
  let out = "";
  let level = 0;
  for (const c of name) {
    if (c === "<") {
      level += 1;
      if (level === depth) out += "<…";
      else if (level < depth) out += c;
    } else if (c === ">" && level > 0) {
      if (level <= depth) out += ">";
      level -= 1;
    } else if (level < depth) out += c;
  }
  return level === 0 ? out : name;
}

/**
 * "kineto_resnet50/resnet50_num_workers_0" -> "kineto_resne…_num_workers_0" (at most `max`
 * characters): the ellipsis in the middle keeps the end, where names that share a prefix
 * differ (`_0` vs `_4`, `rank-3` vs `rank-4`).
 */
export function middleEllipsis(name, max = 32) {
  const s = String(name ?? "");
  if (s.length <= max) return s;
  const tail = Math.floor((max - 1) / 2);
  return `${s.slice(0, max - 1 - tail)}…${s.slice(s.length - tail)}`;
}

/** Epoch time of a span id, in ms, when it looks like one (10/13/16/19 digits = s/ms/µs/ns
 * since 1970, years 2000-2099; tensorboard_trace_handler writes ms or ns); else null. */
export function spanTime(span) {
  const s = String(span);
  const scale = { 10: 1e-3, 13: 1, 16: 1e3, 19: 1e6 }[s.length];
  if (!scale || !/^\d+$/.test(s)) return null;
  // the top digits only: 19-digit ids exceed Number's exact range (ms precision is enough)
  const ms = Number(s.slice(0, s.length - Math.round(Math.log10(scale)))) || 0;
  const year = new Date(ms).getUTCFullYear();
  return year >= 2000 && year < 2100 ? ms : null;
}

/**
 * A span id as the dashboard shows it: a time-stamp id becomes its capture time,
 * "1623143089861" -> "2021-06-08 09:04:49 UTC" (the raw id goes in a tooltip, see
 * spanTitle); other ids ("1102", "default") are shown as they are.
 */
export function spanLabel(span) {
  const ms = spanTime(span);
  if (ms === null) return String(span);
  return `${new Date(ms).toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** Labels of a worker's spans: capture times, with milliseconds where two fall in one second. */
export function spanLabels(spans) {
  const labels = spans.map(spanLabel);
  return labels.map((l, i) => {
    if (labels.indexOf(l) === labels.lastIndexOf(l) || spanTime(spans[i]) === null) return l;
    return `${new Date(spanTime(spans[i])).toISOString().slice(0, 23).replace("T", " ")} UTC`;
  });
}

/** Hover text of a span: "span 1623143089861 (captured 2021-06-08 09:04:49 UTC)"; `label`:
 *  the shown label when it differs from spanLabel (spanLabels adds milliseconds). */
export function spanTitle(span, label = spanLabel(span)) {
  return spanTime(span) === null ? `span ${span}` : `span ${span} (captured ${label})`;
}
