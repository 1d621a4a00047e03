"""Disk cache: hit, invalidation on change, corrupt entries, eviction, two processes."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from stepscope.store.cache import _CHUNK, _MAX_BIG_STEPS, DiskCache, narrow, widen


@pytest.fixture
def trace_file(tmp_path):
    p = tmp_path / "w.pt.trace.json"
    p.write_text('{"traceEvents": []}')
    return str(p)


def test_hit_returns_what_was_stored(tmp_path, trace_file):
    cache = DiskCache(str(tmp_path / "c"))
    assert cache.get(trace_file) is None
    cache.put(trace_file, {"overview": {"a": 1}}, {"start": np.arange(5, dtype=np.int64)})
    hit = cache.get(trace_file)
    assert hit.meta == {"overview": {"a": 1}}
    assert hit.array("start").tolist() == [0, 1, 2, 3, 4]
    assert hit.names() == ["start"]


def test_a_trace_whose_path_is_not_utf8_is_cached(tmp_path):
    """The manifest names the source file: a folder named in Latin-1 made the put fail
    (orjson refuses the path's escaped bytes), so its trace failed to analyse (fuzzing)."""
    folder = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.makedirs(folder)
    path = os.fsdecode(os.path.join(folder, b"w.pt.trace.json"))
    with open(path, "w") as f:
        f.write('{"traceEvents": []}')
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(path, {"a": 1}, {"start": np.arange(5, dtype=np.int64)})
    assert cache.get(path).meta == {"a": 1}


ROUND_TRIP = {
    "small ints": np.array([-1, 7, 3], dtype=np.int64),  # int8 on disk
    "ns": np.array([0, 9_681_406_000], dtype=np.int64),  # beyond int32: stays int64
    "uint": np.array([0, 65_535], dtype=np.int64),  # uint16
    "constant": np.full(1000, -1, dtype=np.int32),  # one element on disk
    "2-d": np.arange(12, dtype=np.int64).reshape(3, 4),
    "int extremes": np.array([-2**63, 2**63 - 1], dtype=np.int64),
    "float32-exact": np.array([0.5, np.nan, -0.0, np.inf, 100.0]),
    "not float32": np.array([0.1, 2.5]),  # 0.1 is not a float32: stays float64
    "signed zeros": np.array([0.0, -0.0, 0.0]),  # equal, yet not one constant
    "nan constant": np.full(10, np.nan),
    "bools": np.array([True, False]),
    "times": np.array([10**12, 10**12 + 5, 10**12 + 9, 10**12 - 100]),  # int8 steps
    "wide steps": np.array([0, 2**62, -2**62, 2**62]),  # steps overflow int64: as it is
    "row keys": (np.arange(6) // 3 << 40) + np.array([1, 5, 9] * 2),  # one big step
    # a step wider than the array's own dtype (int32 pids around -1), a falling uint step
    "int32 wide step": np.array([-2_000_000_000, 2_000_000_000, 2_000_000_001] * 3, np.int32),
    "uint32 falling": np.array([0, 100_000, 5, 4_000_000_000, 3_999_999_999] * 3, np.uint32),
    "empty": np.zeros(0, dtype=np.int64),
    "one": np.array([5], dtype=np.int64),
}


def test_arrays_are_stored_narrow_and_read_back_exactly(tmp_path, trace_file):
    """Each array is stored in its narrowest exact dtype and read back bit for bit, with
    its dtype and shape (issue 19: the cache of a big trace was 2.35 GB)."""
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {}, ROUND_TRIP)
    hit = cache.get(trace_file)
    for name, want in ROUND_TRIP.items():
        got = hit.array(name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name
        assert not got.flags.writeable, name
    size = {n: _stored_bytes(hit, n) for n in ROUND_TRIP}
    assert size["one"] == 8
    assert size["small ints"] == 3
    assert size["uint"] == 4
    assert size["constant"] <= 4
    assert size["not float32"] == 16
    assert size["float32-exact"] == 20
    assert size["signed zeros"] == 12
    assert size["times"] == 3 and size["wide steps"] == 32
    assert size["row keys"] == 5


@pytest.mark.parametrize("n_big", [_MAX_BIG_STEPS, _MAX_BIG_STEPS + 1])
def test_steps_are_coded_across_chunks_up_to_the_big_step_limit(n_big):
    """Difference coding works chunk by chunk (issue 19): big steps on either side of a
    chunk boundary come back exactly, and a dtype is used while at most _MAX_BIG_STEPS
    steps do not fit it, however the big steps fall into chunks."""
    n = 3 * _CHUNK + 5
    step = np.ones(n, dtype=np.int64)
    at = np.r_[_CHUNK - 1, _CHUNK, 2 * _CHUNK, np.arange(n_big - 3) * 7 + 5]
    step[at] = -(3 * 10**9) - at  # too big for int8, int16 and int32 alike
    arr = np.cumsum(step) + 10**12
    stored, how = narrow(arr)
    assert stored.dtype == (np.int8 if n_big <= _MAX_BIG_STEPS else np.int64)
    assert widen(stored, how).tobytes() == arr.tobytes()
    falling = np.array([7, 3, 2**32 - 1, 0] * (_CHUNK // 2), dtype=np.uint32)
    stored, how = narrow(falling)  # steps wider than uint32 itself, and negative
    assert widen(stored, how).tobytes() == falling.tobytes()


def _stored_bytes(hit, name: str) -> int:
    """Bytes of ``name``'s data on disk (in small.bin, or its .npy less the header)."""
    rec = hit.manifest["packed"].get(name)
    if rec is not None:
        dtype = np.lib.format.descr_to_dtype(rec["descr"])
        return int(np.prod(rec["stored_shape"])) * dtype.itemsize
    with open(os.path.join(hit.folder, name + ".npy"), "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return os.path.getsize(f.name) - f.tell()


def test_small_arrays_share_one_file_big_ones_are_mapped(tmp_path, trace_file):
    """Issue 19 (many small traces): arrays under 64 KiB go into one file (a file creation
    costs more than writing them); a big one keeps its own .npy, memory-mapped on load when
    stored at full width."""
    cache = DiskCache(str(tmp_path / "c"))
    big = np.random.default_rng(0).integers(0, 2**62, 20_000)  # 160 kB, cannot narrow
    cache.put(trace_file, {}, {"a": np.arange(5), "b": np.zeros((2, 3)), "big": big,
                               "c": np.array([0.1, 0.2])})
    hit = cache.get(trace_file)
    assert sorted(os.listdir(hit.folder)) == ["big.npy", "manifest.json", "meta.json",
                                              "small.bin"]
    assert sorted(hit.names()) == ["a", "b", "big", "c"]
    assert hit.array("b").shape == (2, 3) and hit.array("c").tolist() == [0.1, 0.2]
    assert isinstance(hit.array("big"), np.memmap) and (hit.array("big") == big).all()


def test_checksums_are_crc32_of_the_files(tmp_path, trace_file):
    """The manifest's checksums are zlib's CRC-32 of each file, whichever library computes
    them (ISA-L's when installed, issue 19)."""
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {"big": np.arange(100_000) * 7, "small": np.arange(5)})
    hit = cache.get(trace_file)
    assert sorted(hit.manifest["files"]) == ["big.npy", "meta.json", "small.bin"]
    for name, record in hit.manifest["files"].items():
        with open(os.path.join(hit.folder, name), "rb") as f:
            assert record["crc32"] == f"{zlib.crc32(f.read()):08x}", name


def test_changed_file_is_a_miss(tmp_path, trace_file):
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {})
    with open(trace_file, "a") as f:
        f.write(" ")
    assert cache.get(trace_file) is None
    os.replace(trace_file, trace_file + ".x")  # replaced by another file of equal size
    with open(trace_file, "w") as f:
        f.write('{"traceEvents": []} ')
    assert cache.get(trace_file) is None


def test_corrupt_meta_is_rebuilt_not_fatal(tmp_path, trace_file):
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {"a": np.ones(3)})
    folder = cache._folder(cache.key(trace_file))
    with open(os.path.join(folder, "meta.json"), "r+b") as f:
        f.write(b"XX")
    assert cache.get(trace_file) is None
    assert not os.path.exists(folder)
    cache.put(trace_file, {"v": 2}, {"a": np.ones(3)})
    assert cache.get(trace_file).meta == {"v": 2}


def test_corrupt_array_raises_on_access(tmp_path, trace_file):
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {}, {"a": np.arange(100_000), "b": np.arange(1000)})
    folder = cache._folder(cache.key(trace_file))
    for part in ("a.npy", "small.bin"):  # a big array, the small ones
        with open(os.path.join(folder, part), "r+b") as f:
            f.seek(500)
            f.write(b"\xff\xff")
    for name in "ab":
        with pytest.raises(ValueError):
            cache.get(trace_file).array(name)


@pytest.mark.parametrize("threads", [False, True])
def test_an_entrys_arrays_read_in_threads_are_the_same(tmp_path, trace_file, monkeypatch,
                                                       threads):
    """A big entry's files are read back and widened in threads (issue 19: the x200
    timeline): the same arrays bit for bit, whatever their narrowing, and a corrupt file
    still raises."""
    from concurrent.futures import ThreadPoolExecutor

    from stepscope.store import cache as cache_mod

    rng = np.random.default_rng(0)
    n = 100_000
    big = {"times": 10**12 + np.arange(n) * 3,  # steps
           "constant": np.full(n, 7, dtype=np.int32), "small ints": np.arange(n) % 100,
           "full width": rng.integers(-2**62, 2**62, n), "halves": np.arange(n) / 2,
           "small": np.arange(10)}
    pools = []

    class Counted(ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(self)
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(cache_mod, "ThreadPoolExecutor", Counted)
    monkeypatch.setattr(cache_mod, "THREADED_IO_BYTES", 0 if threads else 1 << 60)
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {}, big)
    written = len(pools)
    got = cache.get(trace_file).arrays()
    assert (len(pools) > written) == threads
    assert got.keys() == big.keys()
    for name, want in big.items():
        assert got[name].dtype == want.dtype and got[name].tobytes() == want.tobytes(), name
    with open(os.path.join(cache._folder(cache.key(trace_file)), "times.npy"), "r+b") as f:
        f.seek(500)
        f.write(b"\xff\xff")
    with pytest.raises(ValueError):
        cache.get(trace_file).arrays()


def test_lru_eviction(tmp_path):
    cache = DiskCache(str(tmp_path / "c"))
    files = []
    for i in range(4):
        p = tmp_path / f"w{i}.json"
        p.write_text(str(i))
        files.append(str(p))
        cache.put(str(p), {}, {"a": np.random.default_rng(i).random(1000)})  # 8 KB each
        os.utime(os.path.join(cache._folder(cache.key(str(p))), "manifest.json"),
                 (1000 + i, 1000 + i))
    cache.get(files[0])  # touch: most recently used
    cache.max_bytes = 30_000  # room for three of the four
    cache.evict()
    present = [cache.get(f) is not None for f in files]
    assert present[0] and present[3] and not present[1]


def test_env_var_sets_root(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "envcache"))
    assert DiskCache().root.startswith(str(tmp_path / "envcache"))


CHILD = """
import sys, numpy as np
from stepscope.store.cache import _CHUNK, _MAX_BIG_STEPS, DiskCache, narrow, widen
c = DiskCache(sys.argv[1])
for i in range(20):
    c.put(sys.argv[2], {"i": i}, {"a": np.arange(20000) + int(sys.argv[3])})
    hit = c.get(sys.argv[2])
    if hit is not None:
        a = hit.array("a")
        assert a[1] - a[0] == 1 and len(a) == 20000
print("ok")
"""


def test_two_processes_share_a_cache(tmp_path, trace_file):
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "c"), trace_file,
                               str(k)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    assert DiskCache(str(tmp_path / "c")).get(trace_file) is not None


def test_memory_budget_serialises_big_jobs_but_not_small_ones():
    import threading
    import time

    from stepscope.store.pool import MemoryBudget

    budget = MemoryBudget(1000)
    order = []

    def job(name, need, hold):
        release = budget.acquire(need)
        try:
            order.append(("start", name))
            time.sleep(hold)
            order.append(("end", name))
        finally:
            release()

    big1 = threading.Thread(target=job, args=("big1", 700, 0.3))
    big1.start()
    time.sleep(0.05)
    big2 = threading.Thread(target=job, args=("big2", 700, 0.01))
    small = threading.Thread(target=job, args=("small", 10, 0.01))
    big2.start()
    small.start()
    for t in (big1, big2, small):
        t.join(5)
    assert order.index(("end", "small")) < order.index(("end", "big1"))  # small did not wait
    assert order.index(("start", "big2")) > order.index(("end", "big1"))  # big2 waited
    assert budget.used == 0
    release = budget.acquire(5000)  # bigger than the budget: runs alone, does not hang
    assert budget.used == 1000
    release()


def test_older_cache_formats_are_removed(tmp_path, trace_file):
    """A cache folder left by an older format (v1 before the timeline had its own entry)
    is read by nothing any more: it goes at the next write, other folders stay."""
    root = tmp_path / "c"
    old = root / "v1" / "ab" / "entry"
    old.mkdir(parents=True)
    (old / "big.npy").write_bytes(b"x" * 1000)
    (root / "notes").mkdir()
    cache = DiskCache(str(root))
    cache.put(trace_file, {"state": 1}, {"a": np.arange(3)})
    assert not (root / "v1").exists() and (root / "notes").exists()
    assert cache.get(trace_file).meta == {"state": 1}


@pytest.mark.parametrize("part", ["manifest.json", "meta.json"])
def test_entry_missing_a_part_is_removed_and_rebuilt(tmp_path, trace_file, part):
    """Issue 12 item 6: an entry without its manifest or meta (a crash, a hand-cleaned
    folder) is a miss, and the next put replaces it (it used to block every put for ever)."""
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {"a": np.arange(3)})
    folder = cache._folder(cache.key(trace_file))
    os.remove(os.path.join(folder, part))
    assert cache.get(trace_file) is None
    cache.put(trace_file, {"v": 2}, {"a": np.arange(4)})
    hit = cache.get(trace_file)
    assert hit.meta == {"v": 2} and hit.array("a").tolist() == [0, 1, 2, 3]


def test_incomplete_twin_does_not_block_a_put(tmp_path, trace_file):
    """A folder already at the entry's place without a manifest is replaced by the put."""
    cache = DiskCache(str(tmp_path / "c"))
    folder = cache._folder(cache.key(trace_file))
    os.makedirs(folder)
    with open(os.path.join(folder, "meta.json"), "wb") as f:
        f.write(b'{"v": 0}')
    cache.put(trace_file, {"v": 1}, {})
    assert cache.get(trace_file).meta == {"v": 1}


def _tmp_folder(cache, key, pid, age_s=0.0):
    from stepscope.store.cache import _tmp_prefix

    shard = os.path.join(cache.root, key[:2])
    os.makedirs(shard, exist_ok=True)
    prefix = _tmp_prefix(key).rsplit("-", 2)[0] + f"-{pid}-"
    folder = os.path.join(shard, prefix + "abc_1")
    os.makedirs(folder)
    with open(os.path.join(folder, "0.npy"), "wb") as f:
        f.write(b"x" * 100)
    if age_s:
        t = os.path.getmtime(folder) - age_s
        os.utime(folder, (t, t))
    return folder


def test_sweep_removes_stale_temporary_folders_only(tmp_path, trace_file):
    """Issue 12 item 12: temporary folders of writes killed mid-way (writer dead, or
    untouched for long) are swept; a live writer's folder stays."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache = DiskCache(str(tmp_path / "c"))
    key = cache.key(trace_file)
    killed = _tmp_folder(cache, key, dead.pid)
    old = _tmp_folder(cache, "ab" + key[2:], os.getpid(), age_s=2 * 3600)
    live = _tmp_folder(cache, "cd" + key[2:], os.getpid())
    cache.put(trace_file, {"v": 1}, {})
    assert cache.sweep() == 2
    assert not os.path.exists(killed) and not os.path.exists(old)
    assert os.path.exists(live)
    assert cache.get(trace_file).meta == {"v": 1}  # entries are not temporary folders


def test_writes_name_their_writer(tmp_path, trace_file, monkeypatch):
    """A write in progress carries this process's pid, so a sweep leaves it alone."""
    seen = []
    real_place = DiskCache._place

    def spy(self, tmp, final, path, key):
        seen.append(os.path.basename(tmp))
        assert self.sweep() == 0 and os.path.isdir(tmp)
        return real_place(self, tmp, final, path, key)

    monkeypatch.setattr(DiskCache, "_place", spy)
    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {})
    assert f"-{os.getpid()}-" in seen[0]


def test_key_includes_the_analysis_code(tmp_path, trace_file, monkeypatch):
    """Issue 13: the key includes a fingerprint of the package's source, so an entry made
    by other analysis code is a miss (and rebuilt), never served."""
    import stepscope.store.cache as cache_mod

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    before = cache_mod.code_fingerprint(str(pkg))
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    cache_mod.code_fingerprint.cache_clear()
    assert cache_mod.code_fingerprint(str(pkg)) != before
    cache_mod.code_fingerprint.cache_clear()
    assert len(cache_mod.code_fingerprint()) == 16
    # the whole package counts, not only the folder the cache module sits in
    assert os.path.isfile(os.path.join(cache_mod.PACKAGE_DIR, "analysis", "operators.py"))

    cache = DiskCache(str(tmp_path / "c"))
    cache.put(trace_file, {"v": 1}, {})
    monkeypatch.setattr(cache_mod, "code_fingerprint", lambda: "another-version")
    assert cache.get(trace_file) is None
    cache.put(trace_file, {"v": 2}, {})
    assert cache.get(trace_file).meta == {"v": 2}


def test_eviction_scans_are_throttled_but_big_writes_still_evict(tmp_path, monkeypatch):
    """Issue 12 item 15: a scan of the whole cache after every put made many small traces
    quadratic; scans now run at most every EVICT_INTERVAL_S per process, or sooner once a
    16th of max_bytes was written since the last one (the cache stays bounded)."""
    import stepscope.store.cache as cache_mod

    scans = []
    cache = DiskCache(str(tmp_path / "c"), max_bytes=160_000)
    monkeypatch.setattr(DiskCache, "evict", lambda self: scans.append(1))
    for i in range(20):
        p = tmp_path / f"t{i}.json"
        p.write_text(str(i))
        cache.put(str(p), {}, {"a": np.zeros(10)})  # ~200 bytes each
    assert len(scans) == 1  # the first put scans; the next 19 are within the interval
    p = tmp_path / "big.json"
    p.write_text("big")
    cache.put(str(p), {}, {"a": np.random.default_rng(0).random(2000)})  # 16 KB > max_bytes / 16: scan now
    assert len(scans) == 2
    monkeypatch.setattr(cache_mod, "EVICT_INTERVAL_S", 0.0)
    cache.put(str(tmp_path / "t0.json"), {"again": 1}, {})
    assert len(scans) == 3


def test_packing_leaves_no_cycle_holding_the_arrays():
    """pack and unpack walk the graph with a recursive closure; once they return, nothing of
    theirs refers to the arrays, which go with their last other reference, without waiting
    for a garbage collection (issue 19: an idle worker kept a timeline's arrays)."""
    import gc
    import weakref

    from stepscope.store.packing import pack, unpack
    from stepscope.timeline.lod import Items

    was = gc.isenabled()
    gc.disable()
    try:
        obj = Items(*(np.arange(10) + i for i in range(7)))
        packed = weakref.ref(obj.start)
        state, arrays = pack(obj)
        del obj, arrays
        assert packed() is None
        loaded = {str(i): np.arange(10) + i for i in range(7)}
        back = unpack(state, loaded)
        assert back.end.tolist() == list(range(1, 11))
        unpacked = weakref.ref(loaded["0"])
        del back, loaded
        assert unpacked() is None
    finally:
        if was:
            gc.enable()


def test_arrays_saved_ahead_are_moved_into_the_entry(tmp_path, trace_file):
    """The worker saves a trace's columns while it builds the timeline (issue 19); put then
    only renames their files: the entry reads back the same, and nothing is left over."""
    cache = DiskCache(str(tmp_path / "c"))
    rng = np.random.default_rng(1)
    early = {"times": 10**12 + np.arange(50_000) * 7, "wide": rng.integers(-2**62, 2**62, 20_000),
             "unused": np.arange(30_000)}
    late = {"lod": np.arange(40_000) % 300, "small": np.arange(5)}
    ahead = cache.save_ahead("k", [*early.values(), np.arange(3)])  # (small: not saved ahead)
    entry = {n: a for n, a in {**early, **late}.items() if n != "unused"}
    cache.put(trace_file, {"m": 1}, entry, key="k", ahead=ahead)
    hit = cache.get(trace_file, "k")
    assert sorted(hit.names()) == sorted(entry)
    for name, want in entry.items():
        got = hit.array(name)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name
    folder = cache._folder("k")
    assert not [f for f in os.listdir(folder) if f.startswith("ahead-")]
    assert os.listdir(os.path.dirname(folder)) == ["k"]  # no temporary folder left
    assert cache.save_ahead("k2", [np.arange(3)]) is None  # nothing big: no thread


def test_a_failed_put_or_discard_leaves_nothing_saved_ahead(tmp_path, trace_file):
    cache = DiskCache(str(tmp_path / "c"))
    ahead = cache.save_ahead("k", [np.arange(100_000)])
    ahead.discard()
    assert not os.path.exists(ahead.folder)
    ahead = cache.save_ahead("k", [np.arange(100_000)])
    with pytest.raises(TypeError):  # meta that is not JSON
        cache.put(trace_file, {"m": object()}, {"a": np.arange(100_000)}, key="k", ahead=ahead)
    assert os.listdir(os.path.dirname(cache._folder("k"))) == []
