// Unit tests of frontend/lib/embedded.js: a `stepscope report` file's answers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { embeddedAnswer, windowAnswer } from "../../frontend/lib/embedded.js";

const CURVE = { device: "GPU0", rows: [[0, 10, 20], [5, 30, 40], [10, 50, 60], [15, 5, 60]],
  start_us: 0, end_us: 20, range: [0, 20], window_peak: { allocated: 50, ts_us: 10 } };
const DATA = {
  version: "0", runs: { runs: ["r"], loading: false, status: {} },
  workers: { r: ["w"] }, spans: { r: { w: ["1"] } },
  routes: { "operation/table": { group_by: "Operation" }, "memory/curve": { device: null, start: null, end: null, width: null } },
  windowed: ["memory/curve"],
  data: { r: { w: { 1: { views: ["Overview", "Operator"], notes: [],
    answers: {
      "operation/table": [[{ group_by: "Operation" }, [{ name: "a" }]],
        [{ group_by: "OperationAndInputShape" }, [{ name: "b" }]]],
      "memory/curve": [[{ device: "GPU0", width: "2000" }, CURVE]],
    } } } } },
};
const SPAN = { run: "r", worker: "w", span: "1" };

test("runs, workers, spans, views answer from the data", () => {
  assert.deepEqual(embeddedAnswer(DATA, "runs").body.runs, ["r"]);
  assert.deepEqual(embeddedAnswer(DATA, "workers", { run: "r" }).body, ["w"]);
  assert.deepEqual(embeddedAnswer(DATA, "spans", { run: "r", worker: "w" }).body, ["1"]);
  assert.deepEqual(embeddedAnswer(DATA, "views", SPAN).body, ["Overview", "Operator"]);
  assert.equal(embeddedAnswer(DATA, "workers", { run: "x" }).status, 404);
});

test("a route's answer matches its parameters, defaults filled, empties dropped", () => {
  assert.deepEqual(embeddedAnswer(DATA, "operation/table", SPAN).body, [{ name: "a" }]);
  assert.deepEqual(embeddedAnswer(DATA, "operation/table", { ...SPAN, group_by: "OperationAndInputShape", x: "" }).body, [{ name: "b" }]);
  const miss = embeddedAnswer(DATA, "operation/table", { ...SPAN, group_by: "Nope" });
  assert.equal(miss.status, 404);
  assert.match(miss.body.error, /not in this report/);
  assert.equal(embeddedAnswer(DATA, "trace/timeline", SPAN).status, 404);
  assert.equal(embeddedAnswer(DATA, "overview", { ...SPAN, span: "2" }).status, 404);
});

test("the memory curve: any width; a window is cut out of the embedded whole span", () => {
  const whole = embeddedAnswer(DATA, "memory/curve", { ...SPAN, device: "GPU0", width: "731" });
  assert.equal(whole.body, CURVE);
  const win = embeddedAnswer(DATA, "memory/curve", { ...SPAN, device: "GPU0", width: "500", start: "4", end: "12" }).body;
  assert.deepEqual(win.rows, [[0, 10, 20], [5, 30, 40], [10, 50, 60]]); // the level before, then inside
  assert.deepEqual([win.start_us, win.end_us], [4, 12]);
  assert.deepEqual(win.window_peak, { allocated: 50, ts_us: 10 });
  assert.deepEqual(windowAnswer(CURVE, 11, 14).window_peak, null);
  assert.equal(embeddedAnswer(DATA, "memory/curve", { ...SPAN, device: "CPU" }).status, 404);
});
