"""Find runs, workers and spans under a log directory (SPEC §1.1).

A **run** is a folder (at any depth) that directly holds trace files; its name is the
folder's path relative to the log directory with ``/`` separators (``"."`` becomes the log
directory's own name). A file name gives worker and span::

    worker0.1623143089861.pt.trace.json.gz     -> ("worker0", "1623143089861")
    rank-0.Apr_03_18_51_38.1102.pt.trace.json  -> ("rank-0.Apr_03_18_51_38", "1102")
    worker0_step_12.1694128201545.pt.trace.json -> ("worker0_step_12", "1694128201545")
    trace.json                                 -> ("trace", "default")

``*.pt.trace.json[.gz]`` files are always traces; any other ``*.json[.gz]`` only when its
first bytes sniff as a trace (:func:`sniff_trace`). Symlinks are followed (each real folder
is visited once, so a link loop ends); hidden folders are skipped.

:class:`Scanner` keeps sniff results between polls, so polling a big tree every few
seconds reads only the files that changed.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import zlib
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: File name -> worker and span (SPEC §1.1).
NAME_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?(?:\.pt\.trace)?\.json(?:\.gz)?$")
#: Names that are always traces, without sniffing.
ALWAYS_TRACE_RE = re.compile(r"\.pt\.trace\.json(?:\.gz)?$")
#: Candidates for sniffing.
JSON_RE = re.compile(r"\.json(?:\.gz)?$")
#: Side files the profiler writes next to a trace; never traces.
NOT_TRACES = frozenset({"key_averages.json", "meta.json"})
#: A JSON object whose first key is one of these is a trace.
TRACE_KEYS = frozenset({"schemaVersion", "traceEvents", "deviceProperties", "displayTimeUnit",
                        "baseTimeNanoseconds", "distributedInfo", "traceName"})
DEFAULT_SPAN = "default"
#: Bytes (decompressed for .gz) looked at when sniffing.
SNIFF_BYTES = 8192

Snapshot = dict[str, dict[str, dict[str, "FileInfo"]]]


@dataclass(frozen=True)
class FileInfo:
    """One trace file as seen by a scan.

    ``size`` in bytes, ``mtime_ns`` in ns since the epoch, ``inode`` from ``os.stat``.
    ``shadowed`` lists files that gave the same worker and span but lost to this newer one.
    """

    path: str
    size: int
    mtime_ns: int
    inode: int
    shadowed: tuple[str, ...] = ()

    @property
    def signature(self) -> tuple[int, int, int]:
        """What must stay equal between polls for the file to count as unchanged."""
        return (self.size, self.mtime_ns, self.inode)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def parse_name(filename: str) -> tuple[str, str] | None:
    """``(worker, span)`` for a trace file name, ``None`` when it is not a JSON name."""
    m = NAME_RE.match(filename)
    if m is None:
        return None
    return m.group("worker"), m.group("span") or DEFAULT_SPAN


def span_key(span: str) -> tuple[int, int, str]:
    """Sort key: ``default`` first, then numeric spans by value."""
    if span.isdigit():
        return (1, int(span), span)
    return (0, 0, span)


def natural_key(name: str) -> list:
    """Sort key putting ``worker2`` before ``worker10``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def _head(path: str, limit: int = SNIFF_BYTES) -> bytes:
    """The first ``limit`` bytes of a file, decompressed when it ends in ``.gz``."""
    with open(path, "rb") as f:
        if not path.endswith(".gz"):
            return f.read(limit)
        raw = f.read(limit)
        out = b""
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        # Feed compressed chunks until enough text came out (a few KB usually suffice).
        for _ in range(64):
            try:
                out += decomp.decompress(raw, limit - len(out))
            except zlib.error:
                return out
            if len(out) >= limit or decomp.eof:
                return out
            raw = decomp.unconsumed_tail or f.read(limit)
            if not raw:
                return out
        return out


def _skip_ws(text: bytes, i: int) -> int:
    while i < len(text) and text[i] in b" \t\r\n":
        i += 1
    return i


def _read_string(text: bytes, i: int) -> tuple[str | None, int]:
    """Decode the JSON string starting at ``text[i] == '"'``; ``(None, i)`` if cut off."""
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == 0x5C:  # backslash: skip the escaped byte
            j += 2
            continue
        if c == 0x22:
            return text[i + 1:j].decode("utf-8", "replace"), j + 1
        j += 1
    return None, len(text)


def _first_object_has_ph(text: bytes, i: int) -> bool:
    """True when the object starting at ``text[i] == '{'`` has a top-level ``"ph"`` key."""
    depth = 0
    expect_key = False
    while i < len(text):
        c = text[i]
        if c == 0x22:  # string
            value, j = _read_string(text, i)
            if value is None:
                return False
            if depth == 1 and expect_key and text[_skip_ws(text, j):_skip_ws(text, j) + 1] == b":":
                if value == "ph":
                    return True
            expect_key = False
            i = j
            continue
        if c in b"{[":
            depth += 1
            expect_key = c == 0x7B
        elif c in b"}]":
            depth -= 1
            if depth == 0:
                return False
        elif c == 0x2C:  # comma: a key follows inside an object
            expect_key = True
        i += 1
    return False


def sniff_bytes(head: bytes) -> bool:
    """Does this file start like a trace? (SPEC §1.1)

    ``{"traceEvents": ...`` -> True; ``[{"ph": "X", ...}, ...]`` -> True;
    ``[{"name": "aten::mm", "count": 3}]`` (key_averages) -> False.
    """
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    i = _skip_ws(head, 0)
    if i >= len(head):
        return False
    if head[i] == 0x7B:  # {
        i = _skip_ws(head, i + 1)
        if i >= len(head) or head[i] != 0x22:
            return False
        key, _ = _read_string(head, i)
        return key in TRACE_KEYS
    if head[i] == 0x5B:  # [
        i = _skip_ws(head, i + 1)
        return i < len(head) and head[i] == 0x7B and _first_object_has_ph(head, i)
    return False


def sniff_trace(path: str) -> bool:
    """Read the start of ``path`` and decide whether it is a trace; unreadable -> False."""
    try:
        return sniff_bytes(_head(path))
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


class Scanner:
    """Scans one log directory; keeps sniff results keyed by (path, size, mtime, inode)."""

    def __init__(self, logdir: str):
        self.logdir = os.path.abspath(logdir)
        self._sniffed: dict[str, tuple[tuple[int, int, int], bool]] = {}

    def root_name(self) -> str:
        """Name of the run that is the log directory itself."""
        return os.path.basename(self.logdir.rstrip(os.sep)) or self.logdir

    def _is_trace(self, path: str, name: str, info: FileInfo) -> bool:
        if name in NOT_TRACES:
            return False
        if ALWAYS_TRACE_RE.search(name):
            return True
        cached = self._sniffed.get(path)
        if cached is not None and cached[0] == info.signature:
            return cached[1]
        verdict = sniff_trace(path)
        self._sniffed[path] = (info.signature, verdict)
        return verdict

    def iter_folders(self):
        """Yield ``(relative name, folder path, [os.DirEntry of files])`` for every folder.

        Iterative walk (no recursion limit), following symlinks; each real folder once.
        """
        seen: set[str] = set()
        stack = [(".", self.logdir)]
        while stack:
            rel, folder = stack.pop()
            real = os.path.realpath(folder)
            if real in seen:
                continue
            seen.add(real)
            try:
                with os.scandir(folder) as it:
                    entries = list(it)
            except OSError as e:
                log.debug("cannot list %s: %s", folder, e)
                continue
            files = []
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=True):
                        if not entry.name.startswith("."):
                            child = entry.name if rel == "." else f"{rel}/{entry.name}"
                            stack.append((child, entry.path))
                    elif entry.is_file(follow_symlinks=True):
                        files.append(entry)
                except OSError:
                    continue
            yield rel, folder, files

    def snapshot(self) -> Snapshot:
        """``{run: {worker: {span: FileInfo}}}``, every level sorted (runs by name, workers
        naturally, spans numerically)."""
        runs: Snapshot = {}
        live: set[str] = set()
        for rel, _folder, files in self.iter_folders():
            workers: dict[str, dict[str, FileInfo]] = {}
            for entry in files:
                parsed = parse_name(entry.name) if JSON_RE.search(entry.name) else None
                if parsed is None:
                    continue
                try:
                    st = entry.stat(follow_symlinks=True)
                except OSError:
                    continue
                info = FileInfo(entry.path, st.st_size, st.st_mtime_ns, st.st_ino)
                live.add(entry.path)
                if not self._is_trace(entry.path, entry.name, info):
                    continue
                worker, span = parsed
                spans = workers.setdefault(worker, {})
                spans[span] = _newer(spans.get(span), info)
            if workers:
                name = self.root_name() if rel == "." else rel
                runs[name] = {w: {s: workers[w][s] for s in sorted(workers[w], key=span_key)}
                              for w in sorted(workers, key=natural_key)}
        # forget sniff results of files that are gone
        for path in [p for p in self._sniffed if p not in live]:
            del self._sniffed[path]
        return {name: runs[name] for name in sorted(runs)}


def _newer(old: FileInfo | None, new: FileInfo) -> FileInfo:
    """Of two files giving the same worker and span, keep the newer (then the first name)."""
    if old is None:
        return new
    if (new.mtime_ns, old.path) > (old.mtime_ns, new.path):
        win, lose = new, old
    else:
        win, lose = old, new
    return FileInfo(win.path, win.size, win.mtime_ns, win.inode,
                    tuple(sorted(win.shadowed + lose.shadowed + (lose.path,))))


def snapshot(logdir: str) -> Snapshot:
    """One-off scan of ``logdir`` (see :meth:`Scanner.snapshot`)."""
    return Scanner(logdir).snapshot()


def shadow_note(info: FileInfo) -> dict | None:
    """The data-quality note for a file that won over same-named others, else ``None``."""
    if not info.shadowed:
        return None
    others = ", ".join(os.path.basename(p) for p in info.shadowed)
    return {"level": "info", "code": "duplicate_file",
            "text": f"{others} and {info.name} give the same worker and span; "
                    f"showing the newer file, {info.name}."}


def has_traces(logdir: str, max_folders: int = 10_000) -> bool:
    """Cheap check: does any folder (up to ``max_folders`` visited) hold a trace file?"""
    scanner = Scanner(logdir)
    for n, (_rel, _folder, files) in enumerate(scanner.iter_folders()):
        for entry in files:
            if not JSON_RE.search(entry.name) or parse_name(entry.name) is None:
                continue
            if entry.name in NOT_TRACES:
                continue
            if ALWAYS_TRACE_RE.search(entry.name) or sniff_trace(entry.path):
                return True
        if n >= max_folders:
            break
    return False
