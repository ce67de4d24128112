"""A deterministic write in one process, without a runner: the shard bytes of
`WriteToArrowShards(..., deterministic=True)`, for inputs small enough that starting Beam
would cost more than the write.

It runs `ordered`'s steps in turn, as the Beam steps (`ordered_steps`) run them over
bundles: the pairs as one sorted run, each chunk read back in key order and written with a
chunk writer, the chunks' shards planned into bins (`ordered_bins`) and merged, and the
result published in order; so the same input gives the same rows, order and shard bytes
as on any runner. When every example is rows already encoded (`EncodedRows`, as the
pipelines' batches are) under keys of their own, the run is skipped: it would only put
the rows back in the order they are in, at the cost of a key per row, written and read.
Nothing here imports Beam.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.beam.bad_limit import check_skipping, skipped_of
from beam_shards.beam.plain_keys import plain_key
from beam_shards.beam.ordered import (KEY_COLUMN, chunk_in_key_order, chunk_of, chunk_rows, keyed, ranks,
                                      run_features, run_options, sorted_keys, write_chunk, write_run)
from beam_shards.beam.ordered_bins import batch_bytes, plan_ordered_bins
from beam_shards.beam.publishing import apply_retention, publish_staged, settle_write
from beam_shards.beam.staging import BundleWriter, merge_bin
from beam_shards.errors import best_effort
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.shards.encoded_rows import EncodedRows
from beam_shards.shards.merge import file_overhead
from beam_shards.shards.options import WriterOptions
from beam_shards.versions.commit import abandon
from beam_shards.versions.gc import Retention


@dataclasses.dataclass(frozen=True)
class WrittenInProcess:
    """What `write_in_process` published, and the dead letters of what it skipped (`on_bad="skip"`)."""

    manifest: Manifest
    letters: list[dict[str, Any]]


def write_in_process(pairs: Iterable[Any], path: str, features: Features, options: WriterOptions, *,
                     metadata: dict[str, Any] | None = None, mode: str = "overwrite", on_bad: str = "fail",
                     max_bad: int | float | None = None, set_aside: list[dict[str, Any]] = (),
                     allow_empty: bool = False, retention: Retention | None = Retention(),
                     write_id: str | None = None) -> WrittenInProcess:
    """Writes `(key, example)` pairs in key order and publishes them, as `WriteToArrowShards(path,
    features, deterministic=True, ...)` with the same arguments would.

    Example:
        >>> from beam_shards import Features, Value
        >>> from beam_shards.shards import WriterOptions
        >>> written = write_in_process([(("a", 1), {"x": 1}), (("a", 0), {"x": 0})], "/tmp/doctest_in_process",
        ...                            Features({"x": Value("int64")}), WriterOptions())
        >>> written.manifest.num_rows
        2

    Args:
      pairs: `(key, example)` pairs, an example a dict, a batch or `EncodedRows`; all are held
        in memory until written (this is for small inputs).
      path: the cache folder.
      features: the schema of the rows.
      options: the shards' sizes and compression.
      metadata, mode, on_bad, max_bad, allow_empty, retention: as `WriteToArrowShards` takes them.
      set_aside: dead letters of inputs the caller left out before the write, counted toward `max_bad`.
      write_id: the write's id (a fresh one by default), for a `progress.Watch` of it, say; a write
        run again with the id of one that published publishes nothing more, as the sink's.

    Raises:
      EncodeError: an example does not fit (without `on_bad="skip"`); nothing is published.
      TooManyBadError, EmptyWriteError: more skipped than `max_bad` allows, or no row at all
        (without `allow_empty`); nothing is published.
      ValueError: a pair without a key, bad arguments.
    """
    check_skipping(on_bad, max_bad, bool(set_aside))
    metadata, since, options = settle_write(path, features, metadata, mode, options, write_id)
    write_id = write_id or new_write_id()
    try:
        staged, letters = _stage(pairs, path, features, options, write_id, on_bad == "skip")
        manifest = publish_staged(path, write_id=write_id, features=features, staged=staged, options=options,
                                  metadata=metadata, mode=mode, ordered=True, since=since, allow_empty=allow_empty,
                                  max_bad=max_bad, skipped=skipped_of([*set_aside, *letters]))
    except BaseException:
        with best_effort(f"remove the files of failed write {write_id}", path):
            abandon(path, write_id)
        raise
    apply_retention(path, retention)
    return WrittenInProcess(manifest, letters)


def _stage(pairs: Iterable[Any], path: str, features: Features, options: WriterOptions, write_id: str,
           skip: bool) -> tuple[list[Any], list[dict[str, Any]]]:
    """The staged shards of a write, in order, and its dead letters: the chunks written, the bins merged."""
    triples = sorted_keys([(plain_key(key), key, example) for key, example in map(keyed, pairs)],
                          key=operator.itemgetter(0))
    rows_per_chunk = chunk_rows(options)
    if _all_encoded_with_keys_apart(triples):
        chunks, letters = _chunks_as_given(triples, rows_per_chunk), []
    else:
        chunks, letters = _chunks_through_a_run(triples, path, features, options, write_id, skip, rows_per_chunk)
    writer = BundleWriter(path, features, options)
    written = []
    for chunk, rank in ranks(chunks).items():
        shards = write_chunk(writer, write_id, chunks[chunk]())
        written.extend((write_id, shard, (rank, index), batch_bytes(shard)) for index, shard in enumerate(shards))
    layout = CacheLayout(path)
    bins = plan_ordered_bins(written, options, overhead=file_overhead(features))
    return [merge_bin(layout, write_id, spans, features, options) for _, spans, _ in bins], letters


def _all_encoded_with_keys_apart(triples: list[tuple[Any, Any, Any]]) -> bool:
    """Whether every example is `EncodedRows` (checked already) and no two share a key (no ties to
    break by the rows' values)."""
    return (all(isinstance(example, EncodedRows) for _, _, example in triples)
            and all(a[0] != b[0] for a, b in zip(triples, triples[1:])))


def _chunks_as_given(triples: list[tuple[Any, Any, Any]], rows_per_chunk: int) -> dict[Any, Callable[[], pa.Table]]:
    """Each chunk's rows in key order, for sorted `triples` of `EncodedRows` with keys apart: the rows
    of an example are in order already, and share its chunk, so a run would only put them back
    in this order (row i of an example keys `(key, i)`)."""
    tables = collections.defaultdict(list)
    for plain, _, example in triples:
        tables[chunk_of(plain, rows_per_chunk)].append(example.table)
    return {chunk: functools.partial(_one_table, parts) for chunk, parts in tables.items()}


def _one_table(parts: list[pa.Table]) -> pa.Table:
    # Laid out as a chunk sorted from the runs is, by a `take`: the IPC writer writes the buffers of
    # a batch as they lie, so the same rows in another layout give other bytes (a batch sliced from
    # a longer array carries the bytes after it to a 64-byte boundary; a list's child offsets may
    # start past 0), and `take` lays out its result the same whatever it was given.
    table = pa.concat_tables(parts)
    return table.take(pa.array(np.arange(table.num_rows)))


def _chunks_through_a_run(triples: list[tuple[Any, Any, Any]], path: str, features: Features,
                          options: WriterOptions, write_id: str, skip: bool,
                          rows_per_chunk: int) -> tuple[dict[Any, Callable[[], pa.Table]], list[dict[str, Any]]]:
    """Each chunk's rows in key order, read back from the triples written as one run (examples that
    are not encoded yet are encoded there, or dead-lettered with `skip`), and the dead letters."""
    keyed_features, keyed_options = run_features(features), run_options(options)
    runs = BundleWriter(path, keyed_features, keyed_options, skip, hidden=(KEY_COLUMN,))
    letters, pieces = [], collections.defaultdict(list)
    for output in write_run(runs, triples, write_id, keyed_features, keyed_options, rows_per_chunk):
        if isinstance(output, dict):
            letters.append(output)
        else:
            pieces[output[0]].append(output[1])
    return {chunk: functools.partial(chunk_in_key_order, chunk, listed, features, options)
            for chunk, listed in pieces.items()}, letters
