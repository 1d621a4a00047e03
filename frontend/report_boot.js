// The start of a `stepscope report` file (SPEC §4.5), inlined by stepscope/share/bundle.py.
// The report carries three blocks as base64 of gzip bytes (script elements of type
// application/gzip with ids stepscope-data, -plotly, -imports: data blocks, never run):
// the embedded answers (JSON), plotly.js and the import map of the dashboard's modules.
// This script unpacks them with the browser's own DecompressionStream (nothing is fetched),
// runs plotly.js and installs the import map as inline scripts carrying this script's
// nonce (the page's Content-Security-Policy runs nothing else), sets
// window.STEPSCOPE_EMBEDDED, then imports main.js (whose imports inherit the nonce).
// A classic script, not a module: the import map must be in place before any module loads.
// Not part of the import map (bundle.py leaves it out); unit-tested with node.
"use strict";

const StepscopeBoot = (() => {
  const BROWSERS = "Chrome or Edge 89+, Firefox 113+, Safari 16.4+";
  const NEEDS = "This report needs a newer browser: it unpacks its data with "
    + `DecompressionStream and runs ES modules with an import map (${BROWSERS}).`;

  /** The bytes of base64 text (ASCII whitespace ignored, as atob does). */
  function bytesOf(base64) {
    const bin = atob(base64.trim());
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  /** The UTF-8 text held gzip-compressed in base64 `text` (`Decompression`: the
   * browser's DecompressionStream class). */
  async function gunzipText(text, Decompression) {
    if (typeof Decompression !== "function") throw new Error(NEEDS);
    const stream = new Blob([bytesOf(text)]).stream().pipeThrough(new Decompression("gzip"));
    return new Response(stream).text();
  }

  /** The unpacked text of the block `stepscope-<name>` of `doc`. */
  async function block(doc, name, Decompression) {
    const node = doc.getElementById(`stepscope-${name}`);
    if (!node) throw new Error(`This report is damaged: it has no ${name} block.`);
    return gunzipText(node.textContent, Decompression);
  }

  /** Run `code` as an inline script of `type` (allowed by its hash in the page's CSP). */
  function inline(doc, code, type, nonce) {
    const s = doc.createElement("script");
    s.nonce = nonce;
    if (type) s.type = type;
    s.textContent = code;
    doc.head.appendChild(s);
  }

  /** The message shown in the page's main area when the report cannot start. */
  function fail(doc, message) {
    const panel = doc.createElement("div");
    panel.className = "error-panel";
    panel.setAttribute("role", "alert");
    const title = doc.createElement("div");
    title.className = "error-title";
    title.textContent = "This report cannot be shown";
    const detail = doc.createElement("div");
    detail.className = "error-detail";
    detail.textContent = message;
    panel.append(title, detail);
    const main = doc.getElementById("view") ?? doc.body;
    main.replaceChildren(panel);
  }

  /**
   * Unpack the blocks of `doc`, then start the dashboard (main.js); on failure, a message
   * in the page. true when main.js was imported. `importMain`: for tests.
   */
  async function start(doc, win, { importMain = (spec) => import(spec) } = {}) {
    const ready = doc.readyState === "loading"
      ? new Promise((resolve) => doc.addEventListener("DOMContentLoaded", resolve, { once: true }))
      : Promise.resolve();
    const nonce = doc.currentScript?.nonce ?? "";
    try {
      const [data, plotly, imports] = await Promise.all(
        ["data", "plotly", "imports"].map((name) => block(doc, name, win.DecompressionStream)));
      win.STEPSCOPE_EMBEDDED = JSON.parse(data);
      inline(doc, plotly, "", nonce);
      if (!win.Plotly) throw new Error("plotly.js did not start (see the browser console).");
      inline(doc, imports, "importmap", nonce);
      await ready;
    } catch (err) {
      await ready;
      fail(doc, err.message);
      return false;
    }
    try {
      await importMain("stepscope/main.js");
    } catch (err) {      // e.g. a browser without import maps: the bare name is unknown
      fail(doc, `The dashboard did not start (${err.message}). It needs ${BROWSERS}.`);
      return false;
    }
    return true;
  }

  return { NEEDS, bytesOf, gunzipText, start };
})();

if (typeof document !== "undefined" && document.getElementById("stepscope-data")) {
  StepscopeBoot.start(document, window);
}
