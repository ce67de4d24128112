"""How an `ArrowBackend` opens one shard of a published version: from where (the file, or its copy in a
disk cache for a shard on an object store) and by what (format 5: each record batch where the shard table
says it lies, checked alone when read; older formats: the file's footer).

A format-5 shard's copy in a disk cache is not read whole in each process before it is served: each of its
batches is checked when this reader reads it, as a local file's is. A copy found damaged is fetched again
once (the disk cache replaces it under its own lock, and checks the download whole); damaged again, the read
fails with an error naming the copy.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa

from beam_shards.errors import CorruptCacheError
from beam_shards.format.manifest import Manifest
from beam_shards.format.table_files import BatchSpan
from beam_shards.read.open_shard import OpenShard
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.span_reader import DamagedBatchError, SpanReader
from beam_shards.storage.disk_cache import DiskCache

Opened = TypeVar("Opened")


def load_shard(manifest: Manifest, shard_id: int, disk_cache: DiskCache | None, sequential: bool) -> OpenShard:
    """Shard `shard_id` of `manifest` opened for reading: its batches located, none read yet (format 5), or
    its footer read and its batches' rows counted (older formats). `sequential` advises its map for a scan.

    Raises:
      CorruptCacheError: the shard is missing, truncated, or does not match the manifest.
    """
    file = ShardFile.of(manifest, shard_id)
    start = manifest.shards.start(shard_id)
    spans = manifest.shards.batch_spans(shard_id)
    if spans is not None:
        batches = CheckedBatches(file, spans, disk_cache, sequential)
        return OpenShard(batches.reader.batch_rows, start, batches.read, resident=batches.reader.resident)
    source = through_cache(file, disk_cache, file.open_source)
    reader = file.reader(source)
    free = file.reads_free(source)
    rows = manifest.shards.batch_rows(shard_id)
    if rows is not None:  # the shard table says: no batch header is read before its batch is needed
        file.check_batch_count(reader, rows)
        return OpenShard(rows, start, functools.partial(file.read_batch, reader, rows=rows, source=source),
                         resident=not free)
    if free:
        unchecked = file.unchecked_batches(reader)
        return OpenShard([batch.num_rows for batch in unchecked], start,
                         functools.partial(_checked, file, source, unchecked), resident=False)
    rows = file.batch_rows(source, reader)
    return OpenShard(rows, start, functools.partial(file.read_batch, reader, source=source), resident=True)


class CheckedBatches:
    """The batches of a format-5 shard, read through a `SpanReader` of the file or of its disk-cache copy;
    a copy found damaged is fetched again once."""

    def __init__(self, file: ShardFile, spans: Sequence[BatchSpan], disk_cache: DiskCache | None, sequential: bool):
        self._file = file
        self._spans = spans
        self._cache = disk_cache
        self._sequential = sequential
        self._fetched_again = False
        self._lock = threading.Lock()
        self.reader = through_cache(file, disk_cache, self._reader, whole_check=False)

    def __repr__(self) -> str:
        return f"CheckedBatches({self.reader!r}, fetched_again={self._fetched_again})"

    def _reader(self, copy: str | None) -> SpanReader:
        return SpanReader(self._file, self._spans, copy, self._sequential)

    def read(self, index: int) -> pa.RecordBatch:
        """Batch `index`, checked; threads may call it at once.

        Raises:
          CorruptCacheError: it is damaged (in a disk-cache copy: again, after the copy was fetched again).
        """
        reader = self.reader
        try:
            return reader.read(index)
        except DamagedBatchError as error:
            if reader.copy is None or self._cache is None:
                raise
            damage = error
        fresh = self._fetch_again(reader)
        if fresh is None:
            raise CorruptCacheError(f"{damage} (the copy was fetched again once already)") from None
        try:
            return fresh.read(index)
        except DamagedBatchError as error:
            if fresh.copy is None:
                raise
            raise CorruptCacheError(f"{error} (the copy was fetched again once already)") from None

    def _fetch_again(self, damaged: SpanReader) -> SpanReader | None:
        """The reader of a fresh copy in place of `damaged`, the reader that found damage: fetched here, or
        by the thread that found it first (under the lock, so a second thread waits for that download and
        reads the fresh copy instead of failing); None when `damaged` already reads a copy fetched again."""
        with self._lock:
            if self.reader is damaged:
                if self._fetched_again:
                    return None
                entry = self._file.entry
                copy = self._cache.refetch(self._file.path, entry.checksum, entry.num_bytes, self._file.open_source,
                                           damaged.identity)
                self.reader = self._reader(copy)
                self._fetched_again = True
            return self.reader


def through_cache(file: ShardFile, disk_cache: DiskCache | None, open_at: Callable[[str | None], Opened],
                  whole_check: bool = True) -> Opened:
    """`open_at(copy)` of the shard's copy in `disk_cache` for a remote shard when there is one (fetched if
    need be; `whole_check` as `DiskCache.get` takes it), else `open_at(None)`: the shard where it is."""
    if disk_cache is None or not file.is_remote:
        return open_at(None)
    for _ in range(3):
        copy = disk_cache.get(file.path, file.entry.checksum, file.entry.num_bytes, file.open_source, whole_check)
        if copy is None:  # larger than the whole disk cache, or the local disk failed
            return open_at(None)
        try:
            return open_at(copy)
        except CorruptCacheError:
            if os.path.exists(copy):
                raise
            # Another process evicted it between get and open: get it again.
    return open_at(None)


def _checked(file: ShardFile, source: pa.NativeFile, unchecked: list[pa.RecordBatch], b: int) -> pa.RecordBatch:
    """Batch `b` of `unchecked` (from `ShardFile.unchecked_batches` over `source`), validated on this first
    touch, once `source` is seen whole still."""
    file.check_held(source, b)
    return file.check_batch(unchecked[b])
