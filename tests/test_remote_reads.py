"""Training reads from gs:// and s3:// (real protocol servers): ranged reads, bounded memory, the disk cache."""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pytest
from torch.utils.data import DataLoader

from beam_shards import ArrowBackend, Features, Image, ShardedDataset, Value, write_shards
from beam_shards.storage import fs

from _support import jpeg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
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
    assert not [name for name in os.listdir(tmp_path / "c") if name.endswith(".arrow")]


@pytest.mark.timeout(120)
def test_a_local_compressed_cache_bounds_its_memory_too(tmp_path):
    path = str(tmp_path / "z")
    write_shards((example(i) for i in range(ROWS)), path, FEATURES, compression="zstd", batch_size=BATCH)
    backend = ArrowBackend.open(path, max_memory_bytes=200_000)
    assert [backend.get_row(i)["id"] for i in range(0, ROWS, 7)] == list(range(0, ROWS, 7))
    assert 0 < backend.memory_bytes <= 200_000
    with pytest.raises(ValueError, match="max_memory_bytes"):
        ArrowBackend.open(path, max_memory_bytes=-1)
