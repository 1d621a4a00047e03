"""Diff view in a real browser (SPEC §4.4, issue 17): the two golden runs compared (default
experiment = the next run), what changed most at the top, the breakdown side by side, the
delta tables (search into the URL), a deep link reopening the same comparison, a CPU-only
experiment (device cells blank, not 0), a failed experiment (says which side, no half
page) and "Swap sides". Screenshots go to test-output/ (diff_*.png)."""

from __future__ import annotations

import os

import pytest
from browser import KINETO, have_chromium, open_page, query, screenshot, stepscope_server
from tracebuild import NO_SHARED, SHARED, SHARED_TRACES, have_shared

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(not have_shared(), reason=NO_SHARED),
]
pytest.importorskip("playwright.sync_api")

READY_MS = 90_000
OLD = 1_700_000_000
W0, W4 = "resnet50_num_workers_0", "resnet50_num_workers_4"


@pytest.fixture(scope="module")
def diff_url(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("difflogs")
    for run in (W0, W4):
        (logdir / run).mkdir()
        (logdir / run / "worker0.pt.trace.json.gz").symlink_to(KINETO / run / "worker0.pt.trace.json.gz")
    (logdir / "zcpu").mkdir()
    (logdir / "zcpu" / "rank0.pt.trace.json.gz").symlink_to(
        os.path.join(SHARED, SHARED_TRACES["hta_cpu_only_gloo"]))
    (logdir / "zbad").mkdir()
    bad = logdir / "zbad" / "w.pt.trace.json"
    bad.write_text('{"traceEvents": []}')
    os.utime(bad, (OLD, OLD))
    with stepscope_server(logdir) as base:
        yield base


def column_texts(page, table_id, key):
    """Texts of the cells of column ``key`` in the table of ``#table_id``."""
    return page.evaluate("""([id, key]) => {
      const t = document.querySelector(`#${id} table`);
      const i = [...t.querySelectorAll('thead th')].findIndex(th => th.querySelector(`button[data-key="${key}"]`));
      return [...t.querySelectorAll('tbody tr')].map(tr => tr.children[i].textContent);
    }""", [table_id, key])


def wait_compared(page):
    page.locator("#diff-operators tbody tr").first.wait_for(timeout=READY_MS)
    page.locator("#diff-kernels tbody tr").first.wait_for(timeout=READY_MS)


def test_diff_view_golden_runs_deep_link_cpu_side_failure_and_swap(browser, diff_url):
    context, page, watch = open_page(browser, diff_url)
    page.goto(f"{diff_url}/?run={W0}&worker=worker0&span=default&view=Diff")
    wait_compared(page)
    page.wait_for_selector("#diff-breakdown-chart .main-svg", timeout=READY_MS)
    q = query(page)
    assert (q["diff_run"], q["diff_worker"], q["diff_span"]) == (W4, "worker0", "default")
    summary = page.locator("#diff-summary").inner_text()
    assert summary.startswith("Step time -27.8 ms per step (faster, -18.66 %")
    assert "mostly DataLoader -31.2 ms" in summary
    assert page.locator("#diff-evidence li").count() == 3
    rows = page.locator("#diff-breakdown tbody tr")
    assert rows.nth(5).inner_text().split("\t")[:2] == ["DataLoader", "31.23\u00a0ms"]
    assert rows.last.inner_text().split("\t")[0] == "Total"
    assert page.locator("#diff-breakdown tbody tr td.delta-down").count() > 0
    names = page.evaluate("() => document.getElementById('diff-breakdown-chart').data.map(t => t.name)")
    assert names[0] == "Kernel" and "DataLoader" in names
    assert "operators" in page.locator("#diff-operators .table-count").inner_text()
    screenshot(page, "diff_golden_runs")

    # search the operator table: into the URL; the link reopens the same comparison
    page.locator("#diff-operators .table-search").fill("conv")
    page.wait_for_function("() => new URLSearchParams(location.search).get('search') === 'conv'")
    assert all("conv" in n.lower() for n in column_texts(page, "diff-operators", "name"))
    link = page.evaluate("() => location.href")
    page2 = context.new_page()
    page2.goto(link)
    wait_compared(page2)
    assert page2.locator("#diff-summary").inner_text() == summary
    assert page2.locator("#diff-operators .table-search").input_value() == "conv"
    assert page2.locator("#diff-run").input_value() == W4
    page2.close()
    watch.assert_clean()

    # a CPU-only experiment: its device cells are blank, not 0
    with page.expect_response(lambda r: "diff/operators" in r.url and "diff_run=zcpu" in r.url):
        page.select_option("#diff-run", "zcpu")
    wait_compared(page)
    assert query(page)["diff_run"] == "zcpu"
    page.locator("#diff-operators .table-search").fill("")
    cells = column_texts(page, "diff-operators", "e_device_self_us")
    assert cells and all(c == "" for c in cells)
    assert any(c not in ("", "0\u00a0µs") for c in column_texts(page, "diff-operators", "b_device_self_us"))
    assert all(c == "" for c in column_texts(page, "diff-kernels", "e_total_us"))
    screenshot(page, "diff_cpu_experiment")

    # a failed experiment: the page says which side, and shows no half-done comparison
    page.select_option("#diff-run", "zbad")
    page.wait_for_selector("#diff-error", timeout=READY_MS)
    assert page.locator("#diff-error").get_attribute("data-side") == "experiment"
    assert "The experiment (zbad / w" in page.locator("#diff-error").inner_text()
    assert page.locator("#diff-operators").count() == 0 and page.locator("#diff-summary").count() == 0
    screenshot(page, "diff_failed_experiment")

    # swap: the experiment becomes the page's span
    page.select_option("#diff-run", W4)
    wait_compared(page)
    page.locator("#diff-swap").click()
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('run') === '{W4}'")
    wait_compared(page)
    q = query(page)
    assert (q["run"], q["diff_run"], q["view"]) == (W4, W0, "Diff")
    page.wait_for_function("() => (document.getElementById('diff-summary')?.innerText ?? '')"
                           ".startsWith('Step time +27.8 ms per step (slower')", timeout=READY_MS)
    context.close()


def test_a_side_still_loading_is_named_and_nothing_is_shown_half_done(browser, diff_url):
    """While the server answers 202 for the experiment, the page says so and shows no
    comparison; once it answers, the comparison appears."""
    context, page, watch = open_page(browser, diff_url)
    answered = []

    def loading(route):
        if len(answered) < 3:
            answered.append(route.request.url)
            route.fulfill(status=202, headers={"Retry-After": "1"}, content_type="application/json",
                          body='{"loading": true, "phase": "analyse", "fraction": 0.5, "elapsed_s": 2.0,'
                               ' "side": "experiment", "sides": ["experiment"]}')
        else:
            route.continue_()

    page.route("**/diff/overview?*", loading)
    page.goto(f"{diff_url}/?run={W0}&worker=worker0&span=default&view=Diff"
              f"&diff_run={W4}&diff_worker=worker0&diff_span=default")
    page.wait_for_selector("#diff-loading", timeout=READY_MS)
    assert page.locator("#diff-loading").get_attribute("data-side") == "experiment"
    text = page.locator("#diff-loading").inner_text()
    assert f"Waiting for the experiment ({W4} / worker0 / default)" in text and "50%" in text
    assert page.locator("#diff-summary").count() == 0 and page.locator("#diff-operators").count() == 0
    screenshot(page, "diff_loading_experiment")
    wait_compared(page)
    assert len(answered) == 3 and page.locator("#diff-loading").count() == 0
    watch.assert_clean()
    context.close()
