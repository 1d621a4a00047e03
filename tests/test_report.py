"""``stepscope report`` (SPEC §4.5): one self-contained HTML file.

- every embedded answer equals the live server's answer for the same route and parameters
  (golden kineto_resnet50 traces);
- opened from disk in Chromium with every non-``file:`` request blocked, the report's
  tables and overview show the same text as the live dashboard, with no request, console
  error or dialog; its CSV button downloads exactly the rows shown;
- the data, plotly.js and the import map travel gzip-compressed as base64; the page unpacks
  them itself (DecompressionStream), says why when the browser cannot, and its CSP lets
  only the report's own inline scripts run (by hash);
- the file grows with distinct names, not with events; hostile names stay text;
- the sub-command's output and exit status.
Report sizes of the shared traces are printed (``-s``) and written to
test-output/report_sizes.json.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from browser import (
    FRONTEND,
    KINETO,
    XSS,
    download_chart_png,
    have_chromium,
    open_page,
    output_dir,
    screenshot,
)
from tracebuild import NO_SHARED, SHARED, have_shared, kernel, op, runtime, step

from stepscope.cli import main
from stepscope.share.bundle import packed, rewrite_imports, unpacked
from stepscope.share.load import spans_of
from stepscope.share.report import report_data, write_report
from stepscope.web.assets import plotly_js

READY_MS = 60_000
needs_shared = pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
browser_test = [pytest.mark.browser,
                pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")]


def embedded(html: str) -> dict:
    """The page's embedded answers: its data block, base64 -> gunzip -> JSON."""
    return json.loads(unpacked(html, "data"))


def policy(html: str) -> dict[str, list[str]]:
    """The page's Content-Security-Policy: directive -> sources."""
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html).group(1)
    return {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}


def boot_script(html: str) -> tuple[str, str]:
    """(nonce, code) of the page's one runnable script: the boot script."""
    runnable = re.findall(r"<script( [^>]*)?>(.*?)</script>", html, re.S)
    runnable = [(attrs, code) for attrs, code in runnable if "type=" not in (attrs or "")]
    assert len(runnable) == 1, [a for a, _ in runnable]
    attrs, code = runnable[0]
    return re.fullmatch(r' nonce="([A-Za-z0-9_-]+)"', attrs).group(1), code


def write_trace(path, events) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))


def repeated_trace(repeats: int) -> list[dict]:
    """3 steps, 20 operator names each launching a kernel, every op ``repeats`` times."""
    events, t, corr = [], 0, 0
    for s in range(3):
        start = t
        for _ in range(repeats):
            for k in range(20):
                corr += 1
                events += [op(f"aten::op{k}", t, 8, ext=corr), runtime("cudaLaunchKernel", t + 1, 2, corr=corr, ext=corr),
                           kernel(f"kernel_{k}", t + 3, 4, corr=corr)]
                t += 10
        events.append(step(s + 1, start, t - start))
    return events


# -- the data --------------------------------------------------------------------------------
def test_imports_become_bare_names():
    src = ('import { a } from "../lib/dom.js";\nimport("./x.js");\n'
           'const v = import(`./views/${n}.js`);\nexport { b } from "./c.js";')
    out = rewrite_imports("views/kernel.js", src)
    assert 'from "stepscope/lib/dom.js"' in out
    assert 'import("stepscope/views/x.js")' in out
    assert "import(`stepscope/views/views/${n}.js`)" in out
    assert 'from "stepscope/views/c.js"' in out
    assert "import(`stepscope/views/${n}.js`)" in rewrite_imports("main.js", "import(`./views/${n}.js`)")


def test_packed_blocks_are_plain_base64_of_gzip():
    raw = json.dumps({"n": "</script><!-- & > é"}).encode()
    text = packed(raw)
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", text)            # nothing can end the element
    assert gzip.decompress(base64.b64decode(text)) == raw
    assert packed(raw) == text                                # no timestamp: reproducible
    page = f'<p><script type="application/gzip" id="stepscope-x">{text}</script>'
    assert unpacked(page, "x") == raw


def test_size_grows_with_names_not_events(tmp_path):
    sizes, packed_sizes = {}, {}
    for repeats in (2, 20):
        write_trace(tmp_path / f"r{repeats}" / "run" / "w.pt.trace.json", repeated_trace(repeats))
        data = report_data(spans_of(str(tmp_path / f"r{repeats}")), "x")
        sizes[repeats] = len(json.dumps(data))
        packed_sizes[repeats] = len(packed(json.dumps(data).encode()))
    assert sizes[20] < 1.1 * sizes[2], sizes      # 10x the events, about the same size
    assert packed_sizes[20] < 1.1 * packed_sizes[2], packed_sizes   # compressed too
    write_trace(tmp_path / "names" / "run" / "w.pt.trace.json",
                [{**e, "name": f"{e['name']}_{i}"} if e["cat"] in ("cpu_op", "kernel") else e
                 for i, e in enumerate(repeated_trace(2))])
    more_names = len(json.dumps(report_data(spans_of(str(tmp_path / "names")), "x")))
    assert more_names > 1.5 * sizes[2]             # distinct names do make it grow


def test_memory_curve_is_embedded_whole_so_zoomed_windows_are_exact(tmp_path, monkeypatch):
    """The page cuts memory/curve windows from its embedded answer: at 2,000 pixels a
    zoomed window's peak and opening level came from bucket extremes (16 of 60 random
    windows of a real trace differed from the server's). A device of up to
    EXACT_CURVE_SAMPLES samples is embedded whole; a bigger one downsampled, with a note."""
    import random

    from tracebuild import memory

    from stepscope.read.reader import read_trace
    from stepscope.share import report
    from stepscope.views import build_views

    rng = random.Random(7)
    n, level, events = 12_000, 0, [step(1, 0, 5 * 12_000 + 10), op("aten::empty", 0, 5 * 12_000)]
    for i in range(n):
        level = max(0, level + rng.randint(-1000, 1100))
        events.append(memory(1 + 5 * i, level, nbytes=1))
    write_trace(tmp_path / "run" / "w.pt.trace.json", events)
    views = build_views(read_trace(str(tmp_path / "run" / "w.pt.trace.json")))
    (answer,) = [a for _q, a in report_data(spans_of(str(tmp_path)), "x")["data"]["run"]["w"]
                 ["default"]["answers"]["memory/curve"]]
    assert len(answer["rows"]) == n  # every sample, not 2 x 2,000 of them
    for _ in range(30):  # any window cut from them is the server's
        s = round(rng.uniform(0, 5 * n), 3)  # (a URL holds ns-exact µs)
        e = round(s + rng.uniform(1, 2000), 3)
        live = views.get("memory/curve", {"start": str(s), "end": str(e), "width": "100"})
        before = [r for r in answer["rows"] if r[0] < s][-1:]
        inside = [r for r in answer["rows"] if s <= r[0] <= e]
        peak = max(inside, key=lambda r: r[1], default=None)
        if before and (peak is None or before[0][1] > peak[1]):
            peak = [s, before[0][1]]
        assert (peak[1], peak[0]) == (live["window_peak"]["allocated"], live["window_peak"]["ts_us"])
    monkeypatch.setattr(report, "EXACT_CURVE_SAMPLES", 1000)
    data = report_data(spans_of(str(tmp_path)), "x")
    (small,) = [a for _q, a in data["data"]["run"]["w"]["default"]["answers"]["memory/curve"]]
    assert len(small["rows"]) <= 4000
    assert any("memory curve is embedded at 2000 pixels (12,000 samples)" in t for t in data["notes"])


def test_command_writes_the_file_and_fails_in_one_line(tmp_path, capsys):
    write_trace(tmp_path / "logs" / "run" / "w.pt.trace.json", repeated_trace(1))
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "logs"), "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith(f"Wrote {out} (") and out.stat().st_size > 1_000_000
    data = embedded(out.read_text())
    assert data["runs"]["runs"] == ["run"] and data["spans"] == {"run": {"w": ["default"]}}
    assert data["data"]["run"]["w"]["default"]["views"] == ["Overview", "Operator", "Kernel", "Module"]
    assert main(["report", str(tmp_path / "nope"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file or folder" in err
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text("[")
    assert main(["report", str(bad), "-o", str(tmp_path / "b.html")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stepscope report: ")
    assert not (tmp_path / "b.html").exists()


def test_report_leaves_out_an_unreadable_trace_and_names_it(tmp_path, capsys):
    """SPEC §1.4: one empty or damaged rank file (a job still writing) gave no report at
    all; the others are written, the page and stderr name the ones left out, exit 1."""
    logs = tmp_path / "logs"
    write_trace(logs / "run" / "a.pt.trace.json", repeated_trace(1))
    (logs / "run" / "c.pt.trace.json").write_text("")
    (logs / "run" / "d.pt.trace.json").write_text('{"traceEvents": [')
    out = tmp_path / "r.html"
    assert main(["report", str(logs), "-o", str(out)]) == 1
    cap = capsys.readouterr()
    assert cap.out.startswith(f"Wrote {out} (") and "1 trace)" in cap.out
    failed = [ln for ln in cap.err.splitlines() if ln.startswith("stepscope report: run / ")]
    assert [ln.split(":")[1].strip() for ln in failed] == ["run / c / default", "run / d / default"]
    assert "left out" not in cap.err  # (each said once, not again as a note)
    data = embedded(out.read_text())
    assert data["spans"] == {"run": {"a": ["default"]}}
    assert [n.split(" is left out: ")[0] for n in data["notes"]] == ["run / c / default",
                                                                      "run / d / default"]
    assert main(["report", str(logs / "run" / "c.pt.trace.json"), "-o", str(tmp_path / "c.html")]) == 1
    assert not (tmp_path / "c.html").exists()  # nothing readable: no page


def test_report_leaves_no_file_it_was_not_asked_for(tmp_path, capsys):
    """Writing into a folder's name failed but left a 2 MB ``out.tmp``; a user's own
    ``r.html.tmp`` was overwritten; a folder whose name is not UTF-8 gave a traceback
    (fuzzing the CLI)."""
    logs = tmp_path / os.fsdecode(b"caf\xe9")
    write_trace(logs / "run" / "w.pt.trace.json", repeated_trace(1))
    (tmp_path / "out").mkdir()
    mine = tmp_path / "r.html.tmp"
    mine.write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["report", str(logs), "-o", str(tmp_path / "out")]) == 2  # a bad argument
    assert capsys.readouterr().err == f"stepscope report: {tmp_path / 'out'}: is a folder: name the HTML file to write\n"
    assert main(["report", str(logs), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "no such folder to write the report into" in capsys.readouterr().err  # not a .tmp name
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert main(["report", str(logs), "-o", str(tmp_path / "r.html")]) == 0
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["r.html"])
    assert "caf\ufffd" in (tmp_path / "r.html").read_text(encoding="utf-8")



@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs symbolic links and FIFOs (POSIX)")
def test_report_writes_through_a_link_and_into_a_pipe(tmp_path, capsys):
    """``-o`` naming a symbolic link writes its target (the rename replaced the link with a
    file); naming a pipe or a device (``/dev/stdout``) writes into it (the rename replaced
    it: as root, ``-o /dev/null`` put the report in place of the device)."""
    write_trace(tmp_path / "logs" / "run" / "w.pt.trace.json", repeated_trace(1))
    (tmp_path / "site").mkdir()
    target = tmp_path / "site" / "r.html"
    target.write_text("old")
    link = tmp_path / "r.html"
    link.symlink_to(target)
    assert main(["report", str(tmp_path / "logs"), "-o", str(link)]) == 0
    assert link.is_symlink() and embedded(target.read_text())["runs"]["runs"] == ["run"]
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == ["r.html"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["report", str(tmp_path / "logs"), "-o", str(fifo)]) == 0
    reader.join(timeout=60)
    assert fifo.is_fifo() and embedded(got[0].decode())["data"] == embedded(target.read_text())["data"]
    assert f"Wrote {fifo} ({len(got[0]):,} bytes" in capsys.readouterr().out

@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_report_to_dev_stdout_piped(tmp_path):
    """``stepscope report LOGS -o /dev/stdout | cat > r.html`` (README): the report went to
    a temporary file beside realpath("/dev/stdout"), "/proc/PID/fd/pipe:[N]", and failed;
    the "Wrote" line goes to stderr, not into the page."""
    import subprocess
    import sys

    write_trace(tmp_path / "logs" / "run" / "w.pt.trace.json", repeated_trace(1))
    for out in ("/dev/stdout", "-"):
        proc = subprocess.run([sys.executable, "-m", "stepscope", "report",
                               str(tmp_path / "logs"), "-o", out], capture_output=True,
                              timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        page = proc.stdout.decode()
        assert page.rstrip().endswith("</html>") and embedded(page)["runs"]["runs"] == ["run"]
        said = "standard output" if out == "-" else out
        assert f"Wrote {said} (".encode() in proc.stderr
    assert not (tmp_path / "-").exists()


@pytest.fixture(scope="module")
def small_report(tmp_path_factory) -> Path:
    """A report of one small hand-built trace."""
    root = tmp_path_factory.mktemp("small")
    write_trace(root / "logs" / "run" / "w.pt.trace.json", repeated_trace(1))
    write_report(str(root / "logs"), str(root / "small.html"))
    return root / "small.html"


def test_page_holds_compressed_blocks_and_runs_only_its_own_scripts(small_report):
    html = small_report.read_text()
    assert unpacked(html, "plotly") == plotly_js().read_bytes()
    modules = json.loads(unpacked(html, "imports"))["imports"]
    assert "stepscope/main.js" in modules and "stepscope/report_boot.js" not in modules
    assert all(url.startswith("data:text/javascript;base64,") for url in modules.values())
    nonce, code = boot_script(html)
    assert code == (FRONTEND / "report_boot.js").read_text()
    csp = policy(html)
    assert csp["script-src"] == [f"'nonce-{nonce}'"]            # no inline, eval, data:, blob:
    assert csp["default-src"] == csp["connect-src"] == ["'none'"]
    again = small_report.with_name("again.html")
    write_report(str(small_report.parent / "logs"), str(again))
    assert boot_script(again.read_text())[0] != nonce            # a new nonce per report
    assert len(html) < 2_500_000                                 # plotly.js alone was 4.8 MB


# -- against the live server --------------------------------------------------------------------
@pytest.fixture(scope="module")
def kineto_report(tmp_path_factory):
    if not (KINETO / "expected.jsonl").is_file():
        pytest.skip(NO_SHARED)
    out = tmp_path_factory.mktemp("report") / "kineto.html"
    write_report(str(KINETO), str(out))
    return out


def live(base: str, path: str, params: dict):
    url = f"{base}/data/plugin/stepscope/{path}?{urllib.parse.urlencode(params)}"
    for _ in range(600):
        with urllib.request.urlopen(url, timeout=30) as r:
            if r.status == 200:
                body = r.read()
                text = r.headers.get_content_type() == "text/plain"   # stacks/collapsed
                return body.decode() if text else json.loads(body)
        time.sleep(0.2)
    raise AssertionError(f"{url} never ready")


@needs_shared
def test_every_embedded_answer_equals_the_live_api(kineto_report, kineto_url):
    data = embedded(kineto_report.read_text())
    assert data["runs"]["runs"] == live(kineto_url, "runs", {})["runs"]
    checked = 0
    for run, workers in data["data"].items():
        for worker, spans in workers.items():
            for span, sd in spans.items():
                who = {"run": run, "worker": worker, "span": span}
                assert sd["views"] == [v for v in live(kineto_url, "views", who)
                                       if v in ("Overview", "Operator", "Kernel", "Memory", "Module")]
                for path, entries in sd["answers"].items():
                    for params, answer in entries:
                        assert answer == live(kineto_url, path, {**who, **params}), (path, params)
                        checked += 1
    assert checked >= 2 * 7


def _texts(page, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("els => els.map(e => e.innerText)")


def _show(page, url: str, view: str, ready: str) -> None:
    page.goto(url)
    page.wait_for_selector(ready, timeout=READY_MS)
    assert page.locator("#tabs .tab.active").inner_text() == view


@needs_shared
@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_report_in_chromium_shows_the_live_numbers_offline(browser, kineto_report, kineto_url):
    ctx_r, page_r, watch_r = open_page(browser, "file:///")
    ctx_l, page_l, watch_l = open_page(browser, kineto_url)
    report = kineto_report.as_uri()
    q = "?run=resnet50_num_workers_4&worker=worker0&span=default"
    for view, ready, selectors in (
            ("Overview", "#view .main-svg", [".summary-table tbody tr", ".metric", ".env-list", "#view h2"]),
            ("Operator", "#view tbody tr", ["#view tbody tr", ".table-count"]),
            ("Kernel", "#kernel-table tbody tr", ["#kernel-table tbody tr", "#kernel-table .table-count"])):
        _show(page_r, f"{report}{q}&view={view}", view, ready)
        _show(page_l, f"{kineto_url}/{q}&view={view}", view, ready)
        for sel in selectors:
            ours = _texts(page_r, sel)
            assert ours and ours == _texts(page_l, sel), (view, sel)
        screenshot(page_r, f"report_{view.lower()}")
    # the operator table's call-stack-free search and paging work on the embedded rows
    _show(page_r, f"{report}{q}&view=Operator&op_group_by=OperationAndInputShape&search=conv",
          "Operator", "#view tbody tr")
    assert "conv" in page_r.locator("#view tbody tr").first.inner_text().lower()
    watch_r.assert_clean()
    watch_l.assert_clean()
    assert all(u.startswith(("file:", "data:")) for u in watch_r.requests), watch_r.requests
    ctx_r.close()
    ctx_l.close()


@needs_shared
@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_csv_button_downloads_the_rows_shown(browser, kineto_report):
    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    page.goto(f"{kineto_report.as_uri()}?run=resnet50_num_workers_0&view=Operator&search=aten")
    page.wait_for_selector("#view tbody tr", timeout=READY_MS)
    shown = int(page.locator(".table-count").inner_text().split()[0].replace(",", ""))
    assert shown > 25  # more than one page
    with page.expect_download() as dl:
        page.locator(".table-csv").first.click()
    text = open(dl.value.path(), encoding="utf-8", newline="").read()
    lines = text.strip("\r\n").split("\r\n")
    assert lines[0].startswith("Operator,Calls,Device self (us),Device total (us),Host self (us)")
    assert len(lines) == 1 + shown and all("aten" in ln for ln in lines[1:])
    first = page.locator("#view tbody tr").first.locator("td").first.inner_text()
    assert lines[1].split(",")[0] == first.strip()
    ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_collapsed_stacks_download_from_the_report(browser, small_report):
    """The Module view's "Download collapsed stacks" is the embedded text: it linked to a
    server route, and clicking it replaced the report with a browser error page."""
    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    page.goto(f"{small_report.as_uri()}?view=Module&mod_tab=flame")
    page.wait_for_selector("#module-flame-download", timeout=READY_MS)
    with page.expect_download() as dl:
        page.locator("#module-flame-download").click()
    text = open(dl.value.path(), encoding="utf-8").read()
    assert dl.value.suggested_filename == "stacks_host_self.txt"
    assert text.count("\n") > 3 and all(ln.rsplit(" ", 1)[1].isdigit() for ln in text.splitlines())
    assert page.url.startswith("file:") and page.locator("#module-flame-download").count() == 1
    ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_hostile_names_stay_text(browser, tmp_path):
    run = f"run</script>{XSS}"
    write_trace(tmp_path / "logs" / run / "w.pt.trace.json",
                [{**e, "name": XSS} if e["cat"] == "cpu_op" else e for e in repeated_trace(1)])
    out = tmp_path / "x.html"
    write_report(str(tmp_path / "logs"), str(out))
    assert XSS not in out.read_text() and "run</script>" not in out.read_text()
    assert run in embedded(out.read_text())["runs"]["runs"]
    ctx, page, watch = open_page(browser, "file:///")
    page.goto(f"{out.as_uri()}?view=Operator")
    page.wait_for_selector("#view tbody tr", timeout=READY_MS)
    option = page.locator("#run option").first      # long names shortened, full on hover
    assert option.get_attribute("value") == run and option.get_attribute("title") == run
    assert page.locator("#view tbody tr").first.locator("td").first.inner_text().strip() == XSS
    watch.assert_clean()
    ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_chart_png_button_downloads_an_image(browser, small_report):
    """Plotly draws the image from a blob: URL: the policy allows it (it did not, and the
    button did nothing but log a CSP error)."""
    assert "blob:" in policy(small_report.read_text())["img-src"]
    ctx, page, watch = open_page(browser, "file:///")
    page.goto(f"{small_report.as_uri()}?view=Overview")
    page.wait_for_selector("#step-chart .main-svg", timeout=READY_MS)
    name, data = download_chart_png(page, "#step-chart")
    assert name == "stepscope-step-chart.png"
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    watch.assert_clean()
    ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_browser_without_decompression_stream_is_told_why(browser, small_report):
    ctx, page, watch = open_page(browser, "file:///")
    ctx.add_init_script("delete window.DecompressionStream;")
    page.goto(f"{small_report.as_uri()}?view=Operator")
    page.wait_for_selector("#view .error-panel", timeout=READY_MS)
    text = page.locator("#view .error-panel").inner_text()
    assert "needs a newer browser" in text and "DecompressionStream" in text, text
    screenshot(page, "report_old_browser")
    assert page.evaluate("typeof window.Plotly") == "undefined"
    watch.assert_clean()
    ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not have_chromium(), reason="needs /usr/bin/chromium")
def test_scripts_without_the_reports_nonce_do_not_run(browser, small_report, tmp_path):
    """What an injection could add (an inline or data: script, a handler) is refused; the
    report itself still runs. (eval: no 'unsafe-eval' in the policy, tested above;
    Playwright's evaluate is exempt from the page's CSP.)"""
    html = small_report.read_text()
    evil = ('<script>window.PWNED = "inline"</script>'
            '<script src="data:text/javascript,window.PWNED=%22data%22"></script>'
            '<img src="data:," onerror="window.PWNED = \'handler\'">')
    out = tmp_path / "tampered.html"
    out.write_text(html.replace('<div id="banner"></div>', evil + '<div id="banner"></div>', 1))
    ctx, page, watch = open_page(browser, "file:///")
    page.goto(f"{out.as_uri()}?view=Operator")
    page.wait_for_selector("#view tbody tr", timeout=READY_MS)
    assert page.evaluate("typeof window.PWNED") == "undefined"
    assert watch.console_errors and all("Content Security Policy" in e for e in watch.console_errors)
    assert not watch.page_errors and not watch.external
    ctx.close()


@needs_shared
@pytest.mark.slow
def test_report_sizes_of_the_shared_traces(tmp_path):
    """Not pass/fail on the figures: records them (bytes of the file; of the data as JSON
    and as the file holds it, gzip in base64)."""
    sizes = {}
    for key in sorted(p.name for p in Path(SHARED).iterdir() if p.is_dir()):
        src = f"{SHARED}/{key}"
        out = tmp_path / f"{key}.html"
        info = write_report(src, str(out))
        html = out.read_text()
        data = len(json.dumps(embedded(html)))
        block = len(re.search(r'id="stepscope-data">([^<]*)<', html).group(1))
        sizes[key] = {"bytes": info.bytes, "data_bytes": data, "data_packed_bytes": block,
                      "traces": info.spans}
        assert block < data and info.bytes > block
    (output_dir() / "report_sizes.json").write_text(json.dumps(sizes, indent=1))
    print(json.dumps(sizes, indent=1))
