"""The sink's write step: each bundle's examples encoded into size-rotated staged shards.

Each bundle attempt stages its shards in a folder of its own (`_staging/<write id>/<attempt>/`),
so retried or repeated bundles never collide; a failed attempt removes its files. With
`on_bad="skip"`, an example that does not fit goes to the `BAD_TAG` output instead (only a
committed bundle's reach it).
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
from beam_shards.display import short_repr
from beam_shards.errors import EncodeError, best_effort
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter, split_key
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


class WriteBundleFn(beam.DoFn):
    """Encodes a bundle's examples and writes them into size-rotated staged shards.

    With `on_bad="skip"` an example that does not fit is returned as a dead letter (the
    `BAD_TAG` output) instead of failing the bundle; a batch that does not fit is
    written row by row, so only its bad rows are skipped.
    """

    def __init__(self, path: str, features: Features, options: WriterOptions, write_id: str | None = None,
                 on_bad: str = "fail"):
        self._layout = CacheLayout(path)
        self._features = features
        self._options = options
        self._given_write_id = write_id
        self._skip = on_bad == "skip"
        self._rows = Metrics.counter(counters.NAMESPACE, counters.ROWS_WRITTEN)
        self._bytes = Metrics.counter(counters.NAMESPACE, counters.BYTES_WRITTEN)
        self._shards = Metrics.counter(counters.NAMESPACE, counters.SHARDS_WRITTEN)
        self._bad = Metrics.counter(counters.NAMESPACE, counters.BAD_INPUTS)

    def setup(self) -> None:
        self._write_id = self._given_write_id

    def start_bundle(self) -> None:
        self._writer: ShardWriter | None = None
        self._letters: list[dict[str, Any]] = []

    def teardown(self) -> None:
        # A step fused before this one failed mid-bundle: drop what this attempt staged.
        self._discard()

    def process(self, element: Any) -> list[TaggedOutput] | tuple[()]:
        key, example = split_key(element, None)
        if self._writer is None:
            attempt = self._layout.new_attempt(self._write_id)
            self._writer = ShardWriter(self._features, staged_shards(attempt), self._options,
                                       self._skip_bad if self._skip else None)
        try:
            self._writer.add(example, key)
        except BaseException:
            self._discard()
            raise
        if self._letters:
            return [TaggedOutput(BAD_TAG, letter) for letter in self._take_letters()]
        return ()

    def _skip_bad(self, example: Any, key: Any, error: EncodeError) -> None:
        """The writer's `on_bad`: a dead letter for an example (or a batch's row) left out."""
        self._letters.append(dead_letter(example, key, error))
        self._bad.inc()

    def _take_letters(self) -> list[dict[str, Any]]:
        """The dead letters made since the last call (plain examples are checked with their
        batch, so a letter may come with a later element, or only at the bundle's end)."""
        letters, self._letters = self._letters, []
        return letters

    def _discard(self) -> None:
        # A failed attempt removes what it staged; the runner may retry the bundle.
        writer, self._writer = getattr(self, "_writer", None), None
        if writer is not None:
            with best_effort("remove the files of a failed bundle", self._layout.path):
                fs.delete(writer.abort())

    def finish_bundle(self):
        if self._writer is None:
            return
        try:
            shards = self._writer.close()
        except BaseException:
            self._discard()
            raise
        self._writer = None
        for letter in self._take_letters():
            yield TaggedOutput(BAD_TAG, window.GlobalWindows.windowed_value(letter))
        for shard in shards:
            self._rows.inc(shard.num_rows)
            self._shards.inc()
            self._bytes.inc(shard.num_bytes)
            yield window.GlobalWindows.windowed_value((self._write_id, shard))


class WriteBundleWithIdFn(WriteBundleFn):
    """`WriteBundleFn` for a write whose id is made when the pipeline runs: it comes as a side input."""

    def process(self, element: Any, write_id: Any) -> list[TaggedOutput] | tuple[()]:
        if self._write_id is None:
            self._write_id = write_id_or_fallback(write_id)
        return super().process(element)
