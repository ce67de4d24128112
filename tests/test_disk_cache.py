"""DiskCache: whole, verified shard files on local disk, one download per shard across processes, LRU by bytes.

The multi-process tests run the cache in spawned processes (as torch DataLoader workers may be), which import
the worker functions below from this module.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import zlib

import pytest

from beam_shards.errors import CorruptCacheError
from beam_shards.storage import disk_cache
from beam_shards.storage.checksum import format_checksum
from beam_shards.storage.disk_cache import DiskCache


def blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def key_of(data: bytes) -> str:
    return format_checksum(zlib.crc32(data))


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def names(folder) -> list[str]:
    """The cached files and temporaries in `folder` (not the empty lock files)."""
    return sorted(name for name in os.listdir(folder) if not name.endswith(".lock"))


class Fetcher:
    """A `fetch` serving `data` that counts its calls."""

    def __init__(self, data: bytes):
        self.data = data
        self.calls = 0

    def __call__(self) -> io.BytesIO:
        self.calls += 1
        return io.BytesIO(self.data)


def get(cache: DiskCache, data: bytes) -> str:
    return cache.get(key_of(data), len(data), Fetcher(data))


class BreakingStream(io.BytesIO):
    """Serves `good` bytes, then calls `on_end()` (which raises, or blocks forever) as a broken store would."""

    def __init__(self, data: bytes, good: int, on_end):
        super().__init__(data[:good])
        self.on_end = on_end

    def read(self, size: int = -1) -> bytes:
        return super().read(size) or self.on_end()


def spawned(target, *args) -> multiprocessing.Process:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    process.start()
    return process


def reporting(target, results, *args) -> None:
    """Runs `target(*args)` and puts its result, or its traceback, on `results`."""
    try:
        results.put(target(*args))
    except BaseException:
        results.put(traceback.format_exc())
        raise


def collect(results, count: int) -> list[dict]:
    collected = [results.get() for _ in range(count)]
    failures = [r for r in collected if isinstance(r, str)]
    assert not failures, failures[0]
    return collected


@pytest.mark.timeout(60)
def test_a_miss_fetches_once_and_later_gets_hit_the_same_complete_file(tmp_path):
    folder = str(tmp_path / "cache")
    cache = DiskCache(folder, max_bytes=64 << 20)
    data = blob(0, 9 << 20 | 1)  # a few chunks of streaming
    fetcher = Fetcher(data)
    first = cache.get(key_of(data), len(data), fetcher)
    second = cache.get(key_of(data), len(data), fetcher)
    assert first == second and os.path.dirname(first) == folder
    assert read(first) == data
    assert fetcher.calls == 1
    assert (cache.hits, cache.misses, cache.bytes_fetched) == (1, 1, len(data))
    assert names(folder) == [os.path.basename(first)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["flipped", "short", "long", "much_longer"])
def test_a_download_with_the_wrong_bytes_raises_and_leaves_nothing(tmp_path, damage):
    data = blob(1, 10_000)
    served = {"flipped": data[:5] + bytes([data[5] ^ 1]) + data[6:], "short": data[:-1], "long": data + b"x",
              "much_longer": data * 1000}[damage]
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    with pytest.raises(CorruptCacheError) as error:
        cache.get(key_of(data), len(data), Fetcher(served))
    found = f"{len(served)} bytes" if len(served) <= len(data) else f"more than {len(data)} bytes"
    assert f"has {found} with checksum crc32:" in str(error.value)
    assert f"expected {len(data)} bytes with checksum {key_of(data)}" in str(error.value)
    if damage != "much_longer":  # that one stops reading one chunk past the size
        assert key_of(served) in str(error.value)
    assert names(tmp_path) == []
    assert (cache.hits, cache.misses) == (0, 0)


@pytest.mark.timeout(60)
def test_a_fetch_failing_midway_leaves_nothing_and_a_later_get_fetches_again(tmp_path):
    data = blob(2, 6 << 20)
    cache = DiskCache(str(tmp_path), max_bytes=64 << 20)
    on_disk = []

    def reset():
        on_disk.extend(name for name in os.listdir(tmp_path) if ".tmp-" in name)
        raise ConnectionResetError("the store reset the connection")

    with pytest.raises(ConnectionResetError, match="reset the connection"):
        cache.get(key_of(data), len(data), lambda: BreakingStream(data, 5 << 20, reset))
    assert len(on_disk) == 1, "the failure came while a temporary file was being written"
    assert names(tmp_path) == []
    assert read(get(cache, data)) == data
    assert (cache.hits, cache.misses, cache.bytes_fetched) == (0, 1, (5 << 20) + len(data))


@pytest.mark.timeout(60)
def test_a_cached_file_of_the_wrong_size_is_fetched_again(tmp_path):
    data = blob(3, 10_000)
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    path = get(cache, data)
    with open(path, "r+b") as handle:
        handle.truncate(100)
    fetcher = Fetcher(data)
    assert cache.get(key_of(data), len(data), fetcher) == path
    assert read(path) == data and fetcher.calls == 1
    assert (cache.hits, cache.misses) == (0, 2)


@pytest.mark.timeout(60)
def test_eviction_deletes_the_least_recently_used_files_until_under_the_byte_limit(tmp_path):
    cache = DiskCache(str(tmp_path), max_bytes=300)
    a, b, c, d = (blob(10 + i, 100) for i in range(4))
    paths = [get(cache, x) for x in (a, b, c)]
    for age, path in enumerate(paths):  # a used first, then b, then c
        os.utime(path, ns=((age + 1) * 10**9,) * 2)
    assert get(cache, a) == paths[0]  # a hit: now the most recent
    newest = get(cache, d)
    assert names(tmp_path) == sorted(os.path.basename(p) for p in (paths[0], paths[2], newest))
    assert (cache.hits, cache.misses) == (1, 4)


@pytest.mark.timeout(60)
def test_eviction_never_deletes_the_file_it_returns(tmp_path):
    cache = DiskCache(str(tmp_path), max_bytes=250)
    older = [get(cache, blob(20 + i, 100)) for i in range(2)]
    later = time.time_ns() + 3600 * 10**9
    for i, path in enumerate(older):  # used after the next download, as by a process with a clock ahead
        os.utime(path, ns=(later + i,) * 2)
    data = blob(22, 200)
    path = get(cache, data)
    assert names(tmp_path) == [os.path.basename(path)]
    assert read(path) == data


@pytest.mark.timeout(60)
def test_eviction_removes_temporaries_left_over_by_dead_or_stalled_downloads(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = "crc32-0a1b2c3d-5.arrow.tmp-{pid}-{thread}"
    live, of_dead, stalled = (tmp_path / name.format(pid=pid, thread=thread)
                              for pid, thread in [(os.getpid(), 1), (dead.pid, 1), (os.getpid(), 2)])
    for path in (live, of_dead, stalled):
        path.write_bytes(b"part")
    os.utime(stalled, ns=((time.time_ns() - 2 * 3600 * 10**9),) * 2)
    path = get(DiskCache(str(tmp_path), max_bytes=1 << 20), blob(30, 100))
    assert names(tmp_path) == sorted([os.path.basename(path), live.name])


@pytest.mark.timeout(60)
def test_a_file_larger_than_the_limit_is_not_cached(tmp_path):
    cache = DiskCache(str(tmp_path), max_bytes=100)
    too_large = Fetcher(blob(40, 101))
    assert cache.get(key_of(too_large.data), 101, too_large) is None
    assert too_large.calls == 0 and names(tmp_path) == []
    data = blob(41, 100)
    assert read(get(cache, data)) == data


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key", ["../x", "crc32:zz", "", None, "crc32:0A1B2C3D", "crc32:0a1b2c3d/../../x",
                                 "crc32:0a1b2c3d\n", "/etc/passwd", b"crc32:0a1b2c3d", "md5:0a1b2c3d"])
def test_keys_that_are_not_checksums_are_refused(tmp_path, key):
    cache = DiskCache(str(tmp_path / "cache"), max_bytes=100)
    fetcher = Fetcher(b"")
    with pytest.raises(ValueError, match=re.escape(repr(key))):
        cache.get(key, 0, fetcher)
    assert fetcher.calls == 0 and os.listdir(tmp_path) == ["cache"] and names(tmp_path / "cache") == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [-1, "10", True, 1.5, None])
def test_sizes_that_are_not_byte_counts_are_refused(tmp_path, size):
    with pytest.raises(ValueError, match=re.escape(repr(size))):
        DiskCache(str(tmp_path), max_bytes=100).get(key_of(b""), size, Fetcher(b""))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cache_dir, max_bytes", [("", 1), (None, 1), ("dir", 0), ("dir", -1), ("dir", True),
                                                  ("dir", "1"), ("dir", 1.5)])
def test_a_cache_needs_a_folder_and_a_positive_byte_limit(tmp_path, cache_dir, max_bytes):
    wrong = max_bytes if cache_dir else cache_dir
    with pytest.raises(ValueError, match=re.escape(repr(wrong))):
        DiskCache(cache_dir and str(tmp_path / cache_dir), max_bytes)


@pytest.mark.timeout(60)
def test_a_cache_pickles_and_works_after_fork(tmp_path):
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    first, second = blob(50, 1000), blob(51, 1000)
    path = get(cache, first)
    clone = pickle.loads(pickle.dumps(cache))
    assert repr(clone) == repr(cache) == f"DiskCache({str(tmp_path)!r}, max_bytes={1 << 20})"
    fetcher = Fetcher(first)
    assert clone.get(key_of(first), len(first), fetcher) == path and fetcher.calls == 0

    results = multiprocessing.get_context("fork").SimpleQueue()

    def child():
        reporting(lambda: {"first": get(cache, first), "second": get(cache, second), "hits": cache.hits,
                           "misses": cache.misses}, results)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    [seen] = collect(results, 1)
    process.join()
    assert seen["first"] == path and read(seen["second"]) == second
    assert (seen["hits"], seen["misses"]) == (1, 2)  # the parent's miss, then the child's own hit and miss
    assert (cache.hits, cache.misses) == (0, 1)


def _get_one_key(folder: str, markers: str, workers: int, size: int) -> dict:
    """One of `workers` processes getting the same key; its fetch waits until every worker found the file absent."""
    data = blob(60, size)
    checks = []
    found_absent = os.path.join(markers, str(os.getpid()))
    real_use = disk_cache._use

    def use(path: str, size: int) -> bool:  # notes what each look for the complete file found
        checks.append(real_use(path, size))
        if not checks[-1]:
            open(found_absent, "w").close()
        return checks[-1]

    fetches = []

    def fetch() -> io.BytesIO:
        fetches.append(os.getpid())
        while len(os.listdir(markers)) < workers:  # every other worker is now on its way to wait for this download
            time.sleep(0.01)
        return io.BytesIO(data)

    disk_cache._use = use
    cache = DiskCache(folder, max_bytes=2 * size)
    path = cache.get(key_of(data), size, fetch)
    return {"path": path, "digest": digest(read(path)), "checks": checks, "fetches": len(fetches),
            "hits": cache.hits, "misses": cache.misses}


@pytest.mark.timeout(300)
def test_processes_getting_one_key_at_once_download_it_once_and_share_it(tmp_path):
    workers, size = 6, 5 << 20
    folder, markers = tmp_path / "cache", tmp_path / "absent"
    markers.mkdir()
    results = multiprocessing.get_context("spawn").SimpleQueue()
    processes = [spawned(reporting, _get_one_key, results, str(folder), str(markers), workers, size)
                 for _ in range(workers)]
    seen = collect(results, workers)
    for process in processes:
        process.join()
    assert sum(r["fetches"] for r in seen) == 1
    downloader = [r for r in seen if r["fetches"]]
    assert [(r["checks"], r["misses"]) for r in downloader] == [([False, False], 1)]
    waiters = [r for r in seen if not r["fetches"]]
    assert all((r["checks"], r["hits"]) == ([False, True], 1) for r in waiters), \
        "every other worker found the file absent, waited for the download, then found it complete"
    assert {r["digest"] for r in seen} == {digest(blob(60, size))}
    assert len({r["path"] for r in seen}) == 1


_SHARDS = [blob(70 + i, 20_000 * (i + 1)) for i in range(6)]


def _get_many_keys(folder: str, max_bytes: int, seed: int, rounds: int) -> dict:
    """Gets random shards of `_SHARDS` through a cache too small for them all, checking each file read."""
    cache = DiskCache(folder, max_bytes=max_bytes)
    rng, evicted_before_open = random.Random(seed), 0
    for _ in range(rounds):
        data = rng.choice(_SHARDS)
        while True:
            path = get(cache, data)
            try:
                content = read(path)
            except FileNotFoundError:  # another process evicted it after get returned: get it again
                evicted_before_open += 1
                continue
            assert content == data, f"{path} holds other bytes than {key_of(data)}"
            break
    return {"hits": cache.hits, "misses": cache.misses, "evicted_before_open": evicted_before_open}


@pytest.mark.timeout(300)
def test_processes_getting_different_keys_through_a_small_cache_only_ever_read_complete_files(tmp_path):
    workers, rounds, max_bytes = 4, 40, 250_000
    folder = str(tmp_path / "cache")
    results = multiprocessing.get_context("spawn").SimpleQueue()
    processes = [spawned(reporting, _get_many_keys, results, folder, max_bytes, seed, rounds)
                 for seed in range(workers)]
    seen = collect(results, workers)
    for process in processes:
        process.join()
    assert sum(r["misses"] for r in seen) > len(_SHARDS), "the cache was small enough to evict"
    assert sum(r["hits"] + r["misses"] - r["evicted_before_open"] for r in seen) == workers * rounds
    left = names(folder)
    assert not [name for name in left if ".tmp-" in name]
    assert sum(os.path.getsize(os.path.join(folder, name)) for name in left) <= max_bytes
    for name in left:
        content = read(os.path.join(folder, name))
        assert name == f"crc32-{key_of(content)[6:]}-{len(content)}.arrow"


def _stalling_download(folder: str, size: int, stalled: str) -> None:
    """Downloads half of a shard, then the store stalls forever (until the test kills this process)."""

    def stall():
        open(stalled, "w").close()
        threading.Event().wait()

    data = blob(80, size)
    DiskCache(folder, max_bytes=2 * size).get(key_of(data), size, lambda: BreakingStream(data, size // 2, stall))


@pytest.mark.timeout(300)
def test_a_download_killed_midway_is_never_served_and_the_next_get_fetches_again(tmp_path):
    size, folder, stalled = 2 << 20, tmp_path / "cache", tmp_path / "stalled"
    process = spawned(_stalling_download, str(folder), size, str(stalled))
    while not stalled.exists():
        assert process.exitcode is None, f"the download ended before stalling (exit code {process.exitcode})"
        time.sleep(0.01)
    temporaries = [name for name in names(folder) if ".tmp-" in name]
    assert len(temporaries) == 1 and temporaries[0].split(".tmp-")[1].startswith(f"{process.pid}-")
    process.kill()
    process.join()
    assert process.exitcode == -signal.SIGKILL
    assert names(folder) == temporaries, "nothing under a final name"

    data = blob(80, size)
    cache = DiskCache(str(folder), max_bytes=2 * size)
    fetcher = Fetcher(data)
    path = cache.get(key_of(data), size, fetcher)
    assert read(path) == data and fetcher.calls == 1
    assert names(folder) == [os.path.basename(path)], "the dead download's temporary was cleaned up"
