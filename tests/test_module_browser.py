"""Module view in a real browser (SPEC §4.2): phases chart and table with a step picked, the
range tree and flat table, the module tree (and the note when a trace has no module
frames), the canvas flame graph (zoom by click, search highlight, both metrics, the
collapsed-stacks download), links operator <-> flame graph, and every state deep-linked.
Screenshots go to test-output/ (module_*.png)."""

from __future__ import annotations

import json
import shutil
import urllib.request

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


def tiny_trace() -> dict:
    """One step: forward > nn.Module: Net_0 > nn.Module: Linear_0 > aten::linear (with a
    call stack) > aten::addmm; backward > an autograd op."""
    def ev(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
                "args": args}
    return {"traceEvents": [
        ev("user_annotation", "ProfilerStep#1", 0, 1000),
        ev("user_annotation", "forward", 10, 400),
        ev("python_function", "nn.Module: Net_0", 20, 380),
        ev("python_function", "nn.Module: Linear_0", 30, 300),
        ev("cpu_op", "aten::linear", 40, 250, **{"Call stack": "model.py(12): forward;train.py(40): step"}),
        ev("cpu_op", "aten::addmm", 50, 200),
        ev("user_annotation", "backward", 450, 500),
        ev("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 460, 300),
    ]}


def many_steps(n: int) -> dict:
    """``n`` steps of a forward range each (step k's forward lasts k µs)."""
    events = []
    for k in range(n):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1,
                    "tid": 1, "ts": 1000 * k, "dur": 900},
                   {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1,
                    "ts": 1000 * k + 1, "dur": k + 1},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                    "ts": 1000 * k + 1, "dur": 1}]
    return {"traceEvents": events}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("modlogs")
    (logdir / "cuda").mkdir()
    (logdir / "tiny").mkdir()
    (logdir / "many").mkdir()
    (logdir / "many" / "w.pt.trace.json").write_text(json.dumps(many_steps(450)))
    shutil.copy(f"{SHARED}/{SHARED_TRACES['hta_v100_resnet_ns_2024']}",
                logdir / "cuda" / "rank0.pt.trace.json.gz")
    (logdir / "tiny" / "w.pt.trace.json").write_text(json.dumps(tiny_trace()))
    with stepscope_server(logdir) as url:
        yield url


def test_phases_ranges_and_modules_tabs(browser, base):
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=cuda&view=Module")
    page.wait_for_selector("#module-phase-chart .main-svg", timeout=READY_MS)
    names = page.evaluate("() => document.getElementById('module-phase-chart').data.map(t => t.name)")
    assert names == ["DataLoader", "Forward", "Backward", "Optimizer", "Other"]
    x = page.evaluate("() => document.getElementById('module-phase-chart').data[0].x")
    assert x[-1] == "Average" and len(x) == 6
    page.wait_for_selector("#module-phase-device-chart .main-svg")
    rows = page.locator(".phase-table tbody tr")
    assert rows.count() == 6
    # number column headers sit over their right-aligned numbers
    align = page.evaluate("""() => [...document.querySelectorAll('.phase-table thead th')]
        .map(th => getComputedStyle(th).textAlign)""")
    assert align == ["left", "right", "right", "right", "right"]
    # phases time the ProfilerStep host span, the overview the GPU work: one line says so
    assert "the Overview times each step by the GPU work" in page.locator("#module-phase-step-note").inner_text()
    assert "your record_function ranges" in page.locator("#module-body").inner_text()
    screenshot(page, "module_phases")
    page.select_option("#module-step", "102")
    page.wait_for_function("() => new URLSearchParams(location.search).get('mod_step') === '102'")
    page.wait_for_selector(".phase-table")
    assert page.locator("#module-step").input_value() == "102"

    page.click("#module-tabs [data-tab=ranges]")
    page.wait_for_selector("#module-range-tree")
    text = page.locator("#module-range-tree").inner_text()
    assert "## backward ##" in text and "DistributedDataParallel.forward" in text
    align = page.evaluate("""() => [...document.querySelectorAll('#module-range-tree thead th')]
        .map(th => getComputedStyle(th).textAlign)""")
    assert align[0] == "left" and set(align[1:]) == {"right"}
    assert query(page)["mod_tab"] == "ranges"
    page.click("#module-range-view [data-view=flat]")
    page.locator("#module-body .data-table tbody tr").first.wait_for()
    assert query(page)["mod_range_view"] == "flat"
    screenshot(page, "module_ranges_flat")

    page.click("#module-tabs [data-tab=modules]")
    page.wait_for_function(r"() => /profile\(with_stack=True\) to record/.test((document.getElementById('module-body')?.textContent ?? ''))")

    page.goto(f"{base}/?run=tiny&view=Module&mod_tab=modules")
    page.wait_for_selector("#module-tree")
    tree = page.locator("#module-tree").inner_text()
    assert "nn.Module: Net_0" in tree and "nn.Module: Linear_0" in tree
    screenshot(page, "module_tree")
    watch.assert_clean()
    context.close()


def download_lines(page, selector: str) -> list[str]:
    """Click the CSV button `selector`; the downloaded file's CRLF lines."""
    with page.expect_download() as dl:
        page.click(selector)
    with open(dl.value.path(), encoding="utf-8", newline="") as f:
        return f.read().strip("\r\n").split("\r\n")


def test_phase_table_and_trees_download_as_csv(browser, base):
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=tiny&view=Module")
    page.wait_for_selector(".phase-table", timeout=READY_MS)
    # CPU only: no Device columns (they would read 0 µs / 0.00%), no GPU re-timing line
    assert page.locator(".phase-table thead th").all_inner_texts() == ["Phase", "Host", "Host %"]
    assert page.locator(".phase-table tbody tr").first.locator("td").count() == 3
    assert page.locator("#module-phase-step-note").count() == 0
    lines = download_lines(page, "#module-phase-csv")
    assert lines[0] == "Phase,Host (us),Host (%)"
    shown = page.locator(".phase-table tbody tr")
    assert len(lines) == 1 + shown.count()
    assert [ln.split(",")[0] for ln in lines[1:]] == [
        shown.nth(i).locator("td").first.inner_text() for i in range(shown.count())]
    assert lines[-1].startswith("Step,1000,")  # the step's 1,000 µs host span

    page.goto(f"{base}/?run=tiny&view=Module&mod_tab=modules")
    page.wait_for_selector("#module-tree")
    lines = download_lines(page, "#module-tree-csv")
    assert lines[0] == "Depth,Path,Name,Occurrences,Host total (us),Host self (us),Device total (us)"
    assert any(ln.startswith("1,nn.Module: Net_0 / nn.Module: Linear_0,nn.Module: Linear_0,1,") for ln in lines)

    page.goto(f"{base}/?run=tiny&view=Module&mod_tab=ranges")
    page.wait_for_selector("#module-range-tree")
    lines = download_lines(page, "#module-range-csv")
    assert lines[0].startswith("Depth,Path,Name,Calls,Host total (us)")
    assert {ln.split(",")[2] for ln in lines[1:]} >= {"forward", "backward"}
    watch.assert_clean()
    context.close()


def test_flame_graph_zoom_search_download_and_deep_link(browser, base):
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=cuda&view=Module&mod_tab=flame")
    page.wait_for_selector("#module-flame-canvas", timeout=READY_MS)
    canvas = page.locator("#module-flame-canvas")
    box = canvas.bounding_box()
    assert box["width"] > 300 and box["height"] > 50
    screenshot(page, "module_flame")
    # a click on the second row zooms into a frame: mod_focus in the URL, a detail line
    page.mouse.click(box["x"] + 5, box["y"] + 18 + 9)
    page.wait_for_function("() => new URLSearchParams(location.search).has('mod_focus')")
    focus = query(page)["mod_focus"]
    detail = page.locator("#module-flame-detail").inner_text()
    assert "Find in the Operator view" in detail
    page.fill("#module-flame-search", "conv")
    page.wait_for_function("() => new URLSearchParams(location.search).get('mod_search') === 'conv'")
    assert "Matched" in page.locator("#module-flame-matched").inner_text()
    screenshot(page, "module_flame_zoom_search")

    # the download is the export_stacks text
    href = page.locator("#module-flame-download").get_attribute("href")
    assert "stacks/collapsed" in href and "metric=host_self" in href
    with urllib.request.urlopen(f"{base}/data/plugin/stepscope/{href}" if not href.startswith("/")
                                else f"{base}{href}") as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        lines = r.read().decode().splitlines()
    assert all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines) and ";" in lines[1]
    assert lines[0].startswith("thread ") and ";" not in lines[0]  # the steps' own time

    # deep link: a fresh page restores focus and search
    url = page.url
    page2 = context.new_page()
    page2.goto(url)
    page2.wait_for_selector("#module-flame-canvas", timeout=READY_MS)
    assert page2.locator("#module-flame-search").input_value() == "conv"
    page2.wait_for_function("() => /Find in the Operator view/.test(document.getElementById('module-flame-detail').textContent)")
    assert query(page2)["mod_focus"] == focus

    # device metric
    page2.click("#module-flame-metric [data-metric=device]")
    page2.wait_for_function("() => new URLSearchParams(location.search).get('mod_flame_metric') === 'device'")
    page2.wait_for_selector("#module-flame-canvas")
    assert "metric=device" in page2.locator("#module-flame-download").get_attribute("href")
    screenshot(page2, "module_flame_device")
    watch.assert_clean()
    context.close()


def test_operator_call_stack_links_to_flame_and_back(browser, base):
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=tiny&view=Operator")
    page.locator("tbody tr", has_text="aten::linear").first.wait_for(timeout=READY_MS)
    page.locator("tbody tr", has_text="aten::linear").first.locator("button.expand").click()
    link = page.locator("a.flame-link").first
    link.wait_for()
    link.click()
    page.wait_for_selector("#module-flame-canvas", timeout=READY_MS)
    q = query(page)
    assert (q["view"], q["mod_tab"], q["mod_search"]) == ("Module", "flame", "aten::linear")
    assert "Matched" in page.locator("#module-flame-matched").inner_text()
    # back: focus the frame, follow "Find in the Operator view"
    box = page.locator("#module-flame-canvas").bounding_box()
    # rows: thread, forward, Net_0, Linear_0, aten::linear (backward is wider: drawn first)
    page.mouse.click(box["x"] + box["width"] * 0.7, box["y"] + 18 * 4 + 9)
    page.locator("#module-flame-to-operator").wait_for()
    name = page.locator("#module-flame-detail b").inner_text()
    assert name == "aten::linear"
    page.click("#module-flame-to-operator")
    page.wait_for_function("() => new URLSearchParams(location.search).get('view') === 'Operator'")
    assert query(page)["search"] == name
    screenshot(page, "module_back_to_operator")
    watch.assert_clean()
    context.close()


def test_many_steps_are_charted_as_means_of_consecutive_steps(browser, base):
    """A bar per step froze the page for about 2 minutes at 60,000 steps: past 200 columns
    each is the mean of a run of steps; a click still picks a step."""
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=many&view=Module")
    page.wait_for_selector("#module-phase-chart .main-svg", timeout=READY_MS)
    xs = page.evaluate("() => document.getElementById('module-phase-chart').data[0].x")
    assert len(xs) == 151 and xs[0] == "0–2" and xs[-2] == "447–449" and xs[-1] == "Average"
    forward = page.evaluate("() => document.getElementById('module-phase-chart').data"
                            ".find(t => t.name === 'Forward').y")
    assert forward[0] == pytest.approx(2.0) and forward[1] == pytest.approx(5.0)  # means, µs
    assert "450 steps: each column is the mean of 3 consecutive steps" in \
        page.locator("#module-phase-means").inner_text()
    assert page.locator("#module-step option").count() == 451  # the table: every step
    watch.assert_clean()
    context.close()


def test_many_steps_overview_chart_is_means_of_consecutive_steps(browser, base):
    """The Overview's step chart drew a bar per step (3 minutes frozen at 60,000 steps)."""
    context, page, watch = open_page(browser, base)
    page.goto(f"{base}/?run=many&view=Overview")
    page.wait_for_selector("#step-chart .main-svg", timeout=READY_MS)
    xs = page.evaluate("() => document.getElementById('step-chart').data[0].x")
    assert len(xs) == 150 and xs[0] == "0–2" and xs[-1] == "447–449"
    assert "450 steps: each column is the mean of 3 consecutive steps" in \
        page.locator("#step-chart-means").inner_text()
    watch.assert_clean()
    context.close()
