"""Where the static frontend files are.

Installed from a wheel, ``frontend/`` ships inside the package (``stepscope/frontend``);
in a source or editable checkout it is the repository's top-level ``frontend/`` folder,
next to ``plugin/``.
"""

from __future__ import annotations

from pathlib import Path

#: MIME types for the files the frontend serves; the OS table may lack some (.mjs, .wasm)
#: or be wrong (.js as text/plain on some Windows set-ups breaks ES modules).
MIME_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".wasm": "application/wasm",
    ".map": "application/json",
    ".txt": "text/plain",
    ".woff2": "font/woff2",
}


def frontend_dir() -> Path:
    """The folder holding ``index.html`` and the frontend modules."""
    package = Path(__file__).resolve().parent.parent  # stepscope/ (web/ is one level down)
    packaged = package / "frontend"
    if packaged.is_dir():
        return packaged
    return package.parent / "frontend"


def plotly_js() -> Path | None:
    """``plotly.min.js`` from the installed ``plotly`` Python package, or None."""
    try:
        import plotly
    except ImportError:
        return None
    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


def mime_type(path: Path | str) -> str:
    """MIME type of a static file by its suffix (``application/octet-stream`` if unknown)."""
    return MIME_TYPES.get(Path(path).suffix.lower(), "application/octet-stream")
