// Unit tests of frontend/views/overview.js GPU labels (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { gpuArch } from "../../frontend/views/overview.js";

test("ROCm GPUs show their architecture, NVIDIA GPUs their compute capability", () => {
  assert.equal(gpuArch({ arch: "gfx90a", compute_capability: "9.0" }), "gfx90a");
  assert.equal(gpuArch({ compute_capability: "8.0" }), "compute capability 8.0");
  assert.equal(gpuArch({ compute_capability: null }), "");
});
