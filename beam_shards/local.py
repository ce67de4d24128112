"""`write_shards`: the cache format written from a plain Python iterable, without Beam."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import filelock
import pyarrow as pa

from beam_shards import fs
from beam_shards.commit import abandon, check_write, publish, staged_shards
from beam_shards.features import Features
from beam_shards.manifest import LOCK_NAME, Manifest, new_write_id, staging_dir
from beam_shards.progress import Progress
from beam_shards.writer import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES, ShardWriter

_LOGGER = logging.getLogger(__name__)


def split_key(item: Any, position: int) -> tuple[Any, Any]:
    """`(key, example)` for a `(key, example)` pair; `(position, item)` for anything else.

    Any 2-tuple is taken as a pair: a tuple is never an example itself, so when its
    second item is not a dict either, the error names the pair's key.
    """
    if isinstance(item, tuple) and len(item) == 2:
        return item
    return position, item


def write_example(writer: ShardWriter, features: Features, example: Any, key: Any) -> int:
    """Encodes one example, or a pyarrow RecordBatch/Table of them, into `writer`; returns its rows."""
    if isinstance(example, (pa.RecordBatch, pa.Table)):
        writer.write_table(features.encode_batch(example, key))
        return example.num_rows
    writer.write(features.encode_example(example, key))
    return 1


def write_shards(examples: Iterable[Any], path: str, features: Features, *,
                 shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, max_rows_per_shard: int | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, batch_bytes: int = DEFAULT_BATCH_BYTES,
                 compression: str | None = None, metadata: dict[str, Any] | None = None,
                 progress: bool | None = None) -> Manifest:
    """Writes examples into a sharded Arrow cache at `path` and publishes it atomically.

    Shards are staged under `<path>/_staging/<write id>/`; the manifest is written last
    by an atomic rename. An existing cache stays readable until the new manifest lands;
    then its files are removed. On any exception nothing is published and the staged
    files are removed. Local paths are locked, so two local writers do not interleave.

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
      progress: print progress lines to stderr; None prints them when it is a terminal.

    Returns:
      The published manifest.

    Raises:
      EncodeError: an example does not match `features` (names the example and field).
      ValueError: an option is out of range.
    """
    options = dict(shard_size_bytes=shard_size_bytes, max_rows_per_shard=max_rows_per_shard,
                   batch_size=batch_size, batch_bytes=batch_bytes, compression=compression)
    metadata = check_write(path, features, options, metadata)
    if fs.is_local(path):
        created = not os.path.exists(fs.local_path(path))
        os.makedirs(fs.local_path(path), exist_ok=True)
        lock = filelock.FileLock(os.path.join(fs.local_path(path), LOCK_NAME))
    else:
        created, lock = False, None
    try:
        if lock is not None:
            lock.acquire()
        try:
            return _write(examples, path, features, metadata, progress, options)
        finally:
            if lock is not None:
                lock.release()
    except BaseException:
        if created:
            _remove_if_only_lock(fs.local_path(path))
        raise


def _write(examples: Iterable[Any], path: str, features: Features, metadata: dict[str, Any],
           progress: bool | None, options: dict[str, Any]) -> Manifest:
    write_id = new_write_id()
    writer = ShardWriter(features, staged_shards(staging_dir(path, write_id)), **options)
    meter = Progress(path, enabled=progress)
    try:
        for position, item in enumerate(examples):
            key, example = split_key(item, position)
            meter.update(write_example(writer, features, example, key), extra=f"{len(writer.shards)} shards")
        staged = writer.close()
        manifest = publish(path, write_id=write_id, features=features, staged=staged,
                           compression=options["compression"], metadata=metadata)
    except BaseException:
        _abandon_quietly(writer, path, write_id)
        raise
    meter.finish(extra=f"{manifest.num_shards} shards, {manifest.num_bytes / 1e6:,.1f} MB")
    return manifest


def _abandon_quietly(writer: ShardWriter, path: str, write_id: str) -> None:
    """Removes a failed write's files; a failure here must not hide the error that failed the write."""
    try:
        writer.abort()
        abandon(path, write_id)
    except Exception:
        _LOGGER.warning("beam_shards: could not remove the staged files of failed write %s at %s "
                        "(`beam-shards gc` removes them)", write_id, path, exc_info=True)


def _remove_if_only_lock(path: str) -> None:
    """Removes a folder this write created, when a failed write left only its lock in it."""
    try:
        if os.listdir(path) == [LOCK_NAME]:
            os.remove(os.path.join(path, LOCK_NAME))
        os.rmdir(path)
    except OSError:
        pass
