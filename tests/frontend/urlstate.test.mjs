// Unit tests of frontend/lib/urlstate.js and the pure parts of api.js, charts.js, views.
import assert from "node:assert/strict";
import { test } from "node:test";
import { buildQuery, choice, parseState, withPatch, withoutViewKeys } from "../../frontend/lib/urlstate.js";
import { endpoint, retryDelay } from "../../frontend/lib/api.js";
import { axisUnit, foldTail, uniqueLabels, wrapForHover } from "../../frontend/lib/charts.js";
import { stepSeries } from "../../frontend/views/overview.js";

test("state round-trips through the query string, known keys first", () => {
  const q = "?view=Kernel&zzz=1&run=a%20b&worker=w%3C0%3E&span=1&sort=calls&dir=asc&search=";
  const s = parseState(q);
  assert.deepEqual(s, { view: "Kernel", zzz: "1", run: "a b", worker: "w<0>", span: "1", sort: "calls", dir: "asc" });
  assert.equal(buildQuery(s), "?run=a+b&worker=w%3C0%3E&span=1&view=Kernel&sort=calls&dir=asc&zzz=1");
  assert.deepEqual(parseState(buildQuery(s)), s);
  assert.equal(buildQuery({}), "");
});

test("patches set and remove keys; view keys drop together", () => {
  const s = withPatch({ run: "a", search: "x" }, { search: "", sort: "calls", span: 5 });
  assert.deepEqual(s, { run: "a", sort: "calls", span: "5" });
  assert.deepEqual(withoutViewKeys({ run: "a", view: "Kernel", kernel_group_by: "Kernel", search: "x", sort: "y", dir: "asc", start: "1" }),
    { run: "a", view: "Kernel", kernel_group_by: "Kernel" });
});

test("endpoint URLs are relative and skip empty parameters", () => {
  assert.equal(endpoint("operation/table", { run: "r", worker: "w", span: undefined, group_by: "Operation" }),
    "operation/table?run=r&worker=w&group_by=Operation");
  assert.equal(endpoint("runs"), "runs");
  assert.ok(!endpoint("x", { run: "/etc" }).startsWith("/"));
});

test("Retry-After is clamped", () => {
  assert.equal(retryDelay("1"), 1);
  assert.equal(retryDelay(null), 0.25); // Number(null) is 0 -> clamped
  assert.equal(retryDelay("abc"), 1);
  assert.equal(retryDelay("3600"), 10);
});

test("pie tail folds into Other", () => {
  const rows = Array.from({ length: 15 }, (_, i) => [`op${i}`, 100 - i]);
  const s = foldTail(rows, 10);
  assert.equal(s.length, 10);
  assert.equal(s[9].name, "Other (6 more)");
  assert.equal(s[9].value, [9, 10, 11, 12, 13, 14].reduce((a, i) => a + 100 - i, 0));
  assert.equal(foldTail(rows.slice(0, 10), 10).length, 10);
  assert.deepEqual(foldTail([["a", 0], ["b", -1], ["c", 2]], 10).map((r) => r.name), ["c"]);
});

test("legend labels are unique and hover text is escaped", () => {
  assert.deepEqual(uniqueLabels(["k<float>(int)", "k<float>(int)", "x"], 60), ["k<float>(int)", "k<float>(int) #2", "x"]);
  assert.equal(wrapForHover("<img src=x onerror=alert(1)>"), "&lt;img src=x onerror=alert(1)&gt;");
  assert.equal(wrapForHover("a".repeat(100), 90).split("<br>").length, 2);
});

test("the step axis unit follows the longest step", () => {
  assert.deepEqual(axisUnit(160000), ["ms", 1000]);
  assert.deepEqual(axisUnit(900), ["µs", 1]);
  assert.deepEqual(axisUnit(2.5e6), ["s", 1e6]);
});

test("step categories come from the tooltips when headers disagree", () => {
  const tip = (c) => `<div>Step 5<br><b>${c}: 1us</b></div>`;
  const table = {
    columns: [{ type: "string", name: "Step" },
      { type: "number", name: "Kernel" }, { type: "string", role: "tooltip" },
      { type: "number", name: "Communication" }, { type: "string", role: "tooltip" },
      { type: "number", name: "Memset" }, { type: "string", role: "tooltip" }],
    rows: [["5", 10, tip("Kernel"), 3, tip("Memset"), 0, tip("Communication")]],
  };
  const s = stepSeries(table);
  assert.deepEqual(s.steps, ["5"]);
  assert.deepEqual(s.categories.map((c) => [c.name, c.values[0]]), [["Kernel", 10], ["Memset", 3], ["Communication", 0]]);
});

test("choice: an option's own name, else the fallback (not toString, constructor, __proto__)", () => {
  const GROUPS = { Operation: "Operator", OperationAndInputShape: "Operator + shape" };
  assert.equal(choice(GROUPS, "OperationAndInputShape", "Operation"), "OperationAndInputShape");
  for (const v of ["toString", "constructor", "__proto__", "hasOwnProperty", "", undefined, null, "nope"]) {
    assert.equal(choice(GROUPS, v, "Operation"), "Operation");
  }
});
