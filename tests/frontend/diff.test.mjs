// Unit tests of frontend/views/diff.js helpers (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { KERNEL_FIELDS, deltaClass, deltaText, flatRows, nextRun, otherSpan, sideText, signedDuration } from "../../frontend/views/diff.js";
import { buildQuery, parseState, withoutViewKeys } from "../../frontend/lib/urlstate.js";

test("default experiment: the next run (wrapping), else a neighbouring span", () => {
  assert.equal(nextRun(["a", "b", "c"], "b"), "c");
  assert.equal(nextRun(["a", "b", "c"], "c"), "a");
  assert.equal(nextRun(["a", "b"], "x"), "a");
  assert.equal(nextRun(["a"], "a"), null);
  assert.equal(otherSpan(["1", "2", "3"], "3"), "2");
  assert.equal(otherSpan(["1", "2", "3"], "1"), "2");
  assert.equal(otherSpan(["1"], "1"), null);
});

test("rows flatten per side and delta; a null (CPU-only side) stays null, not 0", () => {
  const rows = [{ name: "k", baseline: { calls: null, total_us: null, mean_us: null },
    experiment: { calls: 2, total_us: 80, mean_us: 40 }, delta: { calls: null, total_us: null, mean_us: null } }];
  assert.deepEqual(flatRows(rows, KERNEL_FIELDS)[0], { name: "k", kind: "",
    b_calls: null, e_calls: 2, d_calls: null, b_total_us: null, e_total_us: 80, d_total_us: null,
    b_mean_us: null, e_mean_us: 40, d_mean_us: null });
  assert.equal(deltaClass(5), "delta-up");
  assert.equal(deltaClass(-5), "delta-down");
  assert.equal(deltaClass(0), "");
  assert.equal(deltaClass(null), "");
  assert.equal(signedDuration(1500), "+1.500\u00a0ms");
  assert.equal(signedDuration(-69), "-69\u00a0µs");
  assert.equal(signedDuration(null), "");
  assert.equal(sideText("duration")(null), "");   // blank, not "0 µs" nor "–"
  assert.equal(sideText("duration")(0), "0\u00a0µs");
  assert.equal(deltaText("count")(412), "+412");
  assert.equal(deltaText("count")(-1234), "-1,234");
  assert.equal(deltaText("duration")(38000), "+38.00\u00a0ms");
  assert.equal(deltaText("duration")(null), "");
});

test("the experiment lives in the URL and survives a change of view", () => {
  const q = buildQuery({ view: "Diff", run: "a", worker: "w", span: "1", diff_span: "2", diff_worker: "w", diff_run: "b" });
  assert.equal(q, "?run=a&worker=w&span=1&view=Diff&diff_run=b&diff_worker=w&diff_span=2");
  const kept = withoutViewKeys({ ...parseState(q), kdiff_sort: "d_total_us", search: "mm" });
  assert.deepEqual(kept, { run: "a", worker: "w", span: "1", view: "Diff", diff_run: "b", diff_worker: "w", diff_span: "2" });
});
