// Unit tests of frontend/lib/embedded.js: a `stepscope report` file's answers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { embeddedAnswer, eventsPage, windowAnswer } from "../../frontend/lib/embedded.js";

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
  // nothing inside: the level the window opens at is its peak, at its start (as the server)
  assert.deepEqual(windowAnswer(CURVE, 11, 14).window_peak, { allocated: 50, ts_us: 11 });
  assert.deepEqual(windowAnswer(CURVE, -5, -1).window_peak, null);
  assert.equal(embeddedAnswer(DATA, "memory/curve", { ...SPAN, device: "CPU" }).status, 404);
});

test("a report answers the allocation table's pages as the server would (window, search, sort, page)", () => {
  const body = {
    columns: [{ type: "string", name: "Operator" }, { type: "number", name: "Size" },
      { type: "number", name: "Allocation Time" }, { type: "number", name: "Release Time" },
      { type: "number", name: "Duration" }],
    rows: [["A", 8, 1, 12, 11], ["B", 2, 2.5, null, null], ["B", 4, 3, 4, 1], ["C", 16, 7, null, null]],
  };
  // the same cases as tests/test_memory.py::test_allocations_page_window_search_and_sort
  assert.deepEqual(eventsPage(body, { start: "3.5", end: "5" }).index, [0, 1, 2]);
  assert.deepEqual(eventsPage(body, { start: "4.5" }).index, [0, 1, 3]);
  assert.deepEqual(eventsPage(body, { search: "b NEVER" }).index, [1]);
  assert.deepEqual(eventsPage(body, { sort: "size" }).index, [3, 0, 2, 1]);
  assert.deepEqual(eventsPage(body, { sort: "release_time", dir: "asc" }).index, [2, 0, 1, 3]);
  const p = eventsPage(body, { sort: "size", offset: "1", limit: "2" });
  assert.deepEqual([p.index, p.matched, p.total, p.offset], [[0, 2], 4, 4, 1]);
  assert.deepEqual(p.rows, [["A", 8, 1, 12, 11], ["B", 4, 3, 4, 1]]);
  // a report keeps the largest rows with their ids in the span's allocation order
  const cut = { ...body, rows: [body.rows[0], body.rows[3]], index: [0, 3] };
  assert.deepEqual(eventsPage(cut, { offset: "0", limit: "25" }).index, [0, 3]);
});
