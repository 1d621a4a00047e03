"""Browser test of the dashboard inside a real ``tensorboard`` (issue 18 item 9): the view
state lives in TensorBoard's own URL (``#stepscope&run=...&view=...``), so reloading
TensorBoard's page reopens the same view, and "Copy link" copies a TensorBoard URL.

Runs on the bundled samples (no shared traces needed), behind ``--path_prefix``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from browser import (
    have_chromium,
    open_page,
    query,
    screenshot,
    tensorboard_frame,
    tensorboard_server,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
pytest.importorskip("playwright.sync_api")

READY_MS = 90_000
SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "logs"
RUN = "cpu_train_num_workers_2"  # two spans of worker0
PREFIX = "/tb/prefix"




def tb_hash(page) -> tuple[str, dict[str, str]]:
    """TensorBoard's hash, parsed the way TensorBoard parses it: (tab, {key: value})."""
    parts = page.evaluate("() => location.hash").lstrip("#").split("&")
    tab = [p for p in parts if "=" not in p]
    state = dict(unquote(p).split("=", 1) for p in parts if "=" in p)
    return (tab[0] if tab else ""), state


def wait_view(frame, view: str) -> None:
    """Until ``view`` is the active tab and its cards and charts are drawn."""
    frame.wait_for_selector(f'.tab.active[data-view="{view}"]', timeout=READY_MS)
    frame.wait_for_function(f"""() => document.querySelector('#view .view-root[data-view="{view}"] .card')
        && [...document.querySelectorAll('#view .chart')].every(c => c.querySelector('.main-svg'))""",
                            timeout=READY_MS)


def test_state_survives_a_reload_of_tensorboard_and_copy_link_opens_it(browser):
    with tensorboard_server(SAMPLES, path_prefix=PREFIX) as base:
        home = f"{base}{PREFIX}/"
        context, page, watch = open_page(browser, base)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        # a TensorBoard URL that names a view opens it
        page.goto(f"{home}#stepscope&run={RUN}&view=Operator")
        frame = tensorboard_frame(page)
        wait_view(frame, "Operator")
        assert frame.locator("#run").input_value() == RUN
        spans = frame.locator("#span option").evaluate_all("os => os.map(o => o.value)")
        assert len(spans) == 2
        tab, state = tb_hash(page)
        assert tab == "stepscope"  # TensorBoard's own part of its hash is kept
        assert state == {"run": RUN, "worker": "worker0", "span": spans[-1], "view": "Operator"}

        # move inside the dashboard: the older span, then the Memory view
        frame.select_option("#span", spans[0])
        wait_view(frame, "Operator")
        frame.locator(".tab", has_text="Memory").click()
        wait_view(frame, "Memory")
        want = {"run": RUN, "worker": "worker0", "span": spans[0], "view": "Memory"}
        assert query(frame) == want
        assert tb_hash(page) == ("stepscope", want)
        # the browser's Back goes through the dashboard's own history, TensorBoard's hash follows
        page.go_back()
        wait_view(frame, "Operator")
        assert tb_hash(page) == ("stepscope", {**want, "view": "Operator"})
        page.go_forward()
        wait_view(frame, "Memory")
        assert tb_hash(page) == ("stepscope", want)
        # a hand-edited TensorBoard URL is followed
        page.evaluate(f"() => {{ location.hash = '#stepscope&run={RUN}&span={spans[1]}&view=Trace'; }}")
        frame.wait_for_selector('.tab.active[data-view="Trace"]', timeout=READY_MS)
        assert frame.locator("#span").input_value() == spans[1]
        assert tb_hash(page) == ("stepscope", {**want, "span": spans[1], "view": "Trace"})
        page.go_back()
        wait_view(frame, "Memory")
        assert tb_hash(page) == ("stepscope", want)

        # reload TensorBoard's page (not our iframe): a fresh iframe reads the hash
        page.reload()
        frame = tensorboard_frame(page)
        wait_view(frame, "Memory")
        assert frame.locator("#run").input_value() == RUN
        assert frame.locator("#span").input_value() == spans[0]
        assert tb_hash(page) == ("stepscope", want)

        # Copy link: TensorBoard's URL with the state in its hash, not index.html
        frame.locator("#copy-link").click()
        frame.wait_for_selector("#copy-link[data-url]", timeout=10_000)
        link = frame.locator("#copy-link").get_attribute("data-url")
        assert link == (f"{home}#stepscope&run={RUN}&worker=worker0&span={spans[0]}&view=Memory"), link
        assert "index.html" not in link
        assert "TensorBoard" in frame.locator("#toast").inner_text()
        assert page.evaluate("() => navigator.clipboard.readText()") == link
        screenshot(page, "tensorboard_state_in_hash")

        # the copied link opens the same view in a fresh page
        other = context.new_page()
        other.goto(link)
        frame = tensorboard_frame(other)
        wait_view(frame, "Memory")
        assert frame.locator("#span").input_value() == spans[0]
        assert not watch.dialogs and not watch.page_errors
        context.close()
