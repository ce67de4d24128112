"""The sink's merge step: one bin of staged shards merged into one staged shard, by copying record batches."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_shards.beam import counters
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout
from beam_shards.shards.merge import merge_shards
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.versions.staging import staged_shards


class MergeBinFn(beam.DoFn):
    """Merges one bin, `(write id, shards, *rest)`, into `(write id, merged shard, *rest)`: the bin's
    shards copied in a fresh attempt folder (a retried or repeated merge never collides with
    another); a bin of one shard passes through. `rest` (a deterministic write's order) is kept."""

    def __init__(self, path: str, features: Features, options: WriterOptions):
        self._layout = CacheLayout(path)
        self._features = features
        self._options = options
        self._merged = Metrics.counter(counters.NAMESPACE, counters.SHARDS_MERGED)

    def process(self, element: tuple[Any, ...]):
        write_id, shards, *rest = element
        if len(shards) == 1:
            yield (write_id, shards[0], *rest)
            return
        attempt = self._layout.new_attempt(write_id)
        merged: WrittenShard = merge_shards(shards, self._features, staged_shards(attempt), self._options.compression,
                                            self._options.column_types)
        self._merged.inc(len(shards))
        yield (write_id, merged, *rest)
