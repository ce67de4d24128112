"""Reading a format-5 shard's record batches where its shard table says they lie, each checked alone.

The shard table gives every batch's offset, length and CRC-32 (`BatchSpan`), so a batch is read
without the file's footer: a local file (or a disk-cache copy) is memory-mapped with Python's
`mmap` and a batch is a zero-copy slice of it; a shard on an object store is read with one ranged
read per batch. Each read checks the batch's CRC-32 before pyarrow sees a byte of it, so a byte
damaged since the shard was written (even after another reader, or this process, checked it) is
never served; the batch is then fully validated as every batch is (`ShardFile.check_batch`).

A map is advised for how it is read: random access for point reads (a page fault then reads no
more than its page, not the kernel's readahead window), sequential for scans (asked for, or seen:
a batch read right after the one before it); the batch being read is asked for whole at once
(WILLNEED), so its check reads it in large requests, and in a scan the next batch with it.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import pyarrow as pa

from beam_shards.errors import CorruptCacheError
from beam_shards.format.manifest import size_problem
from beam_shards.format.table_files import BatchSpan
from beam_shards.shards.shard_file import ShardFile
from beam_shards.storage import fs
from beam_shards.storage.checksum import crc32

_PAGE = mmap.PAGESIZE


class DamagedBatchError(CorruptCacheError):
    """A record batch's bytes do not have the CRC-32 its shard table gives: the file was damaged."""


class SpanReader:
    """The record batches of one format-5 shard, read by their spans and checked on every read.

    Example:
        >>> reader = SpanReader(ShardFile.of(manifest, 0), manifest.shards.batch_spans(0))  # doctest: +SKIP
        >>> reader.read(3).num_rows  # doctest: +SKIP
        1000

    Args:
      file: the shard.
      spans: its batches as its shard table gives them.
      copy: a local copy of the shard to read instead (from a disk cache); errors name it.
      sequential: advise the map for a scan (else for point reads).

    Raises:
      CorruptCacheError: the shard (or copy) is missing, not a regular file or of another size.
    """

    def __init__(self, file: ShardFile, spans: Sequence[BatchSpan], copy: str | None = None,
                 sequential: bool = False):
        self.file = file
        self.spans = list(spans)
        self.copy = copy
        self.identity: tuple[int, int] | None = None  # (device, inode) of the mapped file
        self._map: mmap.mmap | None = None
        self._buffer: pa.Buffer | None = None
        self._source: pa.NativeFile | None = None
        self._sequential = sequential
        self._last = -2  # the batch read last
        where = copy or file.path
        if fs.is_local(where):
            self._open_map(where, sequential)
        else:
            self._source = file.open_source()

    def __repr__(self) -> str:
        return f"SpanReader({self.file.where}, batches={len(self.spans)}, copy={self.copy!r})"

    @property
    def batch_rows(self) -> list[int]:
        return [span.rows for span in self.spans]

    @property
    def resident(self) -> bool:
        """Whether a batch read holds memory of its own (read over the network, or decompressed)."""
        return self._map is None or self.file.compression is not None

    def _open_map(self, path: str, sequential: bool) -> None:
        try:
            mapped, info = fs.map_file(path)
        except FileNotFoundError:
            raise (self.file.missing() if self.copy is None else CorruptCacheError(f"{self._named()} is missing")) from None
        except OSError as error:
            raise CorruptCacheError(f"{self._named()} cannot be opened: {error.strerror or error}") from None
        if info.st_size != self.file.entry.num_bytes:
            raise CorruptCacheError(size_problem(self._named(), info.st_size, self.file.entry.num_bytes))
        self.identity = (info.st_dev, info.st_ino)
        self._map = mapped
        if mapped is not None:
            _advise(mapped, "MADV_SEQUENTIAL" if sequential else "MADV_RANDOM")
            self._buffer = pa.py_buffer(mapped)

    def read(self, index: int) -> pa.RecordBatch:
        """Record batch `index`, its CRC-32, rows and buffers checked.

        Raises:
          DamagedBatchError: its bytes do not have the CRC-32 the shard table gives.
          CorruptCacheError: it is not a valid record batch of the shard's schema.
        """
        span = self.spans[index]
        part = batch_part(index, span)
        data = self._bytes(index)
        found = crc32(data)  # the first touch of a mapped batch: `_bytes` checked the file still holds it
        if found != span.crc32 or data.size != span.length:
            raise DamagedBatchError(
                f"{self._named()}: {part} has CRC-32 {found:08x} over {data.size} bytes, the shard table says "
                f"{span.crc32:08x} over {span.length}; the file was damaged since it was written, nothing of it "
                "was served")
        with self.file.unreadable_as_corrupt(part):
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(data), self.file.schema)
        if batch.num_rows != span.rows:
            raise CorruptCacheError(f"{self._named()}: record batch {index} holds {batch.num_rows} rows, the shard "
                                    f"table says {span.rows}")
        return self.file.check_batch(batch, part)

    def _bytes(self, index: int) -> pa.Buffer:
        span = self.spans[index]
        if self._source is not None:
            with self.file.unreadable_as_corrupt():
                return pa.py_buffer(self._source.read_at(span.length, span.offset))
        if self._buffer is None:  # an empty file holds no batch
            return pa.py_buffer(b"")
        self._check_holds(index, span)
        if index == self._last + 1 and not self._sequential:
            self._sequential = True
            _advise(self._map, "MADV_SEQUENTIAL")
        self._last = index
        self._will_need(span)
        if self._sequential and index + 1 < len(self.spans):
            self._will_need(self.spans[index + 1])
        return self._buffer.slice(span.offset, span.length)

    def _check_holds(self, index: int, span: BatchSpan) -> None:
        """Refuses a batch the mapped file no longer holds whole: touching a mapped page past the end of
        a file truncated since it was mapped kills the process (SIGBUS). This only narrows that race to
        the microseconds between this check and the touch; it cannot close it."""
        size = self._map.size()  # fstat of the map's own descriptor: the file mapped, even if since replaced
        if size < span.offset + span.length:
            raise CorruptCacheError(
                f"{self._named()} was truncated to {size} bytes since it was opened: {batch_part(index, span)} is "
                "no longer in it; nothing of it was read")

    def _will_need(self, span: BatchSpan) -> None:
        start = span.offset - span.offset % _PAGE  # spans fit the file: its table entry and size were checked
        _advise(self._map, "MADV_WILLNEED", start, span.offset + span.length - start)

    def _named(self) -> str:
        return f"the disk-cache copy {self.copy} of {self.file.where}" if self.copy else self.file.where


def batch_part(index: int, span: BatchSpan) -> str:
    """How errors name record batch `index` of a shard and where its span lies."""
    return f"record batch {index} (bytes {span.offset} to {span.offset + span.length})"


def _advise(mapped: mmap.mmap, option: str, *where: int) -> None:
    """Advises the kernel how `mapped` (or the range `where`, start and length) will be read, where it
    takes the advice (not on Windows; a refusal is ignored)."""
    if hasattr(mmap, option):
        try:
            mapped.madvise(getattr(mmap, option), *where)
        except OSError:  # advice is a hint: a kernel that refuses it reads the map all the same
            pass
