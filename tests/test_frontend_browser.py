"""Browser tests of the dashboard: headless Debian Chromium (Playwright) against the real
standalone server, inside TensorBoard, and (for states the real traces never reach:
loading progress, a 422, no kernels) against the stand-in backend of frontend_fixture.

Screenshots of every view go to $STEPSCOPE_TEST_OUTPUT (default ./test-output).
Skipped when /usr/bin/chromium (or $STEPSCOPE_CHROMIUM) is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import (
    KINETO,
    XSS,
    download_chart_png,
    have_chromium,
    open_page,
    query,
    screenshot,
    stepscope_server,
    tensorboard_frame,
    tensorboard_server,
    wsgi_server,
    xss_trace,
)
from tracebuild import NO_SHARED

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
playwright_api = pytest.importorskip("playwright.sync_api")

READY_MS = 90_000  # first analysis of a trace, on a slow CI machine
WORKERS_0 = "resnet50_num_workers_0"
WORKERS_4 = "resnet50_num_workers_4"


def page_url(page) -> str:
    return page.evaluate("() => location.href")


def shot(page, name: str) -> Path:
    return screenshot(page, f"frontend_{name}")


def wait_plot(page_or_frame, selector: str) -> None:
    page_or_frame.wait_for_selector(f"{selector} .main-svg", timeout=READY_MS)


# -- standalone server, shared kineto traces ----------------------------------------------------
def test_overview_step_chart_recommendation_offline(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Overview")
    wait_plot(page, "#step-chart")
    steps = page.evaluate("() => document.getElementById('step-chart').data.map(t => t.x)")
    assert steps and all(x == [f"Step {n}" for n in range(5, 11)] for x in steps), steps
    rec = page.locator(".recommendations li", has_text="DataLoader")
    assert rec.count() == 1
    assert "21.0%" in rec.inner_text()
    assert page.locator(".summary-table").inner_text().count("%") >= 8
    assert page.locator(".gpu-head strong").all_inner_texts() == ["GPU0"]  # as the other views
    q = query(page)
    assert q["run"] == WORKERS_0 and q["worker"] == "worker0" and q["view"] == "Overview"
    assert q["span"], "the span is always written explicitly"
    assert page.evaluate("() => location.pathname") == "/data/plugin/stepscope/index.html"
    shot(page, "overview")
    name, data = download_chart_png(page, "#step-chart")  # the chart's one tool, under our CSP
    assert name == "stepscope-step-chart.png" and data[:8] == b"\x89PNG\r\n\x1a\n"
    watch.assert_clean()
    assert any("vendor/plotly.min.js" in r for r in watch.requests)
    context.close()


def test_overview_deep_link_to_an_unknown_span_says_so(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&span=no-such-span&view=Overview")
    page.wait_for_selector(".view-root", timeout=READY_MS)
    banner = page.locator("#banner .banner")
    assert banner.is_visible()
    assert "Span “no-such-span” not found in worker “worker0”: showing the latest span." in banner.inner_text()
    spans = page.evaluate("() => [...document.querySelectorAll('#span option')].map(o => o.value)")
    assert query(page)["span"] == spans[-1]  # the latest, written back to the URL
    watch.assert_clean()
    context.close()


def test_overview_readable_on_laptop_and_wide_screens(browser, kineto_url):
    for name, (w, h) in {"laptop": (1280, 720), "wide": (2560, 1300)}.items():
        context, page, watch = open_page(browser, kineto_url, width=w, height=h)
        page.goto(f"{kineto_url}/?run={WORKERS_4}&worker=worker0&view=Overview")
        wait_plot(page, "#step-chart")
        # nothing overflows the page sideways
        assert page.evaluate("() => document.documentElement.scrollWidth") <= w
        shot(page, f"overview_{name}")
        watch.assert_clean()
        context.close()


def test_kernel_deep_link_grouping_sorting_search_in_url(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_4}&worker=worker0&view=Kernel")
    table = page.locator("#kernel-table")
    table.locator("tbody tr").first.wait_for(timeout=READY_MS)
    assert page.locator("#run").input_value() == WORKERS_4
    assert page.locator(".tab.active").inner_text() == "Kernel"
    q = query(page)
    assert (q["run"], q["worker"], q["view"]) == (WORKERS_4, "worker0", "Kernel") and q["span"]
    assert "62 kernels" in table.locator(".table-count").inner_text()
    assert "dgrad_engine" in table.locator("tbody tr").first.inner_text()
    wait_plot(page, "#kernel-pie")
    shot(page, "kernel")

    page.select_option("#kernel-group-by", "KernelNameAndOpName")
    page.locator("#kernel-table th", has_text="Operator").wait_for()
    assert query(page)["kernel_group_by"] == "KernelNameAndOpName"
    sort_calls = page.locator("#kernel-table th button.sort", has_text="Calls")
    sort_calls.click()
    assert (query(page)["sort"], query(page)["dir"]) == ("calls", "desc")
    page.locator("#kernel-table th button.sort", has_text="Calls").click()
    assert (query(page)["sort"], query(page)["dir"]) == ("calls", "asc")
    page.fill("#kernel-table .table-search", "sgemm")
    assert query(page)["search"] == "sgemm"
    before = table.locator("tbody").inner_text()

    page.reload()
    table.locator("tbody tr").first.wait_for(timeout=READY_MS)
    assert page.locator("#kernel-group-by").input_value() == "KernelNameAndOpName"
    assert page.locator("#kernel-table .table-search").input_value() == "sgemm"
    assert page.locator("#kernel-table th[aria-sort=ascending]").inner_text().startswith("Calls")
    assert table.locator("tbody").inner_text() == before
    rows = table.locator("tbody tr").all_inner_texts()
    assert rows and all("sgemm" in r.lower() for r in rows)
    calls = [int(re.split(r"\t", r)[2].replace(",", "")) for r in rows]
    assert calls == sorted(calls)
    shot(page, "kernel_grouped_sorted")

    # another view is a history entry; Back restores the kernel page as it was
    page.locator(".tab", has_text="Overview").click()
    wait_plot(page, "#step-chart")
    page.go_back()
    table.locator("tbody tr").first.wait_for(timeout=READY_MS)
    assert query(page)["kernel_group_by"] == "KernelNameAndOpName"
    watch.assert_clean()
    context.close()


def test_operator_view_pies_grouping_and_paging(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Operator")
    wait_plot(page, "#operator-pie")
    legend = page.locator("#operator-pie .legendtext").all_text_contents()
    assert legend[0] == "aten::cudnn_convolution_backward_weight"
    assert any(t.startswith("Other (") for t in legend), "tail folded into Other"
    page.locator(".segmented button", has_text="Host self time").click()
    assert query(page)["op_pie"] == "host_self_time"
    count = page.locator(".table-count").inner_text()
    assert re.match(r"\d+ operators", count)
    assert "1–25 of" in page.locator(".pager-range").inner_text()
    page.locator(".page-next").click()
    assert "26–50 of" in page.locator(".pager-range").inner_text()
    shot(page, "operator")
    page.select_option("#op-group-by", "OperationAndInputShape")
    page.locator("th", has_text="Input shape").wait_for(timeout=READY_MS)
    assert query(page)["op_group_by"] == "OperationAndInputShape"
    page.reload()
    page.locator("th", has_text="Input shape").wait_for(timeout=READY_MS)
    assert page.locator("#op-group-by").input_value() == "OperationAndInputShape"
    wait_plot(page, "#operator-pie")
    assert page.locator(".segmented button.active").inner_text() == "Host self time"
    shot(page, "operator_by_shape")
    watch.assert_clean()
    context.close()


def test_trace_view_slot_and_copy_link(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace")
    page.locator(".view-root[data-view=Trace] .card").wait_for(timeout=READY_MS)
    shot(page, "trace")
    page.click("#copy-link")
    page.locator("#toast.show").wait_for()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == page_url(page)
    assert query(page)["view"] == "Trace" and query(page)["span"]
    watch.assert_clean()
    context.close()


VIEW_SETTLED = """() => !document.querySelector('#view .loading-line, #progress .progress-panel')
    && document.querySelector('#view .view-root .card')
    && [...document.querySelectorAll('#view .chart')].every(c => c.querySelector('.main-svg'))"""


@pytest.mark.slow
def test_every_view_of_every_shared_run_renders(browser):
    """Sweep: each run under ../shared/traces, each view it lists, renders without errors."""
    from browser import SHARED_TRACES

    if not SHARED_TRACES.is_dir():
        pytest.skip(NO_SHARED)
    with stepscope_server(SHARED_TRACES) as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}/")
        page.locator(".tab").first.wait_for(timeout=READY_MS)
        runs = page.locator("#run option").evaluate_all("os => os.map(o => o.value)")
        assert len(runs) >= 8
        seen = []
        for run in runs:
            page.select_option("#run", run)
            page.locator(".tab").first.wait_for(timeout=READY_MS)
            for view in page.locator(".tab").all_text_contents():
                page.locator(".tab", has_text=view).click()
                page.wait_for_function(VIEW_SETTLED, timeout=READY_MS)
                errors = page.locator(".error-panel").all_inner_texts()
                assert not errors, f"{run} / {view}: {errors}"
                seen.append((run, view))
            shot(page, f"sweep_{run.replace('/', '_')}")
        assert ("param_v100_dlrm_8rank", "Kernel") in seen
        watch.assert_clean()
        context.close()


# -- inside TensorBoard ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("path_prefix", ["", "/tb/prefix"])
def test_dashboard_inside_tensorboard(browser, tmp_path, path_prefix):
    if not KINETO.is_dir():
        pytest.skip(NO_SHARED)
    with tensorboard_server(KINETO, path_prefix=path_prefix) as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}{path_prefix}/#stepscope")
        frame = tensorboard_frame(page)
        wait_plot(frame, "#step-chart")
        assert frame.locator("#run").input_value() == WORKERS_0
        assert "21.0%" in frame.locator(".recommendations li", has_text="DataLoader").inner_text()
        assert frame.evaluate("() => location.pathname") == f"{path_prefix}/data/plugin/stepscope/index.html"
        frame.locator(".tab", has_text="Kernel").click()
        frame.locator("#kernel-table tbody tr").first.wait_for(timeout=READY_MS)
        assert query(frame)["view"] == "Kernel" and query(frame)["span"]
        frame.select_option("#run", WORKERS_4)
        frame.locator("#kernel-table tbody tr").first.wait_for(timeout=READY_MS)
        wait_plot(frame, "#kernel-pie")
        assert "62 kernels" in frame.locator("#kernel-table .table-count").inner_text()
        assert query(frame)["run"] == WORKERS_4
        shot(page, f"tensorboard{path_prefix.replace('/', '_')}")
        assert not watch.dialogs and not watch.page_errors
        context.close()




def hover_texts(page, selector: str) -> list[str]:
    """Hover each plotly element matching `selector`; the tooltip texts shown."""
    out = []
    for item in page.locator(selector).all()[:12]:
        try:
            item.hover(force=True, timeout=2000)
            tip = page.locator(".hoverlayer .hovertext").first
            tip.wait_for(timeout=2000)
        except playwright_api.Error:  # a zero-size segment: nothing to hover
            continue
        out.append(tip.text_content())
    return out


# -- hostile names -------------------------------------------------------------------------
def test_a_trace_without_profiler_steps_is_charted_as_the_whole_trace(browser, tmp_path):
    # SPEC §2.1.1 makes it one step "0": it was drawn as a real "Step 0"
    _cpu_trace(tmp_path / "nosteps" / "w.pt.trace.json")
    with stepscope_server(tmp_path) as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}/?run=nosteps&worker=w&view=Overview")
        wait_plot(page, "#step-chart")
        xs = page.evaluate("() => document.getElementById('step-chart').data.map(t => t.x)")
        assert xs and all(x == ["Whole trace"] for x in xs), xs
        titles = page.locator(".card h2").all_inner_texts()
        assert "Step Time Breakdown (whole trace: no ProfilerStep)" in titles, titles
        watch.assert_clean()
        context.close()


def _cpu_trace(path: Path, op: str = "aten::mm") -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 40}
        for t in (0, 50)]}))


def test_the_open_page_follows_new_spans_workers_and_a_removed_run(browser, tmp_path):
    """New spans and workers of the run shown appear in its selectors (only new runs did);
    a run deleted while shown stays selected as "(removed)" with a banner (the selector
    showed another run while the page showed the deleted one)."""
    import shutil

    _cpu_trace(tmp_path / "runA" / "worker0.100.pt.trace.json")
    _cpu_trace(tmp_path / "runS" / "worker0.100.pt.trace.json")
    with stepscope_server(tmp_path, "--reload-interval", "1") as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}/?run=runS&worker=worker0&view=Overview")
        wait_plot(page, "#step-chart")
        options = "id => [...document.querySelectorAll(`#${id} option`)].map(o => o.value)"
        assert page.evaluate(options, "span") == ["100"]
        _cpu_trace(tmp_path / "runS" / "worker0.200.pt.trace.json")
        _cpu_trace(tmp_path / "runS" / "worker1.100.pt.trace.json")
        page.wait_for_function(f"() => ({options})('span').length === 2 && ({options})('worker')"
                               ".length === 2", timeout=40_000)
        assert page.evaluate(options, "worker") == ["worker0", "worker1"]
        assert page.locator("#span").input_value() == "100"  # still the span shown
        shutil.rmtree(tmp_path / "runS")
        page.wait_for_function("() => document.querySelector('#banner').innerText.includes("
                               "'no longer in the log directory')", timeout=40_000)
        assert page.locator("#run").input_value() == "runS"
        assert page.locator("#run option:checked").inner_text() == "runS (removed)"
        assert "Run “runS” is no longer" in page.locator("#banner").inner_text()
        page.select_option("#run", "runA")  # another run is picked as usual
        page.wait_for_function("() => new URLSearchParams(location.search).get('run') === 'runA'")
        wait_plot(page, "#step-chart")
        assert page.evaluate(options, "run") == ["runA"]
        context.close()


def test_html_in_trace_names_renders_as_text(browser, tmp_path):
    run = "run<svg onload=alert(5)>"
    xss_trace(tmp_path / run / "worker<img src=y onerror=alert(4)>.pt.trace.json.gz")
    with stepscope_server(tmp_path) as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}/")
        page.locator(".tab").first.wait_for(timeout=READY_MS)
        assert page.locator("#run").input_value() == run
        assert page.locator("#run option").all_text_contents() == [run]
        views = page.locator(".tab").all_text_contents()
        assert {"Overview", "Operator", "Kernel"} <= set(views)
        for view in views:
            page.locator(".tab", has_text=view).click()
            page.locator(f".view-root[data-view={view}] .card").first.wait_for(timeout=READY_MS)
            page.wait_for_timeout(500)
            if view == "Operator":
                wait_plot(page, "#operator-pie")
                cells = page.locator(".data-table td.first").all_text_contents()
                assert XSS in cells and "aten::mm<script>alert(2)</script>" in cells
                assert any(t.startswith(XSS) for t in page.locator("#operator-pie .legendtext").all_text_contents())
                assert any(XSS in t for t in hover_texts(page, "#operator-pie .slice"))
                page.locator("tr", has=page.locator("td.first", has_text=XSS)).locator("button.expand").click()
                page.locator(".stack-frames").first.wait_for(timeout=READY_MS)
                assert XSS in page.locator(".stack-frames").first.inner_text()
            if view == "Kernel":
                wait_plot(page, "#kernel-pie")
                names = page.locator("#kernel-table td.first").all_text_contents()
                assert f"void k<{XSS}, &amp;>(<b>int</b>) #0" in names
                legend = page.locator("#kernel-pie .legendtext").all_text_contents()
                # shown literally: plotly neither ran the tags nor decoded the trace's "&amp;"
                assert any(t.startswith("k<") and "&amp;>(<b>int</b>)" in t for t in legend), legend
                assert any("<b>int</b>" in t for t in hover_texts(page, "#kernel-pie .slice"))
            if view == "Overview":
                wait_plot(page, "#step-chart")
                assert hover_texts(page, "#step-chart .point")
            assert page.locator("img").count() == 0, f"an <img> element appeared on {view}"
            assert page.locator("script:not([src])").count() == 0
            shot(page, f"xss_{view.lower()}")
        assert not watch.dialogs, watch.dialogs
        assert not watch.page_errors and not watch.external
        context.close()


# -- states the real traces do not reach: stand-in backend ------------------------------------
@pytest.fixture(scope="module")
def fixture_url():
    from frontend_fixture import fixture_app
    with wsgi_server(fixture_app()) as base:
        yield base


def test_loading_progress_from_202_answers(browser, fixture_url):
    context, page, watch = open_page(browser, fixture_url)
    page.goto(f"{fixture_url}/?run=slow&view=Overview")
    bar = page.locator(".progress-panel [role=progressbar]")
    bar.wait_for(timeout=10_000)
    assert re.search(r"\d+%", page.locator(".progress-label").inner_text())
    shot(page, "state_loading")
    wait_plot(page, "#step-chart")
    assert page.locator(".progress-panel").count() == 0
    watch.assert_clean()
    context.close()


def test_unusable_trace_error_names_the_file(browser, fixture_url):
    context, page, watch = open_page(browser, fixture_url)
    page.goto(f"{fixture_url}/?run=broken&view=Overview")
    panel = page.locator(".error-panel")
    panel.wait_for(timeout=10_000)
    text = panel.inner_text()
    assert "worker0.pt.trace.json.gz" in text and "1,204,113" in text and "not JSON" in text
    # the run picker still works after an error
    page.select_option("#run", "resnet50_num_workers_0")
    wait_plot(page, "#step-chart")
    shot(page, "state_after_error")
    assert not watch.dialogs and not watch.page_errors and not watch.external
    context.close()


def test_empty_states_instead_of_blank_charts(browser, fixture_url):
    context, page, watch = open_page(browser, fixture_url)
    page.goto(f"{fixture_url}/?run=cpu_only&view=Kernel")
    page.locator(".empty-state", has_text="no GPU kernels").wait_for(timeout=10_000)
    shot(page, "state_no_kernels")
    page.locator(".tab", has_text="Operator").click()
    page.locator(".empty-state", has_text="No operator").first.wait_for(timeout=10_000)
    page.goto(f"{fixture_url}/?run=no_such_run&view=Overview")
    page.locator(".banner", has_text="no_such_run").wait_for(timeout=10_000)
    watch.assert_clean()
    context.close()
