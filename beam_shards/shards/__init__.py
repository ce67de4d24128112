"""Shard files: writing encoded rows into size-rotated Arrow IPC shards, reading one back, merging small ones;
the digests of rows that deduplication compares."""

from beam_shards.shards.merge import file_overhead, is_small, merge_shards, plan_bins
from beam_shards.shards.options import (DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES,
                                        WriterOptions, WrittenShard)
from beam_shards.shards.row_digest import DIGEST_BYTES, row_digests
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.writer import EncodedRows, ShardWriter, split_key

__all__ = [
    "DEFAULT_BATCH_BYTES", "DEFAULT_BATCH_SIZE", "DEFAULT_SHARD_SIZE_BYTES", "DIGEST_BYTES", "EncodedRows",
    "file_overhead", "is_small", "merge_shards", "plan_bins", "row_digests", "ShardFile", "ShardWriter", "split_key",
    "WriterOptions", "WrittenShard",
]
