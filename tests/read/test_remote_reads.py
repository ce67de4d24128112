"""Training reads from gs:// and s3:// (real protocol servers): ranged reads, bounded memory, the disk cache."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import warnings
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pyarrow as pa
import pytest
from torch.utils.data import DataLoader

from beam_shards import ArrowBackend, Features, Image, ShardedDataset, Value, write_shards
from beam_shards.storage import disk_cache, fs, local_files
from beam_shards.storage.checksum import Crc32

from _paths import REPO
from _support import jpeg

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from read_counter import counting_opener  # noqa: E402

FEATURES = Features({"id": Value("int64"), "image": Image(), "pad": Value("binary")})
ROWS = 400
BATCH = 5


def example(i: int) -> dict:
    return {"id": i, "image": jpeg(i % 7), "pad": bytes([i % 251]) * 4000}


@pytest.fixture
def remote_cache(store) -> str:
    path = store.uri("cache")
    write_shards((example(i) for i in range(ROWS)), path, FEATURES, shard_size_bytes=600_000, batch_size=BATCH)
    return path


@pytest.fixture
def fetched(monkeypatch) -> list[int]:
    """The sizes of the reads made from remote shards (counted as `bench_remote.py` counts them)."""
    tally: list[int] = []
    monkeypatch.setattr(fs, "open_random_access", counting_opener(fs.open_random_access, tally))
    return tally


@pytest.mark.timeout(300)
def test_a_row_costs_about_one_batch_not_one_shard(remote_cache, fetched):
    backend = ArrowBackend.open(remote_cache)
    shard_bytes = backend.manifest.shards[0].num_bytes
    batch_bytes = shard_bytes / (backend.manifest.shards[0].num_rows / BATCH)
    assert backend.manifest.num_shards >= 3 and shard_bytes > 10 * batch_bytes
    assert backend.get_row(5)["id"] == 5
    first = sum(fetched)
    assert first < 2 * batch_bytes, (first, batch_bytes, shard_bytes)
    assert backend.get_row(7)["id"] == 7 and sum(fetched) == first  # the same batch: nothing more fetched
    rng = np.random.default_rng(0)
    picks = rng.choice(ROWS, 25, replace=False)
    rows = backend.take(picks).to_pylist()
    assert [row["id"] for row in rows] == picks.tolist()
    assert rows[0] == {**example(int(picks[0]))}
    touched = len({(int(i) // BATCH) for i in picks} | {0})
    assert sum(fetched) < (touched + 1) * 1.3 * batch_bytes


@pytest.mark.timeout(300)
def test_batches_held_in_memory_are_bounded_by_bytes(remote_cache):
    limit = 300_000
    backend = ArrowBackend.open(remote_cache, max_memory_bytes=limit)
    for i in np.random.default_rng(1).permutation(ROWS).tolist():
        assert backend.get_row(i)["pad"] == example(i)["pad"]
        assert backend.memory_bytes <= limit
    assert 0 < backend.memory_bytes
    assert backend.slice(0, ROWS).column("id").to_pylist() == list(range(ROWS))


@pytest.mark.timeout(300)
def test_the_disk_cache_downloads_each_shard_once_for_all_data_loader_workers(remote_cache, tmp_path, monkeypatch):
    log = tmp_path / "whole_downloads.log"
    real = fs.open_random_access

    def logged(path: str) -> pa.NativeFile:  # DataLoader workers fork: they inherit this and append to the log
        if not fs.is_local(path):
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {path}\n")
        return real(path)
    monkeypatch.setattr(fs, "open_random_access", logged)
    cache_dir = str(tmp_path / "shard_cache")
    ds = ShardedDataset(remote_cache, image_mode="bytes", cache_dir=cache_dir, cache_max_bytes=50 << 20)
    loader = DataLoader(ds, batch_size=16, num_workers=2, shuffle=True, collate_fn=list,
                        multiprocessing_context="fork")
    seen = sorted(row["id"] for batch in loader for row in batch)
    assert seen == list(range(ROWS))
    opened = [line.split()[1] for line in log.read_text().splitlines()]
    shards = [ds.backend.manifest.shard_path(i) for i in range(ds.backend.manifest.num_shards)]
    assert sorted(opened) == sorted(shards)  # one download each, whichever worker got there first
    files = sorted(os.listdir(cache_dir))
    kept = [name for name in files if name.endswith(".arrow")]
    assert len(kept) == len(shards) and not [name for name in files if ".tmp-" in name]
    again = ShardedDataset(remote_cache, image_mode="bytes", cache_dir=cache_dir, cache_max_bytes=50 << 20)
    assert again[ROWS - 1]["id"] == ROWS - 1 and again.backend.memory_bytes == 0  # memory-mapped from the copy
    assert len(log.read_text().splitlines()) == len(shards)  # served from disk: nothing fetched


@pytest.mark.timeout(300)
def test_a_disk_cache_smaller_than_a_shard_falls_back_to_ranged_reads(remote_cache, tmp_path):
    ds = ShardedDataset(remote_cache, image_mode="numpy", cache_dir=str(tmp_path / "c"), cache_max_bytes=1000)
    assert [ds[i]["id"] for i in (0, 399, 200)] == [0, 399, 200]
    assert ds[3]["image"].shape == (16, 16, 3)
    assert not list((tmp_path / "c").glob("*.arrow"))  # the folder is made at the first download: none here


@pytest.mark.timeout(120)
def test_a_local_compressed_cache_bounds_its_memory_too(tmp_path):
    path = str(tmp_path / "z")
    write_shards((example(i) for i in range(ROWS)), path, FEATURES, compression="zstd", batch_size=BATCH)
    backend = ArrowBackend.open(path, max_memory_bytes=200_000)
    assert [backend.get_row(i)["id"] for i in range(0, ROWS, 7)] == list(range(0, ROWS, 7))
    assert 0 < backend.memory_bytes <= 200_000
    with pytest.raises(ValueError, match="max_memory_bytes"):
        ArrowBackend.open(path, max_memory_bytes=-1)


def ids_and_pads(backend: ArrowBackend, rows: int) -> list[tuple[int, bytes]]:
    return [(row["id"], row["pad"]) for row in backend.slice(0, rows).select(["id", "pad"]).to_pylist()]


def copy_of(backend: ArrowBackend, cache_dir, shard_id: int):
    """Where `cache_dir` keeps the copy of shard `shard_id`."""
    entry = backend.manifest.shards[shard_id]
    where = hashlib.sha256(backend.manifest.shard_path(shard_id).encode()).hexdigest()[:32]
    return cache_dir / f"{where}-crc32-{entry.checksum[6:]}-{entry.num_bytes}.arrow"


def _first_rows(path: str, cache_dir: str, rows: int) -> list[tuple[int, bytes]]:
    """`ids_and_pads` through the disk cache in `cache_dir`, in a process of its own."""
    return ids_and_pads(ArrowBackend.open(path, cache_dir=cache_dir), rows)


FIXED = Features({"id": Value("int64"), "pad": Value("binary")})


def fixed_size(first: int, count: int) -> Iterator[dict]:
    """`count` rows of one size from id `first`: caches of as many rows have shards of equal sizes."""
    return ({"id": first + i, "pad": bytes([(first + i) % 251]) * 1000} for i in range(count))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_caches_sharing_a_cache_dir_never_serve_each_others_shards(store, tmp_path, monkeypatch):
    # Every checksum alike: each shard of one cache now matches the other's in size and checksum, as an unlucky
    # CRC-32 match makes it.
    monkeypatch.setattr(Crc32, "checksum", lambda self: "crc32:00000000")
    rows = 200
    paths = {first: store.uri(f"cache_{first}") for first in (0, 1000)}
    for first, path in paths.items():
        write_shards(fixed_size(first, rows), path, FIXED, shard_size_bytes=100_000, batch_size=BATCH)
    cache_dir = tmp_path / "shard_cache"
    backends = {first: ArrowBackend.open(path, cache_dir=str(cache_dir)) for first, path in paths.items()}
    shards = [[(entry.num_bytes, entry.checksum) for entry in backend.manifest.shards] for backend in backends.values()]
    assert shards[0] == shards[1] and len(shards[0]) >= 2
    for first, backend in backends.items():
        assert ids_and_pads(backend, rows) == [(row["id"], row["pad"]) for row in fixed_size(first, rows)]
    copies = {copy_of(backend, cache_dir, i).name for backend in backends.values() for i in range(backend.num_shards)}
    assert len(copies) == 2 * len(shards[0])
    assert {name for name in os.listdir(cache_dir) if name.endswith(".arrow")} == copies
    for first, path in paths.items():  # served from the copies now
        again = ArrowBackend.open(path, cache_dir=str(cache_dir))
        assert ids_and_pads(again, rows) == [(row["id"], row["pad"]) for row in fixed_size(first, rows)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_copy_damaged_in_place_is_fetched_again_and_serves_the_right_rows(remote_cache, tmp_path):
    """The copy of shard 0 gets one bit flipped, that of shard 1 is zeroed; one fresh process reads both."""
    cache_dir = tmp_path / "shard_cache"
    backend = ArrowBackend.open(remote_cache, cache_dir=str(cache_dir))
    entries = backend.manifest.shards[:2]
    rows = entries[0].num_rows + entries[1].num_rows
    expected = [(i, example(i)["pad"]) for i in range(rows)]
    assert ids_and_pads(backend, rows) == expected
    copies = []
    for entry, damage in zip(entries, ["flipped", "zeroed"]):
        name = f"crc32-{entry.checksum[6:]}-{entry.num_bytes}.arrow"
        [copy] = [path for path in cache_dir.iterdir() if path.name.endswith(name)]
        data = copy.read_bytes()
        if damage == "flipped":
            at = data.index(example(3)["pad"]) + 2000  # inside row 3's pad
            damaged = data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]
        else:
            damaged = bytes(len(data))
        with open(copy, "r+b") as handle:  # the same file, the same size
            handle.write(damaged)
        copies.append(copy)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
        assert fresh.submit(_first_rows, remote_cache, str(cache_dir), rows).result() == expected
    for copy, entry in zip(copies, entries):
        assert (f"crc32:{zlib.crc32(copy.read_bytes()):08x}", copy.stat().st_size) == (entry.checksum, entry.num_bytes)
    assert ids_and_pads(ArrowBackend.open(remote_cache, cache_dir=str(cache_dir)), rows) == expected


def create_on_a_full_disk(path):
    """`create_new` for the disk cache on a full disk: the file is created, writing to it fails as writing to /dev/full does."""
    local_files.create_new(path).close()
    return open("/dev/full", "wb")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_full_disk_under_the_cache_dir_leaves_reads_to_the_store_with_one_warning(remote_cache, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setattr(disk_cache, "create_new", create_on_a_full_disk)
    cache_dir = tmp_path / "shard_cache"
    backend = ArrowBackend.open(remote_cache, cache_dir=str(cache_dir))
    assert backend.num_shards >= 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ids_and_pads(backend, ROWS) == [(i, example(i)["pad"]) for i in range(ROWS)]
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, f"the disk cache in {cache_dir} cannot be used ([Errno 28] No space left on device); "
                         f"reading shards from the store with ranged reads instead")]
    assert backend.memory_bytes > 0, "read with ranged reads"
    assert not [name for name in os.listdir(cache_dir) if not name.endswith(".lock")]
