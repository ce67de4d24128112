"""The sink and source in a pipeline of the tests' own on Apache Flink: an embedded Flink (`[local]`)
and a standalone cluster at parallelism 2 with its Python workers in a worker pool.

A cache read, shuffled and written again (not deterministically) keeps every row once, in
shards of the contract's sizes whatever Flink's bundles, and `beam-shards verify` passes
on it. The conversion pipelines' runs are `test_flink_pipelines`'.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_shards import Features, ReadFromArrowShards, Value, WriteToArrowShards, read_metadata, write_shards
from beam_shards.cli import main as beam_shards_cli
from beam_shards.read.backend import ArrowBackend
from beam_shards.shards.merge import is_small

pytestmark = pytest.mark.timeout(600)

FEATURES = Features({"id": Value("int64"), "text": Value("string"), "data": Value("binary")})
ROWS = 3000
SHARD_BYTES = 16 << 10


def _verified(path: str) -> None:
    assert beam_shards_cli(["verify", path]) == 0, f"beam-shards verify {path} failed"


def _rows(path: str) -> list[tuple]:
    table = ArrowBackend.open(path).slice(0, read_metadata(path).num_rows)
    return list(zip(*(table.column(name).to_pylist() for name in FEATURES)))


def test_a_cache_read_and_written_again_on_flink_keeps_every_row_once(flink_options, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_shards(({"id": i, "text": f"row {i}", "data": bytes([i % 251]) * (i % 40)} for i in range(ROWS)),
                 source, FEATURES, shard_size_bytes=SHARD_BYTES)
    assert read_metadata(source).num_shards >= 4, "the source should span several shards, read in parallel"
    with beam.Pipeline(options=PipelineOptions(flink_options)) as pipeline:
        _ = (pipeline
             | ReadFromArrowShards(source, desired_split_bytes=4 << 10)
             | beam.Reshuffle()
             | WriteToArrowShards(target, FEATURES, shard_size_bytes=SHARD_BYTES, batch_size=64))
    written = _rows(target)
    assert len(written) == len(set(written)) == ROWS, f"{len(written)} rows, {len(set(written))} distinct"
    assert sorted(written) == _rows(source)
    sizes = [shard.num_bytes for shard in read_metadata(target).shards]
    assert max(sizes) <= SHARD_BYTES and sum(is_small(size, SHARD_BYTES) for size in sizes) <= 1, sizes
    _verified(target)
