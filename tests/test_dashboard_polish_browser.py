"""Browser tests of the dashboard's first-hour polish (issue 18): a header that fits, span
capture times, and screenshots of every view at 1400 and 1024 px.

A log directory that looks like a real one: the shared kineto runs nested one level
(``kineto_resnet50/resnet50_num_workers_0`` and ``_4``: names that differ at their end)
next to the bundled samples (nanosecond time-stamp spans, two workers).
"""

from __future__ import annotations

import os
import re

import pytest
from browser import KINETO, have_chromium, open_page, screenshot, stepscope_server
from tracebuild import NO_SHARED

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
playwright_api = pytest.importorskip("playwright.sync_api")

READY_MS = 90_000
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples", "logs")
RUN_0 = "kineto_resnet50/resnet50_num_workers_0"
RUN_4 = "kineto_resnet50/resnet50_num_workers_4"
SAMPLE_RUN = "cpu_train_num_workers_2"
DDP_RUN = "cpu_ddp_2_workers"  # the samples' two-worker run
ROCM_RUN = "mi250_rocm"
SETTLED = """() => !document.querySelector('#view .loading-line')
    && document.querySelector('#view .view-root .card')
    && [...document.querySelectorAll('#view .chart')].every(c => c.querySelector('.main-svg'))"""


@pytest.fixture(scope="module")
def polish_url(tmp_path_factory):
    if not KINETO.is_dir():
        pytest.skip(NO_SHARED)
    logdir = tmp_path_factory.mktemp("polish_logs")
    os.symlink(KINETO, logdir / "kineto_resnet50")
    os.symlink(KINETO.parent / "hta_mi250_rocm62", logdir / ROCM_RUN)
    for run in os.listdir(SAMPLES):
        os.symlink(os.path.join(SAMPLES, run), logdir / run)
    with stepscope_server(logdir) as base:
        yield base


def header_rows(page) -> int:
    """Rows of the top bar: its direct children's vertical centres, clustered (20 px)."""
    centres = sorted(page.evaluate("""() => [...document.querySelector('.topbar').children]
        .map(c => { const r = c.getBoundingClientRect(); return (r.top + r.bottom) / 2; })"""))
    return 1 + sum(b - a > 20 for a, b in zip(centres, centres[1:]))


@pytest.mark.parametrize("width,rows", [(1400, 1), (1024, 2)])
def test_header_fits_and_long_names_stay_apart(browser, polish_url, width, rows):
    context, page, watch = open_page(browser, polish_url, width=width)
    page.goto(f"{polish_url}/?run={RUN_0}&worker=worker0&view=Overview")
    page.locator(".tab").first.wait_for(timeout=READY_MS)
    options = page.locator("#run option").evaluate_all(
        "os => os.map(o => [o.value, o.textContent, o.title])")
    shown = {v: t for v, t, _ in options}
    # the two runs differ only at their end: the middle goes, the ends stay
    assert shown[RUN_0] != shown[RUN_4] and shown[RUN_0].endswith("_0") and "…" in shown[RUN_0]
    assert all(title == v for v, _, title in options)          # full name on hover
    assert page.locator("#run").get_attribute("title") == RUN_0
    assert header_rows(page) == rows
    # "Copy link" sits on the first row, at the right edge
    top = page.evaluate("() => document.querySelector('.brand').getBoundingClientRect().top")
    box = page.locator("#copy-link").bounding_box()
    assert abs(box["y"] - top) < 20 and box["x"] + box["width"] > width - 40
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    screenshot(page, f"polish_header_{width}")
    watch.assert_clean()
    context.close()


def test_spans_show_their_capture_time(browser, polish_url):
    context, page, watch = open_page(browser, polish_url)
    page.goto(f"{polish_url}/?run={SAMPLE_RUN}&view=Overview")
    page.locator(".tab").first.wait_for(timeout=READY_MS)
    spans = page.locator("#span option").evaluate_all(
        "os => os.map(o => [o.value, o.textContent, o.title])")
    assert len(spans) == 2
    for value, text, title in spans:
        assert re.fullmatch(r"\d{19}", value)
        assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})? UTC", text), text
        assert value in title and text in title
    assert page.locator("#span").get_attribute("title").startswith("span ")
    watch.assert_clean()
    context.close()


def test_operator_by_shape_pies_by_operator_and_never_breaks_identifiers(browser, polish_url):
    context, page, watch = open_page(browser, polish_url)
    page.goto(f"{polish_url}/?run={RUN_0}&worker=worker0&view=Operator&op_group_by=OperationAndInputShape")
    page.wait_for_selector("#operator-pie .main-svg", timeout=READY_MS)
    page.locator("th", has_text="Input shape").wait_for(timeout=READY_MS)
    legend = page.locator("#operator-pie .legendtext").all_text_contents()
    # by operator: the same slices as "Group by operator", not (operator, shape) pairs
    assert legend[0] == "aten::cudnn_convolution_backward_weight" and "[" not in "".join(legend)
    shares = page.evaluate("""() => { const d = document.getElementById('operator-pie').data[0];
        const t = d.values.reduce((a, b) => a + b, 0);
        return d.labels.map((l, i) => [l, d.values[i] / t]); }""")
    other = [s for label, s in shares if label.startswith("Other")]
    assert not other or other[0] < 0.5, shares
    assert "groups by operator" in page.locator(".pie-note").inner_text()
    # line breaks only between identifiers: a name cell's pieces never end inside one
    cells = page.locator("td.name").evaluate_all(
        "tds => tds.map(td => [...td.childNodes].filter(n => n.nodeType === 3).map(n => n.data))")
    assert cells and [["aten::", "cudnn_convolution_backward_weight"]] == cells[:1]
    assert not [c for c in cells if any(p[-1:].isalnum() or p.endswith("_") for p in c[:-1])]
    assert page.locator("td.name").first.evaluate("td => getComputedStyle(td).overflowWrap") == "normal"
    watch.assert_clean()
    context.close()


def test_core_share_is_compact_and_rocm_says_matrix_cores(browser, polish_url):
    context, page, watch = open_page(browser, polish_url)
    page.goto(f"{polish_url}/?run={RUN_0}&worker=worker0&view=Kernel")
    share = page.locator("#tc-share .core-figure")
    share.wait_for(timeout=READY_MS)
    assert "of kernel time in Tensor Core kernels" in share.inner_text()
    card = page.locator(".card", has=page.locator("#tc-share"))
    assert card.locator("h2").inner_text() == "Tensor Core usage"
    assert card.bounding_box()["height"] < 160 and page.locator("#tc-pie").count() == 0
    page.goto(f"{polish_url}/?run={ROCM_RUN}&view=Kernel")
    page.locator("#tc-share .core-figure").wait_for(timeout=READY_MS)
    assert page.locator(".card h2", has_text="Matrix Core usage").count() == 1
    assert "Matrix Core kernels" in page.locator("#tc-share").inner_text()
    screenshot(page, "polish_kernel_rocm")
    page.locator(".tab", has_text="Operator").click()
    page.locator("th", has_text="MC eligible").wait_for(timeout=READY_MS)
    assert page.locator("th", has_text="TC eligible").count() == 0
    page.locator(".tab", has_text="Overview").click()
    page.locator(".gpu-card, .card", has_text="gfx90a").first.wait_for(timeout=READY_MS)
    assert "compute capability" not in page.locator("#view").inner_text()
    watch.assert_clean()
    context.close()


def test_table_page_in_the_url_and_a_favicon(browser, polish_url):
    from browser import query

    context, page, watch = open_page(browser, polish_url)
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(r.url))
    page.goto(f"{polish_url}/?run={RUN_0}&worker=worker0&view=Operator")
    page.locator(".page-next").wait_for(timeout=READY_MS)
    page.locator(".page-next").click()
    assert query(page)["page"] == "2" and "26–50 of" in page.locator(".pager-range").inner_text()
    page.reload()
    page.locator(".pager-range").wait_for(timeout=READY_MS)
    assert "26–50 of" in page.locator(".pager-range").inner_text()
    page.locator(".page-prev").click()
    assert "page" not in query(page)
    page.locator(".page-next").click()
    page.locator(".table-search").fill("conv")                  # a new search: back to page 1
    assert "page" not in query(page) and query(page)["search"] == "conv"
    icon = page.evaluate("() => document.querySelector('link[rel=icon]').href")
    assert page.request.get(icon).status == 200
    assert not failed, failed
    watch.assert_clean()
    context.close()


@pytest.mark.parametrize("width", [1400, 1024])
def test_screenshots_of_every_view(browser, polish_url, width):
    """test-output/polish_<run>_<view>_<width>.png for every view of a GPU run, the ROCm run
    and the CPU samples; the header stays within two rows and nothing overflows sideways."""
    context, page, watch = open_page(browser, polish_url, width=width)
    tabs = {}
    for run in (RUN_0, ROCM_RUN, SAMPLE_RUN, DDP_RUN):
        page.goto(f"{polish_url}/?run={run}")
        page.locator(".tab").first.wait_for(timeout=READY_MS)
        tabs[run] = page.locator(".tab").all_text_contents()
        for view in tabs[run]:
            page.locator(".tab", has_text=view).click()
            page.wait_for_function(SETTLED, timeout=READY_MS)
            page.wait_for_timeout(300)
            assert not page.locator(".error-panel").all_inner_texts(), (run, view)
            assert header_rows(page) <= 2, (run, view)
            assert page.evaluate("() => document.documentElement.scrollWidth") <= width, (run, view)
            screenshot(page, f"polish_{run.replace('/', '_')}_{view.lower()}_{width}")
    # the CPU samples show every view a CPU trace can fill (Kernel needs a GPU)
    for run in (SAMPLE_RUN, DDP_RUN):
        assert {"Overview", "Operator", "Trace", "Memory"} <= set(tabs[run]), tabs
        assert "Kernel" not in tabs[run], tabs
    assert "Distributed" in tabs[DDP_RUN] and "Distributed" not in tabs[SAMPLE_RUN], tabs
    watch.assert_clean()
    context.close()


def test_cpu_samples_say_what_a_gpu_trace_adds(browser, polish_url):
    context, page, watch = open_page(browser, polish_url)
    page.goto(f"{polish_url}/?run={SAMPLE_RUN}&view=Overview")
    empty = page.locator(".card", has_text="GPU Summary").locator(".empty-state")
    empty.wait_for(timeout=READY_MS)
    text = empty.inner_text()
    assert "Kernel view" in text and "ProfilerActivity.CUDA" in text
    watch.assert_clean()
    context.close()
