"""Disk cache of analysed traces: JSON payloads plus numpy arrays, no pickle (SPEC §3, issue 5).

One entry per trace file, keyed by the file's real path, size, ``mtime_ns``, identity (the
inode locally; the ETag remotely), the cache format and a fingerprint of the analysis code
(:func:`code_fingerprint`), so a changed or replaced file, or a fixed analysis, never hits
a stale entry. An entry is a folder::

    <root>/v<FORMAT>/<key[:2]>/<key>/
        meta.json          JSON payloads (orjson)
        <name>.npy         one array each (np.save, loaded with allow_pickle=False, mmap),
                           stored in the narrowest exact dtype (:func:`narrow`)
        small.bin          the arrays under 64 KiB, narrowed likewise, one after the other
                           (where each is: ``packed`` in the manifest)
        manifest.json      sizes and CRC-32 checksums of the files above; written last

Writes go to a temporary folder that is renamed into place (atomic: readers see a whole
entry or none; two servers sharing the folder never see each other's half-written files).
A corrupt or incomplete entry (bad checksum, unreadable or missing file) is removed and
reported as a miss, so it is rebuilt. After each write, least-recently-used entries are
evicted down to ``max_bytes``. Temporary folders of writes killed mid-way are swept by
:meth:`DiskCache.sweep` (the server calls it at start).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import orjson

try:  # ISA-L's CRC-32: the same checksums, ~6x faster than zlib's (issue 19)
    from isal.isal_zlib import crc32
except ImportError:  # a platform without an isal wheel
    from zlib import crc32  # type: ignore[assignment]

from .. import __version__
from ..discovery import display_name
from ..fs import filesystem_of

FORMAT = 4  # 2: the timeline is an entry of its own; 3: steps carry host spans, advice shares;
#            4: small arrays share small.bin
DEFAULT_MAX_BYTES = 4 << 30
#: A temporary folder of a write untouched this long (s) is stale even when its writer's
#: pid cannot be checked (another host sharing the folder).
STALE_TMP_S = 3600.0
_TMP = ".tmp-"


#: The ``stepscope`` package folder (this module lives in its ``store/`` sub-package).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def code_fingerprint(package_dir: str = PACKAGE_DIR) -> str:
    """SHA-256 (hex, 16 digits) of the package's own ``*.py`` files (paths and contents),
    computed once per process: part of every cache key, so an entry written by another
    version of the analysis code is never served (issue 13)."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, package_dir).encode("utf-8", "surrogateescape"))
            h.update(b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:16]


def default_root() -> str:
    """``$STEPSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stepscope``, else ``~/.cache/stepscope``."""
    if os.environ.get("STEPSCOPE_CACHE_DIR"):
        return os.environ["STEPSCOPE_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stepscope")


def _digest(path: str) -> str:
    """CRC-32 of a file: catches torn or corrupted files at memory speed (a cryptographic
    hash would cost far more on every cached re-open and protects nothing more here)."""
    with open(path, "rb") as f:
        return _digest_file(f)


def _digest_file(f: io.BufferedReader) -> str:
    """:func:`_digest` of an open file, read from where it is to its end."""
    crc = 0
    while block := f.read(1 << 22):
        crc = crc32(block, crc)
    return f"{crc:08x}"


#: Threads writing an entry's arrays, or reading them back, when they hold at least
#: ``THREADED_IO_BYTES`` (numpy's copies and file writes release the GIL).
IO_THREADS = 2
THREADED_IO_BYTES = 16 << 20


def _io_map(fn, items: list, nbytes: int) -> list:
    """``[fn(x) for x in items]``, in :data:`IO_THREADS` threads when they move ``nbytes``
    of at least :data:`THREADED_IO_BYTES` (else here: starting threads would cost more than
    they save)."""
    if len(items) < 2 or nbytes < THREADED_IO_BYTES:
        return list(map(fn, items))
    with ThreadPoolExecutor(IO_THREADS) as pool:
        return list(pool.map(fn, items))


def _write(path: str, *parts: bytes | memoryview) -> dict:
    """Write ``parts`` to a new file; its manifest record (size, CRC-32 of the bytes)."""
    crc = size = 0
    with open(path, "wb") as f:
        for part in parts:
            f.write(part)
            crc = crc32(part, crc)
            size += len(part)
    return {"size": size, "crc32": f"{crc:08x}"}


def _save(path: str, arr: np.ndarray) -> dict:
    """``np.save(path, arr)`` (format 1.0, C order) of the array narrowed by :func:`narrow`,
    checksummed from memory as written; the manifest record says how to widen it back."""
    arr = np.require(arr, requirements="C")
    if arr.dtype.hasobject:
        raise ValueError("object arrays cannot be cached")
    stored, how = narrow(arr)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(stored))
    return {**_write(path, head.getvalue(), memoryview(stored.reshape(-1)).cast("B")), **how}


#: Arrays smaller than this (bytes in memory) share one file, :data:`SMALL_FILE`: creating
#: a file costs ~0.3 ms here, and the timeline of a small trace has ~90 arrays, most of a
#: few hundred bytes (issue 19: many small traces).
SMALL_ARRAY_BYTES = 64 << 10
SMALL_FILE = "small.bin"
_ALIGN = 16


def _save_small(path: str, arrays: dict[str, np.ndarray]) -> dict:
    """Write ``arrays``, each narrowed by :func:`narrow`, one after the other (each at a
    multiple of 16 bytes) into ``path``. Returns ``{name: record}`` (``offset``, the stored
    ``descr`` and ``stored_shape``, plus :func:`narrow`'s ``how``) and, under the key None,
    the file's manifest record."""
    parts: list[bytes | memoryview] = []
    records: dict = {}
    offset = 0
    for name, arr in arrays.items():
        arr = np.require(arr, requirements="C")
        if arr.dtype.hasobject:
            raise ValueError("object arrays cannot be cached")
        stored, how = narrow(arr)
        stored = np.ascontiguousarray(stored)
        records[name] = {"offset": offset, "stored_shape": list(stored.shape),
                         "descr": np.lib.format.dtype_to_descr(stored.dtype), **how}
        data = memoryview(stored.reshape(-1)).cast("B")
        pad = -len(data) % _ALIGN
        parts += [data, b"\0" * pad] if pad else [data]
        offset += len(data) + pad
    records[None] = _write(path, *parts)
    return records


def _load_small(blob: bytes, record: dict) -> np.ndarray:
    """One array of a :data:`SMALL_FILE` (read-only), widened back."""
    dtype = np.lib.format.descr_to_dtype(_descr(record["descr"]))
    shape = tuple(record["stored_shape"])
    count = int(np.prod(shape, dtype=np.int64))
    stored = np.frombuffer(blob, dtype=dtype, count=count, offset=record["offset"])
    return widen(stored.reshape(shape), record)


def _descr(d: object) -> object:
    """A dtype description back from JSON (lists where ``dtype_to_descr`` gave tuples)."""
    if isinstance(d, list):
        return [tuple(_descr(x) for x in f) if isinstance(f, list) else f for f in d]
    return d


#: Integer dtypes an integer array may be stored as, narrowest first.
_NARROW_INTS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16,
                                            np.int32, np.uint32))


def narrow(arr: np.ndarray) -> tuple[np.ndarray, dict]:
    """The narrowest exact form of ``arr`` on disk: ``(stored, how)``; ``how`` is empty when
    ``arr`` is stored as it is, else ``{"dtype": original, "shape": [...]}`` plus
    ``"const": True`` when every element equals the one stored. Integers go to the
    narrowest integer dtype holding their range, or, when that is narrower, their
    differences (``"first"``: the first value; timestamps in time order); float64 to float32
    where every value survives the round trip (NaNs included). :func:`widen` restores
    ``arr`` exactly.

    Example: ``int64 [-1, 7, 3]`` -> ``int8``; ``int64 [-1, -1, -1]`` -> ``[-1]``, const;
    ``int64 [10**12, 10**12 + 5, 10**12 + 9]`` -> ``int8 [5, 4]``, first ``10**12``.
    """
    if arr.size < 2 or arr.dtype.kind not in "iuf":
        return arr, {}
    how = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
    flat = arr.reshape(-1)
    if arr.dtype.kind == "f":
        if _constant_float(flat):
            return flat[:1], {**how, "const": True}
        if arr.dtype.itemsize > 4:
            small = arr.astype(np.float32)
            if np.array_equal(small.astype(arr.dtype), arr, equal_nan=True):
                return small, how
        return arr, {}
    lo, hi = int(flat.min()), int(flat.max())
    if lo == hi:
        return flat[:1], {**how, "const": True}
    t = _int_dtype(lo, hi)
    if t is not None and t.itemsize <= 2:
        return arr.astype(t), how
    best = (t or arr.dtype).itemsize
    if hi - lo <= np.iinfo(np.int64).max:  # differences cannot overflow
        # timestamps in time order: small steps, however big the values; a few big steps
        # (sorted keys jumping to their next row) are kept aside in the manifest
        for dt in _NARROW_INTS[::2]:  # signed
            if dt.itemsize >= best:
                break
            coded = _steps_as(flat, dt)
            if coded is not None:
                small, big_at, big = coded
                return small, {**how, "first": int(flat[0]), "big_at": big_at, "big": big}
    return (arr.astype(t), how) if t is not None and t.itemsize < arr.dtype.itemsize else (arr, {})


#: Most steps too big for the narrow dtype that a difference-coded array may have.
_MAX_BIG_STEPS = 4096
#: Steps computed at a time by :func:`_steps_as`: its temporaries stay in the CPU cache
_CHUNK = 1 << 16


def _steps_as(flat: np.ndarray, dt: np.dtype) -> tuple[np.ndarray, list, list] | None:
    """The differences of consecutive elements of ``flat`` (int64 arithmetic) stored as
    ``dt``, the positions and values of those ``dt`` cannot hold (stored wrapped), or None
    when there are more than :data:`_MAX_BIG_STEPS` of them.

    Chunk by chunk: a ``dt`` too narrow is given up as soon as the steps seen prove it (a
    trace's durations or ids, after a chunk or two), not after a pass over the whole array
    (issue 19: narrowing was a third of storing a big timeline)."""
    n = len(flat) - 1
    out = np.empty(n, dtype=dt)
    at: list[np.ndarray] = []
    count = 0
    for a in range(0, n, _CHUNK):
        b = min(a + _CHUNK, n)
        x = flat[a:b + 1].astype(np.int64, copy=False)
        step = x[1:] - x[:-1]  # as np.diff: wraps like the sum that restores the values
        small = out[a:b]
        np.copyto(small, step, casting="unsafe")  # a big step wraps: replaced when widened
        bad = np.flatnonzero(small != step)
        if len(bad):
            count += len(bad)
            if count > _MAX_BIG_STEPS:
                return None
            at.append(bad + a)
    if not at:
        return out, [], []
    big_at = np.concatenate(at)
    big = flat[big_at + 1].astype(np.int64) - flat[big_at].astype(np.int64)
    return out, big_at.tolist(), big.tolist()


def _constant_float(flat: np.ndarray) -> bool:
    """Do all elements of the float array ``flat`` equal the first (NaNs equal, -0.0 not
    0.0)? A bitwise comparison decides, except NaNs of several payloads."""
    bits = flat.view(f"u{flat.dtype.itemsize}")
    if (bits == bits[0]).all():
        return True
    if not np.isnan(flat[0]):  # equal non-NaN floats of one sign have the same bits
        return False
    sign = np.signbit(flat)
    return bool(np.isnan(flat).all()) and sign.all() == sign.any()


def _int_dtype(lo: int, hi: int) -> np.dtype | None:
    """The narrowest integer dtype of :data:`_NARROW_INTS` holding ``lo..hi``, or None."""
    for t in _NARROW_INTS:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return t
    return None


def widen(stored: np.ndarray, how: dict) -> np.ndarray:
    """Inverse of :func:`narrow` (read-only, like the memory maps of unnarrowed arrays)."""
    if not how.get("dtype"):
        return stored
    dtype, shape = np.dtype(how["dtype"]), tuple(how["shape"])
    if how.get("const"):
        out = np.full(shape, stored[0], dtype=dtype)
    elif "first" in how:  # differences of consecutive elements
        out = np.empty(len(stored) + 1, dtype=dtype)
        out[0] = how["first"]
        out[1:] = stored
        # a big step may not fit ``dtype`` itself (int32 -1 -> 2**31 - 1; a falling uint):
        # kept modulo 2**bits, like the sum that restores the values
        big = np.asarray(how["big"], dtype=np.int64).astype(dtype)
        out[1:][np.asarray(how["big_at"], dtype=np.intp)] = big
        np.cumsum(out, out=out)
        out = out.reshape(shape)
    else:
        out = stored.astype(dtype).reshape(shape)
    out.flags.writeable = False
    return out


@dataclass
class Entry:
    """A cache hit: ``meta`` (JSON) and lazily loaded, checksum-verified arrays. An entry is
    also the mapping :func:`~stepscope.store.packing.unpack` takes arrays from: ``entry[name]``
    loads an array when first asked for, and :meth:`preload` loads several together."""

    folder: str
    meta: dict
    manifest: dict
    _arrays: dict[str, np.ndarray] = field(default_factory=dict)
    _small: bytes | None = None
    #: array name -> its file, opened by :meth:`hold_files` and not read yet
    _files: dict[str, io.BufferedReader] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def names(self) -> list[str]:
        return [n[:-4] for n in self.manifest["files"] if n.endswith(".npy")] + \
            list(self.manifest.get("packed", ()))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.array(name)

    def array(self, name: str) -> np.ndarray:
        """The array ``name`` (read-only: memory-mapped when stored at full width in a file
        of its own). Raises ``KeyError``/``ValueError`` when missing or corrupt, ``OSError``
        when a file is gone."""
        with self._lock:
            if name not in self._arrays:
                packed = self.manifest.get("packed", {})
                self._arrays[name] = _load_small(self._small_blob(), packed[name]) \
                    if name in packed else self._file_array(name)
            return self._arrays[name]

    def preload(self, names: Iterable[str]) -> None:
        """Load the arrays ``names``. Those in files of their own are read in
        :data:`IO_THREADS` threads when they are big: widening narrowed arrays is copying,
        without the GIL (the x200 timeline, 2.4 GB widened: 1.55-1.83 -> 0.84-0.88 s)."""
        with self._lock:
            packed = self.manifest.get("packed", {})
            files = [n for n in names if n not in packed and n not in self._arrays]
            stored = sum(self.manifest["files"][n + ".npy"]["size"] for n in files)
            self._arrays.update(zip(files, _io_map(self._file_array, files, stored)))

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array."""
        self.preload(self.names())
        return {n: self.array(n) for n in self.names()}

    def hold_files(self) -> None:
        """Open the files of the arrays not loaded yet (and read the small arrays' file), so
        that they can still be loaded once the entry is evicted (its folder removed, by this
        server or another one sharing the cache). They close as they are loaded, or with the
        entry."""
        with self._lock:
            weakref.finalize(self, _close_all, self._files)
            try:
                if self.manifest.get("packed"):
                    self._small_blob()
                for name in self.names():
                    if name not in self._arrays and name not in self._files \
                            and name + ".npy" in self.manifest["files"]:
                        self._files[name] = open(os.path.join(self.folder, name + ".npy"), "rb")
            except BaseException:
                self._close_files()
                raise

    def _small_blob(self) -> bytes:
        """The file of small arrays (read and checked once)."""
        if self._small is None:
            with open(os.path.join(self.folder, SMALL_FILE), "rb") as f:
                blob = f.read()
            if f"{crc32(blob):08x}" != self.manifest["files"][SMALL_FILE]["crc32"]:
                raise ValueError("cache file of small arrays is corrupt")
            self._small = blob
        return self._small

    def _file_array(self, name: str) -> np.ndarray:
        """The array stored in a file of its own (held open, or opened now), checked and
        widened back."""
        fname = name + ".npy"
        f = self._files.pop(name, None) or open(os.path.join(self.folder, fname), "rb")
        with f:
            if _digest_file(f) != self.manifest["files"][fname]["crc32"]:
                raise ValueError(f"cache array {name} is corrupt")
            f.seek(0)
            stored = _mapped_npy(f)
        return widen(stored, self.manifest["files"][fname])

    def drop_arrays(self) -> None:
        """Forget the loaded arrays (their memory maps close once nothing else uses them)
        and the files held."""
        with self._lock:
            self._arrays = {}
            self._small = None
            self._close_files()

    def _close_files(self) -> None:
        _close_all(self._files)


def _close_all(files: dict[str, io.BufferedReader]) -> None:
    """Close and forget ``files`` (held by an :class:`Entry`)."""
    for f in files.values():
        f.close()
    files.clear()


class Ahead:
    """Big arrays of an entry saved in a thread before the entry is put
    (:meth:`DiskCache.save_ahead`), into the temporary folder that :meth:`DiskCache.put` then
    fills and moves into place, renaming their files."""

    def __init__(self, folder: str, arrays: list[np.ndarray]):
        self.folder = folder
        self._arrays = arrays  # (held: their ids name them until put)
        self._saved: dict[int, tuple[str, dict]] = {}  # id(array) -> (file, manifest record)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._save, name="stepscope-save-ahead",
                                        daemon=True)
        self._thread.start()

    def _save(self) -> None:
        try:
            for i, arr in enumerate(self._arrays):
                file = f"ahead-{i}.npy"
                self._saved[id(arr)] = (file, _save(os.path.join(self.folder, file), arr))
        except BaseException as e:  # noqa: BLE001 - raised by saved(), in put
            self._error = e

    def saved(self) -> dict[int, tuple[str, dict]]:
        """Wait for the thread: ``id(array) -> (file name, manifest record)``; raises what
        stopped it (a full disk, say)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._saved

    def discard(self) -> None:
        """Remove what was saved (the entry will not be put)."""
        self._thread.join()
        self._arrays = []
        shutil.rmtree(self.folder, ignore_errors=True)


def _mapped_npy(f: io.BufferedReader) -> np.ndarray:
    """The array of an open ``.npy`` file (format 1.0, as :func:`_save` writes), memory-mapped
    read-only (the map stays valid once the file is closed or removed)."""
    if np.lib.format.read_magic(f) != (1, 0):
        raise ValueError("not a cache array file")
    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    if dtype.hasobject:
        raise ValueError("object arrays cannot be cached")
    if not np.prod(shape, dtype=np.int64):
        return np.zeros(shape, dtype=dtype)
    return np.memmap(f, dtype=dtype, mode="r", shape=shape, order="F" if fortran else "C",
                     offset=f.tell())


class DiskCache:
    """See the module doc. ``root=None`` uses :func:`default_root`."""

    def __init__(self, root: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = os.path.join(root or default_root(), f"v{FORMAT}")
        self.max_bytes = max_bytes

    def key(self, path: str) -> str:
        """Key of the file's current version (raises OSError if it is gone)."""
        fs = filesystem_of(path)
        real = fs.realpath(path)
        st = fs.stat(real)
        ident = (f"{real}\0{st.size}\0{st.mtime_ns}\0{st.identity}\0{FORMAT}\0{__version__}"
                 f"\0{code_fingerprint()}")
        return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()

    def _folder(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def get(self, path: str, key: str | None = None) -> Entry | None:
        """The entry for the file's current version (or for ``key``), or None (missing,
        stale or corrupt)."""
        try:
            folder = self._folder(key or self.key(path))
        except OSError:  # the file is gone
            return None
        if not os.path.isdir(folder):
            return None
        try:
            with open(os.path.join(folder, "manifest.json"), "rb") as f:
                manifest = orjson.loads(f.read())
            meta_path = os.path.join(folder, "meta.json")
            if _digest(meta_path) != manifest["files"]["meta.json"]["crc32"]:
                raise ValueError("meta.json checksum mismatch")
            with open(meta_path, "rb") as f:
                meta = orjson.loads(f.read())
            now = time.time()
            os.utime(os.path.join(folder, "manifest.json"), (now, now))  # LRU clock
            return Entry(folder, meta, manifest)
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            # corrupt, or incomplete (a part missing: entries appear whole, by rename, so
            # one without its manifest or meta never completes): rebuilt on the next put
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def save_ahead(self, key: str, arrays: Iterable[np.ndarray]) -> Ahead | None:
        """Start saving the big ones of ``arrays``, part of the entry :meth:`put` stores under
        ``key`` later, in a thread meanwhile (the analysis worker saves a trace's columns while
        it lays out the timeline); None when none is big. Pass the result to :meth:`put`, or
        :meth:`Ahead.discard` it."""
        big = [a for a in arrays if a.nbytes >= SMALL_ARRAY_BYTES]
        return Ahead(self._tmp_folder(key), big) if big else None

    def _tmp_folder(self, key: str) -> str:
        """A new temporary folder beside the entry ``key`` will have (:meth:`sweep` knows it)."""
        final = self._folder(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        return tempfile.mkdtemp(prefix=_tmp_prefix(key), dir=os.path.dirname(final))

    def put(self, path: str, meta: dict, arrays: dict[str, np.ndarray],
            key: str | None = None, ahead: Ahead | None = None) -> None:
        """Store an entry for the file's current version, or under ``key`` (taken before the
        file was read, so content read from a file that changed meanwhile is never filed
        under the new version). Atomic; a concurrent twin wins. ``ahead``: some of the
        ``arrays`` already saved (:meth:`save_ahead`)."""
        key = key or self.key(path)
        final = self._folder(key)
        tmp = self._tmp_folder(key) if ahead is None else ahead.folder
        try:
            files = {"meta.json": _write(os.path.join(tmp, "meta.json"), orjson.dumps(
                meta, option=orjson.OPT_SERIALIZE_NUMPY))}
            saved = ahead.saved() if ahead is not None else {}
            # the kernel's copy into the page cache is the cost (~300 MB/s per thread here):
            # a big entry's files are written by two threads at once
            def save(item: tuple[str, np.ndarray]) -> dict:
                name, arr = item
                done = saved.get(id(arr))
                if done is not None:
                    os.rename(os.path.join(tmp, done[0]), os.path.join(tmp, name + ".npy"))
                    return done[1]
                return _save(os.path.join(tmp, name + ".npy"), arr)

            big = {n: a for n, a in arrays.items() if a.nbytes >= SMALL_ARRAY_BYTES}
            sums = _io_map(save, list(big.items()), sum(a.nbytes for a in big.values()
                                                        if id(a) not in saved))
            files.update((name + ".npy", info) for name, info in zip(big, sums))
            for file, _ in saved.values():  # saved ahead but not part of the entry after all
                if os.path.exists(os.path.join(tmp, file)):
                    os.remove(os.path.join(tmp, file))
            small = {n: a for n, a in arrays.items() if n not in big}
            packed = _save_small(os.path.join(tmp, SMALL_FILE), small) if small else {}
            if small:
                files[SMALL_FILE] = packed.pop(None)
            with open(os.path.join(tmp, "manifest.json"), "wb") as f:
                f.write(orjson.dumps({"files": files, "packed": packed,
                                      "source": display_name(os.path.realpath(path)),
                                      "version": __version__, "created": time.time()}))
            self._place(tmp, final, path, key)
        except BaseException:
            if ahead is not None:
                ahead.discard()  # (its thread may still write into tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._maybe_evict(sum(f["size"] for f in files.values()))

    def _maybe_evict(self, written: int) -> None:
        """:meth:`evict` (a scan of every entry) at most every :data:`EVICT_INTERVAL_S` in
        this process, or once more than :data:`EVICT_EVERY_BYTES` (at most a 16th of
        ``max_bytes``) were written since the last scan: a scan per put made many small
        traces quadratic (1,000 tiny traces: 76 ms each, almost all in the scans)."""
        state = _since_evict.setdefault(self.root, [float("-inf"), 0])
        state[1] += written
        now = time.monotonic()
        if now - state[0] >= EVICT_INTERVAL_S or \
                state[1] >= min(EVICT_EVERY_BYTES, self.max_bytes // 16):
            state[0], state[1] = now, 0
            self.evict()

    def unwritable(self) -> str | None:
        """Why entries cannot be written here (read-only, not permitted, a regular file in
        the way...), or None when a test folder can be created and removed."""
        try:
            os.makedirs(self.root, exist_ok=True)
            os.rmdir(tempfile.mkdtemp(prefix=_TMP + "probe-", dir=self.root))
        except OSError as e:
            return e.strerror or str(e)
        return None

    def _place(self, tmp: str, final: str, path: str, key: str) -> None:
        """Rename the written ``tmp`` folder to ``final``. A concurrent twin already there
        wins, unless it is unusable (an incomplete entry left by a crash): then it is
        replaced."""
        for _attempt in range(2):
            try:
                os.rename(tmp, final)
                return
            except OSError:
                if self.get(path, key) is not None:  # another process stored it first
                    break
        shutil.rmtree(tmp, ignore_errors=True)

    def sweep(self, stale_s: float = STALE_TMP_S) -> int:
        """Remove the temporary folders of writes that ended without finishing (killed):
        those of a dead process of this host, or untouched for ``stale_s`` seconds. A live
        write is never touched. Returns how many were removed."""
        removed = 0
        now = time.time()
        for shard in _listdir(self.root):
            for name in _listdir(os.path.join(self.root, shard)):
                folder = os.path.join(self.root, shard, name)
                if name.startswith(_TMP) and _stale_tmp(folder, name, now, stale_s):
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
        return removed

    def discard(self, path: str, key: str | None = None) -> None:
        """Remove the entry of the file's current version (or of ``key``), if any."""
        try:
            shutil.rmtree(self._folder(key or self.key(path)), ignore_errors=True)
        except OSError:
            pass

    def evict(self) -> None:
        """Remove least-recently-used entries until the cache holds at most ``max_bytes``,
        and the folders of older cache formats (no version of this package reads them)."""
        parent = os.path.dirname(self.root)
        for name in _listdir(parent):
            if re.fullmatch(r"v\d+", name) and name != os.path.basename(self.root):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        entries = []
        total = 0
        for shard in _listdir(self.root):
            for key in _listdir(os.path.join(self.root, shard)):
                folder = os.path.join(self.root, shard, key)
                if key.startswith(_TMP):
                    continue
                try:
                    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
                    used = os.path.getmtime(os.path.join(folder, "manifest.json"))
                except OSError:
                    continue
                entries.append((used, size, folder))
                total += size
        for _used, size, folder in sorted(entries):
            if total <= self.max_bytes:
                break
            shutil.rmtree(folder, ignore_errors=True)
            total -= size


#: Seconds between two eviction scans of one cache root in one process (see
#: :meth:`DiskCache._maybe_evict`); bytes written that force one sooner.
EVICT_INTERVAL_S = 10.0
EVICT_EVERY_BYTES = 256 << 20
#: cache root -> [monotonic time of this process's last scan, bytes written since]
_since_evict: dict[str, list] = {}


def _tmp_prefix(key: str) -> str:
    """Prefix of a write's temporary folder: names the writer (host, pid) for :meth:`sweep`."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64]
    return f"{_TMP}{key[:8]}-{host}-{os.getpid()}-"


def _stale_tmp(folder: str, name: str, now: float, stale_s: float) -> bool:
    """Is the temporary folder ``name`` left by a write that will never finish?"""
    try:
        if now - os.path.getmtime(folder) >= stale_s:
            return True
    except OSError:
        return False  # gone already
    m = re.fullmatch(re.escape(_TMP) + r"[0-9a-f]{8}-(.+)-(\d+)-[^-]*", name)
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64]
    if m is None or m.group(1) != host:
        return False  # another host's (or an old name): only age tells
    return not _alive(int(m.group(2)))


def _alive(pid: int) -> bool:
    """Does process ``pid`` exist on this host?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
