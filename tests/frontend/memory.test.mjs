// Unit tests of frontend/views/memory.js helpers (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { allocationRows, byteUnit, curveFigure, defaultDevice, num, pageQuery } from "../../frontend/views/memory.js";

const TABLE = {
  columns: [{ type: "string", name: "Operator" }, { type: "number", name: "Size" },
    { type: "number", name: "Allocation Time" }, { type: "number", name: "Release Time" },
    { type: "number", name: "Duration" }],
  rows: [["A", 8, 1, 12, 11], ["B", 2, 2.5, null, null], ["B", 4, 3, 4, 1], ["C<x>", 16, 7, null, null]],
};

test("allocation rows carry an index and say 'never freed' at a glance", () => {
  const rows = allocationRows(TABLE);
  assert.deepEqual(rows.map((r) => [r.idx, r.status]),
    [[0, "freed"], [1, "never freed"], [2, "freed"], [3, "never freed"]]);
});

test("a paged answer's rows keep their ids in allocation order", () => {
  const rows = allocationRows({ ...TABLE, rows: TABLE.rows.slice(2), index: [7, 9] });
  assert.deepEqual(rows.map((r) => [r.idx, r.operator, r.status]), [[7, "B", "freed"], [9, "C<x>", "never freed"]]);
});

test("one table page asks the server for the zoomed window, search, sort and page", () => {
  const st = { search: "", sort: "", dir: "desc", page: 0, pageSize: 25 };
  assert.deepEqual(pageQuery("GPU0", null, null, st), { device: "GPU0", offset: "0", limit: "25" });
  assert.deepEqual(pageQuery("GPU0", 5, 8.5, { ...st, search: "mm", sort: "size", page: 2 }),
    { device: "GPU0", offset: "50", limit: "25", start: "5", end: "8.5", search: "mm", sort: "size", dir: "desc" });
  assert.equal(num("x"), null);
  assert.equal(num("2.5"), 2.5);
  assert.equal(num(null), null);
});

test("curve figure: at most MAX_STEP_MARKS step markers, every k-th step of the window", async () => {
  const { MAX_STEP_MARKS } = await import("../../frontend/views/memory.js");
  const steps = Array.from({ length: 5000 }, (_, i) => [`ProfilerStep#${i}`, 10 * i, 10 * i + 9]);
  const fig = curveFigure({ rows: [[0, 1, 1]], start_us: 0, end_us: 50000, steps });
  const labels = fig.annotations.map((a) => a.text);
  assert.equal(labels.length, 60); // 5,000 steps, every 84th
  assert.ok(labels.length <= MAX_STEP_MARKS && labels[0] === "#0" && labels[1] === "#84");
  assert.equal(fig.shapes.length, labels.length);
});

test("curve figure: hover text, peak marker, steps in the window, marked allocation escaped", () => {
  const curve = { rows: [[1000, 8, 40], [7000, 26, null]], start_us: 0, end_us: 10000,
    peak: { allocated: 26, ts_us: 7000 }, steps: [["ProfilerStep#3", 500, 9000], ["ProfilerStep#4", 20000, 30000]],
    capacity_bytes: 1000 };
  const marked = allocationRows(TABLE)[3];
  const fig = curveFigure(curve, marked);
  assert.deepEqual(fig.data[0].x, [1, 7]);                   // ms
  assert.equal(fig.unit, "B");
  assert.deepEqual(fig.data[0].customdata, [8, 26]);
  assert.deepEqual(byteUnit(6629508096), ["GiB", 2 ** 30]);
  assert.deepEqual(byteUnit(1023), ["B", 1]);
  assert.match(fig.data[0].hovertext[1], /Reserved: –/);
  assert.equal(fig.data[2].name, "Peak");
  assert.ok(fig.annotations.some((a) => a.text === "#3"));
  assert.ok(!fig.annotations.some((a) => a.text === "#4"));   // outside the window
  const mark = fig.annotations.find((a) => /never freed/.test(a.text));
  assert.match(mark.text, /C&lt;x&gt;/);
  assert.equal(fig.shapes.find((s) => s.type === "rect").x1, 10);  // to the window end
});

test("the default device is the GPU with the largest peak, not a CPU of a few bytes", () => {
  const cpu = { device: "CPU", type: 0, id: -1, peak_allocated: 8 };
  const gpus = [{ device: "GPU0", type: 1, id: 0, peak_allocated: 10 },
    { device: "GPU1", type: 1, id: 1, peak_allocated: 6629508096 }];
  assert.equal(defaultDevice([cpu, ...gpus]), "GPU1");
  assert.equal(defaultDevice([cpu]), "CPU");
});
