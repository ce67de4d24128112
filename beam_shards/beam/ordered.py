"""Deterministic writes: `(key, example)` pairs written in key order, whatever the runner's bundles.

The sink's default path stages shards per bundle, so rows land in whatever order bundles
arrive in. With `WriteToArrowShards(..., deterministic=True)` these steps replace it:

- chunk: each pair goes to a chunk named from its key. A key that is a tuple ending in
  an int (such as `(input file, position)`) goes to the chunk of its first items and
  `position // chunk_rows`, so neighbouring rows share a chunk; any other key is a chunk
  of its own (a staged shard a row before the merge: give position keys to large
  writes). Chunk names sort as their keys do.
- rank: every chunk name is listed once and sorted (one small list, a side input), so
  each chunk knows its place in the whole write.
- write: a chunk's pairs are grouped, sorted by key (ties by the example's pickled
  bytes) and written with one `ShardWriter` into staged shards, each tagged with its
  order `(chunk rank, shard index)`. Memory: one chunk.
- merge: the tagged shards, sorted by order, are planned into bins that keep that order
  (`merge.plan_bins(keep_order=True)`), so the cut points depend on sizes alone; each
  bin is merged by copying record batches and keeps its first shard's order.
- finalize publishes the shards sorted by order (`commit.publish(..., ordered=True)`).

The same input thus gives the same rows, order and shard bytes on any runner, bundling or
number of workers (the shard names carry the write id, so they differ). A retried or
repeated chunk writes into an attempt folder of its own, as a bundle does.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import AsSingleton, TaggedOutput

from beam_shards.beam.bundles import WriteBundleFn, write_id_or_fallback
from beam_shards.beam.merging import MergeBinFn
from beam_shards.display import short_repr
from beam_shards.features import Features
from beam_shards.shards.merge import plan_bins
from beam_shards.shards.writer import WriterOptions, WrittenShard, split_key

# Rows of a chunk, in batches: a chunk is held in memory while it is sorted and written.
CHUNK_BATCHES = 8
Order = tuple[int, int]


def chunk_of(key: Any, chunk_rows: int) -> Any:
    """The chunk a key belongs to: `(*key[:-1], key[-1] // chunk_rows)` for a tuple ending in an int, else the key."""
    if isinstance(key, tuple) and key and isinstance(key[-1], int) and not isinstance(key[-1], bool):
        return (*key[:-1], key[-1] // chunk_rows)
    return key


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
    try:
        ordered = sorted(set(chunks))
    except TypeError as error:
        raise ValueError(f"WriteToArrowShards(deterministic=True) needs keys of one sortable type: {error}") from None
    return {chunk: rank for rank, chunk in enumerate(ordered)}


def in_key_order(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """`(key, example)` pairs sorted by key; pairs of one key by the example's pickled bytes, so their order
    does not depend on the order they arrived in."""
    items = sorted(items, key=operator.itemgetter(0))
    keys = [key for key, _ in items]
    if any(a == b for a, b in zip(keys, keys[1:])):
        items.sort(key=lambda item: (item[0], pickle.dumps(item[1], protocol=4)))
    return items


def plan_ordered_bins(items: Iterable[tuple[str, WrittenShard, Order]], options: WriterOptions,
                      overhead: int) -> list[tuple[str, list[WrittenShard], Order]]:
    """Bins of the tagged shards that keep their order: `(write id, shards, order of the first)`."""
    items = sorted(items, key=operator.itemgetter(2))
    bins = plan_bins([shard.num_bytes for _, shard, _ in items], options.shard_size_bytes, keep_order=True,
                     rows=[shard.num_rows for _, shard, _ in items], max_rows=options.max_rows_per_shard,
                     overhead=overhead)
    return [(items[b[0]][0], [items[i][1] for i in b], items[b[0]][2]) for b in bins]


def write_in_key_order(pairs: beam.PCollection, write_id: beam.PCollection, write_chunk: beam.DoFn,
                       path: str, features: Features, options: WriterOptions, overhead: int,
                       bad_tag: str) -> tuple[beam.PCollection, beam.PCollection, beam.PCollection]:
    """The deterministic write's steps: `(merged shards tagged with their order, dead letters, staged shards)`.

    `write_chunk` takes `(chunk, pairs)` with the write id and the chunk ranks as side
    inputs, and yields `(write id, shard, order)` (and dead letters tagged `bad_tag`).
    """
    chunk_rows = CHUNK_BATCHES * options.batch_size
    chunked = pairs | "ChunkOf" >> beam.Map(lambda item: (chunk_of(keyed(item)[0], chunk_rows), keyed(item)))
    chunk_ranks = (chunked
                   | "ChunkNames" >> beam.Keys()
                   | "DistinctChunks" >> beam.Distinct()
                   | "ListChunks" >> beam.combiners.ToList()
                   | "RankChunks" >> beam.Map(ranks))
    written = (chunked
               | "GroupChunks" >> beam.GroupByKey()
               | "WriteChunks" >> beam.ParDo(write_chunk, AsSingleton(write_id),
                                             AsSingleton(chunk_ranks)).with_outputs(bad_tag, main="shards"))
    staged = (written.shards
              | "PairShards" >> beam.Map(lambda item: (None, item))
              | "GroupShards" >> beam.GroupByKey())
    merged = (staged
              | "PlanMerge" >> beam.FlatMap(lambda kv: plan_ordered_bins(kv[1], options, overhead))
              | "SpreadBins" >> beam.Reshuffle()
              | "MergeBins" >> beam.ParDo(MergeBinFn(path, features, options))
              | "PairMerged" >> beam.Map(lambda item: (None, item))
              | "GroupMerged" >> beam.GroupByKey()
              | "Extract" >> beam.FlatMap(lambda kv: kv[1]))
    return merged, written[bad_tag], staged


class WriteChunkFn(WriteBundleFn):
    """Writes one chunk of a deterministic write (see `ordered`): its examples in key order, into
    staged shards tagged with their order `(chunk rank, shard index)`."""

    def process(self, element: tuple[Any, list[tuple[Any, Any]]], write_id: Any, chunk_ranks: dict[Any, int]):
        chunk, items = element
        if self._write_id is None:
            self._write_id = write_id_or_fallback(write_id)
        self.start_bundle()
        for item in in_key_order(items):
            yield from super().process(item)
        rank, index = chunk_ranks[chunk], 0
        for output in self.finish_bundle() or ():
            if isinstance(output, TaggedOutput):  # a dead letter, in a window for finish_bundle
                yield TaggedOutput(output.tag, output.value.value)
            else:
                write_id_, shard = output.value
                yield write_id_, shard, (rank, index)
                index += 1
