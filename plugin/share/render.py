"""Write summary :class:`~stepscope.share.summary.Section` s as text (rich tables), CSV,
JSON or Markdown.

Text and Markdown format values for people (``1.234ms`` like torch's table, ``12.34%``,
``1.50 GiB``); CSV and JSON keep raw values (µs, %, bytes) with the unit in the column name.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from typing import TextIO

from ..units import format_bytes
from .summary import Section

FORMATS = ("text", "csv", "json", "markdown")
#: Unit suffix of a raw column name in CSV and JSON ("Self CPU" -> "Self CPU (us)").
_SUFFIX = {"us": " (us)", "pct": " (%)", "bytes": " (bytes)"}


def format_us(v: float | int) -> str:
    """µs as torch's table writes times: ``12.346us``, ``1.235ms``, ``2.000s``; a whole
    number of µs (the overview's and steps' values, rounded by SPEC §2.2) as ``743us``, not
    with digits it does not have (``743.000us`` beside the phases' ``743.241us``)."""
    if v >= 1e6:
        return f"{v / 1e6:.3f}s"
    if v >= 1e3:
        return f"{v / 1e3:.3f}ms"
    return f"{v}us" if isinstance(v, int) else f"{v:.3f}us"


def cell(value, unit: str) -> str:
    """A value as text for people."""
    if value is None:
        return "-"
    if unit == "us":
        return format_us(value if isinstance(value, int) and not isinstance(value, bool)
                         else float(value))
    if unit == "pct":
        return f"{float(value):.2f}%"
    if unit == "bytes":
        return format_bytes(int(value))
    if unit == "count" and isinstance(value, (int, float)):
        return f"{int(value):,}"
    if unit == "num" and isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _raw_name(name: str, unit: str) -> str:
    suffix = _SUFFIX.get(unit, "")
    return name if not suffix or name.endswith(suffix) or name.endswith("%") else name + suffix


def _footer(s: Section) -> str:
    """The section's note, then how many rows ``--limit`` left out (one line each)."""
    lines = [s.note] if s.note else []
    if s.total_rows > len(s.rows):
        lines.append(f"{len(s.rows):,} of {s.total_rows:,} rows (--limit)")
    return "\n".join(lines)


def write_text(heading: str, sections: list[Section], out: TextIO, width: int) -> None:
    """rich tables, one per section, under ``heading``."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # plain text: a "[memory]" name is not rich markup

    console = Console(file=out, width=width, highlight=False, soft_wrap=False)
    console.print(_plain(heading), style="bold", markup=False)
    for s in sections:
        t = Table(title=Text(_plain(s.title)), title_justify="left",
                  caption=Text("\n".join(map(_plain, _footer(s).splitlines()))) or None,
                  caption_justify="left", show_lines=False)
        cells = [[_plain(cell(v, u)) for v, (_n, u) in zip(r, s.columns)] for r in s.rows]
        for i, (name, unit) in enumerate(s.columns):
            if unit == "text":  # long kernel names: cut (csv / json keep them whole)
                t.add_column(Text(name), overflow="ellipsis", no_wrap=True, max_width=60)
            else:  # numbers never cut: their header wraps instead
                widest = max([len(c[i]) for c in cells] + [min(len(name), 9)])
                t.add_column(Text(_human_name(name)), justify="right", overflow="fold",
                             min_width=widest)
        for c in cells:
            t.add_row(*(Text(x) for x in c))
        console.print(t)


def _human_name(name: str) -> str:
    """Column name over formatted values: the unit is in each cell (``Total Duration``)."""
    for suffix in (" (us)", " (%)"):
        if name.endswith(suffix):
            return name[: -len(suffix)] + (" %" if suffix == " (%)" else "")
    return name


def write_markdown(heading: str, sections: list[Section], out: TextIO) -> None:
    out.write(f"# {_md(heading)}\n")
    for s in sections:
        out.write(f"\n## {_md(s.title)}\n\n")
        out.write("| " + " | ".join(_md(_human_name(n)) for n, _u in s.columns) + " |\n")
        out.write("|" + "|".join("---:" if u != "text" else "---" for _n, u in s.columns)
                  + "|\n")
        for r in s.rows:
            out.write("| " + " | ".join(_md(cell(v, u)) for v, (_n, u) in zip(r, s.columns))
                      + " |\n")
        if _footer(s):
            out.write("\n" + "  \n".join(_md(ln) for ln in _footer(s).splitlines()) + "\n")


def _md(text: str) -> str:
    """``text`` as Markdown shows it, never as HTML: names from a trace are untrusted (an
    operator named ``<img src=x onerror=...>`` ran in a Markdown viewer)."""
    text = html.escape(_plain(str(text).replace("\n", " ")), quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|")


#: Control characters (C0 but tab, DEL, C1): in a name from a trace, an escape sequence
#: would drive the terminal the text summary is printed on (clear it, set its title, ...).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _plain(text: str) -> str:
    """``text`` with its control characters shown as U+FFFD, for a terminal or Markdown."""
    return _CONTROL.sub("\ufffd", text)


def write_csv(heading: str, sections: list[Section], out: TextIO, labelled: bool = False) -> None:
    """One CSV block per section; with several (or ``labelled``: several spans), each
    starts with ``# key: title (run / worker / span)``; a block cut by ``--limit`` ends with
    ``# N of M rows (--limit)``."""
    for i, s in enumerate(sections):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if len(sections) > 1 or labelled:
            out.write(("\n" if i else "") + f"# {s.key}: {s.title} ({heading})\n")
        w.writerow([_raw_name(n, u) for n, u in s.columns])
        w.writerows(s.rows)
        if s.total_rows > len(s.rows):
            buf.write(f"# {len(s.rows)} of {s.total_rows} rows (--limit)\n")
        out.write(buf.getvalue())


def section_json(s: Section) -> dict:
    out = {"title": s.title, "columns": [{"name": n, "unit": u} for n, u in s.columns],
           "rows": s.rows}
    if s.total_rows > len(s.rows):
        out["total_rows"] = s.total_rows
    if s.note:
        out["note"] = s.note
    return out


def write_json(spans: list[tuple[dict, list[Section]]], out: TextIO) -> None:
    """``{"spans": [{"run", "worker", "span", "sections": {key: {...}}}]}``."""
    body = {"spans": [{**who, "sections": {s.key: section_json(s) for s in sections}}
                      for who, sections in spans]}
    json.dump(body, out, ensure_ascii=False, indent=1)
    out.write("\n")
