"""ShardedDataset as a Grain random-access data source, with and without worker processes."""

from __future__ import annotations

import grain
import numpy as np

from beam_shards import ShardedDataset, write_shards

from _support import FEATURES, example


def _cache(tmp_path, n=40):
    path = str(tmp_path / "cache")
    write_shards((example(i) for i in range(n)), path, FEATURES, shard_size_bytes=8_000)
    return path


def test_map_dataset_source_batches_in_order(tmp_path):
    ds = ShardedDataset(_cache(tmp_path), columns=["id", "label", "embedding"])
    order = [row["id"] for row in ds]
    batches = list(grain.MapDataset.source(ds).batch(8))
    assert len(batches) == 5
    np.testing.assert_array_equal(batches[0]["id"], order[:8])
    assert batches[0]["embedding"].shape == (8, 8)
    np.testing.assert_array_equal(batches[0]["label"], [i % 10 for i in order[:8]])


def test_data_loader_with_two_worker_processes(tmp_path):
    ds = ShardedDataset(_cache(tmp_path), columns=["id", "caption"])
    sampler = grain.samplers.IndexSampler(num_records=len(ds), shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(data_source=ds, sampler=sampler, worker_count=2)
    rows = list(loader)
    assert sorted(row["id"] for row in rows) == list(range(40))
    assert all(row["caption"] == example(row["id"])["caption"] for row in rows)
