// Unit tests of the tables' CSV download (frontend/lib/table_model.js csvText, shownRows).
import assert from "node:assert/strict";
import { test } from "node:test";
import { csvField, csvText, shownRows } from "../../frontend/lib/table_model.js";

const COLUMNS = [
  { key: "name", label: "Operator", kind: "text" },
  { key: "calls", label: "Calls", kind: "count" },
  { key: "host", label: "Host self", kind: "duration" },
  { key: "tc", label: "TC eligible", kind: "bool" },
];
const ROWS = [
  { name: "aten::mm", calls: 12, host: 500.5, tc: true, hidden: "x" },
  { name: "aten::add_", calls: 2994, host: 64646, tc: false },
  { name: 'say "hi", then\nbye', calls: 1, host: null, tc: null },
  { name: "=HYPERLINK(\"http://x\")", calls: 3, host: 7, tc: false },
];

test("header names the unit; numbers raw; only the columns given", () => {
  const text = csvText(COLUMNS, ROWS.slice(0, 2));
  assert.equal(text, "Operator,Calls,Host self (us),TC eligible\r\n"
    + "aten::mm,12,500.5,Yes\r\naten::add_,2994,64646,No\r\n");
});

test("quotes, newlines, empty values and formula-looking names", () => {
  const lines = csvText(COLUMNS, ROWS.slice(2)).split("\r\n");
  assert.equal(lines[1], '"say ""hi"", then\nbye",1,,');
  assert.equal(lines[2], `"'=HYPERLINK(""http://x"")",3,7,No`);
  assert.equal(csvField(-5), "-5"); // a negative number stays a number
  assert.equal(csvField("-x"), "'-x");
  assert.equal(csvField(Number.NaN), "");
});

test("shown rows: search over every page, in the table's sort", () => {
  const rows = Array.from({ length: 60 }, (_, i) => ({ name: `op${i}`, calls: i }));
  const shown = shownRows(rows, { search: "op1", searchKeys: ["name"], sort: "calls", dir: "desc" });
  assert.deepEqual(shown.map((r) => r.calls), [19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 1]);
  assert.equal(shownRows(rows).length, 60); // no search: all rows, API order
});

test("tree rows: every node depth first, with its depth and path, children dropped", async () => {
  const { treeRows } = await import("../../frontend/lib/table_model.js");
  const roots = [{ name: "forward", calls: 2, children: [{ name: "attn", calls: 2, children: [{ name: "mm", calls: 4 }] },
    { name: "mlp", calls: 2 }] }, { name: "backward", calls: 1 }];
  assert.deepEqual(treeRows(roots), [
    { name: "forward", calls: 2, depth: 0, path: "forward" },
    { name: "attn", calls: 2, depth: 1, path: "forward / attn" },
    { name: "mm", calls: 4, depth: 2, path: "forward / attn / mm" },
    { name: "mlp", calls: 2, depth: 1, path: "forward / mlp" },
    { name: "backward", calls: 1, depth: 0, path: "backward" },
  ]);
  assert.deepEqual(treeRows(undefined), []);
});
