// Unit tests of frontend/views/distributed.js helpers (run by tests/test_frontend_unit.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { AVERAGE, heatmapData, rankQuery, stepNames, stepValue } from "../../frontend/views/distributed.js";

const ranks = [
  { rank: 0, worker: "worker0", span: "11", steps: [{ step: "1", wait_us: 10 }, { step: "2", wait_us: 30 }],
    wait_by_collective_us: { all_reduce: 40 } },
  { rank: 1, worker: "w<1>", span: "12", steps: [{ step: "2", wait_us: 0 }, { step: "3", wait_us: 6 }],
    wait_by_collective_us: { broadcast: 6 } },
];

test("step values per rank: one step, missing step 0, average over the rank's steps", () => {
  assert.deepEqual(stepNames(ranks), ["1", "2", "3"]);
  assert.equal(stepValue(ranks[0], "2", "wait_us"), 30);
  assert.equal(stepValue(ranks[1], "1", "wait_us"), 0);
  assert.equal(stepValue(ranks[0], AVERAGE, "wait_us"), 20);
  assert.equal(stepValue({ steps: [] }, AVERAGE, "wait_us"), 0);
});

test("a rank's link opens its overview in the same run, view keys dropped", () => {
  const q = rankQuery({ run: "job a", worker: "worker0", view: "Distributed", dist_step: "2", sort: "calls" }, ranks[1]);
  assert.equal(q, "?run=job+a&worker=w%3C1%3E&span=12&view=Overview");
});

test("heat map: ranks x every op any rank ran, 0 where a rank did not wait", () => {
  assert.deepEqual(heatmapData(ranks), { x: ["all_reduce", "broadcast"], y: ["rank 0", "rank 1"], z: [[40, 0], [0, 6]] });
});

test("straggler evidence CSV: one row per rank as the table shows it", async () => {
  const { evidenceRows } = await import("../../frontend/views/distributed.js");
  const { csvText } = await import("../../frontend/lib/table_model.js");
  const { columns, rows } = evidenceRows({ rank: 1, wait_us: { 0: 900, 1: 12 }, arrived_last: { 1: 5 } });
  assert.equal(csvText(columns, rows), "Rank,Total wait (us),Arrived last (times)\r\n0,900,0\r\n1,12,5\r\n");
});

test("per-rank table: the chosen step or each rank's average, rounded µs; CSV as shown", async () => {
  const { rankRows } = await import("../../frontend/views/distributed.js");
  const { csvText } = await import("../../frontend/lib/table_model.js");
  const full = (step, base) => ({ step, total_us: base, computation_us: base - 40, communication_us: 25,
    overlap_us: 5, other_us: 10, wait_us: 20, transfer_us: 10 });
  const rs = [{ rank: 0, worker: "w0", steps: [full("1", 100), full("2", 101)] },
    { rank: 1, worker: "w,1", steps: [full("2", 200)] }];
  const avg = rankRows(rs, AVERAGE);
  assert.deepEqual(avg.rows.map((r) => [r.rank, r.steps, r.total_us, r.computation_us]), [[0, 2, 101, 61], [1, 1, 200, 160]]);
  assert.deepEqual(rankRows(rs, "1").rows.map((r) => r.rank), [0]); // a rank without that step: no row
  assert.equal(csvText(avg.columns, avg.rows).split("\r\n")[0],
    "Rank,Worker,Steps,Step time (us),Computation (us),Communication (us),Overlap (us),Other (us),Wait (us),Transfer (us)");
  assert.equal(csvText(avg.columns, avg.rows).split("\r\n")[2], '1,"w,1",1,200,160,25,5,10,20,10');
});
