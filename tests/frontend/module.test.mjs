// Unit tests of frontend/lib/flame.js and frontend/views/module.js helpers (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ancestors, layout, matchedTotal, matches } from "../../frontend/lib/flame.js";
import { AVERAGE, linkTo, phaseEntry, phaseSeries } from "../../frontend/views/module.js";

// thread t > a (total 14) > b (3); a second thread u > c (6)
const flame = { labels: ["t", "a", "b", "u", "c"], name: [0, 3, 1, 4, 2], parent: [-1, -1, 0, 1, 2],
  self: [0, 0, 11, 6, 3], total: [14, 6, 14, 6, 3], total_us: 20 };

test("layout: roots side by side, children from their parent's left edge, depths", () => {
  const lay = layout(flame);
  assert.deepEqual([...lay.x], [0, 14, 0, 14, 0]);
  assert.deepEqual([...lay.depth], [0, 0, 1, 1, 2]);
  assert.equal(lay.maxDepth, 2);
  assert.equal(lay.width, 20);
  assert.deepEqual(ancestors(flame, 4), [0, 2]);
});

test("search: matches by label, matched time counted once under a matching ancestor", () => {
  assert.equal(matches(flame, ""), null);
  assert.deepEqual(matches(flame, "A"), [false, false, true, false, false]);
  const hit = [false, false, true, false, true];
  assert.equal(matchedTotal(flame, hit), 14);
});

test("phases: series per phase with the average last; a step's entry", () => {
  const body = { phases: ["Forward", "Other"],
    steps: [{ step: "1", host_us: { Forward: 3, Other: 1 } }, { step: "2", host_us: { Forward: 5, Other: 1 } }],
    average: { host_us: { Forward: 4, Other: 1 } } };
  const { x, series, starts } = phaseSeries(body);
  assert.deepEqual(x, ["Step 1", "Step 2", "Average"]);
  assert.deepEqual(starts, [0, 1]);
  assert.deepEqual(series[0].values, [3, 5, 4]);
  assert.equal(phaseEntry(body, "2"), body.steps[1]);
  assert.equal(phaseEntry(body, AVERAGE), body.average);
  assert.equal(phaseEntry(body, "9"), body.average);
});

test("phases: past the most columns, each is the mean of consecutive steps", () => {
  const steps = Array.from({ length: 7 }, (_, i) => ({ step: String(i + 1), host_us: { Forward: i + 1 } }));
  const body = { phases: ["Forward"], steps, average: { host_us: { Forward: 4 } } };
  const { x, series, starts, per } = phaseSeries(body, "host_us", 3);
  assert.equal(per, 3);
  assert.deepEqual(x, ["1–3", "4–6", "7–7", "Average"]);
  assert.deepEqual(series[0].values, [2, 5, 7, 4]);
  assert.deepEqual(starts, [0, 3, 6]);
  assert.equal(phaseSeries(body, "host_us", 7).per, 1); // up to the most: a column per step
});

test("links keep the trace and drop the other views' keys", () => {
  assert.equal(linkTo({ run: "r", worker: "w", span: "1", mod_tab: "flame" }, { view: "Operator", search: "aten::mm" }),
    "?run=r&worker=w&span=1&view=Operator&search=aten%3A%3Amm");
});

test("phase table CSV: phases then the Step total; device columns only when shown", async () => {
  const { phaseRows } = await import("../../frontend/views/module.js");
  const { csvText } = await import("../../frontend/lib/table_model.js");
  const entry = { host_us: { Forward: 60, Backward: 40 }, host_pct: { Forward: 60, Backward: 40 },
    device_us: { Forward: 30, Backward: 0 }, device_pct: { Forward: 100, Backward: 0 },
    host_total_us: 100, device_total_us: 30 };
  const body = { phases: ["Forward", "Backward"] };
  const csv = (dev) => { const t = phaseRows(body, entry, dev); return csvText(t.columns, t.rows); };
  assert.equal(csv(true), "Phase,Host (us),Host (%),Device (us),Device (%)\r\n"
    + "Forward,60,60,30,100\r\nBackward,40,40,0,0\r\nStep,100,,30,\r\n");
  assert.equal(csv(false), "Phase,Host (us),Host (%)\r\nForward,60,60\r\nBackward,40,40\r\nStep,100,\r\n");
});

test("tree CSV: depth, path, name, then the tree's columns", async () => {
  const { treeCsv } = await import("../../frontend/views/module.js");
  const { csvText } = await import("../../frontend/lib/table_model.js");
  const t = treeCsv([{ key: "calls", label: "Calls", kind: "count" }],
    [{ name: "a", calls: 1, children: [{ name: "b", calls: 2 }] }]);
  assert.equal(csvText(t.columns, t.rows), "Depth,Path,Name,Calls\r\n0,a,a,1\r\n1,a / b,b,2\r\n");
});
