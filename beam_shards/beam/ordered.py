"""Deterministic writes: `(key, example)` pairs written in key order, whatever the runner's bundles.

The sink's default path stages shards per bundle, so rows land in whatever order bundles
arrive in. With `WriteToArrowShards(..., deterministic=True)` these steps replace it, and
only file names and row ranges go through Beam's shuffles, never the examples:

- runs: each bundle buffers its pairs, about `ordered_steps.RUN_BYTES` at a time, sorts them by key
  and writes them with a `staging.BundleWriter` into staged "run" shards that carry
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
number of workers (the shard names carry the write id, so they differ), and without a runner:
this module holds the work of each step, without Beam; `ordered_steps` makes Beam steps of
it, and `ordered_in_process` runs it all in one process. Every step writes
into an attempt folder of its own, so a retried or repeated bundle never collides with
another; the runs are removed with the write's staging folder when it is published.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.beam.keys import PAIR_HEAD, PAIR_LAST, KeyedRowDecoder, encode_keyed_rows, key_order
from beam_shards.beam.staging import BundleWriter
from beam_shards.display import short_repr
from beam_shards.errors import CorruptCacheError
from beam_shards.features import RESERVED_PREFIX, Features, Value
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.writer import EncodedRows
from beam_shards.shards.writer_inputs import split_key

# Rows of a chunk, in batches: a chunk is held in memory while it is sorted and written.
_CHUNK_BATCHES = 8
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
    """Each chunk name's place in key order (`sorted_keys`)."""
    return {chunk: rank for rank, chunk in enumerate(sorted_keys(set(chunks)))}


def sorted_keys(items: Iterable[Any], key: Callable[[Any], Any] = lambda item: item) -> list[Any]:
    """`items` sorted by their plain keys (`key` of each): as Python sorts them, or, where it cannot compare
    two (None beside a str at one place), by their stored bytes, as a chunk's rows are (`in_key_order`), so
    whether a write goes through does not depend on which keys met in one bundle."""
    items = list(items)
    try:
        return sorted(items, key=key)
    except TypeError:
        return sorted(items, key=lambda item: key_order(key(item)))


def run_features(features: Features) -> Features:
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


def _stored_keys(column: Iterable[bytes], where: str, first: int = 0) -> list[tuple[Any, int]]:
    """The `(key, row)` pairs of a key column of `where` (run shards), whose first value is its row `first`.

    Raises:
      CorruptCacheError: a value is not a stored key (the staging was damaged or planted).
    """
    pairs, decode = [], KeyedRowDecoder()
    for index, data in enumerate(column, first):
        try:
            pairs.append(decode(data))
        except ValueError as error:
            raise CorruptCacheError(f"row {index} of {where} holds no key a deterministic write stores: {error}; "
                                    "the write's staging was altered (nothing was published)") from None
    return pairs


def _rows(example: Any) -> int:
    return example.table.num_rows if isinstance(example, EncodedRows) else getattr(example, "num_rows", 1)


def rough_nbytes(example: Any) -> int:
    """About how much memory an example holds (its top-level values), to bound a run."""
    if isinstance(example, EncodedRows):
        return example.table.nbytes
    if isinstance(example, (pa.RecordBatch, pa.Table)):
        return example.nbytes
    if isinstance(example, dict):
        return sum(getattr(value, "nbytes", None) or (len(value) if isinstance(value, (bytes, str)) else 8)
                   for value in example.values())
    return 8


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
    depend on the order they arrived in. Stored keys sort by their bytes (`keys`: byte order is key
    order), so no key is decoded.

    Raises:
      CorruptCacheError: a stored key is not in the outline of those `encode_keyed_rows` writes (naming its
        row in the chunk; bytes within the outline are sorted as they are, never decoded).
    """
    column = table.column(KEY_COLUMN)
    _check_stored_pairs(column)
    order = pc.sort_indices(column)
    stored = column.take(order)
    if len(stored) > 1 and pc.any(pc.equal(stored.slice(1), stored.slice(0, len(stored) - 1))).as_py():
        keys, rows = column.to_pylist(), table.drop_columns([KEY_COLUMN]).to_pylist()
        # pickle.dumps only serializes the row's values into a sort key: nothing is ever unpickled.
        order = sorted(range(len(keys)), key=lambda i: (keys[i], pickle.dumps(rows[i], protocol=4)))
    return table.take(order)


def _check_stored_pairs(column: pa.ChunkedArray) -> None:
    """Refuses a key column whose values are not stored pairs in their outline (version, tuple, the row's kind):
    bytes planted in the staging sort as bytes, never decoded, and pickled ones are refused here.

    Raises:
      CorruptCacheError: naming the first such row and what `decode_keyed_row` makes of it.
    """
    heads = pc.equal(pc.binary_slice(column, 0, len(PAIR_HEAD)), pa.scalar(PAIR_HEAD, column.type))
    ends = pc.equal(pc.binary_slice(column, -len(PAIR_LAST)), pa.scalar(PAIR_LAST, column.type))
    outlined = pc.fill_null(pc.and_(heads, ends), False)
    if pc.all(outlined).as_py() is not False:
        return
    row = pc.index(outlined, False).as_py()
    _stored_keys([column[row].as_py()], "the chunk", first=row)  # raises: no such value decodes as a pair


def write_run(runs: BundleWriter, pairs: list[tuple[Any, Any, Any]], write_id: str, features: Features,
              options: WriterOptions, rows_per_chunk: int) -> Iterator[dict[str, Any] | tuple[Any, Piece]]:
    """Writes `(plain key, key as given, example)` triples, sorted by plain key, as one run of write
    `write_id` with `runs` (a `BundleWriter` of the run `features` and `options`): yields its dead
    letters (dicts, as they come), then `(chunk, piece)` for each chunk of each run shard."""
    pairs = sorted_keys(pairs, key=operator.itemgetter(0))
    runs.start(write_id)
    dropped = False
    for plain, key, example in pairs:
        # Errors and dead letters name the key as given (the pipelines' keys print as the input they name).
        runs.add(_with_key(example, plain, features), key)
        for letter in runs.take_letters():
            dropped = True
            yield letter
    shards = runs.finish()
    for letter in runs.take_letters():
        dropped = True
        yield letter
    if dropped:  # rows were left out: which, the runs' own key columns say
        chunks = [chunk_of(key, rows_per_chunk) for shard in shards for key in _read_keys(shard, features, options)]
    else:
        # One chunk an example: the rows of a batch share its key.
        chunks = [chunk for plain, _, example in pairs
                  for chunk in itertools.repeat(chunk_of(plain, rows_per_chunk), _rows(example))]
    yield from _pieces(shards, chunks)


def chunk_in_key_order(chunk: Any, pieces: list[Piece], features: Features, options: WriterOptions) -> pa.Table:
    """The rows of `chunk`, read from the run shards `pieces` name and sorted by key, in the write's
    `features` (the runs' are `run_features(features)`, their options `run_options(options)`).

    Raises:
      CorruptCacheError: a stored key does not decode (naming the chunk and its run shards).
    """
    pieces = sorted(pieces, key=lambda piece: (piece[0].path, piece[1]))
    try:
        table = in_key_order(pa.concat_tables([read_piece(piece, run_features(features), run_options(options))
                                               for piece in pieces]))
    except CorruptCacheError as error:
        runs = ", ".join(sorted({piece[0].path for piece in pieces}))
        raise CorruptCacheError(f"chunk {chunk!r}, read from run shards {runs}: {error}") from None
    return pa.Table.from_arrays(table.drop_columns([KEY_COLUMN]).columns, schema=features.arrow_schema())


def write_chunk(writer: BundleWriter, write_id: str, rows: pa.Table) -> list[WrittenShard]:
    """Writes a chunk's rows, in key order, into staged shards with `writer` (the write's features and options)."""
    writer.start(write_id)
    writer.add(EncodedRows(rows), None)
    return writer.finish()
