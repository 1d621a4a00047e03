"""``stepscope report`` and ``stepscope summary``: arguments, progress, exit status.

Exit status: 0 done; 2 bad arguments or a PATH that is missing or holds no traces; 1 a
trace that cannot be read (both still show the others: ``report`` writes the page without
it and names it there). Data-quality notes go to
stderr as ``note: ...`` lines. Errors are one line on stderr (``stepscope report: ...``).
A progress bar (rich) goes to stderr while traces are read, when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Iterator

from ..errors import StepscopeError
from .load import PathError, Progress, one_line


def _parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"stepscope {name}", description=description)
    p.add_argument("path", metavar="PATH",
                   help="a trace file (*.pt.trace.json[.gz]), a run folder or a log directory "
                        "(a local path, or a URL such as s3://bucket/logs with "
                        "stepscope[remote])")
    return p


def report_parser() -> argparse.ArgumentParser:
    p = _parser("report", "Write one self-contained HTML file (data, JS and plotly inlined; "
                "opens from disk with no network) with the overview, operator, kernel, memory "
                "and module views of every trace under PATH.")
    p.add_argument("-o", "--output", default="stepscope-report.html", metavar="FILE",
                   help="the HTML file to write (default: stepscope-report.html; - for "
                        "standard output)")
    return p


def summary_parser() -> argparse.ArgumentParser:
    from .render import FORMATS
    from .summary import SECTIONS, SORT_KEYS

    p = _parser("summary", "Print the tables of every trace under PATH (a folder, a file or "
                "a URL): device, overview by event type, steps, phases, operators as torch's "
                "key_averages().table(), operator -> kernel, kernels, memcpy by direction and "
                "user ranges.")
    p.add_argument("--sort", choices=sorted(SORT_KEYS), metavar="KEY",
                   help="operator column to sort by, descending: self_cpu, cpu_total, "
                        "self_device, device_total, calls, name, cpu_memory, ... (torch's "
                        "self_cpu_time_total etc. also work; default self_device on GPU "
                        "traces, else self_cpu)")
    p.add_argument("--limit", type=int, default=20, metavar="N",
                   help="rows per long table (operators, kernels, ranges); 0: all (default 20)")
    p.add_argument("--by-shape", action="store_true",
                   help="operator rows per name and input shape (record_shapes=True traces)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (terminal tables), csv, json or markdown (default text); CSV "
                        "tables are separated and annotated by lines starting with #")
    p.add_argument("--section", action="append", choices=SECTIONS, metavar="NAME",
                   help=f"only these tables (repeatable): {', '.join(SECTIONS)}")
    return p


def _fail(command: str, message: str, status: int) -> int:
    print(f"stepscope {command}: {message}", file=sys.stderr)
    return status


@contextlib.contextmanager
def progress_bar(total_files: int) -> Iterator[Progress]:
    """A ``progress(file, fraction)`` drawing a rich bar on stderr (no-op when stderr is
    not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(TextColumn("reading {task.description}"), BarColumn(), TaskProgressColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, fraction: float) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=1.0)
            bar.update(tasks[name], completed=fraction)

        yield progress


def report_main(argv: list[str]) -> int:
    args = report_parser().parse_args(argv)
    from .report import output_problem, write_report

    argv_output = args.output
    if args.output == "-":
        args.output = "/dev/stdout"

    problem = output_problem(args.output)  # checked before any trace is read
    if problem is not None:
        return _fail("report", one_line(problem), 2)
    try:
        with progress_bar(1) as progress:
            info = write_report(args.path, args.output, progress)
    except PathError as e:
        return _fail("report", e.error, 2)
    except (StepscopeError, OSError) as e:
        return _fail("report", one_line(e), 1)
    for failure in info.failed:  # left out of the page (its notes name them too)
        _fail("report", failure, 1)
    for note in [*info.quality, *info.notes]:
        print(f"note: {note}", file=sys.stderr)
    shown = "standard output" if argv_output == "-" else info.path
    print(f"Wrote {shown} ({info.bytes:,} bytes, {info.spans} trace"
          f"{'s' if info.spans != 1 else ''})",
          file=sys.stderr if _is_stdout(args.output) else sys.stdout)  # (not into the page)
    return 1 if info.failed else 0


def _is_stdout(path: str) -> bool:
    """Does ``path`` name this process's standard output (``-o /dev/stdout``)?"""
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # (a test's captured stdout has no fd)
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def summary_main(argv: list[str]) -> int:
    parser = summary_parser()
    args = parser.parse_args(argv)
    if args.limit < 0:
        parser.error("--limit must be 0 (all rows) or more")
    from .load import analyse, spans_of
    from .summary import summary_sections

    try:
        spans = spans_of(args.path)
    except PathError as e:
        return _fail("summary", e.error, 2)
    done, failed = [], 0
    with progress_bar(len(spans)) as progress:
        for s in spans:
            where = f"{s.run} / {s.worker} / {s.span}"
            try:  # one unreadable trace does not hide the others (SPEC §1.4)
                views = analyse(s, progress)
            except (StepscopeError, OSError) as e:
                _fail("summary", f"{where}: {one_line(e)}", 1)
                failed += 1
                continue
            sections = summary_sections(views, by_shape=args.by_shape, sort=args.sort,
                                        limit=args.limit, only=tuple(args.section or ()))
            for note in views.notes():  # data-quality notes (a truncated trace, ...)
                print(f"note: {where}: {note['text']}", file=sys.stderr)
            missing = [k for k in args.section or () if k not in {x.key for x in sections}]
            if missing:
                print(f"note: {where} has no {', '.join(missing)} table", file=sys.stderr)
            done.append(({"run": s.run, "worker": s.worker, "span": s.span}, sections))
    try:
        _write_summary(done, args.format, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # ``| head``: the reader has what it wanted
        # (Python would report the failed flush of the closed pipe again at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 1 if failed else 0


def _write_summary(done: list, fmt: str, out) -> None:
    """Write the summaries of the spans in ``done`` to ``out`` in format ``fmt``."""
    from . import render

    if fmt == "json":
        render.write_json(done, out)
        return
    for i, (who, sections) in enumerate(done):
        heading = f"{who['run']} / {who['worker']} / {who['span']}"
        if fmt == "csv":
            render.write_csv(heading, sections, out, labelled=len(done) > 1)
        elif fmt == "markdown":
            render.write_markdown(heading, sections, out)
        else:
            width = shutil.get_terminal_size((200, 40)).columns if out.isatty() else 200
            render.write_text(heading, sections, out, width)
        if i < len(done) - 1:
            out.write("\n")


