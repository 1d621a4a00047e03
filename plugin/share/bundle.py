"""The dashboard's own page, made self-contained: one HTML string holding the data, the
stylesheet, plotly.js and every frontend module (``stepscope report``, SPEC §4.5).

How the ES modules travel: each ``frontend/**/*.js`` becomes a ``data:`` URL in an import
map under the bare name ``stepscope/<path>``, and its relative imports are rewritten to
those names (``../lib/dom.js`` in ``views/kernel.js`` -> ``stepscope/lib/dom.js``;
main.js's ``import(`./views/${name}.js`)`` -> ``import(`stepscope/views/${name}.js`)``).
The modules themselves are unchanged otherwise, so the report runs the dashboard's code.

Small enough to mail: the embedded answers (JSON), plotly.js and the import map are each
stored gzip-compressed as base64 in a data block (``<script type="application/gzip"
id="stepscope-<name>">``, never run). ``frontend/report_boot.js`` (inline) unpacks them
with the browser's ``DecompressionStream`` and runs plotly.js and the import map as inline
scripts. The Content-Security-Policy runs only scripts carrying the report's nonce (random
per report): the boot script, the two scripts it adds, and the modules it imports (a
module's imports inherit its nonce), so no ``'unsafe-inline'``, ``'unsafe-eval'``,
``data:`` or ``blob:`` source; and no request to anywhere (``connect-src 'none'``).

Untrusted text (trace names inside the JSON) cannot end a script element: base64 has no
``<``; the title and the note are HTML-escaped.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import posixpath
import re
import secrets
from pathlib import Path

from ..web.assets import frontend_dir, plotly_js

#: Bare-name prefix of the frontend modules in the import map.
PREFIX = "stepscope/"
#: The inline classic script that unpacks the blocks and starts main.js (not a module).
BOOT = "report_boot.js"
#: A relative module specifier after ``from``, ``import`` or ``import(`` (quote, backtick).
_SPEC = re.compile(r"""(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'`])(\.{1,2}/[^"'`]*)""")
#: What an inline script must not contain (it would end or confuse the element).
_UNSAFE_SCRIPT = re.compile(r"</script|<!--|<script", re.IGNORECASE)
#: The policy; ``{nonce}``: the report's nonce (the boot script's ``nonce`` attribute).
CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'")


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
        if rel.startswith("vendor/") or rel == BOOT:
            continue
        code = rewrite_imports(rel, path.read_text(encoding="utf-8"))
        out[PREFIX + rel] = ("data:text/javascript;base64,"
                             + base64.b64encode(code.encode("utf-8")).decode("ascii"))
    if PREFIX + "main.js" not in out:
        raise BundleError(f"no main.js in {root}")
    return out


def packed(raw: bytes) -> str:
    """``raw`` gzip-compressed (level 9, no timestamp: the same bytes give the same file),
    as base64 text: safe anywhere in HTML."""
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpacked(page_html: str, name: str) -> bytes:
    """The bytes of the block ``stepscope-<name>`` of a report page (what the page's
    DecompressionStream gives); raises BundleError when the page has no such block."""
    m = re.search(rf'<script type="application/gzip" id="stepscope-{re.escape(name)}">'
                  r"([A-Za-z0-9+/=]*)</script>", page_html)
    if not m:
        raise BundleError(f"no {name} block in this page: not a stepscope report?")
    return gzip.decompress(base64.b64decode(m.group(1)))


@functools.lru_cache(maxsize=2)
def _packed_file(path: str, mtime_ns: int) -> str:
    """:func:`packed` bytes of a file, once per file version (plotly.js: ~0.4 s of gzip)."""
    return packed(Path(path).read_bytes())


def _data_block(name: str, text: str) -> str:
    return f'<script type="application/gzip" id="stepscope-{name}">{text}</script>'


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
    plotly_text = _packed_file(str(plotly), plotly.stat().st_mtime_ns)
    imports = _dumps({"imports": import_map(root)})
    boot = (root / BOOT).read_text(encoding="utf-8")
    if _UNSAFE_SCRIPT.search(boot):
        raise BundleError(f"{BOOT} holds markup that would end its inline script")
    nonce = secrets.token_urlsafe(18)
    icon = base64.b64encode((root / "favicon.svg").read_bytes()).decode("ascii")
    head = "\n".join([
        f'<meta http-equiv="Content-Security-Policy" content="{CSP.format(nonce=nonce)}">',
        f"<style>{css}</style>",
        _data_block("data", packed(data_json)),
        _data_block("plotly", plotly_text),
        _data_block("imports", packed(imports)),
        f'<script nonce="{nonce}">{boot}</script>',
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
