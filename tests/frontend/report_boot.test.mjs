// Unit tests of frontend/report_boot.js: the classic script that unpacks a `stepscope
// report` file's gzip+base64 blocks (loaded here as the page would run it, without a page).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";
import { gzipSync } from "node:zlib";

const SOURCE = readFileSync(new URL("../../frontend/report_boot.js", import.meta.url), "utf8");
const GLOBALS = { atob, Blob, Response, DecompressionStream, TextDecoder, Uint8Array, Error,
  JSON, Promise };
const Boot = vm.runInNewContext(`${SOURCE}\nStepscopeBoot`, { ...GLOBALS });

const b64 = (text) => gzipSync(Buffer.from(text, "utf8")).toString("base64");

/** A stand-in for the page: elements by id, a head that runs appended scripts, #view. */
function fakeDoc(blocks, { nonce = "n0nce" } = {}) {
  const nodes = {};
  const make = (tag) => ({ tag, children: [], attrs: {}, textContent: "",
    setAttribute(k, v) { this.attrs[k] = v; }, append(...c) { this.children.push(...c); },
    replaceChildren(...c) { this.children = c; } });
  for (const [name, text] of Object.entries(blocks)) nodes[`stepscope-${name}`] = { textContent: text };
  nodes.view = make("main");
  const ran = [];
  const doc = { readyState: "complete", currentScript: { nonce }, ran, nodes,
    getElementById: (id) => nodes[id] ?? null, createElement: make, body: make("body"),
    head: { appendChild: (s) => ran.push({ type: s.type, nonce: s.nonce, code: s.textContent }) } };
  return doc;
}

test("bytesOf decodes base64 (whitespace around it ignored)", () => {
  assert.deepEqual([...Boot.bytesOf(" AAEC/w==\n")], [0, 1, 2, 255]);
});

test("gunzipText gives back the UTF-8 text, markup and all", async () => {
  const text = JSON.stringify({ name: "</script><img src=x onerror=alert(1)> µs é" });
  assert.equal(await Boot.gunzipText(b64(text), DecompressionStream), text);
});

test("gunzipText without DecompressionStream says which browsers work", async () => {
  await assert.rejects(Boot.gunzipText(b64("x"), undefined),
    (err) => err.message === Boot.NEEDS && /Firefox 113\+/.test(err.message));
});

test("start: data to window, plotly then the import map run with the nonce, then main.js", async () => {
  const doc = fakeDoc({ data: b64('{"version":"1"}'), plotly: b64("PLOTLY"), imports: b64('{"imports":{}}') });
  const win = { DecompressionStream };
  doc.head.appendChild = (s) => {
    doc.ran.push({ type: s.type, nonce: s.nonce, code: s.textContent });
    if (s.textContent === "PLOTLY") win.Plotly = {};
  };
  const imported = [];
  assert.equal(await Boot.start(doc, win, { importMain: async (spec) => imported.push(spec) }), true);
  assert.deepEqual(win.STEPSCOPE_EMBEDDED, { version: "1" });
  assert.deepEqual(doc.ran.map((s) => [s.type ?? "", s.nonce, s.code]),
    [["", "n0nce", "PLOTLY"], ["importmap", "n0nce", '{"imports":{}}']]);
  assert.deepEqual(imported, ["stepscope/main.js"]);
});

test("start: a missing block or an old browser shows a message, main.js never loads", async () => {
  const all = { data: b64("{}"), plotly: b64("P"), imports: b64("{}") };
  for (const [blocks, win, want] of [
    [{ data: all.data, plotly: all.plotly }, { DecompressionStream }, "has no imports block"],
    [all, {}, "needs a newer browser"],
    [{ ...all, data: "not base64!" }, { DecompressionStream }, ""],
    [all, { DecompressionStream }, "plotly.js did not start"],      // P defines no Plotly
  ]) {
    const doc = fakeDoc(blocks);
    const importMain = () => assert.fail("main.js imported");
    assert.equal(await Boot.start(doc, win, { importMain }), false);
    const [panel] = doc.nodes.view.children;
    assert.equal(panel.className, "error-panel");
    assert.equal(panel.children[0].textContent, "This report cannot be shown");
    assert.ok(panel.children[1].textContent.includes(want), panel.children[1].textContent);
    assert.ok(doc.ran.every((s) => s.type !== "importmap"));
  }
});

test("start: main.js failing to load (no import maps) shows a message", async () => {
  const doc = fakeDoc({ data: b64("{}"), plotly: b64("P"), imports: b64("{}") });
  const win = { DecompressionStream };
  doc.head.appendChild = (s) => { if (s.textContent === "P") win.Plotly = {}; };
  const importMain = async () => { throw new TypeError('Failed to resolve module specifier "stepscope/main.js"'); };
  assert.equal(await Boot.start(doc, win, { importMain }), false);
  const text = doc.nodes.view.children[0].children[1].textContent;
  assert.ok(text.startsWith("The dashboard did not start (Failed to resolve") && text.includes("Firefox 113+"), text);
});
