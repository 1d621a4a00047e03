"""Browser test of the Distributed view (issue 15): the DLRM 8-rank job in headless Debian
Chromium against the real standalone server; screenshot in test-output/."""

from __future__ import annotations

import shutil

import pytest
from browser import SHARED_TRACES, have_chromium, open_page, query, screenshot, stepscope_server
from tracebuild import NO_SHARED

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(not (SHARED_TRACES / "param_v100_dlrm_8rank").is_dir(), reason=NO_SHARED),
]
pytest.importorskip("playwright.sync_api")

READY_MS = 90_000


@pytest.fixture(scope="module")
def dlrm_url(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    shutil.copytree(SHARED_TRACES / "param_v100_dlrm_8rank", logdir / "dlrm")
    shutil.copytree(SHARED_TRACES / "hta_cpu_only_gloo", logdir / "gloo1")
    with stepscope_server(logdir) as base:
        yield f"{base}/data/plugin/stepscope"


def test_distributed_view_charts_straggler_deep_link_and_rank_click(browser, dlrm_url):
    context, page, watch = open_page(browser, dlrm_url)
    page.goto(f"{dlrm_url}/?run=dlrm&worker=worker3_step_12&view=Distributed")
    page.wait_for_selector("#dist-breakdown .main-svg", timeout=READY_MS)
    assert page.locator("#tabs [data-view=Distributed]").count() == 1
    bars = page.evaluate("() => document.getElementById('dist-breakdown').data.map(t => t.x)")
    assert bars and all(x == [f"rank {r}" for r in range(8)] for x in bars), bars
    page.wait_for_selector("#dist-straggler", timeout=READY_MS)
    straggler = page.locator("#dist-straggler").inner_text()
    api = page.evaluate("(u) => fetch(u).then(r => r.json())", f"{dlrm_url}/distributed/straggler?run=dlrm")
    assert straggler == (api["text"] if api else straggler)
    page.wait_for_selector("#dist-heatmap .main-svg", timeout=READY_MS)
    page.wait_for_selector("#dist-collectives tbody tr", timeout=READY_MS)
    assert page.locator("#dist-collectives tbody tr").count() == 2  # all_to_all, all_reduce
    # the per-rank table: each rank's average over its steps, as the API gives them
    rows = page.locator("#dist-rank-table tbody tr")
    assert rows.count() == 8
    api_ranks = page.evaluate("(u) => fetch(u).then(r => r.json())", f"{dlrm_url}/distributed/ranks?run=dlrm")
    for i in (0, 7):
        steps = api_ranks["ranks"][i]["steps"]
        want = [round(sum(s[k] for s in steps) / len(steps) + 1e-9) for k in ("total_us", "wait_us")]
        cells = rows.nth(i).locator("td")
        got = [int(cells.nth(c).get_attribute("title").replace(",", "").split()[0]) for c in (3, 8)]
        assert cells.nth(0).inner_text() == str(i) and got == want, (got, want)
    screenshot(page, "frontend_distributed")
    # the step choice is in the URL and survives a reload
    step = page.locator("#dist-step option").nth(1).get_attribute("value")
    page.select_option("#dist-step", step)
    page.wait_for_function("(s) => new URLSearchParams(location.search).get('dist_step') === s", arg=step)
    page.reload()
    page.wait_for_selector("#dist-breakdown .main-svg", timeout=READY_MS)
    assert page.locator("#dist-step").input_value() == step
    assert f"step {step}" in page.locator("#dist-rank-table").inner_text()
    # clicking a rank opens its overview
    page.locator("#dist-ranks a[data-rank='5']").click()
    page.wait_for_selector("#step-chart .main-svg", timeout=READY_MS)
    q = query(page)
    assert q["view"] == "Overview" and q["worker"].startswith("worker5") and q["run"] == "dlrm"
    assert "dist_step" not in q
    page.go_back()
    page.wait_for_selector("#dist-breakdown .main-svg", timeout=READY_MS)
    watch.assert_clean()
    context.close()


def test_single_rank_run_shows_notes_and_no_straggler(browser, dlrm_url):
    """One gloo rank of 300: per-rank charts, the missing ranks in a note, a null straggler
    (the API's ``null`` answer is a value, not an error)."""
    context, page, watch = open_page(browser, dlrm_url)
    page.goto(f"{dlrm_url}/?run=gloo1&view=Distributed")
    page.wait_for_selector("#dist-breakdown .main-svg", timeout=READY_MS)
    page.wait_for_selector("#dist-straggler", timeout=READY_MS)
    assert "No straggler analysis" in page.locator("#dist-straggler").inner_text()
    notes = page.locator("#dist-notes").inner_text()
    assert "299 of 300 ranks are missing" in notes and "single rank" in notes
    assert page.locator(".error-panel").count() == 0
    screenshot(page, "frontend_distributed_single_rank")
    watch.assert_clean()
    context.close()
