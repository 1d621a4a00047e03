// Unit tests of frontend/views/operator.js column choice (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { operatorColumns } from "../../frontend/views/operator.js";

const op = { name: "aten::mm", calls: 2, device_self_duration: 5, device_total_duration: 5,
  host_self_duration: 3, host_total_duration: 9 };

test("a Row column appears only when range rows (SPEC §2.4.8) are present", () => {
  const keys = (rows) => operatorColumns(rows, "Operation").map((c) => c.key);
  assert.ok(!keys([op]).includes("kind"));
  const range = { ...op, name: "ProfilerStep#*", kind: "range" };
  assert.deepEqual(keys([op, range]).slice(0, 3), ["name", "kind", "calls"]);
});
