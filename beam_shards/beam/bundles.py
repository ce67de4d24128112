"""The sink's write step: each bundle's examples encoded into size-rotated staged shards.

Each bundle attempt stages its shards in a folder of its own (`_staging/<write id>/<attempt>/`),
so retried or repeated bundles never collide; a failed attempt removes its files. With
`on_bad="skip"`, an example that does not fit goes to the `BAD_TAG` output instead (only a
committed bundle's reach it); with `dedup`, the digest of each row staged goes to the
`DIGESTS_TAG` output, and the count of the bundle's own duplicates, left out, to `DROPPED_TAG`
(`staged_dedup`). `BundleWriter` does the writing, without Beam;
`WriteBundleFn` is the DoFn around it.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import EmptySideInput, TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam import counters
from beam_shards.beam.staged_dedup import DIGESTS_TAG, DROPPED_TAG, RowDigester
from beam_shards.display import short_repr
from beam_shards.errors import EncodeError, best_effort
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.writer import ShardWriter
from beam_shards.shards.writer_inputs import BatchHook, split_key
from beam_shards.storage import fs
from beam_shards.versions.staging import staged_shards

_LOGGER = logging.getLogger(__name__)
BAD_TAG = "bad"


def write_id_or_fallback(write_id: Any) -> str:
    # Some runners (Prism, see apache/beam#36563) hand a DoFn an empty singleton side
    # input. Fall back to a fresh id: staged paths travel with the shard results, so
    # finalize still finds every file.
    if isinstance(write_id, EmptySideInput):
        _LOGGER.warning("beam_shards: the write id side input was empty; using a fresh id for this bundle")
        return new_write_id()
    return write_id


def dead_letter(example: Any, key: Any, error: EncodeError) -> dict[str, Any]:
    """The record of a skipped example: its key, the example (a short repr when it does not
    pickle, so the record can travel between workers) and the reason."""
    try:
        pickle.dumps(example)
    except Exception:  # noqa: BLE001 - anything pickle refuses
        example = short_repr(example)
    return {"key": key, "example": example, "reason": str(error)}


class BundleWriter:
    """Writes one bundle at a time into size-rotated shards staged in an attempt folder of its own:
    `start` a bundle, `add` its examples, `finish` it (or `discard` it). No Beam inside: the
    sink's write step and the deterministic write's steps (`ordered`) compose it.

    With `skip_bad`, an example that does not fit becomes a dead letter (`take_letters`)
    instead of failing the bundle; a batch that does not fit is written row by row, so
    only its bad rows are skipped. A bundle that fails removes what it staged.

    Args:
      path: the cache folder.
      features: the schema of the shards.
      options: the shards' sizes, compression and column types.
      skip_bad: dead-letter examples that do not fit instead of raising.
      hidden: columns the caller added to the examples, left out of their dead letters.
      hook: the shard writers' `BatchHook`, if any.
    """

    def __init__(self, path: str, features: Features, options: WriterOptions, skip_bad: bool = False,
                 hidden: tuple[str, ...] = (), hook: BatchHook | None = None):
        self._layout = CacheLayout(path)
        self._hook = hook
        self._features = features
        self._options = options
        self._skip = skip_bad
        self._hidden = hidden
        self._writer: ShardWriter | None = None
        self._letters: list[dict[str, Any]] = []

    @property
    def started(self) -> bool:
        """Whether a bundle is started and not yet finished or discarded."""
        return self._writer is not None

    def start(self, write_id: str) -> None:
        """Starts a bundle of write `write_id`, in a fresh attempt folder (retries never collide).

        A bundle started before and never finished failed: its files are removed first.
        """
        self.discard()
        self._letters = []
        self._writer = ShardWriter(self._features, staged_shards(self._layout.new_attempt(write_id)), self._options,
                                   self._skip_bad if self._skip else None, self._hook)

    def add(self, example: Any, key: Any) -> None:
        """Adds an example (or a batch of them, or `EncodedRows`) of the started bundle.

        Raises:
          EncodeError: it does not fit (and `skip_bad` is off); the bundle is discarded, as on any error.
        """
        writer = self._started()
        try:
            writer.add(example, key)
        except BaseException:
            self.discard()
            raise

    def _started(self) -> ShardWriter:
        if self._writer is None:
            raise RuntimeError("BundleWriter: start a bundle before adding to or finishing it")
        return self._writer

    def _skip_bad(self, example: Any, key: Any, error: EncodeError) -> None:
        """The writer's `on_bad`: a dead letter for an example (or a batch's row) left out."""
        if self._hidden and isinstance(example, dict):
            example = {name: value for name, value in example.items() if name not in self._hidden}
        self._letters.append(dead_letter(example, key, error))

    def take_letters(self) -> list[dict[str, Any]]:
        """The dead letters made since the last call (plain examples are checked with their
        batch, so a letter may come with a later example, or only with `finish`)."""
        letters, self._letters = self._letters, []
        return letters

    def finish(self) -> list[WrittenShard]:
        """Writes what is buffered and returns the bundle's shards, all on disk."""
        writer = self._started()
        try:
            shards = writer.close()
        except BaseException:
            self.discard()
            raise
        self._writer = None
        return shards

    def discard(self) -> None:
        """Drops the started bundle and removes its files (a runner may retry it)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with best_effort("remove the files of a failed bundle", self._layout.path):
                fs.delete(writer.abort())


class WriteCounters:
    """The Beam counters of what a write staged: rows, bytes and shards, and examples dead-lettered."""

    def __init__(self):
        self._rows = Metrics.counter(counters.NAMESPACE, counters.ROWS_WRITTEN)
        self._bytes = Metrics.counter(counters.NAMESPACE, counters.BYTES_WRITTEN)
        self._shards = Metrics.counter(counters.NAMESPACE, counters.SHARDS_WRITTEN)
        self._bad = Metrics.counter(counters.NAMESPACE, counters.BAD_INPUTS)

    def written(self, shards: list[WrittenShard]) -> None:
        for shard in shards:
            self._rows.inc(shard.num_rows)
            self._shards.inc()
            self._bytes.inc(shard.num_bytes)

    def skipped(self, letters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Counts `letters` and returns them."""
        if letters:
            self._bad.inc(len(letters))
        return letters


class WriteBundleFn(beam.DoFn):
    """Encodes a bundle's examples and writes them into size-rotated staged shards (a `BundleWriter`),
    yielding `(write id, shard)` for each; with `on_bad="skip"`, dead letters go to the `BAD_TAG` output;
    with `dedup` ("rows" or a list of columns), the bundle's own duplicates are left out, and counted
    in the `DROPPED_TAG` output at its end, and the records of the rows staged (digest and place) go
    to the `DIGESTS_TAG` output in buckets (`staged_dedup.RowDigester`).

    `features` None: they are made when the pipeline runs, and come to `WriteBundleWithIdFn` as a
    side input (the bundle writer is made at the first element)."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, write_id: str | None = None,
                 on_bad: str = "fail", dedup: str | list[str] | None = None):
        self._path = path
        self._features = features
        self._options = options
        self._given_write_id = write_id
        self._skip = on_bad == "skip"
        self._dedup = dedup
        self._tagged_outputs = self._skip or dedup is not None
        self._digester: RowDigester | None = None
        self._counters = WriteCounters()

    def setup(self) -> None:
        self._write_id = self._given_write_id
        self._bundle = None if self._features is None else self._new_bundle(self._features)

    def _new_bundle(self, features: Features) -> BundleWriter:
        if self._dedup is not None:
            self._digester = RowDigester(None if self._dedup == "rows" else list(self._dedup), features)
        return BundleWriter(self._path, features, self._options, self._skip, hook=self._digester)

    def start_bundle(self) -> None:
        # A bundle left unfinished failed after this step (the runner may retry it): drop its files
        # and the digests of their rows.
        if self._bundle is not None:
            self._bundle.discard()
        if self._digester is not None:
            self._digester.reset()

    def teardown(self) -> None:
        # A step fused before this one failed mid-bundle: drop what this attempt staged.
        if getattr(self, "_bundle", None) is not None:
            self._bundle.discard()

    def process(self, element: Any) -> list[TaggedOutput] | None:
        key, example = split_key(element, None)
        if not self._bundle.started:
            self._bundle.start(self._write_id)
        self._bundle.add(example, key)
        return self._tagged() if self._tagged_outputs else None

    def _tagged(self, end: bool = False) -> list[TaggedOutput]:
        """The dead letters and the rows' digests made since the last call, as tagged outputs (digests
        are held until many are, or the bundle's `end`)."""
        letters = self._bundle.take_letters()
        outputs = [TaggedOutput(BAD_TAG, letter) for letter in self._counters.skipped(letters)] if letters else []
        if self._digester is not None:
            records = self._digester.take(end)
            if records:
                outputs.extend(TaggedOutput(DIGESTS_TAG, part) for part in records)
        return outputs

    def finish_bundle(self):
        if self._bundle is None or not self._bundle.started:
            return
        shards = self._bundle.finish()
        outputs = self._tagged(end=True)
        if self._digester is not None and self._digester.dropped:
            outputs.append(TaggedOutput(DROPPED_TAG, self._digester.dropped))
        for output in outputs:
            yield TaggedOutput(output.tag, window.GlobalWindows.windowed_value(output.value))
        self._counters.written(shards)
        for shard in shards:
            yield window.GlobalWindows.windowed_value((self._write_id, shard))


class WriteBundleWithIdFn(WriteBundleFn):
    """`WriteBundleFn` for a write whose id, or features, are made when the pipeline runs: they come as
    side inputs (the features only when made then)."""

    def process(self, element: Any, write_id: Any, features: Features | None = None) -> list[TaggedOutput] | None:
        if self._write_id is None:
            self._write_id = write_id_or_fallback(write_id)
        if self._bundle is None:
            self._bundle = self._new_bundle(features)
        return super().process(element)
