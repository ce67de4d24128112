"""One shard file: opened, checked against what its writer recorded, read.

Every reader goes through `ShardFile`: `ArrowBackend`, the Beam source, `verify`, the
CLI, and the merge that copies staged shards. Whatever the file holds, reading it gives
the rows its entry promises or a `CorruptCacheError` naming the shard, never a crash
inside pyarrow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pyarrow as pa

from beam_shards.errors import CorruptCacheError
from beam_shards.features import Features
from beam_shards.features.base import arrow_family
from beam_shards.format.version_files import version_numbers
from beam_shards.format.manifest import Manifest, size_problem
from beam_shards.format.table_files import ShardInfo
from beam_shards.storage import fs, store_errors
from beam_shards.storage.checksum import Crc32

_CHUNK = 8 << 20


class ShardFile:
    """A shard file: where it is, what its writer recorded of it, and how to read it.

    Build one with `ShardFile.of` (a shard of a published version) or `ShardFile.staged`
    (a shard a write staged, before it is published).

    Example:
        >>> shard = ShardFile.of(read_metadata("/tmp/my_cache"), 0)  # doctest: +SKIP
        >>> rows = shard.batch_rows()  # doctest: +SKIP

    Args:
      path: the file.
      entry: its rows, bytes and checksum as written.
      features: the features of the write that made it (its schema is checked against them).
      compression: the IPC compression it was written with.
      column_types: how it stores its columns (`features.COLUMN_TYPES`).
      where: how errors name it.
      manifest: the published version it belongs to, if any (errors then say when
        retention removed it), and `shard_id` its index there.
    """

    def __init__(self, path: str, entry: ShardInfo, features: Features, compression: str | None, column_types: str,
                 where: str, manifest: Manifest | None = None, shard_id: int | None = None):
        self.path = path
        self.entry = entry
        self.features = features
        self.column_types = column_types
        self.schema = features.storage_schema(column_types)
        self.compression = compression
        self.where = where
        self.manifest = manifest
        self.shard_id = shard_id

    @classmethod
    def of(cls, manifest: Manifest, shard_id: int) -> ShardFile:
        """Shard `shard_id` (its index in `manifest.shards`) of a published version."""
        entry = manifest.shards[shard_id]
        where = f"shard {shard_id} ({entry.file}) of version {manifest.version} of the cache at {manifest.path}"
        return cls(manifest.shard_path(shard_id), entry, manifest.features, manifest.compression, manifest.column_types,
                   where, manifest, shard_id)

    @classmethod
    def staged(cls, path: str, num_rows: int, num_bytes: int, checksum: str, features: Features,
               compression: str | None, column_types: str) -> ShardFile:
        """A shard a write staged at `path`, as its writer recorded it."""
        entry = ShardInfo(path.rsplit("/", 1)[-1], num_rows, num_bytes, checksum)
        return cls(path, entry, features, compression, column_types, f"staged shard {path}")

    def __repr__(self) -> str:
        return f"ShardFile({self.where})"

    @property
    def is_remote(self) -> bool:
        """Whether the shard is read over the network (batches then take memory), not memory-mapped."""
        return not fs.is_local(self.path)

    @contextlib.contextmanager
    def unreadable_as_corrupt(self, part: str = "") -> Iterator[None]:
        """Turns pyarrow's errors reading the shard (or its `part`, e.g. "record batch 3 (bytes 8 to 96)")
        into a CorruptCacheError naming it, and the errors of a store that would not serve it into a
        StoreAccessError (the shard is not to blame). EOFError is pyarrow's for an end-of-stream marker
        where a message was expected."""
        try:
            yield
        except (pa.ArrowException, OSError, EOFError) as error:
            found = store_errors.kind(error) if self.is_remote and not isinstance(error, EOFError) else None
            if found in ("denied", "throttled", "unreachable"):
                raise store_errors.access_error(self.path, f"read {self.where} from", error, found) from None
            what = f"{self.where}: {part} is not a readable Arrow IPC record batch" if part else \
                f"{self.where} is not a readable Arrow IPC file"
            raise CorruptCacheError(f"{what}: {error or type(error).__name__}") from None

    def open(self, *, columns: Sequence[str] | None = None, copy: str | None = None) -> pa.ipc.RecordBatchFileReader:
        """Opens the shard and checks its size and schema against the manifest (`open_source`, then `reader`).

        With `columns`, the reader's batches hold only those columns (in schema order)
        and only their buffers are read. `copy` is as `open_source` takes it.
        """
        return self.reader(self.open_source(copy), columns)

    def missing(self) -> CorruptCacheError:
        """The error for a shard not found, saying so when retention removed its version since it was opened."""
        hint = _removed_hint(self.manifest) if self.manifest is not None else ""
        return CorruptCacheError(f"{self.where} is missing{hint}")

    def open_source(self, copy: str | None = None) -> pa.NativeFile:
        """The shard's file, its size checked against the manifest.

        Local shards are memory-mapped; on object stores only the bytes read are
        fetched, with ranged reads (`fs.open_random_access`). `copy` is a local copy of
        the shard to read instead (from a disk cache).

        Raises:
          CorruptCacheError: the shard is missing, not a regular file or truncated.
        """
        try:
            source = fs.open_random_access(copy or self.path)
        except FileNotFoundError:
            raise self.missing() from None
        except IsADirectoryError:
            raise CorruptCacheError(f"{self.where} is not a regular file") from None
        except OSError as error:
            if self.is_remote:  # the store would not serve it: not the shard's fault
                raise
            raise CorruptCacheError(f"{self.where} cannot be opened: {error.strerror or error}") from None
        if source.size() != self.entry.num_bytes:
            raise CorruptCacheError(size_problem(self.where, source.size(), self.entry.num_bytes))
        return source

    def reader(self, source: pa.NativeFile, columns: Sequence[str] | None = None) -> pa.ipc.RecordBatchFileReader:
        """An Arrow reader over `source` (from `open_source`), its schema checked against the manifest.

        Raises:
          CorruptCacheError: not an Arrow file, or its schema differs from the manifest's.
        """
        expected = self.schema
        with self.unreadable_as_corrupt():
            reader = pa.ipc.open_file(source)
        if not reader.schema.equals(expected, check_metadata=False):
            raise CorruptCacheError(f"{self.where} has schema {reader.schema.to_string(show_schema_metadata=False)!r}, "
                                    f"the manifest's features in its {self.column_types!r} column types give "
                                    f"{expected.to_string(show_schema_metadata=False)!r}")
        if columns is None:
            return reader
        # A second reader over the same source: its footer says which buffers the projection skips.
        options = pa.ipc.IpcReadOptions(included_fields=[expected.get_field_index(name) for name in columns])
        with self.unreadable_as_corrupt():
            return pa.ipc.open_file(source, options=options)

    def read_batch(self, reader: pa.ipc.RecordBatchFileReader, index: int, rows: Sequence[int] | None = None,
                   source: pa.NativeFile | None = None) -> pa.RecordBatch:
        """Record batch `index` of the shard opened as `reader`, its offsets and lengths checked, and
        its rows against `rows[index]` when the shard table gave `rows`; `source`, the file `reader`
        reads, is first checked to be whole still (`check_held`).

        pyarrow trusts the offsets it reads: a damaged one sends a later read outside
        the memory map (SIGBUS or SIGSEGV, the process dies). Full validation checks
        every offset against its buffer, and UTF-8 in string columns, without touching
        binary data. Damage inside a data buffer stays invisible here; the checksum
        (`verify`) sees it.

        Raises:
          CorruptCacheError: the batch cannot be read or is not a valid Arrow batch.
        """
        if source is not None:
            self.check_held(source, index)
        with self.unreadable_as_corrupt():
            batch = reader.get_batch(index)
        if rows is not None and batch.num_rows != rows[index]:
            raise CorruptCacheError(f"{self.where}: record batch {index} holds {batch.num_rows} rows, the shard "
                                    f"table says {rows[index]}")
        return self.check_batch(batch)

    def check_held(self, source: pa.NativeFile, index: int) -> None:
        """Raises CorruptCacheError if the file `source` (from `open_source`) maps was truncated since it was
        opened, before batch `index` is read: touching a mapped page past the end of a file kills the process
        (SIGBUS). This only narrows that race to the microseconds between this check and the read."""
        size = fs.mapped_size(source)
        if size is not None and size < self.entry.num_bytes:
            raise CorruptCacheError(f"{self.where} was truncated to {size} bytes since it was opened (it had "
                                    f"{self.entry.num_bytes}): record batch {index} was not read")

    def check_batch_count(self, reader: pa.ipc.RecordBatchFileReader, rows: Sequence[int]) -> None:
        """Raises CorruptCacheError unless the shard has a record batch for each of `rows` (the batch
        rows its shard table gives), adding up to its entry's rows."""
        self.check_rows(sum(rows))
        if reader.num_record_batches != len(rows):
            raise CorruptCacheError(f"{self.where} holds {reader.num_record_batches} record batches, the shard "
                                    f"table lists {len(rows)}")

    def check_batch(self, batch: pa.RecordBatch, part: str = "") -> pa.RecordBatch:
        """`batch` (read from this shard, not yet checked) once fully validated, as `read_batch` checks it;
        errors name `part` as `unreadable_as_corrupt` takes it.

        Raises:
          CorruptCacheError: it is not a valid Arrow batch.
        """
        with self.unreadable_as_corrupt(part):
            batch.validate(full=True)
        return batch

    def unchecked_batches(self, reader: pa.ipc.RecordBatchFileReader) -> list[pa.RecordBatch]:
        """Every record batch `reader` reads, not yet validated, their rows checked against the
        manifest entry's.

        Counting a shard's rows reads every batch's header anyway; on a shard whose reads
        are free (`reads_free`) the batches it makes are views, so keeping them spares a
        second read when a batch is first touched. Nothing may use one before `check_batch`.

        Raises:
          CorruptCacheError: a batch cannot be read, or the rows do not add up.
        """
        with self.unreadable_as_corrupt():
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self.check_rows(sum(batch.num_rows for batch in batches))
        return batches

    def iter_batches(self, columns: Sequence[str] | None = None, *, validate: bool = True,
                     source: pa.NativeFile | None = None) -> Iterator[pa.RecordBatch]:
        """The shard's record batches one at a time (memory: one batch), then a check of their rows.

        Args:
          columns: read only these columns (the other columns' buffers are not read).
          validate: fully validate each batch as `read_batch` does; without it only the
            file's framing is checked (for copying batches whose checksum was checked).
          source: the shard opened by `open_source`; opened here when None.

        Raises:
          CorruptCacheError: as `open` and `read_batch`, or the rows do not add up.
        """
        source = source or self.open_source()
        reader = self.reader(source, columns)
        rows = 0
        for index in range(reader.num_record_batches):
            if validate:
                batch = self.read_batch(reader, index, source=source)
            else:
                self.check_held(source, index)
                with self.unreadable_as_corrupt():
                    batch = reader.get_batch(index)
            rows += batch.num_rows
            yield batch
        self.check_rows(rows)

    def check_checksum(self) -> None:
        """Reads the whole file and checks its size and checksum against the entry.

        Raises:
          CorruptCacheError: the file is missing, unreadable, or of another size or checksum.
        """
        try:
            found, size = self.checksum()
        except FileNotFoundError:
            raise CorruptCacheError(f"{self.where} is missing") from None
        except OSError as error:
            raise CorruptCacheError(f"{self.where} cannot be read: {error}") from None
        if (found, size) != (self.entry.checksum, self.entry.num_bytes):
            raise CorruptCacheError(f"{self.where} has {size} bytes and checksum {found}; "
                                    f"{self.entry.num_bytes} bytes and {self.entry.checksum} were written")

    def read_batches(self) -> list[pa.RecordBatch]:
        """Every record batch of the shard, each checked, and their rows checked against the manifest.

        Raises:
          CorruptCacheError: as `open` and `read_batch`, or the shard holds another
            number of rows than its manifest entry says.
        """
        return [self.check_batch(batch) for batch in self.unchecked_batches(self.open())]

    def batch_rows(self, source: pa.NativeFile | None = None,
                   reader: pa.ipc.RecordBatchFileReader | None = None) -> list[int]:
        """The rows of each record batch, checked to add up to the manifest entry's.

        Reads every batch's header, not the data: with `reader` on a shard whose reads
        are free (`reads_free`), through it; otherwise through a second reader that
        loads only one narrow column, so it is cheap on an object store and on a
        compressed shard too. (That projection reads through pyarrow's I/O threads: on
        a busy machine each hand-off can wait milliseconds.)

        Args:
          source: the shard opened by `open_source`; opened here when None.
          reader: `reader(source)`, when the caller has opened it.

        Raises:
          CorruptCacheError: as `open`, or the shard holds another number of rows than
            its manifest entry says.
        """
        source = source or self.open_source()
        if reader is None or not self.reads_free(source):
            narrow = min(self.schema, key=lambda field: _width_rank(field.type)).name
            reader = self.reader(source, columns=[narrow])
        return [batch.num_rows for batch in self.unchecked_batches(reader)]

    def reads_free(self, source: pa.NativeFile) -> bool:
        """Whether reading a batch of `source` costs no memory or I/O: a memory-mapped, uncompressed shard."""
        return fs.is_memory_mapped(source) and self.compression is None

    def check_rows(self, rows: int) -> None:
        """Raises CorruptCacheError unless `rows` is what the manifest entry says."""
        if rows != self.entry.num_rows:
            recorded = "the manifest says" if self.manifest is not None else "the writer recorded"
            raise CorruptCacheError(f"{self.where} holds {rows} rows, {recorded} {self.entry.num_rows}")

    def checksum(self) -> tuple[str, int]:
        """The checksum of the file as it is now, and its size (read in chunks: memory stays small).

        Raises:
          FileNotFoundError: the shard is missing. OSError: it cannot be read.
        """
        return file_checksum(self.path)


def file_checksum(path: str) -> tuple[str, int]:
    """The checksum of the file at `path` and its size, read in chunks (memory stays small).

    Raises:
      FileNotFoundError: the file is missing. OSError: it cannot be read.
    """
    crc = Crc32()
    with fs.open_read(path) as handle:
        while chunk := handle.read(_CHUNK):
            crc.update(chunk)
    return crc.checksum(), crc.size


def _width_rank(arrow_type: pa.DataType) -> int:
    """Orders column types by how few bytes a row takes, so counting rows reads the cheapest."""
    if pa.types.is_primitive(arrow_type):
        return 0
    if pa.types.is_fixed_size_list(arrow_type):
        return 1
    return {"string": 2, "list": 3}.get(arrow_family(arrow_type), 4)  # 4: binary columns, images and videos


def _removed_hint(manifest: Manifest) -> str:
    kept = version_numbers(manifest.path)
    if kept and manifest.version not in kept:
        return (f": version {manifest.version} was removed by retention (`beam-shards gc`) after this reader opened "
                f"it; open the cache again for version {kept[-1]}")
    return ""
