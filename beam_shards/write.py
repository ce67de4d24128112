"""`write_shards`: the cache format written from a plain Python iterable, without Beam."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from collections.abc import Iterable, Iterator
from typing import Any

from beam_shards.errors import best_effort
from beam_shards.features import Features
from beam_shards.format.layout import LOCK_NAME, CacheLayout, new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.progress import Progress
from beam_shards.shards.options import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES, WriterOptions
from beam_shards.shards.writer import ShardWriter
from beam_shards.shards.writer_inputs import split_key
from beam_shards.storage import fs
from beam_shards.versions.commit import abandon, check_write, publish
from beam_shards.versions.gc import Retention, collect_garbage
from beam_shards.versions.staging import staged_shards


def write_shards(examples: Iterable[Any], path: str, features: Features, *,
                 shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, max_rows_per_shard: int | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, batch_bytes: int = DEFAULT_BATCH_BYTES,
                 compression: str | None = None, metadata: dict[str, Any] | None = None,
                 mode: str = "overwrite", retention: Retention | None = Retention(),
                 progress: bool | None = None) -> Manifest:
    """Writes examples into a sharded Arrow cache at `path` and publishes them as a new version.

    Shards are staged under `<path>/_staging/<write id>/`, moved to their final names,
    and committed as `_versions/<N>.json` by a create that cannot succeed twice; then
    `_metadata.json` points at the new version. Readers of older versions keep reading
    them until retention removes them. On any exception nothing is published and the
    write's own files are removed.

    Example:
        >>> from beam_shards import Features, Value, write_shards
        >>> features = Features({"x": Value("int64"), "text": Value("string")})
        >>> manifest = write_shards(({"x": i, "text": str(i)} for i in range(100)),
        ...                         "/tmp/doctest_cache", features)
        >>> manifest.num_rows
        100

    Args:
      examples: dicts, or `(key, dict)` pairs whose key errors name; pyarrow
        RecordBatches or Tables of examples may stand in for dicts (checked and
        cast column by column, with no per-row Python).
      path: the cache folder (local, or any scheme Beam's FileSystems knows).
      features: the schema every example must match.
      shard_size_bytes: target shard size on disk.
      max_rows_per_shard: optional cap on rows per shard.
      batch_size: rows per record batch at most.
      batch_bytes: bytes per record batch at most.
      compression: None, "zstd" or "lz4".
      metadata: free JSON-serializable metadata stored in the manifest.
      mode: "overwrite" publishes these rows alone; "append" publishes the latest
        version's shards plus these (same features and compression); "error" refuses
        a path that already holds a cache.
      retention: the retention gc applies once the write is published (see
        `beam_shards.versions.gc.Retention`); None to keep every version.
      progress: print progress lines to stderr; None prints them when it is a terminal.

    Returns:
      The published manifest.

    Raises:
      EncodeError: an example does not match `features` (names the example and field).
      ValueError: an option is out of range.
      CacheExistsError: `mode="error"` and a cache is at `path`.
      SchemaMismatchError: `mode="append"` to a cache of other features.
    """
    options = WriterOptions(shard_size_bytes, max_rows_per_shard, batch_size, batch_bytes, compression)
    metadata, since, column_types = check_write(path, features, metadata, mode)
    options = dataclasses.replace(options, column_types=column_types)
    write_id = new_write_id()
    created = fs.is_local(path) and not os.path.exists(fs.local_path(path))
    writer = ShardWriter(features, staged_shards(CacheLayout(path).new_attempt(write_id)), options)
    meter = Progress(path, enabled=progress)

    def shards() -> str:  # asked only when a progress line is printed
        return f"{writer.num_shards} shards"

    try:
        with _collecting_young_objects():
            for position, item in enumerate(examples):
                key, example = split_key(item, position)
                meter.update(writer.add(example, key), extra=shards)
            staged = writer.close()
        manifest = publish(path, write_id=write_id, features=features, staged=staged, options=options,
                           metadata=metadata, mode=mode, since=since)
    except BaseException:
        with best_effort(f"remove the files of failed write {write_id}", path):
            writer.abort()
            abandon(path, write_id)
            if created:
                _remove_if_only_lock(fs.local_path(path))
        raise
    if retention is not None:
        with best_effort("apply retention after publishing", path):
            collect_garbage(path, retention, sweep=False)
    meter.finish(extra=f"version {manifest.version}, {manifest.num_shards} shards, "
                       f"{manifest.num_bytes / 1e6:,.1f} MB")
    return manifest


@contextlib.contextmanager
def _collecting_young_objects() -> Iterator[None]:
    """Leaves the objects alive before a write out of the garbage collections during it
    (`gc.freeze`, undone after): a full collection then walks only what the write made,
    not every module, function and object the process holds. A process that froze
    objects itself, or turned the collector off, is left as it is."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _remove_if_only_lock(path: str) -> None:
    """Removes a folder this failed write created, when all it holds is the lock."""
    try:
        if os.listdir(path) == [LOCK_NAME]:
            os.remove(os.path.join(path, LOCK_NAME))
        os.rmdir(path)
    except OSError:
        pass
