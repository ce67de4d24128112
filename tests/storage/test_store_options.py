"""Store calls read Beam's options once per options object: every open of a shard checks its
bucket, and reading all of Beam's options parses its argument list again (about 20 ms)."""

from __future__ import annotations

import pytest

from beam_shards import ArrowBackend, Features, Value, write_shards

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_reading_every_shard_of_a_cache_reads_the_options_at_most_once(store, monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    path = store.uri("cache")
    write_shards(({"id": i} for i in range(60)), path, Features({"id": Value("int64")}), max_rows_per_shard=5)
    reads = []
    real = PipelineOptions.get_all_options
    monkeypatch.setattr(PipelineOptions, "get_all_options", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    backend = ArrowBackend.open(path)
    assert backend.slice(0, backend.num_rows).column("id").to_pylist() == list(range(60))
    assert backend.num_shards >= 12, "the cache has the many shards this is about"
    assert len(reads) <= 1, f"Beam's options were read {len(reads)} times"
