"""Deterministic writes: `(key, example)` pairs written in key order, whatever the runner's bundles.

The sink's default path stages shards per bundle, so rows land in whatever order bundles
arrive in. With `WriteToArrowShards(..., deterministic=True)` these steps replace it, and
only file names and row ranges go through Beam's shuffles, never the examples:

- runs: each bundle buffers its pairs, about `RUN_BYTES` at a time, sorts them by key
  and writes them with a `bundles.BundleWriter` into staged "run" shards that carry
  each row's key in one more column (`KEY_COLUMN`: `(key, row of its element)` in
  `keys`' plain encoding, never pickled, so a run shard planted in the staging cannot
  run code). Each key belongs to a chunk: an int key, or a tuple key whose second item
  is an int (`(input file, position, ...)`), to `position // chunk_rows` (of its input
  file), so neighbouring rows share a chunk; any other key is a chunk of its own (a
  staged shard a row: give position keys to large writes). Chunk names sort as their
  keys do, so in a run the rows of a chunk are contiguous: the run reports `(chunk,
  (run shard, first row, rows))`.
- rank: every chunk name is listed once and sorted (one small list, a side input), so
  each chunk knows its place in the whole write.
- chunks: the row ranges are grouped by chunk; each chunk's rows are read from the runs
  holding them, sorted by key (ties by the row's values) and written with one
  `BundleWriter` into staged shards tagged with their order `(chunk rank, shard index)`.
  Memory: one run while writing runs, one chunk while writing chunks.
- merge: the tagged shards, sorted by order, are planned into bins of record batches that
  keep that order (`ordered_bins`: a small shard before a full one takes part of it, so
  no shard passes the target), so the cut points depend on the rows alone; each bin is
  merged by copying record batches and keeps its first span's order (the sink's own
  merge steps, `merging.merge_small_shards`).
- finalize publishes the shards sorted by order (`commit.publish(..., ordered=True)`).

The same input thus gives the same rows, order and shard bytes on any runner, bundling or
number of workers (the shard names carry the write id, so they differ). Every step writes
into an attempt folder of its own, so a retried or repeated bundle never collides with
another; the runs are removed with the write's staging folder when it is published.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import AsSingleton, TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam.bundles import BAD_TAG, BundleWriter, WriteCounters, write_id_or_fallback
from beam_shards.beam.ordered_bins import batch_bytes
from beam_shards.beam.keys import KeyedRowDecoder, encode_keyed_rows, plain_key
from beam_shards.display import short_repr
from beam_shards.errors import CorruptCacheError
from beam_shards.features import RESERVED_PREFIX, Features, Value
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.writer import EncodedRows
from beam_shards.shards.writer_inputs import split_key

# Rows of a chunk, in batches: a chunk is held in memory while it is sorted and written.
_CHUNK_BATCHES = 8
# About how many bytes of examples a bundle sorts at a time into one run.
RUN_BYTES = 64 << 20
KEY_COLUMN = RESERVED_PREFIX + "key__"
Piece = tuple[WrittenShard, int, int]  # a run shard, the first row of a chunk in it, and its rows


def chunk_rows(options: WriterOptions) -> int:
    """The rows of a chunk of position keys, for a write of `options`."""
    return _CHUNK_BATCHES * options.batch_size


def chunk_of(key: Any, chunk_rows: int) -> Any:
    """The chunk a key belongs to: `position // chunk_rows` for an int key `position` or a tuple key
    `(source, position, ...)`, as `(source, position // chunk_rows)`; else the key itself."""
    if _is_position(key):
        return key // chunk_rows
    if isinstance(key, tuple) and len(key) >= 2 and _is_position(key[1]):
        return key[0], key[1] // chunk_rows
    return key


def _is_position(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def keyed(item: Any) -> tuple[Any, Any]:
    """`item` as a `(key, example)` pair.

    Raises:
      ValueError: `item` is not a pair (an example without its key cannot be put in order).
    """
    key, example = split_key(item, None)
    if key is None:
        raise ValueError("WriteToArrowShards(deterministic=True) takes (key, example) pairs whose keys sort, such "
                         f"as (input file, position); got an element without a key: {short_repr(item)}")
    return key, example


def ranks(chunks: Iterable[Any]) -> dict[Any, int]:
    """Each chunk name's place in key order.

    Raises:
      ValueError: chunk names of types that do not sort together (the keys must).
    """
    return {chunk: rank for rank, chunk in enumerate(_sorted(set(chunks)))}


def _sorted(items: Iterable[Any], key: Any = None) -> list[Any]:
    try:
        return sorted(items, key=key)
    except TypeError as error:
        raise ValueError(f"WriteToArrowShards(deterministic=True) needs keys of one sortable type: {error}") from None


def _run_features(features: Features) -> Features:
    """The features of a run shard: `features` and the key column."""
    if KEY_COLUMN in features:
        raise ValueError(f"{KEY_COLUMN!r} is the name a deterministic write keeps its keys under; rename that feature")
    return Features({**features, KEY_COLUMN: Value("binary")})


def run_options(options: WriterOptions) -> WriterOptions:
    """The options of run shards: the write's, with 64-bit offsets, since a chunk of runs is
    sorted whole and 32-bit string offsets would overflow past 2 GiB of text in it."""
    return dataclasses.replace(options, column_types="large")


def _with_key(example: Any, key: Any, features: Features) -> Any:
    """`example` with the key column: a dict gets `(key, 0)`, row i of a batch `(key, i)`."""
    if isinstance(example, dict):
        return {**example, KEY_COLUMN: encode_keyed_rows(key, 1)[0]}
    if isinstance(example, EncodedRows):
        table = example.table
        return EncodedRows(pa.Table.from_arrays([*table.columns, _row_keys(key, table.num_rows)],
                                                schema=features.arrow_schema()))
    if isinstance(example, (pa.RecordBatch, pa.Table)):
        return example.append_column(KEY_COLUMN, _row_keys(key, example.num_rows))
    return example  # not an example: the writer refuses it, naming the key


def _row_keys(key: Any, rows: int) -> pa.Array:
    return pa.array(encode_keyed_rows(key, rows), pa.large_binary())


def _stored_keys(column: Iterable[bytes], where: str) -> list[tuple[Any, int]]:
    """The `(key, row)` pairs of a key column of `where` (run shards).

    Raises:
      CorruptCacheError: a value is not a stored key (the staging was damaged or planted).
    """
    pairs, decode = [], KeyedRowDecoder()
    for index, data in enumerate(column):
        try:
            pairs.append(decode(data))
        except ValueError as error:
            raise CorruptCacheError(f"row {index} of {where} holds no key a deterministic write stores: {error}; "
                                    "the write's staging was altered (nothing was published)") from None
    return pairs


def _rows(example: Any) -> int:
    return example.table.num_rows if isinstance(example, EncodedRows) else getattr(example, "num_rows", 1)


def _rough_nbytes(example: Any) -> int:
    """About how much memory an example holds (its top-level values), to bound a run."""
    if isinstance(example, EncodedRows):
        return example.table.nbytes
    if isinstance(example, (pa.RecordBatch, pa.Table)):
        return example.nbytes
    if isinstance(example, dict):
        return sum(getattr(value, "nbytes", None) or (len(value) if isinstance(value, (bytes, str)) else 8)
                   for value in example.values())
    return 8


class WriteRunsFn(beam.DoFn):
    """Writes a bundle's `(key, example)` pairs as sorted runs (see `ordered`), yielding
    `(chunk, (run shard, first row, rows))` for each chunk of each run shard, and the dead
    letters of `on_bad="skip"` tagged `BAD_TAG`. A key of a type the plain encoding does not
    hold fails the bundle at once (`keys.plain_key`). `features` None: they are made when the
    pipeline runs and come as a side input (the run writer is made at the first element)."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, write_id: str | None = None,
                 on_bad: str = "fail", run_bytes: int | None = None):
        self._path = path
        self._features = None if features is None else _run_features(features)
        self._options = run_options(options)
        self._given_write_id = write_id
        self._skip = on_bad == "skip"
        self._chunk_rows = chunk_rows(options)
        self._run_bytes = run_bytes or RUN_BYTES
        self._counters = WriteCounters()

    def setup(self) -> None:
        self._write_id = self._given_write_id
        self._runs = None if self._features is None else self._new_runs()

    def _new_runs(self) -> BundleWriter:
        return BundleWriter(self._path, self._features, self._options, self._skip, hidden=(KEY_COLUMN,))

    def start_bundle(self) -> None:
        self._pairs: list[tuple[Any, Any, Any]] = []  # (plain key, key as given, example)
        self._pending_bytes = 0

    def teardown(self) -> None:
        if getattr(self, "_runs", None) is not None:
            self._runs.discard()

    def process(self, element: Any, write_id: Any, features: Features | None = None):
        if self._write_id is None:
            self._write_id = write_id_or_fallback(write_id)
        if self._runs is None:
            self._features = _run_features(features)
            self._runs = self._new_runs()
        key, example = keyed(element)
        self._pairs.append((plain_key(key), key, example))
        self._pending_bytes += _rough_nbytes(example)
        if self._pending_bytes >= self._run_bytes:
            yield from self._write_run()

    def finish_bundle(self):
        for output in self._write_run():
            value = output.value if isinstance(output, TaggedOutput) else output
            windowed = window.GlobalWindows.windowed_value(value)
            yield TaggedOutput(output.tag, windowed) if isinstance(output, TaggedOutput) else windowed

    def _write_run(self) -> Iterator[Any]:
        """Sorts the buffered pairs and writes them as one run: its dead letters, then its pieces."""
        pairs, self._pairs, self._pending_bytes = self._pairs, [], 0
        if not pairs:
            return
        pairs = _sorted(pairs, key=operator.itemgetter(0))
        self._runs.start(self._write_id)
        dropped = False
        for plain, key, example in pairs:
            # Errors and dead letters name the key as given (the pipelines' keys print as the input they name).
            self._runs.add(_with_key(example, plain, self._features), key)
            for letter in self._counters.skipped(self._runs.take_letters()):
                dropped = True
                yield TaggedOutput(BAD_TAG, letter)
        shards = self._runs.finish()
        for letter in self._counters.skipped(self._runs.take_letters()):
            dropped = True
            yield TaggedOutput(BAD_TAG, letter)
        if dropped:  # rows were left out: which, the runs' own key columns say
            chunks = [chunk_of(key, self._chunk_rows) for shard in shards for key in _read_keys(shard, self._features,
                                                                                                  self._options)]
        else:
            # One chunk an example: the rows of a batch share its key.
            chunks = [chunk for plain, _, example in pairs
                      for chunk in itertools.repeat(chunk_of(plain, self._chunk_rows), _rows(example))]
        yield from _pieces(shards, chunks)


def _pieces(shards: list[WrittenShard], chunks: list[Any]) -> Iterator[tuple[Any, Piece]]:
    """`(chunk, (shard, first row, rows))` for each run of equal chunks in `chunks`, the chunks of the
    rows of `shards` in order."""
    start = 0
    for shard in shards:
        rows = chunks[start:start + shard.num_rows]
        first = 0
        while first < len(rows):
            last = first + 1
            while last < len(rows) and rows[last] == rows[first]:
                last += 1
            yield rows[first], (shard, first, last - first)
            first = last
        start += shard.num_rows


def _read_keys(shard: WrittenShard, features: Features, options: WriterOptions) -> list[Any]:
    file = ShardFile.staged(shard.path, shard.num_rows, shard.num_bytes, shard.checksum, features, options.compression,
                            options.column_types)
    column = (key for batch in file.iter_batches(columns=[KEY_COLUMN]) for key in batch.column(0).to_pylist())
    return [key for key, _ in _stored_keys(column, f"run shard {shard.path}")]


def read_piece(piece: Piece, features: Features, options: WriterOptions) -> pa.Table:
    """The rows `piece` names of its run shard (only the record batches holding them are read)."""
    shard, first, rows = piece
    file = ShardFile.staged(shard.path, shard.num_rows, shard.num_bytes, shard.checksum, features, options.compression,
                            options.column_types)
    source = file.open_source()
    reader = file.reader(source)
    ends = np.cumsum(file.batch_rows(source, reader)).tolist()
    batches, start = [], bisect.bisect_right(ends, first)
    for index in range(start, len(ends)):
        batch_start = ends[index - 1] if index else 0
        if batch_start >= first + rows:
            break
        batches.append(file.read_batch(reader, index))
    table = pa.Table.from_batches(batches, schema=file.schema)
    return table.slice(first - (ends[start - 1] if start else 0), rows)


def in_key_order(table: pa.Table) -> pa.Table:
    """The rows of a chunk sorted by key; rows of one key by their values, so their order does not
    depend on the order they arrived in.

    Raises:
      CorruptCacheError: a stored key does not decode (naming its row in the chunk).
    """
    keys = _stored_keys(table.column(KEY_COLUMN).to_pylist(), "the chunk")
    order = _sorted(range(len(keys)), key=keys.__getitem__)
    if any(keys[a] == keys[b] for a, b in zip(order, order[1:])):
        rows = table.drop_columns([KEY_COLUMN]).to_pylist()
        # pickle.dumps only serializes the row's values into a sort key: nothing is ever unpickled.
        order = _sorted(range(len(keys)), key=lambda i: (keys[i], pickle.dumps(rows[i], protocol=4)))
    return table.take(order)


def write_in_key_order(pairs: beam.PCollection, write_id: beam.PCollection, write_runs: WriteRunsFn,
                       write_chunk: WriteChunkFn, features: tuple[Any, ...] = (),
                       tags: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """The deterministic write's steps before the merge: `(runs, written)`, where `runs[BAD_TAG]`
    holds the dead letters and `written.shards` the chunks' shards tagged with their order
    (`written[tag]` the other outputs of `write_chunk`, for each of `tags`).

    `write_runs` takes the pairs with the write id as a side input and yields
    `(chunk, piece)` (and dead letters tagged `BAD_TAG`); `write_chunk` takes
    `(chunk, pieces)` with the write id and the chunk ranks as side inputs, and yields
    `(write id, shard, order, batch bytes)` (`ordered_bins.batch_bytes`). Both take `features` too: the side input of features made
    when the pipeline runs, if any (`deferred.side_inputs`).
    """
    runs = pairs | "WriteRuns" >> beam.ParDo(write_runs, AsSingleton(write_id), *features).with_outputs(
        BAD_TAG, main="pieces")
    chunk_ranks = (runs.pieces
                   | "ChunkNames" >> beam.Keys()
                   | "DistinctChunks" >> beam.Distinct()
                   | "ListChunks" >> beam.combiners.ToList()
                   | "RankChunks" >> beam.Map(ranks))
    written = (runs.pieces
               | "GroupChunks" >> beam.GroupByKey()
               | "WriteChunks" >> beam.ParDo(write_chunk, AsSingleton(write_id), AsSingleton(chunk_ranks),
                                             *features).with_outputs(*tags, main="shards"))
    return runs, written


class WriteChunkFn(beam.DoFn):
    """Writes one chunk of a deterministic write (see `ordered`): its rows, read from the runs and
    sorted by key, into staged shards tagged with their order `(chunk rank, shard index)` and the
    bytes of each of their record batches (`ordered_bins.batch_bytes`, for the merge plan).
    `features` None: they are made when the pipeline runs and come as a side input."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, write_id: str | None = None):
        self._path = path
        self._features = features
        self._options = options
        self._given_write_id = write_id
        self._run_options = run_options(options)
        self._counters = WriteCounters()

    def setup(self) -> None:
        self._write_id = self._given_write_id
        self._chunk = None if self._features is None else self._use(self._features)

    def _use(self, features: Features) -> BundleWriter:
        """The chunk writer of `features` (and the features of the runs read)."""
        self._features, self._runs = features, _run_features(features)
        return BundleWriter(self._path, features, self._options)

    def teardown(self) -> None:
        if getattr(self, "_chunk", None) is not None:
            self._chunk.discard()

    def process(self, element: tuple[Any, list[Piece]], write_id: Any, chunk_ranks: dict[Any, int],
                features: Features | None = None):
        chunk, pieces = element
        if self._write_id is None:
            self._write_id = write_id_or_fallback(write_id)
        if self._chunk is None:
            self._chunk = self._use(features)
        pieces = sorted(pieces, key=lambda piece: (piece[0].path, piece[1]))
        try:
            table = in_key_order(pa.concat_tables([read_piece(piece, self._runs, self._run_options)
                                                   for piece in pieces]))
        except CorruptCacheError as error:
            runs = ", ".join(sorted({piece[0].path for piece in pieces}))
            raise CorruptCacheError(f"chunk {chunk!r}, read from run shards {runs}: {error}") from None
        rows = self._kept(pa.Table.from_arrays(table.drop_columns([KEY_COLUMN]).columns,
                                               schema=self._features.arrow_schema()))
        self._chunk.start(self._write_id)
        self._chunk.add(EncodedRows(rows), None)
        shards = self._chunk.finish()
        self._counters.written(shards)
        rank = chunk_ranks[chunk]
        for index, shard in enumerate(shards):
            yield self._write_id, shard, (rank, index), batch_bytes(shard)

    def _kept(self, rows: pa.Table) -> pa.Table:
        """The rows of a chunk, in key order, that it writes (a deduplicating write leaves some out)."""
        return rows
