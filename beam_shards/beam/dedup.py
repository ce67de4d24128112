"""Exact deduplication of a deterministic write: `WriteToArrowShards(..., deterministic=True, dedup=...)`.

Rows are digested by their encoded values (`shards.row_digest`: after the features encode
them, so `1` and `np.int64(1)` are the same value), over every column or the named ones,
and shuffled by digest, before the write: a combiner keeps the row with the smallest
`(key, row of its element)`, the first in input order, and counts the others, and
combiner lifting drops the duplicates inside a bundle before the shuffle. Each kept
row travels as its encoded values (the payload), with the memory of one row a digest.
The survivors are grouped again by the chunk of their key (`ordered.chunk_of`, so a
group is at most a chunk of the deterministic write) and each group, in key order, goes
on as one `(first key, EncodedRows)` pair: the deterministic write then stores its rows
in the same order. (A non-deterministic write keeps any one row of a digest, and ships
digests alone: `staged_dedup`.)

An example that does not encode is not digested: it goes on as it came, so the write
step fails on it or skips it (with `on_bad="skip"`, the other rows of a batch holding
it are not deduplicated). The count of rows dropped is a PCollection of one int, which
finalize takes as a side input (so retried or repeated bundles never count twice).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam.keys import plain_key
from beam_shards.beam.ordered import chunk_of, keyed
from beam_shards.beam.staged_dedup import check_columns
from beam_shards.errors import EncodeError
from beam_shards.features import Features, numpy_values
from beam_shards.shards import EncodedRows, row_digests

_AS_IS = "as_is"
# (order, encoded values, rows of this digest); the order is `(key, row of its element, digest)`: rows of one
# key and position (keys may repeat) sort by their digest, whatever their arrival.
Kept = tuple[Any, tuple[Any, ...], int]


class _DigestRowsFn(beam.DoFn):
    """Each row of each example as `(digest, (order, encoded values, 1))`; an example that does not
    encode goes to the `_AS_IS` output unchanged. Plain examples are encoded one by one and
    digested a batch at a time."""

    def __init__(self, features: Features | None, columns: list[str] | None, batch_size: int):
        self._features = features
        self._columns = columns
        self._batch_size = batch_size

    def start_bundle(self) -> None:
        self._pending: list[tuple[Any, tuple[Any, ...]]] = []

    def process(self, element: Any, features: Features | None = None) -> Iterator[Any]:
        if self._features is None:
            check_columns(self._columns, features)
            self._features = features
        key, example = keyed(element)
        order = plain_key(key)
        try:
            if isinstance(example, EncodedRows):
                table = example.table
            elif isinstance(example, (pa.RecordBatch, pa.Table)):
                table = self._features.encode_batch(example, key)
            elif isinstance(example, dict):
                self._pending.append((order, self._features.encode_values(example, key)))
                if len(self._pending) >= self._batch_size:
                    yield from self._flush()
                return
            else:
                table = None
        except EncodeError:
            table = None
        if table is None:
            yield TaggedOutput(_AS_IS, element)
            return
        yield from self._digested(table, [order] * table.num_rows, list(range(table.num_rows)))

    def finish_bundle(self) -> Iterator[Any]:
        for output in self._flush():
            yield window.GlobalWindows.windowed_value(output)

    def _flush(self) -> Iterator[Any]:
        pending, self._pending = self._pending, []
        if pending:
            table = pa.Table.from_batches([self._features.build_columns(list(zip(*(row for _, row in pending))))])
            yield from self._digested(table, [order for order, _ in pending], [0] * len(pending))

    def _digested(self, table: pa.Table, orders: list[Any], rows: list[int]) -> Iterator[Any]:
        digests = row_digests(table, self._columns)
        values = zip(*(_payload(column.combine_chunks()) for column in table.columns))
        for digest, order, row, kept in zip(digests, orders, rows, values):
            yield digest, ((order, row, digest), kept, 1)


class _KeepFirstFn(beam.CombineFn):
    """The `Kept` of a digest: the row of the smallest order, and how many rows it stands for."""

    def create_accumulator(self) -> Kept | None:
        return None

    def add_input(self, accumulator: Kept | None, kept: Kept) -> Kept:
        return self._pick(accumulator, kept)

    def merge_accumulators(self, accumulators: Any) -> Kept | None:
        result = None
        for accumulator in accumulators:
            result = self._pick(result, accumulator)
        return result

    def extract_output(self, accumulator: Kept | None) -> Kept | None:
        return accumulator

    def _pick(self, a: Kept | None, b: Kept | None) -> Kept | None:
        if a is None or b is None:
            return a if b is None else b
        try:
            first = b if b[0] < a[0] else a
        except TypeError as error:
            raise ValueError("WriteToArrowShards(deterministic=True) needs keys of one sortable type: "
                             f"{error}") from None
        return first[0], first[1], a[2] + b[2]


def _packed(kind: pa.DataType) -> bool:
    """Whether a column of `kind` travels as bytes: a fixed-size list of numbers (an `Array` embedding,
    say), whose Python lists would cost a float object a number."""
    return pa.types.is_fixed_size_list(kind) and (pa.types.is_integer(kind.value_type)
                                                  or pa.types.is_floating(kind.value_type))


def _payload(column: pa.Array) -> list[Any]:
    """The values of a column as kept rows carry them: Python values, or for a `_packed` column
    without null numbers each list's bytes (None for a null)."""
    kind = column.type
    if not _packed(kind):
        return column.to_pylist()
    size, count = kind.list_size, len(column)
    numbers = column.values.slice(column.offset * size, count * size)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if numbers.null_count:  # in a null list, or a null number, which travels as a Python list
        if (~numbers.is_valid().to_numpy(zero_copy_only=False).reshape(count, size))[valid].any():
            return column.to_pylist()
        numbers = numbers.fill_null(0)
    width = size * kind.value_type.bit_width // 8
    data = numpy_values(numbers).tobytes()
    return [data[i * width:(i + 1) * width] if ok else None for i, ok in enumerate(valid.tolist())]


def _column(values: list[Any], kind: pa.DataType) -> pa.Array:
    """The Arrow column of kept values (from `_payload`) of type `kind`."""
    if _packed(kind) and any(isinstance(value, bytes) for value in values):
        dtype = kind.value_type.to_pandas_dtype()
        if all(value is None or isinstance(value, bytes) for value in values):
            empty = bytes(kind.list_size * np.dtype(dtype).itemsize)
            numbers = np.frombuffer(b"".join(empty if value is None else value for value in values), dtype)
            mask = pa.array([value is None for value in values]) if None in values else None
            return pa.FixedSizeListArray.from_arrays(pa.array(numbers, kind.value_type), kind.list_size, mask=mask)
        values = [np.frombuffer(value, dtype).tolist() if isinstance(value, bytes) else value for value in values]
    return pa.array(values, type=kind)


def _table(features: Features, rows: list[tuple[Any, ...]]) -> EncodedRows:
    schema = features.arrow_schema()
    return EncodedRows(pa.Table.from_arrays([_column(list(values), field.type)
                                             for values, field in zip(zip(*rows), schema)], schema=schema))


class _ChunkRowsFn(beam.DoFn):
    """A chunk's kept rows in key order, as one `(first key, EncodedRows)` pair."""

    def __init__(self, features: Features | None):
        self._features = features

    def process(self, element: tuple[Any, list[Kept]], features: Features | None = None) -> Iterator[Any]:
        kept = sorted(element[1], key=lambda item: item[0])
        yield kept[0][0][0], _table(self._features or features, [item[1] for item in kept])


class DropDuplicates(beam.PTransform):
    """Drops the rows whose digest a row of a smaller key has (see the module): `(examples, dropped)`,
    the `(first key, EncodedRows)` pairs and unencodable examples the deterministic write takes, and
    a PCollection of one int, the count of rows dropped.

    Args:
      features: the write's features, or None when they are made as the pipeline runs (then
        `side` holds their side input).
      columns: the columns to digest; None for every column.
      batch_size: plain examples digested at a time.
      chunk_rows: the rows of a chunk of the deterministic write.
      side: the side input of features made as the pipeline runs, if any.
    """

    def __init__(self, features: Features | None, columns: list[str] | None, batch_size: int, chunk_rows: int,
                 side: tuple[Any, ...] = ()):
        super().__init__()
        self._features = features
        self._columns = columns
        self._batch_size = batch_size
        self._chunk_rows = chunk_rows
        self._side = side

    def expand(self, pcoll: beam.PCollection) -> tuple[beam.PCollection, beam.PCollection]:
        features, side, chunk_rows = self._features, self._side, self._chunk_rows
        digested = pcoll | "DigestRows" >> beam.ParDo(
            _DigestRowsFn(features, self._columns, self._batch_size), *side).with_outputs(_AS_IS, main="rows")
        kept = (digested.rows
                | "KeepFirst" >> beam.CombinePerKey(_KeepFirstFn())
                | "Kept" >> beam.Values())
        dropped = (kept
                   | "DroppedOfDigest" >> beam.Map(lambda item: item[2] - 1)
                   | "CountDropped" >> beam.CombineGlobally(sum))
        rows = (kept
                | "ByChunk" >> beam.Map(lambda item: (chunk_of(item[0][0], chunk_rows), item))
                | "GroupChunks" >> beam.GroupByKey()
                | "ChunkRows" >> beam.ParDo(_ChunkRowsFn(features), *side))
        examples = (rows, digested[_AS_IS]) | "WithUndigested" >> beam.Flatten()
        return examples, dropped
