"""``stepscope summary`` (SPEC §4.5): the operator table equals torch's ``key_averages()``
(calls, self / total CPU time, average, CPU memory; per name and per name + input shape) on
CPU traces torch.profiler writes in the test; the other tables, the output formats, the
sub-command's help and its errors.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tracebuild import NO_SHARED, build, device, kernel, op, runtime, step, user

from stepscope.analysis.memcpy import memcpy_by_direction
from stepscope.cli import main
from stepscope.share.load import analyse, spans_of
from stepscope.share.summary import runtime_rows, summary_sections

GENERATE = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    out = sys.argv[1]
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    tokens = torch.randn(4, 10, 32)

    def ready(prof):
        prof.export_chrome_trace(os.path.join(out, "worker0.pt.trace.json"))
        ka = lambda e: {"calls": e.count, "total": e.cpu_time_total, "self": e.self_cpu_time_total,
                        "avg": e.cpu_time, "mem": e.cpu_memory_usage,
                        "self_mem": e.self_cpu_memory_usage}
        json.dump({"by_name": {e.key: ka(e) for e in prof.key_averages()},
                   "by_shape": [{"name": e.key, "shape": str(e.input_shapes), **ka(e)}
                                for e in prof.key_averages(group_by_input_shape=True)],
                   "sum_self": sum(e.self_cpu_time_total for e in prof.key_averages())},
                  open(os.path.join(out, "ka.json"), "w"))

    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready, record_shapes=True,
                 profile_memory=True, schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for i in range(5):
            with record_function("forward"):
                loss = layer(tokens).sum()
            loss.backward()
            prof.step()
''')


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("summary_torch")
    (out / "gen.py").write_text(GENERATE)
    proc = subprocess.run([sys.executable, str(out / "gen.py"), str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "ka.json").read_text())


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(["summary", *map(str, args)])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def operator_rows(capsys, path, *extra) -> list[dict]:
    code, out, _ = run(capsys, path, "--format", "json", "--limit", "0", "--section",
                       "operators", *extra)
    assert code == 0
    sec = json.loads(out)["spans"][0]["sections"]["operators"]
    names = [c["name"] for c in sec["columns"]]
    return [dict(zip(names, r)) for r in sec["rows"]]


@pytest.mark.torch
@pytest.mark.slow
def test_operator_table_equals_key_averages(torch_run, capsys):
    out, ka = torch_run
    rows = operator_rows(capsys, out / "worker0.pt.trace.json")
    assert len(rows) > 20
    for r in rows:
        k = ka["by_name"][r["Name"]]
        assert r["# of Calls"] == k["calls"], r["Name"]
        assert r["Self CPU"] == pytest.approx(k["self"], abs=1e-3), r["Name"]
        assert r["CPU total"] == pytest.approx(k["total"], abs=1e-3), r["Name"]
        assert r["CPU time avg"] == pytest.approx(k["avg"], abs=1e-3), r["Name"]
        assert r.get("CPU Mem", 0) == k["mem"], r["Name"]
        assert r.get("Self CPU Mem", 0) == k["self_mem"], r["Name"]
    assert any(r.get("CPU Mem") for r in rows)  # the memory columns are exercised
    # shares are of the table's own self time (torch's also count ProfilerStep, forward)
    total = sum(r["Self CPU"] for r in rows)
    for r in rows:
        assert r["Self CPU %"] == pytest.approx(100 * r["Self CPU"] / total)
    # ... and the table says so, with that total, as torch prints its own under its table
    # (a numbers audit: without it, 26.7 % here against torch's 11.1 % looked wrong)
    code, text, _ = run(capsys, out / "worker0.pt.trace.json", "--section", "operators")
    footer = f"Self CPU time total: {total / 1000:.3f}ms (this table's rows: operators; torch's"
    assert code == 0 and footer in " ".join(text.split())
    assert ka["sum_self"] > total  # torch's total counts ProfilerStep and the ranges too
    # sorted by self CPU (a CPU trace), descending
    assert [r["Self CPU"] for r in rows] == sorted((r["Self CPU"] for r in rows), reverse=True)


@pytest.mark.torch
@pytest.mark.slow
def test_by_shape_rows_equal_key_averages(torch_run, capsys):
    out, ka = torch_run
    theirs = {(e["name"], e["shape"]): e for e in ka["by_shape"]}
    rows = operator_rows(capsys, out / "worker0.pt.trace.json", "--by-shape", "--sort", "calls")
    assert len({r["Name"] for r in rows}) < len(rows)  # some name has several shapes
    for r in rows:
        k = theirs[(r["Name"], r["Input Shapes"])]
        assert (r["# of Calls"], r.get("CPU Mem", 0)) == (k["calls"], k["mem"])
        assert r["Self CPU"] == pytest.approx(k["self"], abs=1e-3)
        assert r["CPU total"] == pytest.approx(k["total"], abs=1e-3)
    assert [r["# of Calls"] for r in rows] == sorted((r["# of Calls"] for r in rows), reverse=True)


@pytest.mark.torch
@pytest.mark.slow
def test_formats_and_limit(torch_run, capsys):
    out, _ = torch_run
    path = out / "worker0.pt.trace.json"
    code, text, err = run(capsys, path, "--limit", "3")
    assert code == 0 and not err
    assert "Self CPU %" in text and "# of Calls" in text and "3 of " in text
    code, md, _ = run(capsys, path, "--format", "markdown", "--section", "operators")
    assert code == 0 and md.startswith("# ") and "| Name | Self CPU % |" in md
    code, text, _ = run(capsys, path, "--format", "csv", "--section", "operators", "--limit", "0")
    table = list(csv.reader(io.StringIO(text)))
    assert table[0][:3] == ["Name", "Self CPU %", "Self CPU (us)"]
    assert len(table) == 1 + len(operator_rows(capsys, path))
    code, text, _ = run(capsys, path, "--format", "csv")  # every section: '# key: title' blocks
    assert text.startswith("# device: Device") and "\n# operators: " in text
    # no device columns on a CPU trace: its default order, and the table says so (a log
    # directory of GPU and CPU runs sorted by self_device printed nothing at all)
    code, out_, err = run(capsys, path, "--sort", "self_device", "--section", "operators")
    assert code == 0 and "sorted by Self CPU: this trace has no Self CUDA column" in " ".join(out_.split())


def test_kernel_overview_and_memcpy_sections_come_from_the_payloads(tmp_path):
    events = [step(1, 0, 100), op("aten::mm", 10, 50, ext=7),
              kernel("volta_sgemm", 20, 30, corr=1),
              device("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 60, "2.5"),
              device("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 70, "1.5"),
              device("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 80, 1)]
    t = build(events, device_properties=[{"id": 0, "numSms": 80}])
    rows = memcpy_by_direction(t)
    assert [(r.direction, r.calls, r.total_ns, r.min_ns, r.max_ns) for r in rows] == [
        ("HtoD", 2, 4000, 1500, 2500), ("DtoH", 1, 1000, 1000, 1000)]

    from stepscope.views import build_views

    views = build_views(t)
    sections = {s.key: s for s in summary_sections(views)}
    assert sections["memcpy"].rows[0] == ["HtoD", 2, 4.0, 2.0, 1.5, 2.5]
    assert sections["kernels"].rows[0][:4] == ["volta_sgemm", 1, 30, 30]
    over = views.get("overview", {})["performance"][0]
    assert sections["overview"].rows[-1] == ["Average Step Time", over["value"], 100]
    assert [s.key for s in summary_sections(views, only=("memcpy",))] == ["memcpy"]
    # deviceProperties without a name: the GPU row says so instead of an empty cell
    assert ["GPU0", "(name unknown)"] in sections["device"].rows
    # no record_function range in this trace: no empty "User ranges" table is printed
    assert "ranges" not in sections


@pytest.mark.skipif(not os.path.isdir("../shared/traces/kineto_resnet50"),
                    reason=NO_SHARED)
def test_real_gpu_trace_operator_rows_equal_the_api_rounded():
    (span,) = spans_of("../shared/traces/kineto_resnet50/resnet50_num_workers_0")
    views = analyse(span)
    (ops,) = summary_sections(views, limit=0, only=("operators",))
    names = [c for c, _u in ops.columns]
    api = {r["name"]: r for r in views.get("operation/table", {"group_by": "Operation"})}
    runtime = {r["name"]: r for r in runtime_rows(views.analysis)}  # rows torch's table has too
    assert len(ops.rows) == len(api) + len(runtime) and "Self CUDA" in names
    assert runtime["cudaLaunchKernel"]["calls"] > 1000 and not set(runtime) & set(api)
    for row in ops.rows:
        r = dict(zip(names, row))
        a = api.get(r["Name"]) or {k: round(v, 3) if isinstance(v, float) else v
                                   for k, v in runtime[r["Name"]].items()}
        assert r["# of Calls"] == a["calls"]
        for ours, key in (("Self CPU", "host_self_duration"), ("CPU total", "host_total_duration"),
                          ("Self CUDA", "device_self_duration"),
                          ("CUDA total", "device_total_duration")):
            assert abs(r[ours] - a[key]) <= 0.5, (r["Name"], ours)
    selfs = [dict(zip(names, r))["Self CUDA"] for r in ops.rows]
    assert selfs == sorted(selfs, reverse=True)  # GPU trace: by self device time


def test_help_and_bad_paths(tmp_path, capsys):
    for cmd in ("summary", "report"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0
        assert f"usage: stepscope {cmd}" in capsys.readouterr().out
    code, out, err = run(capsys, tmp_path / "missing")
    assert code == 2 and not out
    assert err.count("\n") == 1 and "no such file or folder" in err
    code, _, err = run(capsys, tmp_path)  # a folder without traces
    assert code == 2 and err.count("\n") == 1 and "no trace files" in err
    bad = tmp_path / "w.pt.trace.json"
    bad.write_text("this is not json")
    code, _, err = run(capsys, bad)
    assert code == 1 and err.count("\n") == 1 and err.startswith("stepscope summary: ")
    with pytest.raises(SystemExit) as e:
        main(["summary", str(bad), "--sort", "nope"])
    assert e.value.code == 2


def test_text_tables_print_names_as_they_are():
    """rich reads "[...]" in a cell as markup: "[memory]" vanished and "x[/]y" crashed."""
    from stepscope.share.render import write_text
    from stepscope.share.summary import Section

    names = ["[memory]", "aten::foo[/]x", "[bold red]k"]
    s = Section("ops", "Ops [/]", [("Name", "text"), ("Calls", "count")],
                [[n, 1] for n in names])
    buf = io.StringIO()
    write_text("heading", [s], buf, width=120)
    text = buf.getvalue()
    for n in names + ["Ops [/]"]:
        assert n in text


def test_names_cannot_drive_html_or_the_terminal():
    """A trace's names are untrusted: Markdown shows ``<img onerror=...>`` as text, and an
    escape sequence in a name reaches no terminal (it cleared the screen and set the
    window's title); csv keeps the names exactly."""
    from stepscope.share.render import write_csv, write_markdown, write_text
    from stepscope.share.summary import Section

    evil = ["<img src=x onerror=alert(1)>", "\x1b[2J\x1b]0;PWNED\x07", "a|b\nc"]
    s = Section("ops", "Ops <svg onload=alert(2)>", [("Name", "text"), ("Calls", "count")],
                [[n, 1] for n in evil])
    md, text, csv_ = io.StringIO(), io.StringIO(), io.StringIO()
    write_markdown("run <script>x</script>", [s], md)
    write_text("run \x1b[31m", [s], text, width=120)
    write_csv("run", [s], csv_)
    for out in (md.getvalue(), text.getvalue()):
        assert "\x1b" not in out and "\x07" not in out
    assert "<" not in md.getvalue() and "&lt;img src=x onerror=alert(1)&gt;" in md.getvalue()
    assert "a\\|b c" in md.getvalue()
    assert "\x1b[2J" in csv_.getvalue()


def test_summary_into_a_closed_pipe_ends_quietly(tmp_path, subprocess_env):
    """``stepscope summary ... | head -c 10`` printed a BrokenPipeError traceback."""
    trace = next((Path(__file__).resolve().parent.parent / "samples" / "logs" /
                  "cpu_ddp_2_workers").glob("worker0.*.json.gz"))
    proc = subprocess.run(f"{sys.executable} -m stepscope summary {trace} --format json "
                          "--limit 0 | head -c 10", shell=True, capture_output=True, text=True,
                          env=subprocess_env, timeout=300)
    assert len(proc.stdout) == 10 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("cmd, where", [("summary", "stepscope.share.load.analyse"),
                                        ("report", "stepscope.share.report.write_report")])
def test_ctrl_c_ends_in_one_line(tmp_path, capsys, monkeypatch, cmd, where):
    """Ctrl-C while a trace is analysed printed a KeyboardInterrupt traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(where, interrupted)
    trace = tmp_path / "w.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": [op("aten::mm", 0, 10)]}))
    out = ["-o", str(tmp_path / "r.html")] if cmd == "report" else []
    assert main([cmd, str(trace), *out]) == 130
    cap = capsys.readouterr()
    assert cap.err == f"stepscope {cmd}: interrupted\n" and not cap.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt.trace.json"]


def _trace_file(path, events):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


GPU_TRACE = [step(1, 0, 100), op("aten::to", 0, 90, ext=1),
             runtime("cudaDeviceGetStreamPriorityRange", 5, 80, ext=1),
             runtime("cudaLaunchKernel", 86, 2, corr=5, ext=1), kernel("k", 88, 10, corr=5),
             user("replay", 92, 6), runtime("cudaGraphLaunch", 93, 1, corr=6),
             kernel("g", 95, 30, corr=6)]


def test_runtime_calls_have_rows_so_no_share_passes_100(tmp_path, capsys):
    """torch's table lists the runtime calls: without them an op whose time is mostly in a
    runtime call showed CPU total % far above 100 (aten::to 2,837.95 % on a real trace);
    device time launched under a range (a graph replay) keeps its row (SPEC §2.4.8)."""
    rows = {r["Name"]: r for r in operator_rows(capsys, _trace_file(tmp_path / "g.pt.trace.json",
                                                                      GPU_TRACE))}
    assert rows["cudaDeviceGetStreamPriorityRange"]["Self CPU"] == 80
    assert max(r["CPU total %"] for r in rows.values()) <= 100
    assert rows["aten::to"]["CPU total %"] == pytest.approx(100 * 90 / sum(r["Self CPU"] for r in rows.values()))
    assert rows["replay"]["Self CUDA"] == 30 and sum(r["Self CUDA"] for r in rows.values()) == 40


def test_one_bad_trace_does_not_hide_the_others(tmp_path, capsys):
    good = _trace_file(tmp_path / "logs" / "runA" / "w0.pt.trace.json", GPU_TRACE)
    (tmp_path / "logs" / "runB").mkdir()
    (tmp_path / "logs" / "runB" / "w0.pt.trace.json").write_text("")
    cut = tmp_path / "logs" / "runC" / "w0.pt.trace.json"
    cut.parent.mkdir()
    cut.write_bytes(good.read_bytes()[:-60])  # truncated: a note
    cpu = _trace_file(tmp_path / "logs" / "runD" / "w0.pt.trace.json",
                      [step(1, 0, 100), op("aten::mm", 0, 50)])
    assert cpu.exists()
    code, out, err = run(capsys, tmp_path / "logs", "--section", "operators", "--section",
                         "kernels", "--sort", "self_device", "--format", "csv")
    assert code == 1  # runB failed, named; the others are printed
    assert "runB / w0 / default: w0.pt.trace.json: empty file" in err
    assert "note: runC / w0 / default: w0.pt.trace.json is truncated" in err
    assert "note: runD / w0 / default has no kernels table" in err
    assert out.count("# operators: ") == 3  # each span's block is labelled
    code, out, err = run(capsys, tmp_path / "logs", "--section", "operators", "--sort",
                         "self_device")
    assert code == 1 and "sorted by Self CPU: this trace has no Self CUDA column" in " ".join(out.split())


def test_a_url_is_read_as_the_server_reads_it(tmp_path, capsys):
    """`stepscope memory://logs` serves the runs; `summary` and `report` of the same URL
    said "no such file or folder"."""
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    body = json.dumps({"traceEvents": GPU_TRACE}).encode()
    mem.pipe("/urlsum/runA/w0.pt.trace.json", body)
    mem.pipe("/urlsum/runB/w1.pt.trace.json", body)
    try:
        code, out, err = run(capsys, "memory://urlsum", "--format", "json", "--section",
                             "operators")
        assert code == 0, err
        spans = json.loads(out)["spans"]
        assert [(s["run"], s["worker"]) for s in spans] == [("runA", "w0"), ("runB", "w1")]
        assert all(s["sections"]["operators"]["rows"] for s in spans)
        code, out, _ = run(capsys, "memory://urlsum/runB/w1.pt.trace.json", "--format",
                           "json", "--section", "operators")
        assert code == 0 and [s["run"] for s in json.loads(out)["spans"]] == ["runB"]
        code, _, err = run(capsys, "memory://nothing-here")
        assert code == 2 and "not found" in err
        assert main(["report", "memory://urlsum", "-o", str(tmp_path / "r.html")]) == 0
        assert (tmp_path / "r.html").stat().st_size > 100_000
    finally:
        mem.rm("/urlsum", recursive=True)


def test_whole_microseconds_are_printed_without_digits_they_do_not_have():
    """The overview's and steps' values are whole µs (SPEC §2.2): 743us, not 743.000us
    beside the phases' 743.241us."""
    from stepscope.share.render import cell

    assert cell(743, "us") == "743us" and cell(743.241, "us") == "743.241us"
    assert cell(1235, "us") == "1.235ms" and cell(0, "us") == "0us"
    assert cell(2.0, "us") == "2.000us"  # a float keeps torch's three digits
