// Unit tests of frontend/lib/tbhost.js: TensorBoard's hash format and host detection, on
// stand-in window objects (the real round trip is tests/test_tensorboard_browser.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { buildHash, parseHash, tensorboardHost, tensorboardTop } from "../../frontend/lib/tbhost.js";

test("TensorBoard's hash: the tab, then percent-encoded keys and values", () => {
  assert.deepEqual(parseHash("#stepscope&run=a%20b&view=Kernel&span=&x"), { tab: "x", state: { run: "a b", view: "Kernel" } });
  assert.deepEqual(parseHash(""), { tab: "", state: {} });
  assert.deepEqual(parseHash("#scalars"), { tab: "scalars", state: {} });
  assert.deepEqual(parseHash("#stepscope&run=%E0%A4%A&view=Trace"), { tab: "stepscope", state: { view: "Trace" } });
  const state = { view: "Kernel", zzz: "1", run: "a b+c&d=é", worker: "w<0>", span: "17" };
  const hash = buildHash("stepscope", state);
  assert.equal(hash, "#stepscope&run=a%20b%2Bc%26d%3D%C3%A9&worker=w%3C0%3E&span=17&view=Kernel&zzz=1");
  assert.deepEqual(parseHash(hash), { tab: "stepscope", state });
  assert.equal(buildHash("stepscope", {}), "#stepscope");
});

/** Stand-in windows: TensorBoard's page > plugin_entry.html > our index.html. */
function frames({ entry = "/tb/data/plugin_entry.html", name = "stepscope", hash = "", origin = "http://h:6006" } = {}) {
  const writes = [];
  const listeners = [];
  const top = {
    location: { origin: "http://h:6006", pathname: "/tb/", search: "?darkMode=true", hash },
    history: {
      state: { tb: 1 },
      replaceState(s, _t, url) {
        writes.push([s, url]);
        top.location.hash = url.slice(url.indexOf("#"));
      },
    },
    addEventListener: (type, fn) => listeners.push([type, fn]),
  };
  top.parent = top;
  const parent = { parent: top, location: { origin: "http://h:6006", pathname: entry, search: `?name=${name}` } };
  const win = { parent, location: { origin, pathname: "/tb/data/plugin/stepscope/index.html", search: "" } };
  return { win, top, writes, listeners };
}

test("detected only inside TensorBoard's plugin_entry iframe for stepscope, same origin", () => {
  const { win, top } = frames();
  assert.equal(tensorboardTop(win), top);
  assert.equal(tensorboardTop(frames({ name: "scalars" }).win), null);
  assert.equal(tensorboardTop(frames({ entry: "/other.html" }).win), null);
  assert.equal(tensorboardTop(frames({ origin: "http://evil" }).win), null);
  const alone = { location: {} };
  alone.parent = alone;
  assert.equal(tensorboardTop(alone), null);
  const crossOrigin = { parent: { get location() { throw new Error("SecurityError"); } } };
  assert.equal(tensorboardTop(crossOrigin), null);
});

test("the host reads, writes and links TensorBoard's URL, never another tab's hash", () => {
  const { win, top, writes, listeners } = frames({ hash: "#stepscope&run=r1&view=Memory" });
  const host = tensorboardHost(win);
  assert.deepEqual(host.read(), { run: "r1", view: "Memory" });
  host.write({ run: "r 2", span: "5", view: "Trace" });
  assert.deepEqual(writes, [[{ tb: 1 }, "/tb/?darkMode=true#stepscope&run=r%202&span=5&view=Trace"]]);
  host.write({ run: "r 2", span: "5", view: "Trace" }); // unchanged: no write
  assert.equal(writes.length, 1);
  assert.equal(host.linkFor({ run: "r", view: "Kernel" }), "http://h:6006/tb/?darkMode=true#stepscope&run=r&view=Kernel");
  const seen = [];
  host.onChange((s) => seen.push(s));
  const [[type, fire]] = listeners;
  assert.equal(type, "hashchange");
  top.location.hash = "#scalars&run=x";
  assert.equal(host.read(), null);
  host.write({ run: "r3" }); // the user is on another TensorBoard tab: leave its hash alone
  assert.equal(writes.length, 1);
  fire();
  top.location.hash = "#stepscope&run=x";
  fire();
  assert.deepEqual(seen, [{ run: "x" }]);
  top.location.hash = "";
  assert.equal(host.read(), null);
  host.write({ run: "r3" }); // no tab yet: ours is the one showing
  assert.equal(top.location.hash, "#stepscope&run=r3");
  assert.equal(tensorboardHost(frames({ name: "other" }).win), null);
});
