"""The Beam counters beam_shards reports (namespace `beam_shards`), shared by the sink, the source and the pipelines."""

NAMESPACE = "beam_shards"
ROWS_WRITTEN, BYTES_WRITTEN, SHARDS_WRITTEN = "rows_written", "bytes_written", "shards_written"
# Staged shards copied into merged ones before publish (so not every shard written is published).
SHARDS_MERGED = "shards_merged"
ROWS_READ, BYTES_READ = "rows_read", "bytes_read"
BAD_INPUTS = "bad_inputs"
