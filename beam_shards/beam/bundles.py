"""The sink's write step: each bundle's examples encoded into size-rotated staged shards.

Each bundle attempt stages its shards in a folder of its own (`_staging/<write id>/<attempt>/`),
so retried or repeated bundles never collide; a failed attempt removes its files. With
`on_bad="skip"`, an example that does not fit goes to the `BAD_TAG` output instead (only a
committed bundle's reach it); with `dedup`, the digest of each row staged goes to the
`DIGESTS_TAG` output, and the count of the bundle's own duplicates, left out, to `DROPPED_TAG`
(`staged_dedup`). `staging.BundleWriter` does the writing, without Beam;
`WriteBundleFn` is the DoFn around it.
"""

from __future__ import annotations

import logging
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import EmptySideInput, TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam import counters
from beam_shards.beam.staged_dedup import DIGESTS_TAG, DROPPED_TAG, RowDigester
from beam_shards.beam.staging import BundleWriter
from beam_shards.features import Features
from beam_shards.format.layout import new_write_id
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.writer_inputs import split_key

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
