"""Shard files: writing encoded rows into size-rotated Arrow IPC shards, reading one back, merging small ones;
the digests of rows that deduplication compares, and the later rows of each digest."""

from beam_shards.lazy import lazy_names

_LAZY = {
    "BatchHook": "beam_shards.shards.writer_inputs",
    "later_records": "beam_shards.shards.duplicates",
    "FOOTER_BLOCK_BYTES": "beam_shards.shards.ipc_layout",
    "file_overhead": "beam_shards.shards.merge",
    "is_small": "beam_shards.shards.merge",
    "merge_shards": "beam_shards.shards.merge",
    "plan_bins": "beam_shards.shards.merge",
    "DEFAULT_BATCH_BYTES": "beam_shards.shards.options",
    "DEFAULT_BATCH_SIZE": "beam_shards.shards.options",
    "DEFAULT_SHARD_SIZE_BYTES": "beam_shards.shards.options",
    "WriterOptions": "beam_shards.shards.options",
    "WrittenShard": "beam_shards.shards.options",
    "DIGEST_BYTES": "beam_shards.shards.row_digest",
    "DIGEST_NUMBERS": "beam_shards.shards.row_digest",
    "row_digests": "beam_shards.shards.row_digest",
    "ShardFile": "beam_shards.shards.shard_file",
    "DamagedBatchError": "beam_shards.shards.span_reader",
    "SpanReader": "beam_shards.shards.span_reader",
    "batch_part": "beam_shards.shards.span_reader",
    "EncodedRows": "beam_shards.shards.writer",
    "ShardWriter": "beam_shards.shards.writer",
    "split_key": "beam_shards.shards.writer_inputs",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "batch_part", "BatchHook", "DamagedBatchError", "DEFAULT_BATCH_BYTES", "DEFAULT_BATCH_SIZE", "DEFAULT_SHARD_SIZE_BYTES", "DIGEST_BYTES",
    "DIGEST_NUMBERS", "EncodedRows", "file_overhead", "FOOTER_BLOCK_BYTES", "is_small", "later_records", "merge_shards", "plan_bins",
    "row_digests", "ShardFile", "ShardWriter", "SpanReader", "split_key", "WriterOptions", "WrittenShard",
]
