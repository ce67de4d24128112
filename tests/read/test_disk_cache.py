"""DiskCache: whole, verified shard files on local disk, one download per shard across processes, LRU by bytes,
keyed by where a shard is stored, each file checked once per process, the store read instead when the disk fails.

The multi-process tests run the cache in spawned processes (as torch DataLoader workers may be), which import
the worker functions below from this module.
"""

from __future__ import annotations

import errno
import hashlib
import io
import multiprocessing
import os
import pickle
import random
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
import zlib

import pytest

from beam_shards.errors import CorruptCacheError
from beam_shards.storage import disk_cache, local_files
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


def uri_of(data: bytes) -> str:
    """Where a test's shard of `data` is stored."""
    return f"s3://bucket/cache/shard-{digest(data)[:12]}.arrow"


def name_of(uri: str, data: bytes) -> str:
    """The name of the cached copy of `data` stored at `uri`."""
    return f"{digest(uri.encode())[:32]}-crc32-{key_of(data)[6:]}-{len(data)}.arrow"


def forged(data: bytes, crc: int) -> bytes:
    """`data` with its last 4 bytes replaced so that its CRC-32 is `crc`, as an unlucky shard's would be.

    CRC-32 is affine in those 32 bits: the bits to set solve 32 equations over GF(2).
    """
    head = data[:-4]
    base = zlib.crc32(head + bytes(4))
    basis: dict[int, tuple[int, int]] = {}  # top bit -> (a change of the CRC, the tail bits that make it)
    for bit in range(32):
        change, tail = zlib.crc32(head + (1 << bit).to_bytes(4, "little")) ^ base, 1 << bit
        while change and change.bit_length() - 1 in basis:
            made, bits = basis[change.bit_length() - 1]
            change, tail = change ^ made, tail ^ bits
        if change:
            basis[change.bit_length() - 1] = (change, tail)
    wanted, tail = crc ^ base, 0
    while wanted:
        made, bits = basis[wanted.bit_length() - 1]
        wanted, tail = wanted ^ made, tail ^ bits
    result = head + tail.to_bytes(4, "little")
    assert zlib.crc32(result) == crc and len(result) == len(data)
    return result


def in_another_process(monkeypatch) -> None:
    """Forgets which cached files this process checked, as a process that just started knows none."""
    monkeypatch.setattr(disk_cache, "_VERIFIED", set())


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
    return cache.get(uri_of(data), key_of(data), len(data), Fetcher(data))


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
    first = cache.get(uri_of(data), key_of(data), len(data), fetcher)
    second = cache.get(uri_of(data), key_of(data), len(data), fetcher)
    assert first == second and os.path.dirname(first) == folder
    assert read(first) == data
    assert fetcher.calls == 1
    assert (cache.hits, cache.misses, cache.bytes_fetched) == (1, 1, len(data))
    assert names(folder) == [name_of(uri_of(data), data)] == [os.path.basename(first)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["flipped", "short", "long", "much_longer"])
def test_a_download_with_the_wrong_bytes_raises_and_leaves_nothing(tmp_path, damage):
    data = blob(1, 10_000)
    served = {"flipped": data[:5] + bytes([data[5] ^ 1]) + data[6:], "short": data[:-1], "long": data + b"x",
              "much_longer": data * 1000}[damage]
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    with pytest.raises(CorruptCacheError) as error:
        cache.get(uri_of(data), key_of(data), len(data), Fetcher(served))
    found = f"{len(served)} bytes" if len(served) <= len(data) else f"more than {len(data)} bytes"
    assert f"the download of {uri_of(data)} into {tmp_path} has {found} with checksum crc32:" in str(error.value)
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
        cache.get(uri_of(data), key_of(data), len(data), lambda: BreakingStream(data, 5 << 20, reset))
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
    assert cache.get(uri_of(data), key_of(data), len(data), fetcher) == path
    assert read(path) == data and fetcher.calls == 1
    assert (cache.hits, cache.misses) == (0, 2)


@pytest.mark.timeout(60)
def test_files_stored_at_other_uris_are_never_served_even_with_the_same_checksum_and_size(tmp_path):
    first = blob(90, 10_000)
    second = forged(blob(91, 10_000), zlib.crc32(first))
    assert (key_of(second), len(second)) == (key_of(first), len(first)) and second != first
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    uris = ["s3://bucket/a/shard-0.arrow", "s3://bucket/b/shard-0.arrow"]
    fetchers = [Fetcher(first), Fetcher(second)]
    paths = [cache.get(uri, key_of(first), len(first), fetcher) for uri, fetcher in zip(uris, fetchers)]
    assert [read(path) for path in paths] == [first, second]
    assert [fetcher.calls for fetcher in fetchers] == [1, 1]
    assert names(tmp_path) == sorted(name_of(uri, first) for uri in uris)
    assert [cache.get(uri, key_of(first), len(first), Fetcher(b"")) for uri in uris] == paths
    assert (cache.hits, cache.misses) == (2, 2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["flipped", "zeroed"])
def test_a_copy_damaged_in_place_is_fetched_again_by_the_next_process(tmp_path, monkeypatch, damage):
    data = blob(92, 10_000)
    path = get(DiskCache(str(tmp_path), max_bytes=1 << 20), data)
    damaged = {"flipped": data[:5000] + bytes([data[5000] ^ 0x10]) + data[5001:], "zeroed": bytes(len(data))}[damage]
    with open(path, "r+b") as handle:  # the same file, the same size
        handle.write(damaged)
    in_another_process(monkeypatch)
    cache, fetcher = DiskCache(str(tmp_path), max_bytes=1 << 20), Fetcher(data)
    assert cache.get(uri_of(data), key_of(data), len(data), fetcher) == path
    assert read(path) == data and fetcher.calls == 1 and (cache.hits, cache.misses) == (0, 1)
    in_another_process(monkeypatch)
    again, fetcher = DiskCache(str(tmp_path), max_bytes=1 << 20), Fetcher(data)
    assert again.get(uri_of(data), key_of(data), len(data), fetcher) == path
    assert read(path) == data and fetcher.calls == 0 and (again.hits, again.misses) == (1, 0)
    assert names(tmp_path) == [os.path.basename(path)]


@pytest.mark.timeout(60)
def test_a_process_reads_a_cached_file_to_check_it_only_the_first_time(tmp_path, monkeypatch):
    checks = []

    class Counted(disk_cache.Crc32):
        def __init__(self):
            super().__init__()
            checks.append(self)

    monkeypatch.setattr(disk_cache, "Crc32", Counted)
    data = blob(93, 10_000)
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    path = get(cache, data)
    assert len(checks) == 1, "checked while it downloaded"
    assert get(cache, data) == path and get(DiskCache(str(tmp_path), max_bytes=1 << 20), data) == path
    assert len(checks) == 1, "served as checked: not read again"
    in_another_process(monkeypatch)
    assert [get(cache, data) for _ in range(3)] == [path] * 3
    assert len(checks) == 2 and checks[-1].size == len(data), "read whole once"
    assert (cache.hits, cache.misses) == (4, 1)


@pytest.mark.timeout(60)
def test_a_damaged_copy_whose_new_download_is_bad_too_raises_naming_the_store_uri(tmp_path, monkeypatch):
    data = blob(94, 10_000)
    cache = DiskCache(str(tmp_path), max_bytes=1 << 20)
    path = get(cache, data)
    with open(path, "r+b") as handle:
        handle.write(bytes(100))
    in_another_process(monkeypatch)
    fetcher = Fetcher(data[:-1] + b"x")
    with pytest.raises(CorruptCacheError) as error:
        cache.get(uri_of(data), key_of(data), len(data), fetcher)
    assert str(error.value) == (f"the download of {uri_of(data)} into {tmp_path} has {len(data)} bytes with checksum "
                                f"{key_of(fetcher.data)}; expected {len(data)} bytes with checksum {key_of(data)}")
    assert fetcher.calls == 1 and names(tmp_path) == []


@pytest.mark.timeout(60)
def test_files_of_the_earlier_layout_are_never_served_and_are_evicted(tmp_path):
    data = blob(95, 1000)
    earlier = tmp_path / f"crc32-{key_of(data)[6:]}-{len(data)}.arrow"  # keyed without the URI
    earlier.write_bytes(forged(blob(96, 1000), zlib.crc32(data)))  # another cache's shard
    os.utime(earlier, ns=(10**9,) * 2)
    cache, fetcher = DiskCache(str(tmp_path), max_bytes=1500), Fetcher(data)
    path = cache.get(uri_of(data), key_of(data), len(data), fetcher)
    assert read(path) == data and fetcher.calls == 1
    assert names(tmp_path) == [os.path.basename(path)]


def create_on_a_full_disk(path):
    """`create_new` for `disk_cache` on a full disk: the file is created, writing to it fails as writing to /dev/full does."""
    local_files.create_new(path).close()
    return open("/dev/full", "wb")


def failing(code: int):
    """A function failing as a system call does with errno `code`."""

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return fail


def fell_back(caught, folder, code: int) -> bool:
    """Whether `caught` is the one warning that the disk cache in `folder` failed with errno `code`."""
    text = (rf"the disk cache in {re.escape(str(folder))} cannot be used \(\[Errno {code}\] [^\n]*\); "
            rf"reading shards from the store with ranged reads instead")
    return [w.category for w in caught] == [RuntimeWarning] and bool(re.fullmatch(text, str(caught[0].message)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("failure, code", [("write", errno.ENOSPC), ("rename", errno.EDQUOT),
                                           ("folder", errno.ENOTDIR)])
def test_a_cache_folder_that_cannot_be_written_leaves_reads_to_the_store_and_warns_once(tmp_path, monkeypatch,
                                                                                      failure, code):
    folder = tmp_path / "cache"
    if failure == "write":
        monkeypatch.setattr(disk_cache, "create_new", create_on_a_full_disk)
    elif failure == "rename":
        monkeypatch.setattr(os, "replace", failing(code))
    else:
        (tmp_path / "file").write_bytes(b"")
        folder = tmp_path / "file" / "cache"
    cache = DiskCache(str(folder), max_bytes=1 << 20)
    shards = [blob(100 + i, 10_000) for i in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [get(cache, data) for data in shards] == [None] * 3
    assert fell_back(caught, folder, code), [str(w.message) for w in caught]
    assert not folder.is_dir() or names(folder) == []
    if failure != "folder":
        monkeypatch.undo()  # the disk works again
        assert read(get(cache, shards[0])) == shards[0]


def _get_past_a_file_size_limit(folder: str, limit: int, size: int) -> dict:
    """Gets a shard of `size` bytes in a process that cannot write files past `limit` bytes, as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so writing past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    data = blob(110, size)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = DiskCache(folder, max_bytes=2 * size).get(uri_of(data), key_of(data), size, Fetcher(data))
    return {"path": path, "caught": [(w.category.__name__, str(w.message)) for w in caught]}


@pytest.mark.timeout(120)
def test_a_real_write_failure_leaves_reads_to_the_store_and_warns_once(tmp_path):
    folder = tmp_path / "cache"
    results = multiprocessing.get_context("spawn").SimpleQueue()
    process = spawned(reporting, _get_past_a_file_size_limit, results, str(folder), 1 << 20, 3 << 20)
    [seen] = collect(results, 1)
    process.join()
    assert seen["path"] is None
    [(category, message)] = seen["caught"]
    assert category == "RuntimeWarning" and message.startswith(f"the disk cache in {folder} cannot be used ([Errno "
                                                                 f"{errno.EFBIG}] File too large)")
    assert names(folder) == []


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
    name = "{uri}crc32-0a1b2c3d-5.arrow.tmp-{pid}-{thread}"
    uri = digest(b"s3://bucket/shard.arrow")[:32] + "-"
    live, of_dead, stalled, of_dead_before = (
        tmp_path / name.format(uri=uri, pid=pid, thread=thread)
        for uri, pid, thread in [(uri, os.getpid(), 1), (uri, dead.pid, 1), (uri, os.getpid(), 2), ("", dead.pid, 1)])
    for path in (live, of_dead, stalled, of_dead_before):
        path.write_bytes(b"part")
    os.utime(stalled, ns=((time.time_ns() - 2 * 3600 * 10**9),) * 2)
    path = get(DiskCache(str(tmp_path), max_bytes=1 << 20), blob(30, 100))
    assert names(tmp_path) == sorted([os.path.basename(path), live.name])


@pytest.mark.timeout(60)
def test_a_file_larger_than_the_limit_is_not_cached(tmp_path):
    cache = DiskCache(str(tmp_path), max_bytes=100)
    too_large = Fetcher(blob(40, 101))
    assert cache.get(uri_of(too_large.data), key_of(too_large.data), 101, too_large) is None
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
        cache.get("s3://bucket/shard.arrow", key, 0, fetcher)
    assert fetcher.calls == 0 and os.listdir(tmp_path) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("uri", ["", None, b"s3://bucket/shard.arrow"])
def test_uris_that_are_not_paths_are_refused(tmp_path, uri):
    fetcher = Fetcher(b"")
    with pytest.raises(ValueError, match=re.escape(repr(uri))):
        DiskCache(str(tmp_path), max_bytes=100).get(uri, key_of(b""), 0, fetcher)
    assert fetcher.calls == 0 and os.listdir(tmp_path) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [-1, "10", True, 1.5, None])
def test_sizes_that_are_not_byte_counts_are_refused(tmp_path, size):
    with pytest.raises(ValueError, match=re.escape(repr(size))):
        DiskCache(str(tmp_path), max_bytes=100).get(uri_of(b""), key_of(b""), size, Fetcher(b""))


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
    assert clone.get(uri_of(first), key_of(first), len(first), fetcher) == path and fetcher.calls == 0

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
    real_complete = disk_cache._complete

    def complete(path: str, key: str, size: int, whole_check: bool = True) -> bool:  # notes what each look found
        checks.append(real_complete(path, key, size, whole_check))
        if not checks[-1]:
            open(found_absent, "w").close()
        return checks[-1]

    fetches = []

    def fetch() -> io.BytesIO:
        fetches.append(os.getpid())
        while len(os.listdir(markers)) < workers:  # every other worker is now on its way to wait for this download
            time.sleep(0.01)
        return io.BytesIO(data)

    disk_cache._complete = complete
    cache = DiskCache(folder, max_bytes=2 * size)
    path = cache.get(uri_of(data), key_of(data), size, fetch)
    return {"path": path, "digest": digest(read(path)), "checks": checks, "fetches": len(fetches),
            "hits": cache.hits, "misses": cache.misses}


@pytest.mark.slow
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
        assert name == name_of(uri_of(content), content)


def _stalling_download(folder: str, size: int, stalled: str) -> None:
    """Downloads half of a shard, then the store stalls forever (until the test kills this process)."""

    def stall():
        open(stalled, "w").close()
        threading.Event().wait()

    data = blob(80, size)
    cache = DiskCache(folder, max_bytes=2 * size)
    cache.get(uri_of(data), key_of(data), size, lambda: BreakingStream(data, size // 2, stall))


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
    path = cache.get(uri_of(data), key_of(data), size, fetcher)
    assert read(path) == data and fetcher.calls == 1
    assert names(folder) == [os.path.basename(path)], "the dead download's temporary was cleaned up"
