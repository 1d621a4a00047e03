// Client of the Stepscope JSON API (SPEC §3). Every URL is relative to the page, so the
// same code works standalone, inside TensorBoard's iframe and behind --path_prefix.
// View endpoints answer 202 + Retry-After while the trace is analysed: getJSON polls them
// and reports progress; 4xx/5xx answers become ApiError with the server's error body.
// In a `stepscope report` file (window.STEPSCOPE_EMBEDDED set) answers come from the page.
import { embeddedAnswer } from "./embedded.js";

/** An error answer, carrying the body {error, detail, file?, position?}. */
export class ApiError extends Error {
  constructor(status, body, url) {
    super(body?.error || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.body = body ?? {};
    this.url = url;
  }
}

/** The server could not be reached (fetch itself failed: server down, network gone). */
export class NetworkError extends Error {
  constructor(url, cause) {
    super(`could not reach the server for ${url}`);
    this.name = "NetworkError";
    this.cause = cause;
  }
}

/** "operation/table", {run: "a", group_by: "Operation"} -> "operation/table?run=a&group_by=...". */
export function endpoint(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** Seconds to wait from a Retry-After header (delta seconds), clamped to 0.25-10 s. */
export function retryDelay(header) {
  const s = Number(header);
  return Number.isFinite(s) ? Math.min(10, Math.max(0.25, s)) : 1;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason ?? new DOMException("aborted", "AbortError"));
    }, { once: true });
  });
}

/** The answer's JSON value (`null` is a value: distributed/straggler answers it), or
 * undefined when the body is not JSON. */
async function readBody(resp) {
  const text = await resp.text();
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * GET `path` with `params` as JSON. While the server answers 202, calls
 * onProgress({phase, fraction, elapsed_s}) and retries after Retry-After.
 * Throws ApiError for error answers, NetworkError when the server cannot be reached.
 */
export async function getJSON(path, params = {}, { signal, onProgress } = {}) {
  const url = endpoint(path, params);
  if (globalThis.STEPSCOPE_EMBEDDED) {
    const { status, body } = embeddedAnswer(globalThis.STEPSCOPE_EMBEDDED, path, params);
    if (status !== 200) throw new ApiError(status, body, url);
    return body;
  }
  for (;;) {
    let resp;
    try {
      resp = await fetch(url, { signal, headers: { Accept: "application/json" } });
    } catch (err) {
      if (isAbort(err)) throw err;
      throw new NetworkError(url, err);
    }
    const body = await readBody(resp);
    if (resp.status === 202) {
      onProgress?.(body ?? {});
      await sleep(retryDelay(resp.headers.get("Retry-After")) * 1000, signal);
      continue;
    }
    if (!resp.ok) throw new ApiError(resp.status, body, url);
    if (body === undefined) throw new ApiError(resp.status, { error: "the server sent a reply that is not JSON" }, url);
    return body;
  }
}

/**
 * The API of one trace span. `get(path, params)` adds run/worker/span and memoises answers
 * (switching views does not refetch). `onProgress(key, body|null)` hears every 202 body
 * and null when that request is done. `close()` stops polling when the user moves to
 * another span (the server analyses the most recently requested trace first).
 */
export function spanClient({ run, worker, span }, { onProgress } = {}) {
  const cache = new Map();
  const controller = new AbortController();
  return {
    run, worker, span,
    signal: controller.signal,
    get(path, params = {}) {
      const key = endpoint(path, params);
      if (!cache.has(key)) {
        const p = getJSON(path, { run, worker, span, ...params }, {
          signal: controller.signal,
          onProgress: (body) => onProgress?.(key, body),
        });
        cache.set(key, p);
        p.catch(() => cache.delete(key)).finally(() => onProgress?.(key, null));
      }
      return cache.get(key);
    },
    url(path, params = {}) {
      return endpoint(path, { run, worker, span, ...params });
    },
    close() {
      controller.abort();
    },
  };
}

/** An error in plain words: {title, detail, file, where} (all plain text). */
export function describeError(err) {
  if (err instanceof ApiError) {
    const b = err.body;
    const where = b.position ? [b.position.byte != null ? `byte ${Number(b.position.byte).toLocaleString("en-US")}` : null,
      b.position.line != null ? `line ${b.position.line}` : null].filter(Boolean).join(", ") : "";
    let title = b.error || `The server answered ${err.status}`;
    if (err.status === 422) title = `This trace file cannot be shown: ${b.error || "nothing usable in it"}`;
    else if (err.status === 404 && !b.error) title = "Not found";
    else if (err.status >= 500) title = `The server hit an internal error: ${b.error || err.status}`;
    return { title, detail: b.detail || "", file: b.file || "", where, status: err.status };
  }
  if (err instanceof NetworkError) {
    return { title: "The server could not be reached",
      detail: "Check that stepscope (or TensorBoard) is still running, then reload the page.",
      file: "", where: "" };
  }
  return { title: String(err?.message || err), detail: "", file: "", where: "" };
}

/** True for the error an aborted fetch or sleep raises (a superseded request). */
export function isAbort(err) {
  return err?.name === "AbortError";
}
