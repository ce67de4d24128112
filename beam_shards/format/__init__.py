"""The cache format: every file name a cache holds (layout), one version's manifest (a header naming
its shard tables, and its statistics), and reading the versions a cache keeps."""

from beam_shards.features import MAX_DEPTH, json_depth, json_text_depth
from beam_shards.format.catalog import list_versions, read_metadata, shard_paths, version_log
from beam_shards.format.latest import MAX_PAST_POINTER, VersionFolder, history, resolve
from beam_shards.format.layout import (CacheLayout, LOCK_NAME, MANIFEST_NAME, STAGING_DIR, TABLES_DIR, VERSIONS_DIR,
                                       check_write_id, classify, is_write_id, new_cache_id, new_write_id,
                                       parse_version_name, shard_name, version_name, write_id_of_shard, write_id_time)
from beam_shards.format.manifest import (COMPRESSIONS, LISTED_FORMAT_VERSION, MAX_MANIFEST_BYTES, MODES,
                                         Manifest, check_metadata, format_for, manifest_json, parse_json,
                                         size_problem)
from beam_shards.format.shard_table import (ShardInfo, ShardTable, TableRef, build_table, concat_tables, plan_tables,
                                            table_file)
from beam_shards.format.statistics import Statistics
from beam_shards.format.version_files import read_table, read_version, version_numbers

__all__ = [
    "build_table", "CacheLayout", "check_metadata", "check_write_id", "classify", "COMPRESSIONS", "concat_tables",
    "format_for", "history", "is_write_id", "json_depth", "json_text_depth", "list_versions", "LISTED_FORMAT_VERSION",
    "LOCK_NAME", "Manifest", "manifest_json", "MANIFEST_NAME", "MAX_DEPTH", "MAX_MANIFEST_BYTES", "MAX_PAST_POINTER",
    "MODES", "new_cache_id", "new_write_id", "parse_json", "parse_version_name", "plan_tables", "read_metadata",
    "read_table", "read_version", "resolve", "shard_name", "shard_paths", "ShardInfo", "ShardTable", "size_problem",
    "STAGING_DIR", "Statistics", "table_file", "TableRef", "TABLES_DIR", "version_log", "version_name",
    "version_numbers", "VersionFolder", "VERSIONS_DIR", "write_id_of_shard", "write_id_time",
]
