"""The sink's merge step: the staged shards planned into bins, each bin merged into one staged
shard by copying record batches, in parallel across workers."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_shards.beam import counters, deferred
from beam_shards.beam.staging import merge_bin
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout
from beam_shards.shards.merge import file_overhead
from beam_shards.shards.options import WriterOptions, WrittenShard


class _MergeBinFn(beam.DoFn):
    """Merges one bin, `(write id, shards, *rest)`, into `(write id, merged shard, *rest)`: the bin's
    shards copied in a fresh attempt folder (a retried or repeated merge never collides with
    another); a bin of one shard passes through. A shard may be given as `(shard, first, end)`:
    its record batches [first, end) alone. `rest` (a deterministic write's order) is kept.
    Features made when the pipeline runs come as a side input (`deferred`)."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions):
        self._layout = CacheLayout(path)
        self._features = features
        self._options = options
        self._merged = Metrics.counter(counters.NAMESPACE, counters.SHARDS_MERGED)

    def process(self, element: tuple[Any, ...], features: Features | None = None):
        write_id, spans, *rest = element
        merged = merge_bin(self._layout, write_id, spans, deferred.features_for(self._features, features),
                           self._options)
        if len(spans) > 1 or not isinstance(spans[0], WrittenShard):
            self._merged.inc(len(spans))
        yield (write_id, merged, *rest)


def gather(pcoll: beam.PCollection, name: str) -> beam.PCollection:
    """`pcoll` as one `(None, items)` element. Like Beam's `WriteImpl`: a shuffle's output, so the
    list a later step reads is stable whatever the runner re-runs."""
    return (pcoll
            | f"Pair{name}" >> beam.Map(lambda item: (None, item))
            | f"Group{name}" >> beam.GroupByKey())


def merge_small_shards(written: beam.PCollection, plan: Callable[[Iterable[tuple], int], list[tuple]], path: str,
                       features: Features | beam.PCollection,
                       options: WriterOptions) -> tuple[beam.PCollection, beam.PCollection]:
    """The merge step of a write whose written shards are `written` (`(write id, shard, *rest)`):
    returns them gathered (`(None, items)`, for finalize) and the merged shards, one element each.

    `plan` takes every written shard and `overhead`, the bytes a shard file spends whatever its
    rows (`file_overhead`), and returns the bins, `(write id, shards, *rest)`; the bins are spread
    over workers and each is merged by one `_MergeBinFn` call. `features` are the write's, or a
    PCollection of them made when the pipeline runs (`deferred`).
    """
    staged = gather(written, "Shards")
    given, side = deferred.known(features), deferred.side_inputs(features)
    merged = (staged
              | "PlanMerge" >> beam.FlatMap(_plan, plan, given, *side)
              | "SpreadBins" >> beam.Reshuffle()
              | "MergeBins" >> beam.ParDo(_MergeBinFn(path, given, options), *side))
    merged = gather(merged, "Merged") | "Extract" >> beam.FlatMap(lambda kv: kv[1])
    return staged, merged


def _plan(gathered: tuple[None, Iterable[tuple]], plan: Callable[[Iterable[tuple], int], list[tuple]],
          given: Features | None, features: Features | None = None) -> list[tuple]:
    return plan(gathered[1], overhead=file_overhead(deferred.features_for(given, features)))
