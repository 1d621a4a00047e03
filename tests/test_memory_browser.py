"""Memory view in a real browser (SPEC §4.1): the real profile_memory trace (two devices),
device picker, drag-to-zoom asking the server for the window, the allocation table
filtered to it, a clicked row marked on the curve, the per-operator table, deep links.
Screenshots go to test-output/ (memory_*.png)."""

from __future__ import annotations

import shutil

import pytest
from browser import have_chromium, open_page, query, screenshot, stepscope_server
from tracebuild import NO_SHARED, SHARED, SHARED_TRACES, have_shared

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(not have_shared(), reason=NO_SHARED),
]
pytest.importorskip("playwright.sync_api")

READY_MS = 90_000


@pytest.fixture(scope="module")
def memory_url(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("memlogs")
    (logdir / "mem").mkdir()
    shutil.copy(f"{SHARED}/{SHARED_TRACES['hta_v100_profile_memory']}",
                logdir / "mem" / "rank1.pt.trace.json.gz")
    with stepscope_server(logdir) as base:
        yield base


def curve_x_range(page):
    return page.evaluate("() => document.getElementById('memory-curve').layout.xaxis.range")


def test_memory_view_curve_tables_zoom_and_deep_link(browser, memory_url):
    context, page, watch = open_page(browser, memory_url)
    page.goto(f"{memory_url}/?run=mem&view=Memory&mem_device=GPU1")
    page.wait_for_selector("#memory-curve .main-svg", timeout=READY_MS)
    page.locator("#memory-events tbody tr").first.wait_for(timeout=READY_MS)
    page.locator("#memory-stats tbody tr").first.wait_for(timeout=READY_MS)
    assert page.locator("#memory-device").input_value() == "GPU1"
    assert page.locator("#memory-device option").count() == 2          # CPU, GPU1
    names = page.evaluate("() => document.getElementById('memory-curve').data.map(t => t.name)")
    assert names[:3] == ["Allocated", "Reserved", "Peak"]
    peak = page.evaluate("() => document.getElementById('memory-curve').data[2].customdata[0]")
    assert peak == 6629508096
    assert "fragmented" in page.locator("#memory-recommendations").inner_text()
    assert "13,385 allocations" in page.locator("#memory-events .table-count").inner_text()
    assert page.locator("#memory-stats tbody tr").first.inner_text().startswith("aten::mul")
    screenshot(page, "memory_curve_whole_span")

    # drag across the middle of the plot: the server answers that window only
    box = page.locator("#memory-curve .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] / 2
    with page.expect_response(lambda r: "memory/curve" in r.url and "start=" in r.url):
        page.mouse.move(box["x"] + box["width"] * 0.4, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
        page.mouse.up()
    page.wait_for_function("() => new URLSearchParams(location.search).has('start')")
    q = query(page)
    start, end = float(q["start"]), float(q["end"])
    assert 0 < start < end
    page.wait_for_function("() => /live in the window/.test(document.querySelector('#memory-events h2').textContent)")
    rng = curve_x_range(page)
    assert abs(rng[0] * 1000 - start) < 1 and abs(rng[1] * 1000 - end) < 1
    shown = page.locator("#memory-events .table-count").inner_text()
    assert "13,385" not in shown
    # the table is the server's page of that window (paged: a big span has 100,000s of rows)
    want = page.evaluate("""async ([s, e]) => (await (await fetch(
        `memory/events?run=mem&worker=${new URLSearchParams(location.search).get("worker")}&device=GPU1&start=${s}&end=${e}&limit=25`)).json())""",
                         [q["start"], q["end"]])
    assert "total" in want, want
    assert shown == f"{want['total']:,} allocations" and 0 < want["total"] < 13385
    first = page.locator("#memory-events tbody tr").first.inner_text()
    assert first.split("\t")[0].strip() == want["rows"][0][0]

    # sorting and searching ask the server; the page shows its rows
    with page.expect_response(lambda r: "memory/events" in r.url and "sort=size" in r.url):
        page.locator("#memory-events th button[data-key=size]").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('sort') === 'size'")
    with page.expect_response(lambda r: "memory/events" in r.url and "search=never" in r.url):
        page.fill("#memory-events .table-search", "never")
    page.wait_for_function("() => /of/.test(document.querySelector('#memory-events .table-count').textContent)")
    rows = page.locator("#memory-events tbody tr").all_inner_texts()
    assert rows and all("never freed" in r or "No allocations match" in r for r in rows), rows
    page.fill("#memory-events .table-search", "")
    page.wait_for_function("() => /^[0-9,]+ allocations$/.test(document.querySelector('#memory-events .table-count').textContent)")

    # click an allocation: it is marked on the curve and in the URL
    page.locator("#memory-events tbody tr").first.click()
    page.wait_for_function("() => (document.getElementById('memory-curve').layout.shapes || []).some(s => s.type === 'rect')")
    assert "mem_row" in query(page)
    screenshot(page, "memory_zoomed_marked")

    # per-operator table grouped by input shape, searched
    page.select_option("#memory-group-by", "OperationAndInputShape")
    page.locator("#memory-stats th", has_text="Input shape").wait_for(timeout=READY_MS)
    page.fill("#memory-stats .table-search", "aten::mm")
    assert query(page)["stats_search"] == "aten::mm"
    rows = page.locator("#memory-stats tbody tr").all_inner_texts()
    assert rows and all("aten::mm" in r for r in rows)
    page.locator("#memory-stats").scroll_into_view_if_needed()
    screenshot(page, "memory_tables")

    # the deep link reopens the same state
    url = page.evaluate("() => location.href")
    page.goto(url)
    page.wait_for_selector("#memory-curve .main-svg", timeout=READY_MS)
    page.locator("#memory-stats tbody tr").first.wait_for(timeout=READY_MS)
    rng2 = curve_x_range(page)
    assert abs(rng2[0] * 1000 - start) < 1 and abs(rng2[1] * 1000 - end) < 1
    assert page.locator("#memory-group-by").input_value() == "OperationAndInputShape"
    assert page.locator("#memory-stats .table-search").input_value() == "aten::mm"
    page.wait_for_function("() => (document.getElementById('memory-curve').layout.shapes || []).some(s => s.type === 'rect')")

    # device picker: CPU curve
    page.select_option("#memory-device", "CPU")
    page.wait_for_function("() => new URLSearchParams(location.search).get('mem_device') === 'CPU'")
    page.wait_for_selector("#memory-curve .main-svg", timeout=READY_MS)
    assert "start" not in query(page)
    watch.assert_clean()
    context.close()
