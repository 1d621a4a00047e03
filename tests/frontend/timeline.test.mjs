// Unit tests of the Trace view's pure modules: window arithmetic and URL keys
// (timeline_window.js), lane layout, hit testing, colors and search (timeline_layout.js),
// the debounced, cancelling loader (timeline_loader.js) and small label helpers.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  MIN_SPAN, clampWindow, formatTime, formatTimeAt, panBy, roundTime, ticks, timeToX, wheelFactor, windowAround,
  windowFromState, windowToState, xToTime, zoomAt,
} from "../../frontend/lib/timeline_window.js";
import {
  COUNTER_H, LANE_PAD, ROW_H, boxAt, boxOf, counterMax, hashName, hitTest, laneRows, layoutLanes, matchingNames,
  nameColor, pointAt, rowTop,
} from "../../frontend/lib/timeline_layout.js";
import { createLoader } from "../../frontend/lib/timeline_loader.js";
import { counterLabel, fitText, stepPoints } from "../../frontend/lib/timeline_draw.js";
import { counterValue } from "../../frontend/lib/timeline_axes.js";
import { argText, kindLabel } from "../../frontend/lib/timeline_detail.js";

const RANGE = [0, 1000];
const close = (a, b, eps = 1e-9) => assert.ok(Math.abs(a - b) <= eps, `${a} != ${b}`);

test("zoom keeps the time under the cursor in place", () => {
  const w = zoomAt({ start: 0, end: 100 }, 0.5, 0.5, RANGE);
  assert.deepEqual(w, { start: 25, end: 75 });
  const z = zoomAt({ start: 100, end: 300 }, 0.1, 0.25, RANGE);
  close(z.start + (z.end - z.start) * 0.25, 150); // the anchor time stays at 25 %
  close(z.end - z.start, 20);
  // zooming out never goes past the trace (+5 % margin) and zooming in stops at MIN_SPAN
  const out = zoomAt({ start: 0, end: 1000 }, 10, 0.5, RANGE);
  assert.deepEqual(out, { start: -50, end: 1050 });
  const deep = zoomAt({ start: 10, end: 10.2 }, 0.001, 0.5, RANGE);
  close(deep.end - deep.start, MIN_SPAN);
});

test("pan moves by a share of the window and stops at the trace's margin", () => {
  assert.deepEqual(panBy({ start: 100, end: 200 }, 0.15, RANGE), { start: 115, end: 215 });
  assert.deepEqual(panBy({ start: 100, end: 200 }, -5, RANGE), { start: -50, end: 50 });
  assert.deepEqual(panBy({ start: 900, end: 1000 }, 5, RANGE), { start: 950, end: 1050 });
});

test("clampWindow repairs impossible windows", () => {
  assert.deepEqual(clampWindow({ start: 5, end: 5 }, RANGE), { start: 5, end: 5 + MIN_SPAN });
  assert.deepEqual(clampWindow({ start: -1e9, end: 1e9 }, RANGE), { start: -50, end: 1050 });
  const w = clampWindow({ start: NaN, end: NaN }, RANGE);
  assert.ok(Number.isFinite(w.start) && Number.isFinite(w.end) && w.end > w.start);
});

test("wheel factor: up zooms in, down zooms out, symmetric, bounded", () => {
  assert.ok(wheelFactor(-100) < 1 && wheelFactor(100) > 1);
  close(wheelFactor(-100) * wheelFactor(100), 1);
  assert.equal(wheelFactor(1e6), wheelFactor(400));
  assert.equal(wheelFactor(3, 1), wheelFactor(48));
});

test("windowAround centres an event with padding and a minimum span", () => {
  assert.deepEqual(windowAround(100, 200, RANGE, 0.5), { start: 50, end: 250 });
  assert.deepEqual(windowAround(500, 500.5, RANGE, 0.25, 10), { start: 495.25, end: 505.25 });
});

test("x <-> time", () => {
  const win = { start: 100, end: 300 };
  assert.equal(timeToX(200, win, 1000), 500);
  assert.equal(xToTime(500, win, 1000), 200);
});

test("URL keys: parse, reject nonsense, round to the nanosecond", () => {
  assert.deepEqual(windowFromState({ start: "10", end: "20.5" }), { start: 10, end: 20.5 });
  assert.equal(windowFromState({ start: "10" }), null);
  assert.equal(windowFromState({ start: "abc", end: "20" }), null);
  assert.equal(windowFromState({ start: "20", end: "20" }), null);
  assert.equal(windowFromState({ start: "30", end: "20" }), null);
  assert.deepEqual(windowToState({ start: 364932.40581981, end: 392428.8603178 }), { start: "364932.406", end: "392428.86" });
  assert.equal(roundTime(1.0004), 1);
});

test("ticks every 1/2/5 x 10^k, labelled in the unit of the window's times", () => {
  const t = ticks({ start: 100046, end: 101646 }, 1000, 110);
  assert.equal(t.step, 200);
  assert.deepEqual(t.ticks.map((x) => x.label).slice(0, 3), ["100.2 ms", "100.4 ms", "100.6 ms"]);
  const whole = ticks({ start: 0, end: 928952 }, 1100, 110);
  assert.equal(whole.step, 100000);
  assert.equal(whole.ticks[1].label, "100 ms");
  const tiny = ticks({ start: 10, end: 10.5 }, 1000, 100);
  assert.equal(tiny.step, 0.05);
  assert.ok(tiny.ticks.every((x) => x.t >= 10 && x.t < 10.5));
  assert.equal(tiny.ticks[0].label, "10.00 µs");
});

test("times since the trace start", () => {
  assert.equal(formatTime(100017), "100.017 ms");
  assert.equal(formatTime(5), "5 µs");
  assert.equal(formatTime(5.25), "5.250 µs");
  assert.equal(formatTime(2500000), "2.500000 s");
  assert.equal(formatTime(null), "–");
  assert.equal(formatTimeAt(364932.406, 27496), "364.93 ms");
  assert.equal(formatTimeAt(100000, 2000), "100.000 ms");
});

const ANSWER = {
  range: [0, 1000], start: 0, end: 1000,
  names: ["aten::conv2d", "ProfilerStep#1", "volta_sgemm", "<img src=x onerror=alert(1)>"],
  lanes: [
    { id: "host:1:1", name: "Thread 1", kind: "host", rows: 3,
      blocks: [[0, 500, 1, 0, 1, 10], [10, 100, 0, 1, 1, 11], [20, 10, 3, 2, 1, 12], [600, 50, 0, 1, 4]] },
    { id: "device:0:7", name: "GPU 0 stream 7", kind: "device", blocks: [[30, 40, 2, 0, 1, 20], [80, 5, 2, 1, 1, 21]] },
    { id: "counter:GPU 0 Utilization", name: "GPU 0 Utilization", kind: "counter", points: [[0, 0], [100, 0.5], [200, 0.97]] },
  ],
  steps: [["1", 0, 500]],
};

test("lanes stack from the top: rows x ROW_H + padding, counters fixed; folding keeps one row", () => {
  const { boxes, height } = layoutLanes(ANSWER.lanes);
  assert.deepEqual(boxes.map((b) => [b.y, b.h, b.rows]), [
    [0, 3 * ROW_H + 2 * LANE_PAD, 3],
    [3 * ROW_H + 2 * LANE_PAD, 2 * ROW_H + 2 * LANE_PAD, 2], // no `rows`: deepest block + 1
    [5 * ROW_H + 4 * LANE_PAD, COUNTER_H, 0],
  ]);
  assert.equal(height, 5 * ROW_H + 4 * LANE_PAD + COUNTER_H);
  const folded = layoutLanes(ANSWER.lanes, new Set(["host:1:1"]));
  assert.equal(folded.boxes[0].shown, 1);
  assert.equal(folded.boxes[0].h, ROW_H + 2 * LANE_PAD);
  assert.equal(laneRows({ kind: "host", blocks: [] }), 1);
  assert.equal(boxOf(folded, "device:0:7"), folded.boxes[1]);
  assert.equal(boxAt(folded, -1), null);
});

test("hit testing finds the block under the pointer, the nearest within a few px", () => {
  const layout = layoutLanes(ANSWER.lanes);
  const win = { start: 0, end: 1000 };
  const host = layout.boxes[0];
  const y1 = rowTop(host, 1) + 5;
  assert.equal(hitTest(layout, 50, y1, win, 1000).block[5], 11);
  assert.equal(hitTest(layout, 111.5, y1, win, 1000).block[5], 11); // within 2 px of its end
  assert.equal(hitTest(layout, 300, y1, win, 1000).block, undefined);
  assert.equal(hitTest(layout, 620, y1, win, 1000).block[4], 4); // a merged block
  const dev = layout.boxes[1];
  assert.equal(hitTest(layout, 82, rowTop(dev, 1) + 3, win, 1000).block[5], 21);
  const counter = layout.boxes[2];
  assert.deepEqual(hitTest(layout, 150, counter.y + 10, win, 1000).point, [100, 0.5]);
  assert.equal(hitTest(layout, 10, 10_000, win, 1000), null);
  // folded: deeper rows are not hit
  const folded = layoutLanes(ANSWER.lanes, new Set(["host:1:1"]));
  assert.equal(hitTest(folded, 50, rowTop(folded.boxes[0], 0) + 5, win, 1000).block[5], 10);
});

test("counter points and scale", () => {
  assert.deepEqual(pointAt([[0, 1], [10, 2], [20, 3]], 15), [10, 2]);
  assert.equal(pointAt([[5, 1]], 1), null);
  assert.equal(pointAt([], 1), null);
  assert.equal(counterMax([[0, 0]]), 1);
  assert.equal(counterMax([[0, 2e9], [1, 3e9]]), 3e9);
  assert.equal(counterLabel(ANSWER.lanes[2]), "max 97%");
  assert.equal(counterLabel({ name: "GPU 0 Memory Allocated", unit: "bytes", points: [[0, 2e9]] }),
    "max 1.86\u00a0GiB");
  assert.equal(counterLabel({ name: "CPU Memory Allocated", points: [[0, 1536]] }), "max 1.5\u00a0KiB");
  assert.equal(counterLabel({ name: "x", unit: "ratio", points: [[0, 0.5]] }), "max 50%");
  assert.equal(counterValue({ name: "GPU 0 Utilization", unit: "ratio" }, 0.975), "97.5%");
  assert.equal(counterLabel({ name: "Other", points: [[0, 12345]] }), "max 12345");
});

test("colors are stable per name and differ between names", () => {
  assert.equal(hashName("aten::mm"), hashName("aten::mm"));
  assert.deepEqual(nameColor("aten::mm"), nameColor("aten::mm"));
  assert.notDeepEqual(nameColor("aten::mm"), nameColor("aten::addmm"));
  assert.deepEqual(nameColor("ProfilerStep#3"), nameColor("ProfilerStep#4"));
  assert.match(nameColor("x").fill, /^hsl\(\d+ \d+% \d+%\)$/);
});

test("search highlight: the names on screen that contain the text", () => {
  assert.equal(matchingNames(ANSWER.names, "  "), null);
  assert.deepEqual([...matchingNames(ANSWER.names, "CONV")], [0]);
});

test("labels are cut to fit", () => {
  assert.equal(fitText("aten::conv2d", 200), "aten::conv2d");
  assert.equal(fitText("aten::conv2d", 10), "");
  assert.ok(fitText("aten::convolution_backward", 50).endsWith("…"));
  assert.equal(kindLabel("host_op"), "Operator");
  assert.equal(kindLabel("new_kind"), "new kind");
  assert.equal(argText("x"), "x");
  assert.equal(argText([1, 2]), "[1,2]");
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const W = (start, end) => ({ start, end, width: 100, key: `${start}|${end}|100` });

test("loader: debounces a burst into one request, for the last window", async () => {
  const asked = [];
  const got = [];
  const loader = createLoader({ delay: 20, fetch: async (w) => { asked.push(w.key); return { w: w.key }; },
    onAnswer: (a) => got.push(a.w) });
  for (let i = 0; i < 10; i += 1) loader.request(W(i, i + 10));
  assert.ok(loader.busy());
  await sleep(60);
  assert.deepEqual(asked, ["9|19|100"]);
  assert.deepEqual(got, ["9|19|100"]);
  loader.request(W(9, 19)); // same window again: not refetched
  await sleep(40);
  assert.equal(asked.length, 1);
  assert.ok(!loader.busy());
});

test("loader: a newer window aborts the request in flight; stale answers are dropped", async () => {
  const aborted = [];
  const got = [];
  const loader = createLoader({ delay: 0,
    fetch: (w, signal) => new Promise((resolve, reject) => {
      signal.addEventListener("abort", () => { aborted.push(w.key); reject(new DOMException("aborted", "AbortError")); });
      setTimeout(() => resolve({ w: w.key }), w.start === 1 ? 50 : 5);
    }),
    onAnswer: (a) => got.push(a.w), onError: (e) => got.push(`error ${e.message}`) });
  loader.now(W(1, 2));
  await sleep(10);
  loader.now(W(3, 4));
  await sleep(80);
  assert.deepEqual(aborted, ["1|2|100"]);
  assert.deepEqual(got, ["3|4|100"]);
});

test("loader: errors are reported (not aborts), and the window may be asked for again", async () => {
  let fail = true;
  const seen = [];
  const busy = [];
  const loader = createLoader({ delay: 0,
    fetch: async (w) => { if (fail) throw new Error("HTTP 500"); return { w: w.key }; },
    onAnswer: (a) => seen.push(a.w), onError: (e) => seen.push(e.message), onBusy: (b) => busy.push(b) });
  loader.now(W(1, 2));
  await sleep(5);
  fail = false;
  loader.now(W(1, 2));
  await sleep(5);
  assert.deepEqual(seen, ["HTTP 500", "1|2|100"]);
  assert.deepEqual(busy, [true, false, true, false]);
  loader.request(W(5, 6));
  loader.cancel();
  await sleep(10);
  assert.deepEqual(seen, ["HTTP 500", "1|2|100"]);
});

test("loader: a long burst still fetches every maxWait ms", async () => {
  const asked = [];
  const loader = createLoader({ delay: 30, maxWait: 60, fetch: async (w) => { asked.push(w.key); return {}; },
    onAnswer: () => {} });
  for (let i = 0; i < 15; i += 1) { // 150 ms of requests, 10 ms apart: never 30 ms of calm
    loader.request(W(i, i + 1));
    await sleep(10);
  }
  await sleep(50);
  assert.ok(asked.length >= 2 && asked.length <= 5, asked.join(" "));
  assert.equal(asked.at(-1), "14|15|100");
});

test("counters draw as steps: a value holds until the next point, the last to the end", () => {
  const id = (v) => v;
  assert.deepEqual(stepPoints([[0, 1], [10, 3]], id, id, 20), [[0, 1], [10, 1], [10, 3], [20, 3]]);
  assert.deepEqual(stepPoints([[5, 2]], id, id, 3), [[5, 2], [5, 2]]);  // (end before: no back)
  assert.deepEqual(stepPoints([], id, id, 9), []);
});
