"""One trace's analysis as a self-contained task that returns bytes (issue 21): what a Dask
worker runs (:mod:`.dask_pool`), on any machine that can read the trace's path or URL.

:func:`analyse_to_bytes` reads and analyses a trace exactly as a local worker process does
(:func:`~.child.analyse_to_cache`) and hands back the packed result (:mod:`.packing`) as
one compact blob instead of writing the server's disk cache; the server stores it there
(:func:`decode`, :meth:`~.cache.DiskCache.put`) and serves it like any other entry. Two
kinds: ``"views"`` (the view payloads and the run-level summaries of the distributed view:
kilobytes to a few MB) and ``"timeline"`` (the trace view's arrays, asked for only when a
``trace/*`` route needs them).

Blob layout: :data:`MAGIC`, the header's length (8 bytes, little-endian), the header (JSON:
``{"ok", "version", "fingerprint", "state", "arrays": [[name, nbytes], ...]}`` or
``{"ok": false, "error": {"status", "error", "detail", ...}}``), then each array as ``.npy``
bytes (loaded with ``allow_pickle=False``: a blob cannot run code in the server).
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import numpy as np
import orjson

from .. import __version__
from ..errors import StepscopeError
from .cache import code_fingerprint
from .packing import pack

MAGIC = b"STEPSCOPE-BLOB-1\n"
KINDS = ("views", "timeline")

#: Environment variables through which storage libraries take credentials, endpoints and
#: configuration (boto/s3fs, gcsfs, adlfs, fsspec's own ``FSSPEC_*``).
STORAGE_ENV = re.compile(r"^(AWS_|FSSPEC_|GOOGLE_|GCLOUD_|GCSFS_|AZURE_|BOTO_|S3_)")


def storage_env() -> dict[str, str]:
    """This process's storage variables (:data:`STORAGE_ENV`), for a worker started earlier
    (the forkserver keeps the environment it started with)."""
    return {k: v for k, v in os.environ.items() if STORAGE_ENV.match(k)}


def apply_storage_env(env: dict[str, str] | None) -> None:
    """Make this process's storage variables exactly ``env`` (None: leave them)."""
    if env is None:
        return
    for name in [k for k in os.environ if STORAGE_ENV.match(k) and k not in env]:
        del os.environ[name]
    os.environ.update(env)


def analyse_to_bytes(path: str, what: str = "views") -> bytes:
    """Read + analyse ``path`` (a local path or a URL), pack the ``what`` part of the result
    (``"views"``: the ``ViewSet``; ``"timeline"``: the trace view's timeline) into a blob.

    A trace that cannot be analysed gives an error blob (its status, error and detail), not
    an exception; a bug in the analysis raises (the server reports it as a 500).
    """
    from ..analysis import analyze  # imported here: the views pull in every analysis
    from ..timeline import build_timeline
    from ..views import ViewSet
    from ..views.trace import timeline_inputs
    from .child import _helpers_for, _read

    if what not in KINDS:
        raise ValueError(f"what must be one of {KINDS}, not {what!r}")
    try:
        analysis = analyze(_read(path, lambda phase, fraction: None, _helpers_for(path)))
        if what == "views":
            obj: Any = ViewSet(analysis)
        else:
            inputs = timeline_inputs(analysis)
            del analysis
            obj = build_timeline(**inputs)
        return encode(*pack(obj))
    except StepscopeError as e:
        return _error_blob({"status": e.status, **e.body()})
    except MemoryError:
        return _error_blob({"status": 422, "error": "out of memory",
                            "detail": "The trace needs more memory than the analysing "
                                      "worker has; profile fewer steps or give the workers "
                                      "more memory."})


def encode(state: Any, arrays: dict[str, np.ndarray]) -> bytes:
    """The blob of a packed result (``state`` JSON-able, ``arrays`` by name)."""
    parts = []
    for arr in arrays.values():
        buf = io.BytesIO()
        np.save(buf, np.require(arr, requirements="C"), allow_pickle=False)
        parts.append(buf.getvalue())
    header = {"ok": True, "version": __version__, "fingerprint": code_fingerprint(),
              "state": state, "arrays": [[n, len(p)] for n, p in zip(arrays, parts)]}
    return _frame(header, parts)


def _error_blob(error: dict) -> bytes:
    return _frame({"ok": False, "version": __version__, "fingerprint": code_fingerprint(),
                   "error": error}, [])


def _frame(header: dict, parts: list[bytes]) -> bytes:
    head = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    return b"".join([MAGIC, len(head).to_bytes(8, "little"), head, *parts])


def decode(blob: bytes) -> tuple[Any, dict[str, np.ndarray]] | dict:
    """``(state, arrays)`` of a blob, or its error dict (``{"status", "error", "detail"}``).

    A blob made by another version of the analysis code (a worker with another stepscope
    installed) is refused with a 503 error dict: its results could differ from this
    server's, and the cache keys them by this server's code.
    """
    if not blob.startswith(MAGIC):
        raise ValueError("not a stepscope result blob")
    at = len(MAGIC)
    size = int.from_bytes(blob[at:at + 8], "little")
    header = orjson.loads(blob[at + 8:at + 8 + size])
    if header.get("fingerprint") != code_fingerprint():
        return {"status": 503, "error": "workers run other analysis code",
                "detail": f"The Dask workers run stepscope {header.get('version')} (code "
                          f"{header.get('fingerprint')}), this server {__version__} (code "
                          f"{code_fingerprint()}). Install the same version on both."}
    if not header["ok"]:
        return header["error"]
    arrays, pos = {}, at + 8 + size
    view = memoryview(blob)
    for name, nbytes in header["arrays"]:
        arrays[name] = np.load(io.BytesIO(view[pos:pos + nbytes]), allow_pickle=False)
        pos += nbytes
    return header["state"], arrays
