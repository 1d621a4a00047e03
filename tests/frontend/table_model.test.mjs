// Unit tests of frontend/lib/table_model.js: search, sort, paging of table rows.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  chartTableRows, columnKey, compareValues, filterRows, paginate, sortRows, tableView,
} from "../../frontend/lib/table_model.js";

const ROWS = [
  { name: "aten::conv2d", calls: 10, host: 500 },
  { name: "aten::add_", calls: 2994, host: 64646 },
  { name: "Aten::Zero_", calls: 996, host: null },
  { name: "aten::cudnn_convolution_backward", calls: 318, host: 22973 },
  { name: "aten::mm", calls: 12, host: 500 },
];

test("numbers sort numerically, text case-insensitively", () => {
  assert.deepEqual(sortRows(ROWS, "calls", "asc").map((r) => r.calls), [10, 12, 318, 996, 2994]);
  assert.deepEqual(sortRows(ROWS, "calls", "desc").map((r) => r.calls), [2994, 996, 318, 12, 10]);
  assert.deepEqual(sortRows(ROWS, "name", "asc").map((r) => r.name),
    ["aten::add_", "aten::conv2d", "aten::cudnn_convolution_backward", "aten::mm", "Aten::Zero_"]);
  assert.ok(compareValues(2, 10) < 0); // not "10" < "2"
});

test("sorting is stable and keeps empty values last in both directions", () => {
  assert.deepEqual(sortRows(ROWS, "host", "asc").map((r) => r.name),
    ["aten::conv2d", "aten::mm", "aten::cudnn_convolution_backward", "aten::add_", "Aten::Zero_"]);
  assert.deepEqual(sortRows(ROWS, "host", "desc").map((r) => r.name),
    ["aten::add_", "aten::cudnn_convolution_backward", "aten::conv2d", "aten::mm", "Aten::Zero_"]);
});

test("no sort key keeps the API order and does not mutate", () => {
  const copy = sortRows(ROWS, "", "asc");
  assert.deepEqual(copy, ROWS);
  assert.notEqual(copy, ROWS);
  sortRows(ROWS, "calls", "asc");
  assert.equal(ROWS[0].name, "aten::conv2d");
});

test("search matches every term, case-insensitive, over the given keys", () => {
  assert.deepEqual(filterRows(ROWS, "CONV", ["name"]).map((r) => r.name),
    ["aten::conv2d", "aten::cudnn_convolution_backward"]);
  assert.deepEqual(filterRows(ROWS, "conv backward", ["name"]).map((r) => r.name),
    ["aten::cudnn_convolution_backward"]);
  assert.equal(filterRows(ROWS, "  ", ["name"]).length, ROWS.length);
  assert.equal(filterRows(ROWS, "<img", ["name"]).length, 0);
  assert.equal(filterRows([{ name: "a", shape: "[[32, 3]]" }], "[32", ["name", "shape"]).length, 1);
});

test("paging clamps the page and reports the range", () => {
  assert.deepEqual(paginate(74, 0, 25), { page: 0, pages: 3, start: 0, end: 25 });
  assert.deepEqual(paginate(74, 2, 25), { page: 2, pages: 3, start: 50, end: 74 });
  assert.deepEqual(paginate(74, 9, 25), { page: 2, pages: 3, start: 50, end: 74 });
  assert.deepEqual(paginate(74, -1, 25), { page: 0, pages: 3, start: 0, end: 25 });
  assert.deepEqual(paginate(0, 0, 25), { page: 0, pages: 1, start: 0, end: 0 });
});

test("tableView filters, then sorts, then pages", () => {
  const rows = Array.from({ length: 30 }, (_, i) => ({ name: `op${i}`, v: i }));
  const v = tableView(rows, { search: "op1", searchKeys: ["name"], sort: "v", dir: "desc", page: 1, pageSize: 5 });
  // op1, op10..op19 match: 11 rows; page 2 of 3 in descending v
  assert.equal(v.matched, 11);
  assert.equal(v.total, 30);
  assert.equal(v.pages, 3);
  assert.deepEqual(v.rows.map((r) => r.v), [14, 13, 12, 11, 10]);
});

test("chart-table rows become objects keyed by column, tooltips dropped", () => {
  const t = chartTableRows({
    columns: [{ type: "string", name: "Name" }, { type: "number", name: "Total Duration (us)" },
      { type: "string", role: "tooltip" }],
    rows: [["k<1>", 5, "<b>tip</b>"]],
  });
  assert.deepEqual(t.columns.map((c) => c.key), ["name", "total_duration_us"]);
  assert.deepEqual(t.rows, [{ name: "k<1>", total_duration_us: 5 }]);
  assert.equal(columnKey("Mean Est. Achieved Occupancy (%)"), "mean_est_achieved_occupancy");
});
