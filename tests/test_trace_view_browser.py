"""Browser tests of the Trace view (issue 6): headless Debian Chromium (Playwright) against
the real standalone server over the shared ResNet-50 traces, a tiny trace with HTML in its
names, and a stand-in backend for the loading (202) and error answers.

The view exposes ``window.__stepscopeTrace``: ``requests`` (every trace/timeline request:
start, end, width), ``answers`` (answers drawn), ``lastAnswer``, ``window`` (the window
drawn last), ``drawn`` (blocks painted), ``selected`` (event id) and ``findBlock(kind,
name)`` (canvas position of the widest single event shown in a lane of that kind).
Screenshots go to $STEPSCOPE_TEST_OUTPUT (default ./test-output) as trace_*.png.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from browser import (
    FRONTEND,
    PREFIX,
    XSS,
    PageWatch,
    have_chromium,
    open_page,
    query,
    screenshot,
    stepscope_server,
    wsgi_server,
    xss_trace,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
playwright_api = pytest.importorskip("playwright.sync_api")

READY_MS = 90_000
WORKERS_0 = "resnet50_num_workers_0"
HOOK = "window.__stepscopeTrace"
#: share of the plot area's pixels that are not (near) white
INK = """() => {
  const c = document.getElementById('trace-canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) ink += 1;
  return ink / (d.length / 4);
}"""


# -- helpers --------------------------------------------------------------------------------------


def shot(page, name: str) -> Path:
    return screenshot(page, f"trace_{name}")


def hook(page, expr: str = ""):
    return page.evaluate(f"() => {HOOK}{expr}")


def wait_drawn(page, answers: int = 1) -> None:
    page.wait_for_function(f"() => {HOOK} && {HOOK}.answers >= {answers} && {HOOK}.drawn > 0", timeout=READY_MS)


def wait_window(page, predicate: str) -> dict:
    """Wait until an answer for the window now shown has arrived and `predicate(win)` holds."""
    page.wait_for_function(f"""() => {{
      const h = {HOOK}, a = h.lastAnswer, win = h.window;
      return win && ({predicate})(win) && Math.abs(a.start - win.start) < 1e-3 && Math.abs(a.end - win.end) < 1e-3;
    }}""", timeout=20_000)
    return hook(page, ".window")


def canvas_box(page) -> dict:
    return page.locator("#trace-canvas").bounding_box()


def timeline_requests(watch: PageWatch) -> list[tuple[str, str]]:
    """(start, end) of every trace/timeline request the page made."""
    out = []
    for url in watch.requests:
        parts = urlsplit(url)
        if parts.path.endswith("/trace/timeline"):
            q = parse_qs(parts.query)
            out.append((q.get("start", [""])[0], q.get("end", [""])[0]))
    return out


# -- the real server, shared ResNet-50 trace -------------------------------------------------------------
def test_zoom_pan_keys_url_and_details(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace")
    wait_drawn(page)
    answer = hook(page, ".lastAnswer")
    kinds = {lane["kind"] for lane in answer["lanes"]}
    assert {"host", "device", "counter"} <= kinds, kinds
    assert answer["steps"] and answer["names"]
    full = hook(page, ".window")
    assert full["start"] == answer["range"][0] and full["end"] == answer["range"][1]
    assert page.evaluate(INK) > 0.05, "the canvas looks blank"
    width = hook(page, ".requests[0].width")
    assert 500 < width < 1400, "the request asks for the plot's pixel width"
    download = page.locator("#trace-download")
    href = download.get_attribute("href")
    assert href.startswith("trace/download?") and f"run={WORKERS_0}" in href and "span=default" in href
    status = page.evaluate("h => fetch(h, {method: 'HEAD'}).then(r => r.status)", href)
    assert status == 200
    shot(page, "whole")

    # wheel zoom around the cursor: a new, narrower window is fetched and drawn
    box = canvas_box(page)
    gpu = hook(page, ".findBlock('device')")
    cx, cy = box["x"] + gpu["x"], box["y"] + gpu["y"]  # zoom in on a kernel
    page.mouse.move(cx, cy)
    plot = hook(page, ".plot")
    share = (cx - box["x"] - plot["gutter"]) / (plot["width"] - plot["gutter"])
    t_cursor = full["start"] + share * (full["end"] - full["start"])
    for _ in range(6):
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(30)
    zoomed = wait_window(page, f"w => w.end - w.start < {(full['end'] - full['start']) / 10}")
    zoomed_t = zoomed["start"] + share * (zoomed["end"] - zoomed["start"])
    px = (full["end"] - full["start"]) / (plot["width"] - plot["gutter"])  # µs per pixel before
    assert abs(zoomed_t - t_cursor) < 1.5 * px, "zoomed around the cursor (mouse events have whole pixels)"
    q = query(page)
    assert abs(float(q["start"]) - zoomed["start"]) < 1e-2 and abs(float(q["end"]) - zoomed["end"]) < 1e-2
    assert page.evaluate(INK) > 0.05
    shot(page, "zoomed")
    seen_after_zoom = len(set(timeline_requests(watch)))
    assert seen_after_zoom >= 2
    # one wheel gesture is one request (debounced), not one per wheel event
    assert len(timeline_requests(watch)) <= 3

    # drag to the left: later times come into view
    page.mouse.move(cx, cy)
    page.mouse.down()
    for dx in range(0, 301, 30):
        page.mouse.move(cx - dx, cy)
        page.wait_for_timeout(10)
    page.mouse.up()
    span = zoomed["end"] - zoomed["start"]
    panned = wait_window(page, f"w => w.start > {zoomed['start'] + span * 0.1}")
    assert abs((panned["end"] - panned["start"]) - span) < 1e-6 * span, "a drag keeps the zoom"
    q = query(page)
    assert abs(float(q["start"]) - panned["start"]) < 1e-2
    assert len(set(timeline_requests(watch))) > seen_after_zoom
    assert hook(page, ".selected") is None, "a drag is not a click"
    shot(page, "panned")

    # W/S zoom around the pointer, A/D pan, as in Perfetto
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + gpu["y"])
    before = hook(page, ".window")
    page.keyboard.press("w")
    after_w = wait_window(page, f"w => w.end - w.start < {(before['end'] - before['start']) * 0.9}")
    page.keyboard.press("s")
    page.keyboard.press("s")
    after_s = wait_window(page, f"w => w.end - w.start > {(after_w['end'] - after_w['start']) * 1.2}")
    page.keyboard.press("d")
    after_d = wait_window(page, f"w => w.start > {after_s['start']}")
    page.keyboard.press("a")
    page.keyboard.press("a")
    wait_window(page, f"w => w.start < {after_d['start']}")
    assert len(set(timeline_requests(watch))) >= seen_after_zoom + 5

    # reloading the URL restores the window
    shown = hook(page, ".window")
    url = page.evaluate("() => location.href")
    page.goto(url)
    wait_drawn(page)
    restored = hook(page, ".window")
    assert abs(restored["start"] - shown["start"]) < 1e-2 and abs(restored["end"] - shown["end"]) < 1e-2
    first = hook(page, ".requests[0]")
    assert abs(first["start"] - shown["start"]) < 1e-2, "the first request is for the URL's window"

    # a deep link into the middle of a step; a click on a single kernel opens its details
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&start=100000&end=102000")
    wait_drawn(page)
    assert hook(page, ".window") == {"start": 100000, "end": 102000}
    target = hook(page, ".findBlock('device')")
    assert target, "no single kernel is shown at this zoom"
    page.mouse.click(box["x"] + target["x"], box["y"] + target["y"])
    panel = page.locator("#trace-detail")
    panel.locator(".event-name").wait_for(timeout=20_000)
    assert panel.locator(".event-name").inner_text() == target["name"]
    assert query(page)["event"] == str(target["id"])
    assert "Kernel" in panel.inner_text() and "Launched by" in panel.inner_text()
    shot(page, "kernel_detail")

    # the operator that launched the kernel: a link that selects it
    op_link = panel.locator("li", has_text="Operator:").locator("a.event-link")
    op_id = op_link.get_attribute("data-event-id")
    op_link.click()
    page.wait_for_function(f"() => document.querySelector('#trace-detail')?.dataset.eventId === '{op_id}'"
                           " && document.querySelector('#trace-detail .event-name')")
    assert query(page)["event"] == op_id
    assert "Launched on the device" in panel.inner_text()
    assert str(target["id"]) in panel.locator("a.event-link").evaluate_all("as => as.map(a => a.dataset.eventId)")
    shot(page, "op_detail")

    # a link with the event reopens it; Esc clears the selection
    page.goto(page.evaluate("() => location.href"))
    wait_drawn(page)
    page.locator("#trace-detail .event-name").wait_for(timeout=20_000)
    assert page.locator("#trace-detail").get_attribute("data-event-id") == op_id
    page.locator("#trace-canvas").focus()
    page.keyboard.press("Escape")
    page.locator("#trace-detail").wait_for(state="detached")
    assert "event" not in query(page)

    # search by name: matches listed, a click selects and shows one
    page.fill("#trace-search", "sgemm")
    results = page.locator("#trace-search-results .match")
    results.first.wait_for(timeout=10_000)
    assert all("sgemm" in t for t in results.all_inner_texts())
    assert query(page)["search"] == "sgemm"
    results.first.click()
    page.locator("#trace-detail .event-name", has_text="sgemm").wait_for(timeout=20_000)
    wait_window(page, "w => true")
    shot(page, "search")

    extra = [r for r in watch.requests if urlsplit(r).netloc != urlsplit(kineto_url).netloc]
    assert not extra
    watch.assert_clean()
    context.close()


def test_search_covers_the_whole_trace_and_steps_through_matches(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    # a 2 ms window near the start: the steps lie mostly outside it
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&start=0&end=2000")
    wait_drawn(page)
    page.fill("#trace-search", "profilerstep#")
    count = page.locator("#trace-search-count")
    count.wait_for(timeout=20_000)
    page.wait_for_function("() => /6 events named like/.test("
                           "document.querySelector('#trace-search-count').textContent)")
    assert "whole trace" in count.inner_text() and "block" not in count.inner_text()
    assert page.locator("#trace-search-results .match").count() == 6
    page.locator("#trace-search").press("Enter")
    page.locator("#trace-detail .event-name", has_text="ProfilerStep#5").wait_for(timeout=20_000)
    page.locator("#trace-search").press("Enter")
    page.locator("#trace-detail .event-name", has_text="ProfilerStep#6").wait_for(timeout=20_000)
    assert page.locator("#trace-search-position").inner_text() == "2 of 6"
    win = wait_window(page, "w => w.end > 2000")     # the view moved to the match
    step6 = page.evaluate("() => window.__stepscopeTrace.lastAnswer.steps")
    assert any(s[0] == "6" for s in step6), (win, step6)
    page.locator("#trace-search").press("Shift+Enter")
    page.locator("#trace-detail .event-name", has_text="ProfilerStep#5").wait_for(timeout=20_000)
    assert page.locator("#trace-search-position").inner_text() == "1 of 6"
    shot(page, "search_whole_trace")
    watch.assert_clean()
    context.close()


def test_steps_band_explains_attribution_and_is_clickable(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace")
    wait_drawn(page)
    step = next(s for s in hook(page, ".lastAnswer.steps") if s[0] == "6")
    name, start, end, host_start, host_end, host_id = step
    assert start > host_start and end > host_end and host_id is not None   # SPEC §2.1 re-timing
    xy = page.evaluate("""(t) => { const h = window.__stepscopeTrace, w = h.window, p = h.plot;
        return {x: p.gutter + (t - w.start) / (w.end - w.start) * (p.width - p.gutter), y: 20 + 9}; }""",
                       (start + end) / 2)
    box = page.locator("#trace-canvas").bounding_box()
    page.mouse.move(box["x"] + xy["x"], box["y"] + xy["y"])
    tip = page.locator(".trace-tooltip")
    tip.wait_for(state="visible", timeout=5_000)
    text = tip.inner_text()
    assert "Step 6" in text and "ProfilerStep#6 on the host" in text
    assert "GPU work belongs to the step that launched it" in text
    page.mouse.click(box["x"] + xy["x"], box["y"] + xy["y"])
    card = page.locator("#trace-detail.trace-step")
    card.wait_for(timeout=5_000)
    assert card.get_attribute("data-step") == "6"
    shot(page, "step_detail")
    card.locator("button", has_text="ProfilerStep#6 event").click()
    page.locator("#trace-detail .event-name", has_text="ProfilerStep#6").wait_for(timeout=20_000)
    assert query(page)["event"] == str(host_id)
    watch.assert_clean()
    context.close()


def test_unknown_event_in_url_and_odd_window(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&start=50&end=50&event=99999999")
    wait_drawn(page)
    answer = hook(page, ".lastAnswer")
    assert hook(page, ".window") == {"start": answer["range"][0], "end": answer["range"][1]}, \
        "an empty window in the URL shows the whole trace"
    panel = page.locator("#trace-detail .error-panel")
    panel.wait_for(timeout=20_000)
    assert "unknown event" in panel.inner_text() and "Reload the timeline" in panel.inner_text()
    shot(page, "unknown_event")
    assert not watch.dialogs and not watch.page_errors and not watch.external
    context.close()


def test_a_link_window_of_days_and_a_bad_event_say_so(browser, kineto_url):
    # a window overlapping the trace but a billion times wider squeezed it into one pixel,
    # silently; an event that is no id was ignored and stayed in the URL
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&start=0&end=1e15&event=abc")
    wait_drawn(page)
    answer = hook(page, ".lastAnswer")
    r0, r1 = answer["range"]
    win = wait_window(page, f"w => w.end - w.start < {2 * (r1 - r0)}")
    assert r0 - (r1 - r0) <= win["start"] and win["end"] <= r1 + (r1 - r0)
    note = page.locator("#trace-window-note").inner_text()
    assert "reaches far beyond this trace" in note and "showing the whole trace" in note
    assert "The link's event (abc) is not an event id" in note
    page.wait_for_function("() => !new URLSearchParams(location.search).has('event')")
    assert float(query(page)["end"]) < 2 * r1
    assert not watch.dialogs and not watch.page_errors and not watch.external
    context.close()


def test_the_detail_panel_gives_the_exact_duration(browser, kineto_url):
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace")
    wait_drawn(page)
    step = hook(page, ".lastAnswer.steps[0]")  # [name, start, end, host start, host end, id]
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&event={step[5]}")
    page.locator("#trace-detail .event-name", has_text="ProfilerStep").wait_for(timeout=20_000)
    facts = dict(zip(page.locator("#trace-detail .event-facts dt").all_inner_texts(),
                     page.locator("#trace-detail .event-facts dd").all_inner_texts()))
    dur = step[4] - step[3]
    assert dur > 10_000 and facts["Duration"] == f"{dur / 1000:.3f} ms"  # was 4 digits
    context.close()


def test_coming_back_to_the_trace_tab_keeps_its_window_and_selection(browser, kineto_url):
    # switching tabs dropped the view's URL keys: back on Trace, the whole trace, no selection
    context, page, watch = open_page(browser, kineto_url)
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace")
    wait_drawn(page)
    step = hook(page, ".lastAnswer.steps[1]")
    page.goto(f"{kineto_url}/?run={WORKERS_0}&worker=worker0&view=Trace&start={step[1]}"
              f"&end={step[2]}&event={step[5]}")
    page.locator("#trace-detail .event-name", has_text="ProfilerStep").wait_for(timeout=20_000)
    before = query(page)
    page.locator(".tab", has_text="Overview").click()
    page.wait_for_selector("#step-chart .main-svg", timeout=READY_MS)
    assert "start" not in query(page) and "event" not in query(page)
    page.locator(".tab", has_text="Trace").click()
    page.locator("#trace-detail .event-name", has_text="ProfilerStep").wait_for(timeout=20_000)
    after = query(page)
    assert {k: after.get(k) for k in ("start", "end", "event")} == \
        {k: before[k] for k in ("start", "end", "event")}
    win = wait_window(page, f"w => Math.abs(w.start - {step[1]}) < 1e-3")
    assert abs(win["end"] - step[2]) < 1e-3
    watch.assert_clean()
    context.close()


# -- HTML in trace names ------------------------------------------------------------------------------------
def test_html_names_are_text_in_the_trace_view(browser, tmp_path):
    run = "run<svg onload=alert(5)>"
    xss_trace(tmp_path / run / "worker<img src=y onerror=alert(4)>.pt.trace.json.gz")
    with stepscope_server(tmp_path) as base:
        context, page, watch = open_page(browser, base)
        page.goto(f"{base}/")
        page.locator(".tab", has_text="Trace").click()
        wait_drawn(page)
        assert XSS in hook(page, ".lastAnswer.names")
        box = canvas_box(page)
        target = hook(page, f".findBlock('host', {json.dumps(XSS)})")
        page.mouse.move(box["x"] + target["x"], box["y"] + target["y"])
        tip = page.locator(".trace-tooltip")
        tip.wait_for(state="visible")
        assert XSS in tip.inner_text()
        page.mouse.click(box["x"] + target["x"], box["y"] + target["y"])
        page.locator("#trace-detail .event-name").wait_for(timeout=20_000)
        assert page.locator("#trace-detail .event-name").inner_text() == target["name"]
        links = page.locator("#trace-detail a.event-link").all_inner_texts()
        assert any(f"k<{XSS}, &amp;>(<b>int</b>)" in t for t in links), links

        # the operator named like an <img>: found by search, its call stack shown as text
        page.fill("#trace-search", "<img")
        page.locator("#trace-search-results .match").first.wait_for(timeout=10_000)
        page.locator("#trace-search-results .match", has=page.locator(".match-name", has_text=XSS)) \
            .filter(has_not_text="range").filter(has_not_text="void").first.click()
        page.locator("#trace-detail .event-stack").wait_for(timeout=20_000)
        assert page.locator("#trace-detail .event-name").inner_text() == XSS
        assert XSS in page.locator("#trace-detail .event-stack").inner_text()
        page.wait_for_timeout(300)
        assert page.locator("img").count() == 0
        assert page.locator("script:not([src])").count() == 0
        shot(page, "xss")
        assert not watch.dialogs, watch.dialogs
        watch.assert_clean()
        context.close()


# -- loading and errors: a stand-in backend -----------------------------------------------------------------
STANDIN_ANSWER = {
    "range": [0, 1000.0], "start": 0.0, "end": 1000.0, "names": ["aten::mm", "volta_sgemm"],
    "lanes": [{"id": "host:1:1", "name": "Thread 1 (pid 1)", "kind": "host", "rows": 1,
               "blocks": [[100.0, 400.0, 0, 0, 1, 0]]},
              {"id": "device:0:7", "name": "GPU 0 stream 7", "kind": "device", "rows": 1,
               "blocks": [[300.0, 300.0, 1, 0, 1, 1]]}],
    "steps": [["1", 0.0, 1000.0]],
}
POLLS = 2


def standin_app():
    from flask import Flask, Response, jsonify, request, send_from_directory

    app = Flask("trace-standin", static_folder=None)
    polls: dict[str, int] = {}
    lock = threading.Lock()

    @app.route(f"{PREFIX}/runs")
    def runs():
        return jsonify({"runs": ["slow", "broken"], "loading": False, "status": {}})

    @app.route(f"{PREFIX}/workers")
    def workers():
        return jsonify(["worker0"])

    @app.route(f"{PREFIX}/spans")
    def spans():
        return jsonify(["default"])

    @app.route(f"{PREFIX}/views")
    def views():
        return jsonify(["Trace"])

    @app.route(f"{PREFIX}/trace/timeline")
    def timeline():
        run = request.args.get("run")
        if run == "broken":
            return jsonify({"error": "not a trace: the file is not JSON", "file": "worker0.pt.trace.json.gz",
                            "position": {"byte": 1204113, "line": 1},
                            "detail": "Re-export the trace with torch.profiler."}), 422
        with lock:
            n = polls[run] = polls.get(run, 0) + 1
        if n <= POLLS:
            body = {"loading": True, "phase": "analyse", "fraction": n / (POLLS + 1), "elapsed_s": 0.5 * n}
            return Response(json.dumps(body), 202, {"Retry-After": "1"}, mimetype="application/json")
        return jsonify(STANDIN_ANSWER)

    @app.route(f"{PREFIX}/trace/event")
    def event():
        return jsonify({"error": "unknown event", "detail": "No event 5 in this trace (ids are 0..1). "
                        "Reload the timeline."}), 404

    @app.route(f"{PREFIX}/<path:name>")
    def files(name):
        return send_from_directory(FRONTEND, name)

    return app


@pytest.fixture(scope="module")
def standin_url():
    with wsgi_server(standin_app()) as base:
        yield base


def test_loading_progress_then_timeline(browser, standin_url):
    context, page, watch = open_page(browser, standin_url)
    page.goto(f"{standin_url}{PREFIX}/index.html?run=slow&worker=worker0&view=Trace&event=5")
    page.locator(".trace-badge .progress-panel").wait_for(timeout=10_000)
    assert "Analysing" in page.locator(".trace-badge").inner_text()
    shot(page, "loading")
    wait_drawn(page)
    assert hook(page, ".drawn") == 2
    assert page.locator(".trace-badge").is_hidden()
    page.locator("#trace-detail .error-panel", has_text="unknown event").wait_for(timeout=10_000)
    assert not watch.dialogs and not watch.page_errors and not watch.external
    # Chromium logs the (expected) 404 of trace/event; nothing else
    assert all("404" in e for e in watch.console_errors), watch.console_errors
    context.close()


def test_unusable_trace_says_so_in_words(browser, standin_url):
    context, page, watch = open_page(browser, standin_url)
    page.goto(f"{standin_url}{PREFIX}/index.html?run=broken&worker=worker0&view=Trace")
    panel = page.locator(".view-root .error-panel")
    panel.wait_for(timeout=10_000)
    text = panel.inner_text()
    assert "not JSON" in text and "worker0.pt.trace.json.gz" in text and "1,204,113" in text
    shot(page, "error")
    assert not watch.dialogs and not watch.page_errors and not watch.external
    context.close()
