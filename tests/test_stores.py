"""gs:// and s3:// end to end against real protocol servers on 127.0.0.1 (moto, fake-gcs-server).

Every test runs on both stores (the `store` fixture, `_stores.py`): writers publish
there, readers read every row back, the commands work on the URI, the versioned
commit keeps its guarantees, and a bad configuration gets an error naming the URI.
"""

from __future__ import annotations

import pytest

from beam_shards import (ArrowBackend, Features, ShardedDataset, Value, list_versions, read_metadata, verify,
                         write_shards)
from beam_shards import fs

from _support import race_to_create

SMALL = Features({"id": Value("int64"), "who": Value("string")})


def rows(first: int, count: int, who: str = "w") -> list[dict]:
    return [{"id": i, "who": who} for i in range(first, first + count)]


def all_ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


@pytest.mark.timeout(120)
def test_create_if_absent_lets_exactly_one_racer_win(store):
    target = store.uri("_versions", "00000000000000000001.json")
    winners = race_to_create(target)
    assert len(winners) == 1
    assert fs.read_bytes(target) == f"writer {winners[0]}".encode()
    assert list(fs.list_dir(store.uri("_versions"))) == [target]


@pytest.mark.timeout(300)
def test_write_shards_publishes_and_every_reader_reads_it_back(store):
    path = store.uri("cache")
    write_shards(rows(0, 120), path, SMALL, shard_size_bytes=600, batch_size=10)
    write_shards(rows(1000, 30, "second"), path, SMALL, mode="append", shard_size_bytes=600, batch_size=10)
    manifest = read_metadata(path)
    assert manifest.version == 2 and manifest.num_rows == 150 and manifest.num_shards > 2
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert sorted(all_ids(path)) == list(range(120)) + list(range(1000, 1030))
    assert sorted(all_ids(path, version=1)) == list(range(120))
    backend = ArrowBackend.open(path)
    assert backend.take([149, 0, 75]).column("id").to_pylist() == [all_ids(path)[i] for i in (149, 0, 75)]
    dataset = ShardedDataset(path)
    assert len(dataset) == 150 and sorted(row["id"] for row in dataset) == sorted(all_ids(path))
    assert dataset[-1]["who"] == "second"
    assert verify(path).ok
