"""A mixture's batch reads sources that give their rows alike in one pass across them: its rows are the
rows single reads give (values, writable arrays, source names), over shards, batches and views; sources
that differ in decoding or transform are each read on their own, with the same rows."""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards import Array, Features, Mixture, ShardedDataset, Value, write_shards

FEATURES = Features({"x": Value("int64"), "vector": Array((3,), "float32")})


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> list[str]:
    """Three caches of several shards of several record batches each."""
    root = tmp_path_factory.mktemp("together")
    paths = []
    for number, size in enumerate([40, 90, 25]):
        paths.append(str(root / f"c{number}"))
        rows = ({"x": 1000 * number + i, "vector": np.full(3, i, np.float32)} for i in range(size))
        write_shards(rows, paths[-1], FEATURES, max_rows_per_shard=16, batch_size=5)
    return paths


def _values(rows: list[dict]) -> list[tuple]:
    return [(row["x"], row["vector"].tolist(), row["source"]) for row in rows]


@pytest.mark.parametrize("epoch_size, seed", [(10**8, 0), (37, 3), (10001, 11)])
def test_a_batch_across_sources_reads_the_rows_single_reads_read(caches, epoch_size, seed):
    sources = [ShardedDataset(caches[0]), ShardedDataset(caches[1])[7:80], ShardedDataset(caches[2])[::-2]]
    mixture = Mixture(dict(zip(sources, [0.5, 0.3, 0.2])), epoch_size=epoch_size, seed=seed)
    assert mixture._alike, "sources that read alike were not read in one pass"
    indices = np.random.default_rng(seed).integers(0, 20 * epoch_size, 300)
    batch = mixture.__getitems__(indices)
    assert _values(batch) == _values([mixture[int(i)] for i in indices])
    assert {row["source"] for row in batch} == {source.backend.manifest.path for source in sources}
    assert all(row["vector"].flags.writeable for row in batch)


@pytest.mark.parametrize("second", [
    lambda path: ShardedDataset(path, writable=False),
    lambda path: ShardedDataset(path, transform=lambda row: {**row, "x": -row["x"]}),
])
def test_sources_that_read_otherwise_are_read_each_on_its_own(caches, second):
    mixture = Mixture({ShardedDataset(caches[0]): 0.6, second(caches[1]): 0.4}, epoch_size=1000, seed=5)
    assert not mixture._alike
    indices = np.random.default_rng(1).integers(0, 10**6, 200)
    batch, singles = mixture.__getitems__(indices), [mixture[int(i)] for i in indices]
    assert _values(batch) == _values(singles)
    assert [row["vector"].flags.writeable for row in batch] == [row["vector"].flags.writeable for row in singles]
    assert all(row["vector"].flags.writeable for row in batch if row["source"] == caches[0])
