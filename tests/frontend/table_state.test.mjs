// Unit tests of tableState (frontend/lib/table.js): a table's state in a view's URL keys.
import assert from "node:assert/strict";
import { test } from "node:test";
import { tableState } from "../../frontend/lib/table.js";
import { VIEW_KEYS, withPatch } from "../../frontend/lib/urlstate.js";

function view(state) {
  const ctx = { state: { ...state }, update: (patch) => { ctx.state = withPatch(ctx.state, patch); } };
  return ctx;
}

test("a patch writes its own keys only, under the table's prefix", () => {
  const ctx = view({ run: "r", stats_sort: "calls", stats_dir: "desc" });
  const { state, onStateChange } = tableState(ctx, "stats_");
  assert.deepEqual(state, { search: undefined, sort: "calls", dir: "desc", page: undefined, rows: undefined });
  onStateChange({ search: "mm", page: null }); // searching keeps the sort
  assert.deepEqual(ctx.state, { run: "r", stats_sort: "calls", stats_dir: "desc", stats_search: "mm" });
  onStateChange({ page: "3" });                 // paging: no "undefined" key (the Diff view's)
  onStateChange({ rows: "50" });
  assert.deepEqual(Object.keys(ctx.state).sort(),
    ["run", "stats_dir", "stats_page", "stats_rows", "stats_search", "stats_sort"]);
});

test("renamed keys keep old links working; the rest take the prefix", () => {
  const ctx = view({ mod_search_r: "step", mod_sort: "calls" });
  const t = tableState(ctx, "mod_r_", { search: "mod_search_r", sort: "mod_sort", dir: "mod_dir" });
  assert.equal(t.state.search, "step");
  t.onStateChange({ sort: "host_total_us", dir: "desc", page: null });
  assert.deepEqual(ctx.state, { mod_search_r: "step", mod_sort: "host_total_us", mod_dir: "desc" });
  t.onStateChange({ page: "2", rows: "10" });
  assert.equal(ctx.state.mod_r_page, "2");
  assert.equal(ctx.state.mod_r_rows, "10");
});

test("every table key a view writes is dropped with the view", () => {
  for (const prefix of ["", "stats_", "kdiff_", "mod_r_"]) {
    for (const k of ["search", "sort", "dir", "page", "rows"]) {
      const key = prefix === "mod_r_" && k !== "page" && k !== "rows"
        ? { search: "mod_search_r", sort: "mod_sort", dir: "mod_dir" }[k] : `${prefix}${k}`;
      assert.ok(VIEW_KEYS.includes(key), key);
    }
  }
});
