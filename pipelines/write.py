"""The write of every pipeline: `(where, example)` pairs checked, then handed to the sink.

An example may stand for several (`Rows`, in Arrow form) or for an input that could not
be parsed (`bad_inputs.Malformed`). Each is fully read before the sink sees it, and
encoded once (by the sink, or for `Rows` here), so the published cache never holds part
of one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, TaggedOutput

from beam_shards import Features, WriteToArrowShards
from beam_shards.beam import CheckFeatures, counters
from beam_shards.progress import Tally
from beam_shards.shards import EncodedRows
from pipelines.bad_inputs import BAD, BadInputError, Malformed, bad_input, record_bad_inputs
from pipelines.flags import dedup_flag
from pipelines.where import Where


class Rows:
    """Stands for several examples at once in the `(where, example)` stream: rows in Arrow form.

    `write_cache` checks the columns against the features all at once
    (`Features.encode_batch`) and hands them to the sink whole, encoded, so the sink
    does not check them again. When they do not fit, the rows from `one_by_one()` go
    to the sink one at a time instead, so a bad row is named, and with `--skip_bad`
    skipped alone.

    Example:
        >>> import pyarrow as pa
        >>> Rows(pa.table({"n": [1, 2]}), lambda: iter([(Where("f", 0), {"n": 1}), (Where("f", 1), {"n": 2})]))
        Rows(2 rows)

    Args:
      table: a pyarrow Table or RecordBatch with a column per feature.
      one_by_one: returns an iterator of the same rows as `(where, example)` pairs; it
        must pickle (a module-level function or a `functools.partial` of one), since
        Beam may ship a `Rows` between workers.
    """

    def __init__(self, table: pa.Table | pa.RecordBatch, one_by_one: Callable[[], Iterator[tuple[Where, Any]]]):
        self.table = table
        self.one_by_one = one_by_one

    def __repr__(self) -> str:
        return f"Rows({self.table.num_rows} rows)"


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
            example = element[1]
            self._tally.add(example.table.num_rows if isinstance(example, Rows) else 1)
        yield from self._check(element, self._features if features is None else features)

    def _check(self, element: tuple[Where, Any], features: Features):
        where, example = element
        if isinstance(example, Rows):
            table, rows = features.encode_batch_or_rows(example.table, where, example.one_by_one)
            if table is not None:
                yield where, EncodedRows(table)
            for item in rows:
                yield from self._check(item, features)
            return
        if not isinstance(example, Malformed):
            yield element
            return
        error = BadInputError(f"{where}: {example.reason}")
        if not self._skip_bad:
            raise error
        self._bad.inc()
        yield TaggedOutput(BAD, bad_input(where, error))


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
        skipping["set_aside"] = checked[BAD] | "DeadLetters" >> beam.Map(
            lambda item: {"key": item[0], "reason": item[1]["error"]})
    written = checked.examples | "WriteToArrowShards" >> WriteToArrowShards(
        args.output, features, shard_size_bytes=args.shard_size, batch_size=args.batch_size,
        compression=args.compression, metadata=metadata, mode=args.mode, write_id=write_id,
        allow_empty=args.allow_empty, deterministic=args.deterministic, dedup=dedup_flag(args), **skipping)
    if not args.skip_bad:
        return written
    refused = written.bad | "BadExamples" >> beam.Map(lambda letter: bad_input(letter["key"], letter["reason"]))
    _ = ((checked[BAD], refused) | "AllBadInputs" >> beam.Flatten()
         | "CollectBadInputs" >> beam.combiners.ToList()
         | "ListBadInputs" >> beam.Map(record_bad_inputs, args.output, AsSingleton(written.manifest)))
    return written.manifest
