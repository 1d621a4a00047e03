"""A corpus of damaged and hostile traces derived from one real trace (issue 7, SPEC §1.4).

Every case is a small file made from a slice of the real ResNet-50 trace (its first two
profiler steps, ~5 MB of JSON) by one kind of damage or hostility: cut off, not JSON,
wrong types, absurd numbers, hostile names, ... Each case knows what the server must answer:

- ``ok``: the views answer 200; ``notes`` must hold every code in ``codes`` (the
  data-quality notes saying what was repaired; empty for hostile-but-valid input);
- ``422``: every view answers 422 with the JSON error body naming the file, ``error``
  must contain ``reason``;
- ``either``: 200 or 422 are both acceptable (e.g. a 100,000-deep nesting may be refused),
  but never a 5xx;
- ``same_as_healthy``: the damage hides nothing (BOM, double gzip, shuffled events, ...):
  every payload equals the healthy slice's, notes aside.

Write the corpus to a folder (one run folder per case) to look at it::

    python tests/damaged.py OUT_DIR
"""

from __future__ import annotations

import copy
import functools
import gzip
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
SOURCE = SHARED / "kineto_resnet50" / "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"
#: hostile markup: would run script if a page ever parsed it as HTML
XSS = "<img src=x onerror=alert(1)>"
#: a run folder name with every HTML-special character
HOSTILE_RUN = "run <svg onload=alert(2)> & \"quotes\" 'single'"
FILE = "worker0.pt.trace.json"


@dataclass
class Case:
    """One damaged trace: ``make(base_doc) -> bytes`` written as ``run/filename``."""

    name: str
    make: Callable[[dict], bytes]
    expect: str = "ok"  # "ok" | "422" | "either"
    codes: frozenset = field(default_factory=frozenset)  # notes required when 200
    reason: str = ""  # substring of the 422 error
    filename: str = FILE
    run: str = ""  # run folder (default: case-<name>)
    #: the repaired trace holds exactly the healthy slice: equal payloads (notes aside)
    same_as_healthy: bool = False

    @property
    def folder(self) -> str:
        return self.run or f"case-{self.name}"

    @property
    def worker(self) -> str:
        from stepscope.discovery import parse_name

        return parse_name(self.filename)[0]


# -- the base slice ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _base() -> bytes:
    with gzip.open(SOURCE, "rb") as f:
        doc = orjson.loads(f.read())
    events = doc["traceEvents"]
    steps = sorted((e["ts"], e["dur"]) for e in events
                   if str(e.get("name", "")).startswith("ProfilerStep#"))
    end = steps[1][0] + steps[1][1]  # end of the second step
    doc["traceEvents"] = [e for e in events if e.get("ph") == "M" or e.get("ts", 0) < end]
    return orjson.dumps(doc)


def base_doc() -> dict:
    """A fresh copy of the slice: top-level keys and ``traceEvents`` of the first two steps."""
    return orjson.loads(_base())


def base_bytes() -> bytes:
    """The slice as compact JSON bytes (what the healthy run holds)."""
    return _base()


def dump(doc) -> bytes:
    """Compact UTF-8 JSON (orjson: ~10x faster than json, which keeps the corpus quick)."""
    return orjson.dumps(doc)


def _xs(doc: dict, cat: str | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def _every(events: list[dict], n: int) -> list[dict]:
    return events[::n]


# -- the damage -------------------------------------------------------------------------------
def truncated(fraction: float) -> Callable[[dict], bytes]:
    def make(doc: dict) -> bytes:
        data = dump(doc)
        return data[: int(len(data) * fraction)]
    return make


def gz_truncated(fraction: float) -> Callable[[dict], bytes]:
    def make(doc: dict) -> bytes:
        data = gzip.compress(dump(doc), 6, mtime=0)
        return data[: int(len(data) * fraction)]
    return make


def gz_corrupt(doc: dict) -> bytes:
    data = bytearray(gzip.compress(dump(doc), 6, mtime=0))
    at = int(len(data) * 0.6)
    data[at: at + 64] = bytes((b ^ 0x5A) for b in data[at: at + 64])
    return bytes(data)


def replace_values(key: str, value_text: str, every: int = 50) -> Callable[[dict], bytes]:
    """Write ``value_text`` raw (not JSON-encoded) as ``key`` of every ``every``-th X event."""
    marker = "\u2603MARK\u2603"

    def make(doc: dict) -> bytes:
        for e in _every(_xs(doc), every):
            e[key] = marker
        return dump(doc).replace(orjson.dumps(marker), value_text.encode())
    return make


def invalid_utf8(doc: dict) -> bytes:
    for e in _every(_xs(doc, "Operator"), 40):
        e["name"] = e["name"] + "\u2603"
    return dump(doc).replace("\u2603".encode(), b"\xff\xfe\xc3")


def control_chars(doc: dict) -> bytes:
    for e in _every(_xs(doc, "Operator"), 40):
        e["name"] = e["name"] + "\u2603"
    return dump(doc).replace("\u2603".encode(), b"\x01\t\x1f\n")


def negative(doc: dict) -> bytes:
    xs = _xs(doc)
    for e in _every(xs, 70):
        e["dur"] = -5
    xs[3]["ts"] = -1000
    return dump(doc)


def missing(doc: dict) -> bytes:
    for k, e in enumerate(_every(_xs(doc), 30)):
        e.pop("ts" if k % 2 else "dur")
    return dump(doc)


def string_typed(doc: dict) -> bytes:
    for k, e in enumerate(_every(_xs(doc), 30)):
        e["ts" if k % 2 else "dur"] = "12abc" if k % 3 else "soon"
    return dump(doc)


def nulls(doc: dict) -> bytes:
    for k, e in enumerate(_every(_xs(doc), 25)):
        e[("name", "ts", "dur", "pid", "tid", "args", "cat", "ph")[k % 8]] = None
    doc["deviceProperties"] = None
    return dump(doc)


def wrong_fields(doc: dict) -> bytes:
    """Ill-typed containers inside events and at the top level: dropped or ignored."""
    xs = _xs(doc)
    xs[10]["args"] = ["not", "a", "dict"]
    xs[11]["args"] = "a string"
    xs[12]["pid"] = [1, 2]
    xs[13]["name"] = {"a": 1}
    xs[14]["ph"] = 88
    xs[15]["args"]["grid"] = "big"
    xs[16]["args"]["Input dims"] = {"x": 1}
    doc["traceEvents"][20:20] = [5, None, "event", [1, 2], True]
    doc["deviceProperties"] = "V100"
    doc["distributedInfo"] = [1, 2]
    return dump(doc)


def events_not_a_list(doc: dict) -> bytes:
    return dump({"schemaVersion": 1, "traceEvents": {str(i): e for i, e in enumerate(doc["traceEvents"][:50])}})


def deep_args(doc: dict) -> bytes:
    depth = 100_000
    data = dump(doc)
    deep = b'{"ph":"i","name":"deep","pid":1,"tid":1,"ts":1,"args":{"x":' + b"[" * depth + \
        b"]" * depth + b"}},"
    i = data.index(b'"traceEvents":[') + len(b'"traceEvents":[')
    return data[:i] + deep + data[i:]


def deep_top(doc: dict) -> bytes:
    return b"[" * 100_000 + b"]" * 100_000


def huge_name(doc: dict) -> bytes:
    ops = _xs(doc, "Operator")
    ops[5]["name"] = "aten::" + "A" * 2_000_000
    kernels = _xs(doc, "Kernel")
    kernels[3]["name"] = "void k<" + "B" * 2_000_000 + ">()"
    return dump(doc)


def shuffled(doc: dict) -> bytes:
    random.Random(7).shuffle(doc["traceEvents"])
    return dump(doc)


def duplicated_steps(doc: dict) -> bytes:
    step = next(e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#"))
    doc["traceEvents"] += [copy.deepcopy(step), copy.deepcopy(step)]
    return dump(doc)


def zero_length_steps(doc: dict) -> bytes:
    for e in doc["traceEvents"]:
        if str(e.get("name")).startswith("ProfilerStep#"):
            e["dur"] = 0
    return dump(doc)


def dangling_links(doc: dict) -> bytes:
    for k, e in enumerate(_xs(doc)):
        args = e.get("args")
        if not isinstance(args, dict):
            continue
        if "correlation" in args and k % 3 == 0:
            args["correlation"] = 10**12 + k
        for key in ("External id", "external id"):
            if key in args and k % 4 == 0:
                args[key] = 10**12 + k
    return dump(doc)


def absurd_timestamps(doc: dict) -> bytes:
    xs = _xs(doc)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "Operator", "name": "Record Window End", "pid": xs[0]["pid"],
         "tid": xs[0]["tid"], "ts": xs[0]["ts"] + 40 * 365 * 86400 * 10**6, "dur": 0},
        {"ph": "X", "cat": "Operator", "name": "epoch", "pid": xs[0]["pid"], "tid": xs[0]["tid"],
         "ts": 1, "dur": 1},
        {"ph": "X", "cat": "Kernel", "name": "forever", "pid": 0, "tid": "stream 7",
         "ts": xs[0]["ts"], "dur": 10**17, "args": {"device": 0, "stream": 7}},
    ]
    return dump(doc)


def big_ints(doc: dict) -> bytes:
    data = dump(doc)
    xs = _xs(doc)
    marks = {f'"dur":{xs[7]["dur"]},'.encode(): b'"dur":99999999999999999999999,',
             f'"ts":{xs[9]["ts"]},'.encode(): b'"ts":-123456789012345678901234567890,'}
    for old, new in marks.items():
        data = data.replace(old, new, 1)
    k = data.index(b'"correlation":')
    data = data[:k] + b'"correlation":184467440737095516160,"x' + data[k + 1:]
    g = data.index(b'"grid":[')
    return data[:g] + b'"grid":[99999999999999999999,1,1],"y":[' + data[g + len(b'"grid":['):]


def metadata_only(doc: dict) -> bytes:
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    doc["deviceProperties"] = [{"id": 0, "name": "Tesla V100"}]
    return dump(doc)


def html_names(doc: dict) -> bytes:
    """Names, categories, threads, stacks, shapes and GPU names made of markup."""
    for k, e in enumerate(_xs(doc, "Operator")[::15]):
        e["name"] = f"{XSS}{k % 4}" if k % 2 else f"aten::mm<script>alert({k % 3})</script>"
        e.setdefault("args", {})["Call stack"] = f"{XSS};train.py(1): <module>"
    for k, e in enumerate(_xs(doc, "Kernel")[::10]):
        e["name"] = f"void k<{XSS}, &amp;>(<b>int</b>) #{k % 5}"
    xs = _xs(doc)
    xs[1]["cat"] = f"cat{XSS}"
    xs[2]["tid"] = f"tid{XSS}"
    doc["deviceProperties"] = [{"id": 0, "name": f"GPU {XSS}", "totalGlobalMem": 16 << 30,
                                "computeMajor": 7, "computeMinor": 0, "numSms": 80}]
    doc["traceName"] = XSS
    return dump(doc)


def surrogates(doc: dict) -> bytes:
    """Lone UTF-16 surrogate escapes (``"\\ud800"``), which no UTF-8 text can hold."""
    for e in _every(_xs(doc, "Operator"), 40):
        e["name"] = e["name"] + "\u2603"
    return dump(doc).replace("\u2603".encode(), b"\\ud800x\\udfff")


def html_error_page(doc: dict) -> bytes:
    return (b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
            b"<body><h1>502 Bad Gateway</h1><script>alert(3)</script></body></html>\n")


def random_bytes(doc: dict) -> bytes:
    rng = random.Random(11)
    data = bytes(rng.randrange(256) for _ in range(8192))
    return b"\x07" + data  # never starts like JSON or gzip


def legacy_list(doc: dict) -> bytes:
    """A bare event list (legacy export) with non-event entries mixed in."""
    events = doc["traceEvents"]
    return dump([events[0], 5, None, "x", *events[1:], [1], {"no": "phase"}])


def trailing_garbage(doc: dict) -> bytes:
    return dump(doc) + b"\n<html>proxy error</html>\n"


def duplicate_keys(doc: dict) -> bytes:
    data = dump(doc)
    return data.replace(b'{"ph":"X",', b'{"ph":"i","ph":"X","dur":-1,', 500)


def unknown_phases(doc: dict) -> bytes:
    for k, e in enumerate(_every(doc["traceEvents"], 11)):
        e["ph"] = ("Z", "", "XX", "\u00e9")[k % 4]
    return dump(doc)


CASES: list[Case] = [
    Case("empty", lambda d: b"", "422", reason="empty"),
    Case("whitespace", lambda d: b" \n\t\r\n" * 1000, "422", reason="empty"),
    Case("empty-object", lambda d: b"{}", "422", reason="not a trace"),
    Case("empty-list", lambda d: b"[]", "422", reason="no events"),
    Case("random-bytes", random_bytes, "422", reason="not JSON"),
    Case("nul-bytes", lambda d: b"\x00" * 100_000, "422", reason="not JSON"),
    Case("html-error-page", html_error_page, "422", reason="not JSON"),
    Case("bare-NA", lambda d: b"N/A", "422", reason="not JSON"),
    Case("not-a-trace", lambda d: b'{"foo": [1, 2, 3], "bar": "baz"}', "422", reason="not a trace"),
    Case("events-number", lambda d: b'{"traceEvents": 5}', "422", reason="not a trace"),
    Case("events-dict", events_not_a_list, "422", reason="not a trace"),
    Case("metadata-only", metadata_only, "422", reason="no events"),
    Case("truncated-header", truncated(0.000003), "422", reason="truncated"),
    Case("truncated-10", truncated(0.10), codes=frozenset({"truncated"})),
    Case("truncated-50", truncated(0.50), codes=frozenset({"truncated"})),
    Case("truncated-99", truncated(0.99), codes=frozenset({"truncated"})),
    Case("gz-truncated-header", gz_truncated(0.00001), "422", filename=FILE + ".gz"),
    Case("gz-truncated-30", gz_truncated(0.3), codes=frozenset({"gzip_truncated", "truncated"}),
         filename=FILE + ".gz"),
    Case("gz-truncated-90", gz_truncated(0.9), codes=frozenset({"gzip_truncated", "truncated"}),
         filename=FILE + ".gz"),
    Case("gz-corrupt", gz_corrupt, codes=frozenset({"gzip_damaged", "truncated"}),
         filename=FILE + ".gz"),
    Case("gz-bad-header", lambda d: b"\x1f\x8b" + b"garbage" * 100, "422", filename=FILE + ".gz"),
    Case("gz-of-gz", lambda d: gzip.compress(gzip.compress(dump(d), mtime=0), mtime=0),
         codes=frozenset({"nested_gzip"}), filename=FILE + ".gz", same_as_healthy=True),
    Case("gz-named-plain", lambda d: gzip.compress(dump(d), mtime=0), same_as_healthy=True),
    Case("plain-named-gz", dump, filename=FILE + ".gz", same_as_healthy=True),
    Case("bare-NA-values", replace_values("dur", "N/A"), codes=frozenset({"bare_tokens"})),
    Case("nan-infinity", replace_values("ts", "NaN", 60),
         codes=frozenset({"bare_tokens", "dropped_events"})),
    Case("invalid-utf8", invalid_utf8, codes=frozenset({"invalid_utf8"})),
    Case("control-chars", control_chars, codes=frozenset({"control_chars"})),
    Case("bom", lambda d: b"\xef\xbb\xbf" + dump(d), codes=frozenset({"bom"}), same_as_healthy=True),
    Case("bom-gz", lambda d: gzip.compress(b"\xef\xbb\xbf" + dump(d), mtime=0),
         codes=frozenset({"bom"}), filename=FILE + ".gz", same_as_healthy=True),
    Case("lone-surrogates", surrogates, codes=frozenset({"lone_surrogates"})),
    Case("big-ints", big_ints, codes=frozenset({"dropped_events"})),
    Case("negative-ts-dur", negative, codes=frozenset({"dropped_events"})),
    Case("missing-ts-dur", missing, codes=frozenset({"dropped_events"})),
    Case("string-ts-dur", string_typed, codes=frozenset({"dropped_events"})),
    Case("nulls", nulls, codes=frozenset({"dropped_events"})),
    Case("wrong-container-types", wrong_fields,
         codes=frozenset({"ill_typed_events", "ill_typed_values", "bad_metadata"})),
    Case("deep-nesting-args", deep_args, "either"),
    Case("deep-nesting-top", deep_top, "422", reason="nested too deeply"),
    Case("huge-name", huge_name),
    Case("shuffled", shuffled, same_as_healthy=True),
    Case("duplicated-steps", duplicated_steps),
    Case("zero-length-steps", zero_length_steps),
    Case("dangling-correlations", dangling_links),
    Case("absurd-timestamps", absurd_timestamps, codes=frozenset({"absurd_timestamps"})),
    Case("legacy-list-garbage", legacy_list, codes=frozenset({"ill_typed_events"}),
         filename="trace.json"),
    Case("trailing-garbage", trailing_garbage, codes=frozenset({"trailing_garbage"}),
         same_as_healthy=True),
    Case("duplicate-keys", duplicate_keys),
    Case("unknown-phases", unknown_phases),
    Case("html-names", html_names),
    Case("html-run-folder", dump, run=HOSTILE_RUN, filename=f"w{XSS}.pt.trace.json",
         same_as_healthy=True),
    Case("html-file-name-damaged", lambda d: b"<html>oops</html>", "422", reason="not JSON",
         run=f"broken {XSS}", filename=f"{XSS}&'\".pt.trace.json"),
]


def write_corpus(root: Path, cases: list[Case] = CASES) -> list[Case]:
    """Write every case to ``root/<case.folder>/<case.filename>``; returns the cases."""
    for case in cases:
        folder = root / case.folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / case.filename).write_bytes(case.make(base_doc()))
    return cases


def write_healthy(root: Path, run: str = "healthy") -> Path:
    """The undamaged slice as ``root/run/worker0.pt.trace.json``."""
    path = root / run / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base_bytes())
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "damaged-corpus")
    write_healthy(out)
    for c in write_corpus(out):
        print(f"{c.expect:6} {c.folder}/{c.filename}")
