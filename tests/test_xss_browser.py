"""Hostile strings in the dashboard (issue 7): every view, with a dialog listener.

One real standalone server over a log directory whose run folder, file name, operator,
kernel, category, thread, call stack, GPU name and DataParallel frame (so a recommendation
quotes it) are HTML, whose file starts with a BOM (so a data-quality note quotes the file
name), next to a run whose damaged file has a hostile name (the error panel quotes it).
Every view is opened, hovered and clicked; no dialog may fire, no element may be created
from trace text, and each hostile string must show up literally as text.

Skipped when /usr/bin/chromium (or $STEPSCOPE_CHROMIUM) is missing.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlsplit

import orjson
import pytest
from browser import PageWatch, have_chromium, launch, output_dir, stepscope_server
from damaged import HOSTILE_RUN, SOURCE, XSS, base_doc, dump, html_names
from tracebuild import NO_SHARED

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(not SOURCE.is_file(), reason=NO_SHARED),
]
playwright_api = pytest.importorskip("playwright.sync_api")

READY_MS = 90_000
WORKER = f"w{XSS}\"'&"
FILE = f"{WORKER}.pt.trace.json"
BROKEN_RUN = "broken <svg onload=alert(7)>"
BROKEN_FILE = "<img src=z onerror=alert(8)>.pt.trace.json"
EVIL_FRAME = "nn.Module: DataParallel<img src=q onerror=alert(6)>"


def hostile_trace() -> bytes:
    """The corpus's html-names case, plus a second GPU and an evil DataParallel frame (so the
    DataParallel recommendation quotes it), behind a BOM (so a note quotes the file name)."""
    doc = orjson.loads(html_names(base_doc()))
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "Operator"]
    kern = next(e for e in doc["traceEvents"] if e.get("cat") == "Kernel")
    doc["traceEvents"] += [
        {"ph": "X", "cat": "python_function", "name": EVIL_FRAME, "pid": ops[0]["pid"],
         "tid": ops[0]["tid"], "ts": ops[0]["ts"], "dur": 1},
        dict(kern, pid=1, args=dict(kern["args"], device=1)),
    ]
    doc["deviceProperties"].append(dict(doc["deviceProperties"][0], id=1))
    return b"\xef\xbb\xbf" + dump(doc)


@pytest.fixture(scope="module")
def hostile_url(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("xss")
    (logdir / HOSTILE_RUN).mkdir()
    (logdir / HOSTILE_RUN / FILE).write_bytes(hostile_trace())
    (logdir / BROKEN_RUN).mkdir()
    (logdir / BROKEN_RUN / BROKEN_FILE).write_bytes(b"<html><script>alert(9)</script></html>")
    with stepscope_server(logdir) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


def assert_inert(page, where: str) -> None:
    """No element made from trace text: no <img>/<svg onload>/inline <script>/on* attribute."""
    assert page.locator("img").count() == 0, where
    assert page.locator("script:not([src])").count() == 0, where
    handlers = page.evaluate("""() => [...document.querySelectorAll('*')].flatMap(e =>
        [...e.attributes].filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name))""")
    assert not handlers, (where, handlers)


def hover_around(page, selector: str, limit: int = 6) -> None:
    """Hover a few chart elements (tooltips are where markup would be parsed)."""
    items = page.locator(selector)
    for i in range(min(items.count(), limit)):
        try:
            items.nth(i).hover(timeout=2_000, force=True)
            page.wait_for_timeout(100)
        except playwright_api.Error:
            continue


def test_hostile_strings_are_text_in_every_view(browser, hostile_url):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    watch = PageWatch(urlsplit(hostile_url).netloc).attach(context, page)
    page.goto(f"{hostile_url}/?run={quote(HOSTILE_RUN)}&view=Overview")
    page.locator(".tab").first.wait_for(timeout=READY_MS)
    assert page.locator("#run").input_value() == HOSTILE_RUN
    # long names are shortened in the middle; the full name (as text) is the option's tooltip
    assert HOSTILE_RUN in page.locator("#run option").evaluate_all("os => os.map(o => o.title)")
    shown = page.locator("#run option", has_text="…").first.text_content()
    assert shown.startswith(HOSTILE_RUN[:10]) and shown.endswith(HOSTILE_RUN[-10:])

    views = page.locator(".tab").all_text_contents()
    assert {"Overview", "Operator", "Kernel", "Trace"} <= set(views), views
    for view in views:
        page.locator(".tab", has_text=view).click()
        page.locator(f".view-root[data-view={view}] .card").first.wait_for(timeout=READY_MS)
        page.wait_for_timeout(800)
        if view == "Overview":
            recs = page.locator(".recommendations").inner_text()
            assert EVIL_FRAME in recs, recs
            notes = page.locator(".notes").inner_text()
            assert FILE in notes, notes  # the BOM note names the file
            hover_around(page, "#step-chart .point")
        elif view in ("Operator", "Kernel"):
            text = page.locator(f".view-root[data-view={view}]").inner_text()
            assert XSS in text, view
            hover_around(page, ".slice")
            expand = page.locator("button.expand")
            if view == "Operator" and expand.count():
                expand.first.click()
                page.wait_for_timeout(500)
        elif view == "Trace":
            hook = "window.__stepscopeTrace"
            page.wait_for_function(f"() => {hook} && {hook}.drawn > 0", timeout=READY_MS)
            target = page.evaluate(f"() => {hook}.findBlock && {hook}.findBlock('host', {json.dumps(XSS + '1')})")
            box = page.locator("#trace-canvas").bounding_box()
            assert target and box, "no hostile host event drawn in the timeline"
            page.mouse.move(box["x"] + target["x"], box["y"] + target["y"])
            page.wait_for_timeout(300)
            page.mouse.click(box["x"] + target["x"], box["y"] + target["y"])
            name = page.locator("#trace-detail .event-name")
            name.wait_for(timeout=20_000)
            assert name.inner_text() == target["name"] and XSS in target["name"]
        assert_inert(page, view)
        page.screenshot(path=str(output_dir() / f"security_xss_{view.lower()}.png"), full_page=True)

    # a damaged file with a hostile name, in a hostile run: the error panel quotes it as text
    page.select_option("#run", BROKEN_RUN)
    panel = page.locator(".error-panel")
    panel.wait_for(timeout=READY_MS)
    text = panel.inner_text()
    assert BROKEN_FILE in text and "not JSON" in text, text
    assert "<script>alert(9)</script>" in text  # the file's first bytes, quoted literally
    assert_inert(page, "error panel")
    page.screenshot(path=str(output_dir() / "security_xss_error.png"), full_page=True)

    # an unknown hostile run in the URL: the banner names it as text
    page.goto(f"{hostile_url}/?run={quote('<svg onload=alert(10)>')}&view=Kernel")
    page.locator(".banner").wait_for(timeout=READY_MS)
    assert "<svg onload=alert(10)>" in page.locator(".banner").inner_text()
    page.wait_for_timeout(500)
    assert_inert(page, "banner")

    assert not watch.dialogs, watch.dialogs
    assert not watch.page_errors, watch.page_errors
    assert not watch.external, watch.external
    context.close()
