"""The Beam steps of a deterministic write (`ordered` says how it works): the runs, the ranks of
the chunks, and the chunks, each step a DoFn around `ordered`'s functions."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.pvalue import AsSingleton, TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam.bundles import BAD_TAG, WriteCounters, write_id_or_fallback
from beam_shards.beam.plain_keys import plain_key
from beam_shards.beam.ordered import (KEY_COLUMN, Piece, chunk_in_key_order, chunk_rows, keyed, ranks, run_features,
                                      run_options, rough_nbytes, write_chunk, write_run)
from beam_shards.beam.ordered_bins import batch_bytes
from beam_shards.beam.staging import BundleWriter
from beam_shards.features import Features
from beam_shards.shards.options import WriterOptions

# About how many bytes of examples a bundle sorts at a time into one run.
RUN_BYTES = 64 << 20

class WriteRunsFn(beam.DoFn):
    """Writes a bundle's `(key, example)` pairs as sorted runs (see `ordered`), yielding
    `(chunk, (run shard, first row, rows))` for each chunk of each run shard, and the dead
    letters of `on_bad="skip"` tagged `BAD_TAG`. A key of a type the plain encoding does not
    hold fails the bundle at once (`plain_keys.plain_key`). `features` None: they are made when the
    pipeline runs and come as a side input (the run writer is made at the first element)."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, write_id: str | None = None,
                 on_bad: str = "fail", run_bytes: int | None = None):
        self._path = path
        self._features = None if features is None else run_features(features)
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
            self._features = run_features(features)
            self._runs = self._new_runs()
        key, example = keyed(element)
        self._pairs.append((plain_key(key), key, example))
        self._pending_bytes += rough_nbytes(example)
        if self._pending_bytes >= self._run_bytes:
            yield from self._write_run()

    def finish_bundle(self):
        for output in self._write_run():
            value = output.value if isinstance(output, TaggedOutput) else output
            windowed = window.GlobalWindows.windowed_value(value)
            yield TaggedOutput(output.tag, windowed) if isinstance(output, TaggedOutput) else windowed

    def _write_run(self):
        """Sorts the buffered pairs and writes them as one run: its dead letters, then its pieces."""
        pairs, self._pairs, self._pending_bytes = self._pairs, [], 0
        if not pairs:
            return
        for output in write_run(self._runs, pairs, self._write_id, self._features, self._options, self._chunk_rows):
            if isinstance(output, dict):
                self._counters.skipped([output])
                yield TaggedOutput(BAD_TAG, output)
            else:
                yield output


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
        self._counters = WriteCounters()

    def setup(self) -> None:
        self._write_id = self._given_write_id
        self._chunk = None if self._features is None else self._use(self._features)

    def _use(self, features: Features) -> BundleWriter:
        """The chunk writer of `features`."""
        self._features = features
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
        rows = self._kept(chunk_in_key_order(chunk, pieces, self._features, self._options))
        shards = write_chunk(self._chunk, self._write_id, rows)
        self._counters.written(shards)
        rank = chunk_ranks[chunk]
        for index, shard in enumerate(shards):
            yield self._write_id, shard, (rank, index), batch_bytes(shard)

    def _kept(self, rows: pa.Table) -> pa.Table:
        """The rows of a chunk, in key order, that it writes (a deduplicating write leaves some out)."""
        return rows
