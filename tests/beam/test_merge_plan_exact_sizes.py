"""The merge plans measure what a merged shard will hold to the byte, so many small rows near the
boundary never make a shard past the target, on the deterministic path and the bundled one alike."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest

from beam_shards import Features, Value, WriteToArrowShards, read_metadata
from beam_shards.beam.ordered_bins import batch_bytes
from beam_shards.shards.merge import file_overhead, is_small, merge_shards
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter

from _support import options

FEATURES = Features({"file": Value("string"), "position": Value("int64"), "data": Value("binary"),
                     "note": Value("string")})


def _row(name: str, position: int, size: int) -> dict:
    return {"file": name, "position": position, "data": random.Random(f"{name} {position}").randbytes(size),
            "note": "x" * (position % 17)}


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_shard_is_its_file_overhead_and_its_batches_bytes_written_or_merged(tmp_path, compression):
    """A file of no batches pads its footer otherwise: its size was 4 bytes short of the overhead of these."""
    opened = []

    def open_shard(index):
        opened.append(str(tmp_path / f"{len(opened)}.arrow"))
        return opened[-1], open(opened[-1], "wb")

    overhead, shards = file_overhead(FEATURES), []
    for batches in range(1, 5):
        writer = ShardWriter(FEATURES, open_shard, WriterOptions(shard_size_bytes=1 << 30, batch_size=1,
                                                                 compression=compression))
        for position in range(batches):
            writer.add(_row("a", position, 37 * position), position)
        [shard] = writer.close()
        assert shard.num_bytes == overhead + sum(batch_bytes(shard)), (batches, shard.num_bytes)
        shards.append(shard)
    merged = merge_shards(shards, FEATURES, open_shard, compression, "hf")
    assert merged.num_bytes == overhead + sum(sum(batch_bytes(shard)) for shard in shards)
    with pytest.raises(ValueError, match="no record batch spans"):
        batch_bytes(merged.__class__(merged.path, merged.num_rows, merged.num_bytes, merged.checksum))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("deterministic", [True, False])
def test_many_small_rows_of_single_row_batches_never_pass_the_target(tmp_path, deterministic):
    """Batches of one small row each: shares of a shard's bytes by the rows' sizes in memory gave such
    batches none of their message framing, and a deterministic bin of them came to 9,482 bytes of 9,000."""
    target = 9_000
    files = {"a": 300, "b": 211, "c": 7, "d": 260}
    sizes = {(name, p): random.Random(f"{name} {p}").choice([random.Random(p).randint(0, 50),
                                                             random.Random(p).randint(0, target // 3)])
             for name, rows in files.items() for p in range(rows)}
    pairs = [((name, p), _row(name, p, size)) for (name, p), size in sizes.items()]
    path = str(tmp_path / "cache")
    with beam.Pipeline(options=options()) as pipeline:
        _ = (pipeline | beam.Create(pairs, reshuffle=True)
             | WriteToArrowShards(path, FEATURES, shard_size_bytes=target, batch_size=1, deterministic=deterministic))
    manifest = read_metadata(path)
    written = [shard.num_bytes for shard in manifest.shards]
    assert manifest.num_rows == len(pairs)
    assert max(written) <= target, f"shards past the {target}-byte target: {[s for s in written if s > target]}"
    assert sum(is_small(size, target) for size in written) <= 1, written
    assert sum(written) > 20 * target, "the write is many shards"
