// Unit tests of frontend/lib/format.js (run by tests/test_frontend_unit.py via `node --test`).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  collapseTemplates, escapeHtml, formatBytes, formatCount, formatDuration, formatPercent,
  formatValue, middleEllipsis, shortenName, spanLabel, spanLabels, spanTitle,
} from "../../frontend/lib/format.js";

const NB = "\u00a0";

test("durations pick µs, ms or s with four significant digits", () => {
  assert.equal(formatDuration(69), `69${NB}µs`);
  assert.equal(formatDuration(0), `0${NB}µs`);
  assert.equal(formatDuration(0.25), `0.25${NB}µs`);
  assert.equal(formatDuration(999), `999${NB}µs`);
  assert.equal(formatDuration(1000), `1.000${NB}ms`);
  assert.equal(formatDuration(148736), `148.7${NB}ms`);
  assert.equal(formatDuration(27000), `27.00${NB}ms`);
  assert.equal(formatDuration(2500000), `2.500${NB}s`);
  assert.equal(formatDuration(123456789), `123.5${NB}s`);
  assert.equal(formatDuration(-2000), `-2.000${NB}ms`);
});

test("missing numbers show a dash", () => {
  for (const v of [null, undefined, "", NaN, "abc"]) {
    assert.equal(formatDuration(v), "–");
    assert.equal(formatPercent(v), "–");
    assert.equal(formatCount(v), "–");
  }
});

test("percentages, counts and bytes", () => {
  assert.equal(formatPercent(67.8234), "67.82%");
  assert.equal(formatPercent(21), "21.00%");
  assert.equal(formatPercent(21, 1), "21.0%");
  assert.equal(formatCount(2994), "2,994");
  assert.equal(formatCount(1234567.891), "1,234,567.89");
  assert.equal(formatCount(-5000), "-5,000");
  assert.equal(formatBytes(512), `512${NB}B`);
  assert.equal(formatBytes(17179869184), `16${NB}GiB`);
  assert.equal(formatBytes(16945512448), `15.8${NB}GiB`);
  assert.equal(formatValue(67.82, "%"), "67.82%");
  assert.equal(formatValue(1500, "us"), `1.500${NB}ms`);
  assert.equal(formatValue(3.5, "x"), `3.5${NB}x`);
});

test("escapeHtml neutralises markup for plotly", () => {
  assert.equal(escapeHtml("<img src=x onerror=alert(1)>"), "&lt;img src=x onerror=alert(1)&gt;");
  assert.equal(escapeHtml("a & b \"c\" 'd'"), "a &amp; b &#34;c&#34; &#39;d&#39;");
  assert.equal(escapeHtml("Array<char*, 3>"), "Array&lt;char*, 3&gt;");
});

test("shortenName keeps short names and shortens long C++ names step by step", () => {
  assert.equal(shortenName("aten::conv2d", 60), "aten::conv2d");
  const k = "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int)";
  assert.equal(shortenName(k, 90), "cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(…)");
  assert.equal(shortenName(k, 42), "cudnn::detail::dgrad_engine<…>(…)");
  const cut = shortenName("x".repeat(200), 40);
  assert.equal(cut.length, 40);
  assert.ok(cut.includes("…"));
});

test("collapseTemplates handles nesting and leaves unbalanced names alone", () => {
  assert.equal(collapseTemplates("f<a<b>, c>::g<d>(int)"), "f<…>::g<…>(int)");
  assert.equal(collapseTemplates("f<a<b>, c>::g<d>(int)", 2), "f<a<…>, c>::g<d>(int)");
  assert.equal(collapseTemplates("operator<(a, b)"), "operator<(a, b)");
});

test("spanLabel shows the capture time of time-stamp span ids (ms, µs, ns)", () => {
  assert.equal(spanLabel("1623143089861"), "2021-06-08 09:04:49 UTC");
  assert.equal(spanLabel("1623143089861123"), "2021-06-08 09:04:49 UTC");
  assert.equal(spanLabel("1795305051123518088"), "2026-11-21 23:50:51 UTC");
  assert.equal(spanTitle("1795305051123518088"),
    "span 1795305051123518088 (captured 2026-11-21 23:50:51 UTC)");
  assert.equal(spanLabel("1102"), "1102");
  assert.equal(spanLabel("9999999999999999999"), "9999999999999999999"); // year 2286: not a time
  assert.equal(spanLabel("default"), "default");
  assert.equal(spanTitle("default"), "span default");
  // two captures within one second keep apart by their milliseconds
  assert.deepEqual(spanLabels(["1795305051123518088", "1795305051923518088", "7"]),
    ["2026-11-21 23:50:51.123 UTC", "2026-11-21 23:50:51.923 UTC", "7"]);
  // the hover text repeats the shown label, milliseconds included
  assert.equal(spanTitle("1795305051123518088", "2026-11-21 23:50:51.123 UTC"),
    "span 1795305051123518088 (captured 2026-11-21 23:50:51.123 UTC)");
});

test("middleEllipsis keeps both ends so names with one prefix stay apart", () => {
  const a = middleEllipsis("kineto_resnet50/resnet50_num_workers_0", 32);
  const b = middleEllipsis("kineto_resnet50/resnet50_num_workers_4", 32);
  assert.equal(a, "kineto_resnet50/…0_num_workers_0");
  assert.equal(a.length, 32);
  assert.notEqual(a, b);
  assert.equal(middleEllipsis("worker0", 32), "worker0");
});

test("table names keep outer template arguments so similar kernels stay apart", () => {
  const a = "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float>(at::TensorIterator&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::threshold_kernel_impl<float>(at::TensorIterator&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)";
  const b = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)";
  const sa = shortenName(a, 120, { outer: false });
  const sb = shortenName(b, 120, { outer: false });
  assert.ok(sa.length <= 120 && sb.length <= 120);
  assert.notEqual(sa, sb);
  assert.ok(sa.includes("threshold_kernel_impl"), sa);
  assert.equal(sb, "at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >(…)");
  assert.equal(shortenName(b, 100, { outer: false }), "at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<…>, at::detail::Array<…> >(…)");
});
