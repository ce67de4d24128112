"""The write of every pipeline: `(where, example)` pairs checked, then handed to the sink.

An example may stand for several (`rows.Rows`, in Arrow form) or for an input that could not
be parsed (`bad_inputs.Malformed`). Each is fully read before the sink sees it, and
encoded once (by the sink, or for `Rows` by `rows.checked`), so the published cache never
holds part of one.
"""

from __future__ import annotations

import argparse
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, TaggedOutput

from beam_shards import Features, WriteToArrowShards
from beam_shards.beam import CheckFeatures, counters
from beam_shards.progress import Tally
from pipelines.bad_inputs import BAD, as_dead_letter, from_dead_letter, record_bad_inputs
from pipelines.flags import dedup_flag
from pipelines.rows import SetAside, checked, rows_in
from pipelines.where import Where


class _CheckFn(beam.DoFn):
    """Turns `(where, example)` pairs into what the sink takes: an input that could not be
    parsed fails the pipeline or goes to the bad output; `Rows` that fit the features go
    on encoded (else their rows one by one); examples go on as they are, for the sink to
    encode once. With a `tally` folder, the rows read are counted there (`progress.Tally`).
    `features` None: they are made when the pipeline runs and come as a side input."""

    def __init__(self, features: Features | None, skip_bad: bool, tally: str | None = None):
        self._features = features
        self._skip_bad = skip_bad
        self._tally_folder = tally
        self._tally: Tally | None = None
        self._bad = Metrics.counter(counters.NAMESPACE, counters.BAD_INPUTS)

    def setup(self):
        if self._tally_folder is not None:
            self._tally = Tally(self._tally_folder)

    def finish_bundle(self):
        if self._tally is not None:
            self._tally.flush()

    def process(self, element: tuple[Where, Any], features: Features | None = None):
        if self._tally is not None:
            self._tally.add(rows_in(element[1]))
        for item in checked(element, self._features if features is None else features, self._skip_bad):
            if isinstance(item, SetAside):
                self._bad.inc()
                yield TaggedOutput(BAD, item.record)
            else:
                yield item


def write_cache(examples: beam.PCollection, args: argparse.Namespace, features: Features | beam.PCollection,
                metadata: dict[str, Any], write_id: str | None = None, tally: str | None = None) -> beam.PCollection:
    """Writes `(where, example)` pairs into the cache at `args.output`, checked against `features`.

    An example may be a `Rows` of several. `features` may be made when the pipeline runs
    (a PCollection of one `Features`, as `WriteToArrowShards` takes): they are checked
    for the write first, then read as a side input. With `args.skip_bad`, inputs that cannot be
    parsed and examples the sink refuses (its dead letters, `on_bad="skip"`) are left
    out, up to `args.max_bad` of them (the sink fails the write past it, publishing
    nothing), and listed beside the cache once it is published. `write_id` is the sink's (a
    fresh one by default); `tally` a local folder where the rows read are counted for a
    `progress.Watch`. Returns the PCollection holding the published `Manifest`.
    """
    if isinstance(features, beam.PCollection):
        features = features | "CheckFeatures" >> CheckFeatures(args.output, metadata, args.mode)
        check = beam.ParDo(_CheckFn(None, args.skip_bad, tally), AsSingleton(features))
    else:
        check = beam.ParDo(_CheckFn(features, args.skip_bad, tally))
    checked = examples | "Check" >> check.with_outputs(BAD, main="examples")
    skipping = {"on_bad": "skip"} if args.skip_bad else {}
    if args.skip_bad and args.max_bad is not None:
        skipping["max_bad"] = args.max_bad
        skipping["set_aside"] = checked[BAD] | "DeadLetters" >> beam.Map(as_dead_letter)
    written = checked.examples | "WriteToArrowShards" >> WriteToArrowShards(
        args.output, features, shard_size_bytes=args.shard_size, batch_size=args.batch_size,
        compression=args.compression, metadata=metadata, mode=args.mode, write_id=write_id,
        allow_empty=args.allow_empty, deterministic=args.deterministic, dedup=dedup_flag(args), **skipping)
    if not args.skip_bad:
        return written
    refused = written.bad | "BadExamples" >> beam.Map(from_dead_letter)
    _ = ((checked[BAD], refused) | "AllBadInputs" >> beam.Flatten()
         | "CollectBadInputs" >> beam.combiners.ToList()
         | "ListBadInputs" >> beam.Map(record_bad_inputs, args.output, AsSingleton(written.manifest)))
    return written.manifest
