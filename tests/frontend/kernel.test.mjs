// Unit tests of frontend/views/kernel.js labels (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { coreName, coreShare, kernelColumns } from "../../frontend/views/kernel.js";
import { operatorColumns } from "../../frontend/views/operator.js";

test("ROCm traces say Matrix Cores (SPEC §2.3), others Tensor Cores", () => {
  assert.equal(coreName([["Using Matrix Cores", 30], ["Not Using Matrix Cores", 8]]), "Matrix Core");
  assert.equal(coreName([["Using Tensor Cores", 30], ["Not Using Tensor Cores", 8]]), "Tensor Core");
  assert.equal(coreName(undefined), "Tensor Core");
  const [col] = kernelColumns([{ key: "mc", name: "Matrix Cores Used", type: "string" }]);
  assert.equal(col.label, "Matrix cores");
  assert.match(col.help, /MFMA/);
});

test("the core share is one figure: used / all kernel time", () => {
  assert.deepEqual(coreShare([["Using Matrix Cores", 30], ["Not Using Matrix Cores", 90]]),
    { used: 30, total: 120, share: 25, core: "Matrix Core" });
  assert.equal(coreShare([["Using Tensor Cores", 5]]).share, 100);
  assert.equal(coreShare([["Using Tensor Cores", 0], ["Not Using Tensor Cores", 0]]), null);
  assert.equal(coreShare(undefined), null);
});

test("operator columns say Matrix Cores on ROCm", () => {
  const rows = [{ name: "aten::mm", calls: 1, device_self_duration: 5, tc_eligible: true, tc_self_ratio: 50 }];
  const mc = operatorColumns(rows, "Operation", "Matrix Core").filter((c) => c.key.startsWith("tc_"));
  assert.deepEqual(mc.map((c) => c.label), ["MC eligible", "MC self"]);
  assert.ok(mc.every((c) => /Matrix Core/.test(c.help) && !/Tensor/.test(c.help)));
  const tc = operatorColumns(rows, "Operation").filter((c) => c.key.startsWith("tc_"));
  assert.deepEqual(tc.map((c) => c.label), ["TC eligible", "TC self"]);
});
