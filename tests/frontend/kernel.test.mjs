// Unit tests of frontend/views/kernel.js labels (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { coreName, kernelColumns } from "../../frontend/views/kernel.js";

test("ROCm traces say Matrix Cores (SPEC §2.3), others Tensor Cores", () => {
  assert.equal(coreName([["Using Matrix Cores", 30], ["Not Using Matrix Cores", 8]]), "Matrix Core");
  assert.equal(coreName([["Using Tensor Cores", 30], ["Not Using Tensor Cores", 8]]), "Tensor Core");
  assert.equal(coreName(undefined), "Tensor Core");
  const [col] = kernelColumns([{ key: "mc", name: "Matrix Cores Used", type: "string" }]);
  assert.equal(col.label, "Matrix cores");
  assert.match(col.help, /MFMA/);
});
