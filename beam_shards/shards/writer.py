"""The shard writer: encoded rows in, size-rotated Arrow IPC files out.

One class serves the local `write_shards` and every bundle of the Beam sink. It never
opens files itself: it asks a callback for a writable stream per shard, so the caller
decides where shards go (a local staging folder, or `FileSystems.create` on gs://).
"""

from __future__ import annotations

from typing import Any, BinaryIO, Callable

import numpy as np
import pyarrow as pa

from beam_shards.display import preview_example
from beam_shards.errors import EncodeError
from beam_shards.features import Features
from beam_shards.features.base import casts
from beam_shards.format.statistics import Statistics
from beam_shards.shards.encoded_rows import EncodedRows
from beam_shards.shards.ipc_layout import FOOTER_BLOCK_BYTES, first_batch_offset, footer_bytes
from beam_shards.shards.later import Later
from beam_shards.shards.plain_rows import ENCODED, THREADED_ROWS, CheckedBatch, encode_each
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.row_sizes import batch_rows, holds_strings, plain_sizer, row_nbytes, values_nbytes
from beam_shards.shards.shard_stream import PendingBytes, ShardStream
from beam_shards.shards.writer_inputs import BatchHook

# What ShardWriter calls for an example that does not fit, instead of raising: (example, key, error).
OnBad = Callable[[Any, Any, EncodeError], None]
# Hugging Face's column types offset strings with 32 bits: a batch holding them stays far below 2 GiB.
_MAX_STRING_BATCH_BYTES = 1 << 30


class ShardWriter:
    """Buffers encoded rows into record batches and writes them into size-rotated shards.

    An example whose values are all already in their encoded form (bytes for an Image,
    ints, strs, arrays of the declared shape and dtype: `Features.plain_values`) is
    checked with its batch, column by column, when the batch is built (the checks Arrow
    types do not make, such as complete images, on a thread while the next batch is
    gathered); any other is encoded when it is added. Either way an example that does
    not fit gets the error `Features.encode_values` gives it, naming its key (an example
    without a key is named by its first fields), and so a bad example may be reported by
    a later `add` or by `close`.

    A batch is flushed at `batch_size` rows or `batch_bytes` bytes, whichever comes
    first. A shard is closed before a batch would take it past `shard_size_bytes` on
    disk (so a batch larger than the target, such as one huge example, gets a shard of
    its own), and once it holds `max_rows_per_shard` rows. No shard is ever empty.
    Each shard is checksummed, written and fsynced by a thread of its own
    (`ShardStream`), while the next is encoded; `close` waits for all of them.
    Memory held: one batch of rows and one built batch being checked, plus what the
    open shard's and the previous shard's streams have queued, together at most half a
    batch (`batch_bytes`) and one piece of a record batch.

    Example:
        >>> import io
        >>> from beam_shards import Features, Value
        >>> features = Features({"x": Value("int64")})
        >>> files = []
        >>> def open_shard(index):
        ...     files.append(io.BytesIO()); files[-1].close = lambda: None
        ...     return f"shard-{index}.arrow", files[-1]
        >>> writer = ShardWriter(features, open_shard, WriterOptions(shard_size_bytes=1 << 20))
        >>> for i in range(10):
        ...     _ = writer.add({"x": i}, key=i)
        >>> [s.num_rows for s in writer.close()]
        [10]

    Args:
      features: the schema rows are encoded with.
      open_shard: called with a shard's sequence number; returns its path and a
        writable binary stream, which the writer closes when the shard is done.
      options: batch and shard sizes and compression (`batch_bytes` is clamped to a
        quarter of a shard).
      on_bad: None to raise `EncodeError` for an example that does not fit; else called
        with the example, its key and the error instead, and the example is left out (a
        batch that does not fit is then added row by row, keyed `(key, row)`).
      hook: None, or a `BatchHook` told of each record batch written.
    """

    def __init__(self, features: Features, open_shard: Callable[[int], tuple[str, BinaryIO]],
                 options: WriterOptions | None = None, on_bad: OnBad | None = None, hook: BatchHook | None = None):
        options = options or WriterOptions()
        shard_size_bytes = options.shard_size_bytes
        self._features = features
        self._schema = features.storage_schema(options.column_types)
        self._open_shard = open_shard
        self._shard_size = shard_size_bytes
        self._max_rows = options.max_rows_per_shard
        self._batch_size = options.batch_size
        self._batch_bytes = min(options.batch_bytes, max(1, shard_size_bytes // 4))
        if holds_strings(self._schema):  # else most batches past 2 GiB of text would fail their cast, then split
            self._batch_bytes = min(self._batch_bytes, _MAX_STRING_BATCH_BYTES)
        self._options = pa.ipc.IpcWriteOptions(compression=options.compression)
        self._compressed = options.compression is not None
        self._first_batch_offset = first_batch_offset(self._schema)
        self._empty_footer = footer_bytes(self._schema, 0)
        self._names = tuple(features)
        self._on_bad = on_bad
        self._hook = hook
        self._plain_nbytes = plain_sizer(features.plain_types)
        self._rows: list[tuple[Any, ...]] = []  # encoded or plain values in column order
        # Per buffered row, its key (ENCODED for a row encoded when added), and the examples as
        # given where an error or on_bad needs them: only ints and untracked tuples stay buffered,
        # which cost the garbage collector nothing.
        self._keys: list[Any] = []
        self._examples: dict[int, Any] = {}
        self._plain_count = 0
        self._rows_bytes = 0
        self._checking: CheckedBatch | None = None  # the last batch built, written once checked
        # The last RecordBatch or Table added, being encoded: (its encoding, the batch, its key).
        self._encoding: tuple[Later, pa.RecordBatch | pa.Table, Any] | None = None
        self._path: str | None = None
        self._stream: ShardStream | None = None
        # Shards their threads still write: (path, rows, bytes, stream, batch rows, statistics).
        self._closing: list[tuple[str, int, int, ShardStream, tuple[int, ...], Statistics]] = []
        # What the streams may queue: half a batch, so a writer holds about two batches in all.
        self._pending = PendingBytes(max(1, self._batch_bytes // 2))
        self._ipc: pa.ipc.RecordBatchFileWriter | None = None
        self._shard_rows = 0
        self._shard_batches = 0
        self._batch_rows: list[int] = []
        self._statistics = Statistics.empty(features)
        self._written_uncompressed = 0
        self._written_on_disk = 0
        self.shards: list[WrittenShard] = []
        self.paths: list[str] = []

    def __repr__(self) -> str:
        return (f"ShardWriter(shards={len(self.shards)}, shard_size_bytes={self._shard_size}, "
                f"batch_size={self._batch_size}, buffered_rows={len(self._rows)})")

    def add(self, example: Any, key: Any) -> int:
        """Adds one example, or a pyarrow RecordBatch/Table of them; returns the rows added
        (plain rows, and the rows of a RecordBatch or Table, count as added until they are
        checked: a batch is encoded, on a thread, while the next is made).

        Raises:
          EncodeError: this example, or a plain one added before it, does not match the
            features (names its key), unless `on_bad` takes it.
          ValueError: `EncodedRows` of another schema.
        """
        if self._encoding is not None and not isinstance(example, (pa.RecordBatch, pa.Table)):
            self._write_encoded()  # before this example: rows keep their order
        values = self._features.plain_values(example)
        if values is not None:
            self._append(values, self._plain_nbytes(values), key, example)
            return 1
        if isinstance(example, EncodedRows):
            schema = example.table.schema
            if not schema.equals(self._features.arrow_schema(), check_metadata=True):
                raise ValueError(f"EncodedRows {key!r} have schema {schema}, not the features' "
                                 f"{self._features.arrow_schema()}; encode them with Features.encode_batch of the "
                                 "same features")
            self.write_table(example.table)
            return example.table.num_rows
        if isinstance(example, (pa.RecordBatch, pa.Table)):
            encoding = Later(self._features.encode_batch, example, key, threaded=example.num_rows >= THREADED_ROWS)
            self._flush_all()
            self._encoding = (encoding, example, key)
            if not encoding.threaded:
                self._write_encoded()
            return example.num_rows
        try:
            values = self._features.encode_values(example, key)
        except EncodeError as error:
            self._refuse(example, key, error)
            return 0
        self._append(values, values_nbytes(values))
        return 1

    def _refuse(self, example: Any, key: Any, error: EncodeError) -> None:
        """Raises `error` for an example that does not fit (naming an unkeyed one by its first
        fields), or hands it to `on_bad`."""
        if key is None and isinstance(example, dict):
            error = EncodeError(error.reason, example=preview_example(example), field=error.field,
                                feature=error.feature, got=error.got)
        if self._on_bad is None:
            raise error from None
        self._on_bad(example, key, error)

    def write(self, row: dict[str, Any], nbytes: int | None = None) -> None:
        """Adds one encoded row (from `Features.encode_example`)."""
        self._append(tuple([row[name] for name in self._names]), row_nbytes(row) if nbytes is None else nbytes)

    def _append(self, values: tuple[Any, ...], nbytes: int, key: Any = ENCODED, example: Any = None) -> None:
        """Buffers one row: encoded values, or with its `key` and `example`, plain values
        (`Features.plain_values`) checked with its batch."""
        if self._rows and self._rows_bytes + nbytes > self._batch_bytes:
            # Flush first, so a batch stays within batch_bytes unless it is one row, and
            # a row larger than a shard gets a batch, and so a shard, of its own.
            self._flush()
        if key is not ENCODED:
            self._plain_count += 1
            if key is None or self._on_bad is not None:
                self._examples[len(self._rows)] = example
        self._rows.append(values)
        self._keys.append(key)
        self._rows_bytes += nbytes
        if (len(self._rows) >= self._batch_size or self._rows_bytes >= self._batch_bytes
                or self._max_rows is not None and self._shard_rows + len(self._rows) >= self._max_rows):
            self._flush()

    def write_table(self, table: pa.Table) -> None:
        """Adds rows already in Arrow form (from `Features.encode_batch`), in record batches.

        The table is cut into batches as rows are: at most `batch_size` rows and
        `batch_bytes` bytes (a row larger than that is a batch of its own), measured
        per row from the Arrow offsets; rotation then works as for single rows.
        """
        self._flush_all()
        rows_from = batch_rows(table, self._batch_size, self._batch_bytes)
        offset = 0
        while offset < table.num_rows:
            rows = rows_from(offset)
            if self._max_rows is not None:
                rows = min(rows, self._max_rows - self._shard_rows)
            self._write_batch(table.slice(offset, rows).combine_chunks().to_batches()[0])
            offset += rows

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Adds one record batch already in Arrow form as it is (no re-slicing), after what is buffered;
        rotation works as for any batch. Merging shards copies batches through here."""
        self._flush_all()
        self._write_batch(batch)

    @property
    def num_shards(self) -> int:
        """Shards closed so far (some may still be on their way to disk)."""
        return len(self.shards) + len(self._closing)

    def close(self) -> list[WrittenShard]:
        """Writes what is buffered, closes the open shard, waits until every shard is on disk
        and returns them all."""
        self._flush_all()
        self._close_shard()
        self._wait_closing(0)
        return self.shards

    def abort(self) -> list[str]:
        """Drops buffered rows, stops every shard's stream unsynced; returns every path it opened."""
        self._rows, self._keys, self._examples, self._plain_count, self._checking = [], [], {}, 0, None
        self._encoding = None
        streams = [closing[3] for closing in self._closing] + ([self._stream] if self._stream else [])
        for stream in streams:
            stream.abort()
        self._closing = []
        self._stream = self._ipc = None
        return self.paths

    def _flush_all(self) -> None:
        """Builds what is buffered and writes every batch built or encoded so far."""
        self._write_encoded()
        self._flush()
        self._write_checked()

    def _write_encoded(self) -> None:
        """Writes the RecordBatch or Table being encoded once it is; one that does not fit
        raises its error, or with `on_bad`, is added row by row, keyed `(key, row)`."""
        if self._encoding is None:
            return
        (encoding, batch, key), self._encoding = self._encoding, None
        try:
            table = encoding.result()
        except EncodeError:
            if self._on_bad is None:
                raise
            for row, example in enumerate(batch.to_pylist()):
                self.add(example, (key, row))
            return
        self.write_table(table)

    def _flush(self) -> None:
        """Builds the buffered rows into a batch: one of encoded rows is written, one holding
        plain rows is checked (on a thread) and written by the next flush."""
        if not self._rows:
            return
        rows, keys, examples, plain = self._rows, self._keys, self._examples, self._plain_count
        self._rows, self._keys, self._examples, self._plain_count, self._rows_bytes = [], [], {}, 0, 0
        batch = self._features.build_plain(list(zip(*rows))) if plain else None
        if batch is not None:
            encoded = {} if plain == len(rows) else {row: rows[row] for row, key in enumerate(keys) if key is ENCODED}
            checking = CheckedBatch(self._features, batch, keys, examples, encoded)
            self._write_checked()
            self._checking = checking
            # A batch checked where it was built is written at once, as is one whose shard decides
            # where the next batch ends.
            if not checking.threaded or self._max_rows is not None:
                self._write_checked()
            return
        if plain:
            # A plain value did not fit: encode the plain rows one by one, as `add`
            # encodes the others, so the bad one gets its own error (or goes to on_bad).
            rows = encode_each(self._features, rows, keys, examples, self._refuse)
        self._write_checked()
        if rows:
            self._write_batch(self._features.build_columns(list(zip(*rows))))

    def _write_checked(self) -> None:
        """Writes the batch being checked once its check is done; one that does not pass goes
        back to per-row encoding."""
        checking, self._checking = self._checking, None
        if checking is None:
            return
        if checking.passed():
            self._write_batch(checking.batch)
            return
        rows = encode_each(self._features, checking.plain_rows(), checking.keys, checking.examples,
                           self._refuse)
        if rows:
            self._write_batch(self._features.build_columns(list(zip(*rows))))

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.schema.equals(self._schema):
            try:
                batch = batch.cast(self._schema)
            except pa.ArrowInvalid as error:
                # Past 2 GiB of text in a 32-bit column: batches are cut by estimated sizes, and a
                # str counts characters, not UTF-8 bytes. Each half is taken (a slice keeps its
                # offsets into the whole); one row cannot be cut.
                if batch.num_rows <= 1:
                    raise self._too_large(batch, error) from None
                half = batch.num_rows // 2
                for start, stop in ((0, half), (half, batch.num_rows)):
                    self._write_batch(batch.take(pa.array(np.arange(start, stop))))
                return
        if self._hook is not None:
            batch = self._hook.keep(batch)
            if not batch.num_rows:
                return
        if self._ipc is not None and self._shard_rows and self._would_overflow(batch):
            self._close_shard()
        if self._ipc is None:
            self._open_next()
        if self._hook is not None:
            self._hook.written(self._path, self._shard_rows, batch)
        before = self._stream.size
        self._stream.begin_span(before or self._first_batch_offset)
        self._ipc.write_batch(batch)
        self._stream.end_span()
        self._shard_rows += batch.num_rows
        self._shard_batches += 1
        self._batch_rows.append(batch.num_rows)
        self._statistics = self._statistics.merge(Statistics.of_batch(self._features, batch))
        if self._compressed:
            self._written_uncompressed += pa.ipc.get_record_batch_size(batch)
            self._written_on_disk += self._stream.size - before
        if self._stream.size >= self._shard_size or self._max_rows is not None and self._shard_rows >= self._max_rows:
            self._close_shard()

    def _too_large(self, row: pa.RecordBatch, error: pa.ArrowInvalid) -> EncodeError:
        """The error for a row that does not fit the shards' column types (`error`, the cast's)."""
        name = next((field.name for field, target in zip(row.schema, self._schema)
                     if not casts(row.column(field.name), target.type)), None)
        if name is None:  # no column alone fails: not a size the features could avoid
            return EncodeError(f"the row cannot be stored in the shards' column types: {error}")
        return EncodeError(f"one row holds more than a {self._schema.field(name).type} column holds: 32-bit offsets "
                           f"take 2 GiB of text and 2**31 list items ({error}); declare strings "
                           "Value('large_string'), and split longer lists across rows", field=name,
                           feature=repr(self._features[name]))

    def _would_overflow(self, batch: pa.RecordBatch) -> bool:
        estimate = pa.ipc.get_record_batch_size(batch)
        if self._compressed and self._written_uncompressed:
            estimate = estimate * self._written_on_disk // self._written_uncompressed
        footer = self._empty_footer + FOOTER_BLOCK_BYTES * (self._shard_batches + 1)
        return self._stream.size + estimate + footer > self._shard_size

    def _open_next(self) -> None:
        self._path, raw = self._open_shard(self.num_shards)
        self.paths.append(self._path)
        self._stream = ShardStream(raw, self._pending)
        self._ipc = pa.ipc.new_file(self._stream, self._schema, options=self._options)

    def _close_shard(self) -> None:
        if self._ipc is None:
            return
        self._ipc.close()
        self._stream.finish()
        self._closing.append((self._path, self._shard_rows, self._stream.size, self._stream, tuple(self._batch_rows),
                              self._statistics))
        self._stream = self._ipc = None
        self._shard_rows = self._shard_batches = 0
        self._batch_rows, self._statistics = [], Statistics.empty(self._features)
        # One shard goes to disk while the next is written: memory stays that of two streams.
        self._wait_closing(1)

    def _wait_closing(self, keep: int) -> None:
        """Waits until at most `keep` closed shards are still being written."""
        while len(self._closing) > keep:
            path, rows, size, stream, batch_rows, statistics = self._closing[0]
            self.shards.append(WrittenShard(path, rows, size, stream.result(), batch_rows, statistics, stream.spans()))
            del self._closing[0]

