"""The dashboard's own page, made self-contained: one HTML string holding the data, the
stylesheet, plotly.js and every frontend module (``stepscope report``, SPEC §4.5).

How the ES modules travel: each ``frontend/**/*.js`` becomes a ``data:`` URL in an import
map under the bare name ``stepscope/<path>``, and its relative imports are rewritten to
those names (``../lib/dom.js`` in ``views/kernel.js`` -> ``stepscope/lib/dom.js``;
main.js's ``import(`./views/${name}.js`)`` -> ``import(`stepscope/views/${name}.js`)``).
The modules themselves are unchanged otherwise, so the report runs the dashboard's code.
A Content-Security-Policy forbids every request to anywhere (``connect-src 'none'``).

Untrusted text (trace names inside the JSON) cannot end a script element: ``<``, ``>`` and
``&`` are written as ``\\u003c`` etc. inside the JSON.
"""

from __future__ import annotations

import base64
import html
import posixpath
import re
from pathlib import Path

from ..web.assets import frontend_dir, plotly_js

#: Bare-name prefix of the frontend modules in the import map.
PREFIX = "stepscope/"
#: A relative module specifier after ``from``, ``import`` or ``import(`` (quote, backtick).
_SPEC = re.compile(r"""(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'`])(\.{1,2}/[^"'`]*)""")
#: What a classic inline script must not contain (it would end or confuse the element).
_UNSAFE_SCRIPT = re.compile(r"</script|<!--|<script", re.IGNORECASE)
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval' data:; "
       "style-src 'unsafe-inline'; img-src data:; font-src data:; connect-src 'none'")


class BundleError(RuntimeError):
    """The frontend cannot be inlined (a file is missing or an import is not rewritable)."""


def rewrite_imports(rel: str, source: str) -> str:
    """``source`` of the module at ``rel`` (``views/kernel.js``) with relative specifiers
    turned into bare ``stepscope/...`` names (a trailing ``/`` of a template prefix kept)."""
    base = posixpath.dirname(rel)

    def repl(m: re.Match) -> str:
        spec = m.group(3)
        path = posixpath.normpath(posixpath.join(base, spec))
        if path.startswith(".."):
            raise BundleError(f"{rel}: import {spec!r} leaves the frontend folder")
        return m.group(1) + m.group(2) + PREFIX + path + ("/" if spec.endswith("/") else "")

    return _SPEC.sub(repl, source)


def import_map(root: Path | None = None) -> dict[str, str]:
    """``{"stepscope/<path>.js": "data:text/javascript;base64,..."}`` for every module."""
    root = root or frontend_dir()
    out = {}
    for path in sorted(root.rglob("*.js")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("vendor/"):
            continue
        code = rewrite_imports(rel, path.read_text(encoding="utf-8"))
        out[PREFIX + rel] = ("data:text/javascript;base64,"
                             + base64.b64encode(code.encode("utf-8")).decode("ascii"))
    if PREFIX + "main.js" not in out:
        raise BundleError(f"no main.js in {root}")
    return out


def json_for_script(data: bytes) -> str:
    """JSON bytes safe inside ``<script type="application/json">`` (no ``<``, ``>``, ``&``:
    they only occur inside JSON strings, where the ``\\u`` escapes mean the same)."""
    return (data.replace(b"<", b"\\u003c").replace(b">", b"\\u003e")
            .replace(b"&", b"\\u0026").decode("utf-8"))


def classic_script(code: str) -> str:
    """An inline ``<script>``, or a base64 ``data:`` one when the code holds markup that
    would end the element early."""
    if _UNSAFE_SCRIPT.search(code):
        b64 = base64.b64encode(code.encode("utf-8")).decode("ascii")
        return f'<script src="data:text/javascript;base64,{b64}"></script>'
    return f"<script>{code}</script>"


def page(data_json: bytes, *, title: str, note: str) -> str:
    """The report page: the dashboard's index.html with everything inlined.

    ``data_json``: the embedded answers (see :mod:`stepscope.share.report`); ``title``
    and ``note`` are plain text (escaped here).
    """
    root = frontend_dir()
    index = (root / "index.html").read_text(encoding="utf-8")
    css = (root / "style.css").read_text(encoding="utf-8").replace("</", "<\\/")
    plotly = plotly_js()
    if plotly is None:
        raise BundleError("the plotly package is not installed (pip install plotly): the "
                          "report inlines its plotly.min.js")
    imports = json_for_script(_dumps({"imports": import_map(root)}))
    icon = base64.b64encode((root / "favicon.svg").read_bytes()).decode("ascii")
    head = "\n".join([
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<style>{css}</style>",
        f'<script type="application/json" id="stepscope-data">{json_for_script(data_json)}'
        "</script>",
        '<script>window.STEPSCOPE_EMBEDDED = JSON.parse('
        'document.getElementById("stepscope-data").textContent);</script>',
        classic_script(plotly.read_text(encoding="utf-8")),
        f'<script type="importmap">{imports}</script>',
        f'<script type="module">import "{PREFIX}main.js";</script>',
    ])
    # the inlined code last: nothing searched for afterwards can match inside it
    for old, new in (("<title>Stepscope</title>", f"<title>{html.escape(title)}</title>"),
                     ('<div id="banner"></div>',
                      f'<div class="report-note" id="report-note">{html.escape(note)}</div>'
                      '<div id="banner"></div>'),
                     ('<link rel="stylesheet" href="style.css">', ""),
                     ('href="favicon.svg"', f'href="data:image/svg+xml;base64,{icon}"'),
                     ('<script type="module" src="main.js"></script>', head)):
        if old not in index:
            raise BundleError(f"index.html has no {old!r}: update stepscope.share.bundle")
        index = index.replace(old, new, 1)
    return index


def _dumps(obj) -> bytes:
    import orjson

    return orjson.dumps(obj)
