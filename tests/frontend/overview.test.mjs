// Unit tests of frontend/views/overview.js GPU labels (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { gpuArch } from "../../frontend/views/overview.js";

test("ROCm GPUs show their architecture, NVIDIA GPUs their compute capability", () => {
  assert.equal(gpuArch({ arch: "gfx90a", compute_capability: "9.0" }), "gfx90a");
  assert.equal(gpuArch({ compute_capability: "8.0" }), "compute capability 8.0");
  assert.equal(gpuArch({ compute_capability: null }), "");
});

test("execution summary CSV: the categories then the step time, µs and % raw", async () => {
  const { executionRows } = await import("../../frontend/views/overview.js");
  const { csvText } = await import("../../frontend/lib/table_model.js");
  const perf = { name: "Average Step Time", value: 148721, extra: 100,
    children: [{ name: "Kernel", value: 120000, extra: 80.69 }, { name: "Other", value: 28721, extra: 19.31 }] };
  const { columns, rows } = executionRows(perf);
  assert.equal(csvText(columns, rows), "Category,Time per step (us),Share (%)\r\n"
    + "Kernel,120000,80.69\r\nOther,28721,19.31\r\nAverage Step Time,148721,100\r\n");
  assert.deepEqual(executionRows(undefined).rows, []);
});

test("a GPU is labelled GPU2, as in the recommendations and the other views", async () => {
  const { gpuLabel } = await import("../../frontend/views/overview.js");
  assert.equal(gpuLabel({ id: 2 }), "GPU2");
});

test("step columns: one per step up to the most, else means of consecutive steps", async () => {
  const { columnGroups, columnMeans } = await import("../../frontend/lib/charts.js");
  const names = ["5", "6", "7", "8", "9", "10", "11"];
  const g = columnGroups(names, 3);
  assert.equal(g.per, 3);
  assert.deepEqual(g.starts, [0, 3, 6]);
  assert.deepEqual(g.labels, ["5–7", "8–10", "11–11"]);
  assert.deepEqual(columnMeans([1, 2, 3, 4, 5, 6, 7], g), [2, 5, 7]);
  const one = columnGroups(names);
  assert.equal(one.per, 1);
  assert.deepEqual(one.labels, names.map((n) => `Step ${n}`));
});
