"""Find runs, workers and spans under a log directory (SPEC §1.1).

A **run** is a folder (at any depth) that directly holds trace files; its name is the
folder's path relative to the log directory with ``/`` separators (``"."`` becomes the log
directory's own name). A file name gives worker and span::

    worker0.1623143089861.pt.trace.json.gz     -> ("worker0", "1623143089861")
    rank-0.Apr_03_18_51_38.1102.pt.trace.json  -> ("rank-0.Apr_03_18_51_38", "1102")
    worker0_step_12.1694128201545.pt.trace.json -> ("worker0_step_12", "1694128201545")
    trace.json                                 -> ("trace", "default")

``*.pt.trace.json[.gz]`` files are always traces; any other ``*.json[.gz]`` only when a
streaming scan of its top-level keys finds a ``traceEvents`` list within the first 64 MiB
(:class:`TopLevelScanner`; exports of analysis tools put a large ``metadata`` object first),
or it is a list of events. The others are listed with the reason in
:attr:`Scanner.skipped` (the ``runs`` answer) and logged once. Symlinks are followed (each
real folder is visited once, so a link loop ends; a folder reached both directly and through
a link keeps its own name); hidden folders and files are skipped.

Names are display text and unique: bytes that are not UTF-8 show as U+FFFD, collisions get
`` (2)``..., the root run is ``"."`` when a sub-folder has its name; ``FileInfo.path`` keeps
the real path, so a listed name always maps back to its file.

:class:`Scanner` keeps sniff results between polls, so polling a big tree every few
seconds reads only the files that changed.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .fs import filesystem, filesystem_of, listing_error, redact
from .read.rawfile import BOM, GZIP_MAGIC
from .read.rawfile import _gunzip as gunzip

log = logging.getLogger(__name__)

#: File name -> worker and span (SPEC §1.1).
NAME_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?(?:\.pt\.trace)?\.json(?:\.gz)?$")
#: Names that are always traces, without sniffing.
ALWAYS_TRACE_RE = re.compile(r"\.pt\.trace\.json(?:\.gz)?$")
#: Candidates for sniffing.
JSON_RE = re.compile(r"\.json(?:\.gz)?$")
#: Side files the profiler writes next to a trace; never traces.
NOT_TRACES = frozenset({"key_averages.json", "meta.json"})
DEFAULT_SPAN = "default"
#: Most bytes (inflated for gzip) scanned for a top-level ``traceEvents`` key (SPEC §1.1).
SNIFF_LIMIT = 64 << 20
#: File bytes read at once while sniffing (most traces decide within the first piece).
SNIFF_PIECE = 64 << 10

Snapshot = dict[str, dict[str, dict[str, "FileInfo"]]]


@dataclass(frozen=True)
class FileInfo:
    """One trace file as seen by a scan.

    ``size`` in bytes, ``mtime_ns`` in ns since the epoch, ``inode``: the file's identity
    (:attr:`stepscope.fs.Stat.identity`: the inode locally, the ETag on an object store).
    ``shadowed`` lists files that gave the same worker and span but lost to this newer one.
    """

    path: str
    size: int
    mtime_ns: int
    inode: int | str
    shadowed: tuple[str, ...] = ()

    @property
    def signature(self) -> tuple[int, int, int | str]:
        """What must stay equal between polls for the file to count as unchanged."""
        return (self.size, self.mtime_ns, self.inode)

    @property
    def name(self) -> str:
        """The file's name for display (see :func:`display_name`)."""
        return display_name(os.path.basename(self.path))


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


class Sniff(NamedTuple):
    """Whether a file is a trace and, when it is not, why (shown in ``runs``' ``skipped``)."""

    is_trace: bool
    reason: str = ""


#: What a ``*.json[.gz]`` that is skipped is, in ``runs``' ``skipped`` list.
SIDE_FILE = "a profiler side file, not a trace"
NO_EVENTS = 'a JSON object without a top-level "traceEvents" list'
CUT_OFF = 'ends before a top-level "traceEvents" list (cut off, or not a trace)'

_KEY, _COLON, _VALUE, _COMMA = range(4)  # what the scanner expects next at the key level
_SHALLOW = re.compile(rb'[{}\[\]:,"]')  # tokens at the key level (scalars need no token)
#: Nesting change of each byte value outside strings: ``{`` ``[`` +1, ``}`` ``]`` -1.
_DELTA = np.zeros(256, dtype=np.int32)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1
_SMALL_VALUE = re.compile(rb'[{}\[\]"]')
_WINDOW = 1024  # bytes of a skipped value looked at first (then twice as many, ...)
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)  # up to the closing quote
_MAX_KEY = 64  # longer keys are kept cut (they are not "traceEvents" or "ph")


def _escaped(a: np.ndarray) -> np.ndarray:
    """For each byte of ``a``: is it preceded by an odd run of backslashes?"""
    idx = np.arange(len(a))
    last_other = np.maximum.accumulate(np.where(a != 0x5C, idx, -1))  # last non-backslash
    run = np.empty(len(a), dtype=np.int64)  # backslashes right before each byte
    run[0] = 0
    run[1:] = idx[:-1] - last_other[:-1]
    return (run & 1) == 1


class TopLevelScanner:
    """Streaming scan of a JSON document's top-level keys, skipping their values (SPEC §1.1).

    Feed consecutive byte pieces to :meth:`feed` until it returns a :class:`Sniff`; then
    :meth:`end` at the end of the data. A document is a trace when it is an object with a
    ``"traceEvents"`` key whose value is a list (``{"metadata": {...26 KB...}, "traceEvents":
    [``), or a list whose first element is an object with a ``"ph"`` key (legacy exports).
    Only strings and brackets are tokens: values are skipped without parsing them, so damage
    that the reader repairs (bad UTF-8, ``N/A``, control characters) does not matter here.
    Memory stays at one piece: a long string is skipped across pieces.
    """

    def __init__(self) -> None:
        self.form = b""  # b"{" or b"[" once the first byte is seen
        self.level = 1  # nesting depth of the keys looked at (2: first element of a list)
        self.depth = 0
        self.want = _KEY
        self.key: bytes | None = None  # the last key read at the key level
        self.keys = 0  # keys seen at the key level
        self.events_not_list = False
        self.in_string = False
        self.string: bytearray | None = None  # the key being read (None: not kept)
        self.carry = b""  # an escape cut by a piece boundary
        self.seen = 0  # bytes fed (counted by the caller)
        self.at_start = True  # nothing but a cut BOM fed yet

    def feed(self, data: bytes) -> Sniff | None:
        """Scan the next piece; a verdict once known, else None."""
        if not self.form:
            data = self.carry + data
            if self.at_start:
                if len(data) < len(BOM) and BOM.startswith(data):
                    self.carry = data  # a BOM cut by the piece boundary
                    return None
                data, self.at_start = data.removeprefix(BOM), False
            data, self.carry = data.lstrip(b" \t\r\n"), b""
            if not data:
                return None
            if data[:1] not in (b"{", b"["):
                return Sniff(False, "not JSON (does not start with { or [)")
            self.form, self.depth = data[:1], 1
            self.level = 1 if self.form == b"{" else 2
            data = data[1:]
        buf, i = self.carry + data, 0
        self.carry = b""
        while i < len(buf):
            if self.in_string:
                i = self._string(buf, i)
                continue
            if self.depth > self.level:
                i = self._skip(buf, i)
                continue
            m = _SHALLOW.search(buf, i)
            if m is None:
                break
            i = m.end()
            verdict = self._token(m.group())
            if verdict is not None:
                return verdict
        return None

    def _skip(self, buf: bytes, i: int) -> int:
        """Skip value bytes from ``buf[i]`` (outside a string, nested deeper than the keys)
        up to the bracket that closes the value; the index to go on from.

        Vectorised (a 64 MiB ``metadata`` value takes about a second): strings are masked
        by counting unescaped quotes, brackets outside them summed; windows grow from
        :data:`_WINDOW` so that many small values cost little.
        """
        for _ in range(8):  # most values are short: token by token first
            m = _SMALL_VALUE.search(buf, i)
            if m is None:
                return len(buf)
            i = m.end()
            if m.group() == b'"':
                j = _STRING_BODY.match(buf, i).end()
                if j >= len(buf) or buf[j] != 0x22:  # goes on in the next piece
                    self.in_string, self.string = True, None
                    return i
                i = j + 1
                continue
            self.depth += 1 if m.group() in b"{[" else -1
            if self.depth == self.level:
                self.want = _COMMA
                return i
        window = _WINDOW
        while i < len(buf):
            a = np.frombuffer(buf, np.uint8, min(window, len(buf) - i), i)
            quote = a == 0x22
            if quote.any():
                quote &= ~_escaped(a)
            opened = np.cumsum(quote)  # odd: inside a string (a quote counts as inside)
            outside = (opened & 1) == 0
            depth = self.depth + np.cumsum(_DELTA[a] * outside)
            back = np.flatnonzero(depth == self.level)
            if back.size:
                self.depth, self.want = self.level, _COMMA
                return i + int(back[0]) + 1
            self.depth = int(depth[-1])
            if not outside[-1]:  # the window ends inside a string: skip it by regex
                self.in_string, self.string = True, None
                return i + int(np.flatnonzero(quote)[-1]) + 1
            i += len(a)
            window *= 2
        return i

    def _string(self, buf: bytes, i: int) -> int:
        """Skip string bytes from ``buf[i]``; the index after the closing quote, or the end."""
        j = _STRING_BODY.match(buf, i).end()
        if self.string is not None and len(self.string) <= _MAX_KEY:
            self.string += buf[i:min(j, i + _MAX_KEY + 1)]
        if j >= len(buf) - 1 and (j == len(buf) or buf[j] == 0x5C):
            self.carry = buf[j:]  # the string goes on in the next piece (maybe after "\\")
            return len(buf)
        self.in_string = False
        key, self.string = self.string, None
        if self.depth == self.level:
            if self.want == _KEY:
                self.key, self.want, self.keys = bytes(key or b""), _COLON, self.keys + 1
            elif self.want == _VALUE:
                self._value(b'"')
        return j + 1

    def _token(self, t: bytes) -> Sniff | None:
        if t == b'"':
            self.in_string = True
            at_key = self.depth == self.level and self.want == _KEY
            self.string = bytearray() if at_key else None
            return None
        if self.depth < self.level:  # inside a top-level list, before its first element
            if t == b"{":
                self.depth += 1
                return None
            return Sniff(False, "a JSON list whose first element is not an event object")
        if self.want == _COLON and t == b":":
            self.want = _VALUE
            if self.form == b"[" and self.key == b"ph":
                return Sniff(True)
            return None
        if self.want == _VALUE:
            if self.form == b"{" and self.key == b"traceEvents" and t == b"[":
                return Sniff(True)
            self._value(t)
        elif t == b",":
            self.want = _KEY
        elif t in b"{[":  # a value where none belongs: skip it
            self.depth += 1
        if t in b"}]" and self.depth == self.level:
            return self._closed()
        return None

    def _value(self, t: bytes) -> None:
        """The value of ``self.key`` starts with token ``t`` (``,`` or ``}``: a scalar)."""
        if self.key == b"traceEvents":
            self.events_not_list = True
        if t in (b"{", b"["):
            self.depth += 1
            self.want = _COMMA
        elif t == b",":
            self.want = _KEY
        elif t == b'"':
            self.want = _COMMA

    def _closed(self) -> Sniff:
        """The top-level object (or the list's first element) ended without a verdict."""
        if self.form == b"[":
            return Sniff(False, 'a JSON list whose first element has no "ph" key')
        if self.events_not_list:
            return Sniff(False, '"traceEvents" is not a list')
        return Sniff(False, NO_EVENTS if self.keys else "an empty JSON object")

    def end(self) -> Sniff:
        """The data ended (or the scan limit was reached) before a verdict."""
        if not self.form:
            return Sniff(False, "empty file")
        if self.key == (b"traceEvents" if self.form == b"{" else b"ph") \
                and self.want in (_COLON, _VALUE) and self.depth == self.level:
            return Sniff(True)  # cut right after the key: a (truncated) trace
        if self.seen >= SNIFF_LIMIT:
            return Sniff(False, 'no top-level "traceEvents" list in the first '
                                f"{SNIFF_LIMIT >> 20} MiB")
        return Sniff(False, CUT_OFF)


def sniff_bytes(head: bytes) -> bool:
    """Does this text (a whole file, or its start) look like a trace? (SPEC §1.1)

    ``{"metadata": {...}, "traceEvents": [...`` -> True; ``[{"ph": "X", ...}, ...]`` -> True;
    ``[{"name": "aten::mm", "count": 3}]`` (key_averages) -> False.
    """
    return _scan([head]).is_trace


def _scan(pieces) -> Sniff:
    """Feed ``pieces`` to a :class:`TopLevelScanner` until a verdict or ``SNIFF_LIMIT``."""
    scanner = TopLevelScanner()
    for piece in pieces:
        view = memoryview(piece)[:max(0, SNIFF_LIMIT - scanner.seen)]
        for k in range(0, len(view), SNIFF_PIECE):  # inflated pieces can be 16 MiB
            part = bytes(view[k:k + SNIFF_PIECE])
            verdict = scanner.feed(part)
            scanner.seen += len(part)
            if verdict is not None:
                return verdict
        if scanner.seen >= SNIFF_LIMIT:
            break
    return scanner.end()


def _pieces(f, notes: list) -> Iterator[bytes]:
    """The file's bytes in pieces of about ``SNIFF_PIECE``, inflated when it is gzip (once
    more for gzip of gzip, as the reader does); gzip damage ends them with a note."""
    raw = iter(lambda: f.read(SNIFF_PIECE), b"")
    first = next(raw, b"")
    pieces = _chain(first, raw)
    for _ in range(2):
        if first[:2] != GZIP_MAGIC:
            break
        pieces = gunzip(pieces, "", notes)
        first = next(pieces, b"")
        pieces = _chain(first, pieces)
    return pieces


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def sniff_file(path: str) -> Sniff:
    """Scan the start of ``path`` (at most ``SNIFF_LIMIT`` bytes of JSON) for a verdict."""
    notes: list = []
    try:
        with filesystem_of(path).open(path) as f:
            verdict = _scan(_pieces(f, notes))
    except OSError as e:
        return Sniff(False, f"cannot read it: {e.strerror or e}")
    if not verdict.is_trace and notes and verdict.reason in (CUT_OFF, "empty file"):
        return Sniff(False, "damaged gzip data before any trace events")
    return verdict


def sniff_trace(path: str) -> bool:
    """Does ``path`` hold a trace? (:func:`sniff_file`; unreadable -> False)"""
    return sniff_file(path).is_trace


class Scanner:
    """Scans one log directory; keeps sniff results keyed by (path, size, mtime, inode).

    After each :meth:`snapshot`, ``skipped`` lists the ``*.json[.gz]`` files that are not
    traces, ``[{"file": path relative to the log directory, "reason": str}]`` sorted by file;
    each is logged once (again only when it changes).
    """

    def __init__(self, logdir: str):
        self.fs, self.logdir = filesystem(logdir)  # a local path or a URL (stepscope.fs)
        self._sniffed: dict[str, tuple[tuple[int, int, int], Sniff]] = {}
        #: each folder's entries at the last complete walk (kept through a passing error)
        self._listed: dict[str, list] = {}
        #: folders the last walk could not list for lack of permission: {relative name: reason}
        self._unlisted: dict[str, str] = {}
        self.skipped: list[dict[str, str]] = []

    def root_name(self) -> str:
        """Own name of the run that is the log directory itself (see :meth:`snapshot`)."""
        logdir = redact(self.logdir)  # a URL's query string or password is never shown
        return display_name(os.path.basename(logdir.rstrip(os.sep)) or logdir)

    def _sniff(self, path: str, name: str, info: FileInfo) -> Sniff:
        if ALWAYS_TRACE_RE.search(name) and name not in NOT_TRACES:
            return Sniff(True)
        cached = self._sniffed.get(path)
        if cached is not None and cached[0] == info.signature:
            return cached[1]
        verdict = Sniff(False, SIDE_FILE) if name in NOT_TRACES else sniff_file(path)
        self._sniffed[path] = (info.signature, verdict)
        if not verdict.is_trace and (cached is None or cached[1] != verdict):
            # (once per verdict: a trainer_state.json rewritten every step is not a trace
            # again and again)
            log.warning("skipping %s: %s", display_name(path), verdict.reason)
        return verdict

    def iter_folders(self):
        """Yield ``(relative name, folder path, [fs.Entry of files])`` for every folder.

        Iterative walk (no recursion limit), following symlinks; each real folder once.
        A remote log directory is listed afresh (:meth:`~stepscope.fs.FsspecFS.refresh`);
        when its root cannot be listed (missing bucket, access denied) this raises the
        error :func:`~stepscope.fs.listing_error` makes, naming the redacted URL.
        """
        if self.fs.remote:
            self.fs.refresh(self.logdir)
        root = self.fs.realpath(self.logdir)
        seen: set[str] = set()
        listed: dict[str, list] = {}
        unlisted: dict[str, str] = {}
        # folders in a fixed order, those reached through a link last: a real folder is
        # named after its own path when it has one (a link `latest -> run3` beside it
        # used to take run3's name in scandir's order, and links to its URLs went 404)
        heap = [(False, ".", self.logdir, root)]
        while heap:
            _linked, rel, folder, real = heapq.heappop(heap)
            if real in seen:
                continue
            seen.add(real)
            try:
                entries = list(self.fs.scandir(folder))
            except Exception as e:  # a storage library's own errors too (botocore...)
                if self.fs.remote and folder == self.logdir:
                    raise listing_error(self.logdir, e) from None
                if not isinstance(e, OSError) and not self.fs.remote:
                    raise
                if isinstance(e, PermissionError):  # lasting: said in `skipped`, logged once
                    unlisted[rel] = f"cannot list this folder: {e.strerror or e}"
                    if rel not in self._unlisted:
                        log.warning("cannot list %s: %s", redact(folder), e)
                    continue
                log.debug("cannot list %s: %s", redact(folder), e)
                # a passing error (a remote timeout) keeps what the folder held: its runs
                # and their analyses stay (they went, and were analysed again, once it passed)
                entries = self._listed.get(folder)
                if entries is None:
                    continue
            listed[folder] = entries
            files = []
            for entry in entries:
                if entry.name.startswith("."):  # hidden: .git, .cache, macOS ._worker0...
                    continue
                if entry.is_dir:
                    child = entry.name if rel == "." else f"{rel}/{entry.name}"
                    child_real = self.fs.realpath(entry.path)
                    linked = not self.fs.remote and child_real != self.fs.join(root, *child.split("/"))
                    heapq.heappush(heap, (linked, child, entry.path, child_real))
                elif entry.is_file:
                    files.append(entry)
            yield rel, folder, files
        self._listed = listed  # (a walk stopped early keeps the last complete one)
        self._unlisted = unlisted

    def snapshot(self) -> Snapshot:
        """``{run: {worker: {span: FileInfo}}}``, every level sorted (runs by name, workers
        naturally, spans numerically).

        Names are for display: bytes that are not UTF-8 show as U+FFFD, and names that then
        collide get `` (2)``, `` (3)``... (:func:`unique_names`); ``FileInfo.path`` keeps the
        real path. A sub-folder named like the log directory keeps its name: the root run is
        then called ``"."``.
        """
        found: dict[str, dict[str, dict[str, FileInfo]]] = {}  # real names
        skipped: list[dict[str, str]] = []
        live: set[str] = set()
        for rel, _folder, files in self.iter_folders():
            workers: dict[str, dict[str, FileInfo]] = {}
            for entry in files:
                parsed = parse_name(entry.name) if JSON_RE.search(entry.name) else None
                if parsed is None:
                    continue
                try:
                    st = self.fs.stat(entry.path)
                except PermissionError as e:  # there, but hidden from us: say why it is not
                    file = entry.name if rel == "." else f"{rel}/{entry.name}"
                    skipped.append({"file": display_name(file),
                                    "reason": f"cannot read: {e.strerror or e}"})
                    continue
                except OSError:  # gone since the listing
                    continue
                info = FileInfo(entry.path, st.size, st.mtime_ns, st.identity)
                live.add(entry.path)
                verdict = self._sniff(entry.path, entry.name, info)
                if not verdict.is_trace:
                    file = entry.name if rel == "." else f"{rel}/{entry.name}"
                    skipped.append({"file": display_name(file), "reason": verdict.reason})
                    continue
                worker, span = parsed
                spans = workers.setdefault(worker, {})
                spans[span] = _newer(spans.get(span), info)
            if workers:
                found[rel] = workers
        # forget sniff results of files that are gone
        for path in [p for p in self._sniffed if p not in live]:
            del self._sniffed[path]
        skipped += [{"file": display_name(rel if rel != "." else self.root_name()) + "/",
                     "reason": reason} for rel, reason in self._unlisted.items()]
        self.skipped = sorted(skipped, key=lambda s: s["file"])
        return self._named(found)

    def _named(self, found: dict[str, dict[str, dict[str, FileInfo]]]) -> Snapshot:
        """Real folder and worker names -> unique display names, each level sorted."""
        names = unique_names([rel for rel in found if rel != "."])
        if "." in found:
            own = self.root_name()
            names["."] = "." if own in names.values() else own
        runs: Snapshot = {}
        for rel, workers in found.items():
            shown = unique_names(list(workers))
            runs[names[rel]] = {
                shown[w]: {display_name(s): workers[w][s] for s in sorted(workers[w], key=span_key)}
                for w in sorted(workers, key=lambda w: natural_key(shown[w]))}
        return {name: runs[name] for name in sorted(runs)}


def display_name(name: str) -> str:
    """``name`` as text that any JSON encoder takes: bytes of a file name that are not UTF-8
    (surrogate-escaped by ``os``) become U+FFFD; ``b"caf\\xe9"`` -> ``"caf\ufffd"``."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return name.encode("utf-8", "replace").decode("utf-8")


def unique_names(names: list[str]) -> dict[str, str]:
    """``{name: display name}``, the display names all different (SPEC §1.1 names are keys).

    A name that is valid text keeps it; the others (their bytes shown as U+FFFD) take their
    display name when it is free, else the first free ``"name (2)"``, ``"name (3)"``...,
    in the order of their real bytes, so the mapping is stable between scans.
    """
    out = {n: n for n in names if display_name(n) == n}
    taken = set(out.values())
    for name in sorted((n for n in names if n not in out), key=_raw):
        shown = base = display_name(name)
        k = 2
        while shown in taken:
            shown, k = f"{base} ({k})", k + 1
        out[name] = shown
        taken.add(shown)
    return out


def _raw(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


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
    others = ", ".join(display_name(os.path.basename(p)) for p in info.shadowed)
    return {"level": "info", "code": "duplicate_file",
            "text": f"{others} and {info.name} give the same worker and span; "
                    f"showing {info.name}, the newer file (the first by name when they are "
                    "as old)."}


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
