"""The csv and jsonl pipelines on Beam: the raw batches of the index files spread over workers,
the features summed up by a combine when they are inferred from every row, and each batch
cast to them (`pipelines.tabular` says how a format is read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beam_shards import FeatureError, Features
from beam_shards.inference import NullTokens
from pipelines.cast_batches import examples
from pipelines.flags import parse_args
from pipelines.inference import inferring
from pipelines.raw_batches import RawBatch
from pipelines.running import Conversion
from pipelines.shell import without_beam_step
from pipelines.summaries import Summarizer, Summary, merge
from pipelines.tabular import (InferenceError, TabularFormat, before_reading, features_of_summary, metadata_of,
                               say_widened)


class _CastFn(beam.DoFn):
    """Casts each raw batch to the features: `(where, Rows or example or Malformed)` pairs."""

    def __init__(self, tabular: TabularFormat, null_tokens: NullTokens):
        self._format = tabular
        self._tokens = null_tokens

    def process(self, batch: RawBatch, features: Features) -> Iterator[tuple[Any, Any]]:
        yield from examples(batch, features, self._format.read_rows, self._format.to_example, self._tokens,
                            self._format.text)


class _SummarizeFn(beam.CombineFn):
    """Merges the summaries of raw batches into the summary of every row."""

    def __init__(self, summarize: Summarizer):
        self._summarize = summarize

    def create_accumulator(self) -> Summary:
        return Summary()

    def add_input(self, summary: Summary, batch: RawBatch) -> Summary:
        return merge(summary, self._summarize(batch))

    def merge_accumulators(self, accumulators: Iterable[Summary]) -> Summary:
        merged = Summary()
        for summary in accumulators:
            merged = merge(merged, summary)
        return merged

    def extract_output(self, summary: Summary) -> Summary:
        return summary


def _features(summary: Summary, tabular: TabularFormat, files: list[str], summarize: Summarizer) -> Features:
    """The features of the combined summary; the columns that widened are named on standard
    output (where the step runs: this terminal, on a local run), as the run's summary is."""
    try:
        features, widened = features_of_summary(summary, tabular, files, summarize)
    except FeatureError as error:
        raise InferenceError(str(error)) from None
    say_widened(widened)
    return features


def plan(tabular: TabularFormat, argv: Sequence[str] | None = None) -> Conversion:
    """The conversion of the index-file pipeline of `tabular` with command-line flags `argv`, on Beam.

    Without `--features` or `--infer_rows`, the features are a Beam combine of the summaries
    of the raw batches the cast reads too: every row is read once.
    """
    parser = tabular.build_parser()
    args, options = parse_args(parser, argv)
    files, summarize, features = before_reading(tabular, parser, args)

    def read(pipeline: beam.Pipeline) -> Any:
        batches = (pipeline
                   | "IndexFiles" >> beam.Create(files)
                   | "ReadBatches" >> beam.FlatMap(tabular.read_file)
                   | "Spread" >> beam.Reshuffle())
        cast = _CastFn(tabular, summarize.null_tokens)
        if features is not None:
            return batches | "Cast" >> beam.ParDo(cast, features)
        made = (batches
                | "Summarize" >> beam.CombineGlobally(_SummarizeFn(summarize))
                | "Features" >> beam.Map(_features, tabular, files, summarize))
        return batches | "Cast" >> beam.ParDo(cast, beam.pvalue.AsSingleton(made)), made

    def explain(error: Exception) -> None:
        if features is None and isinstance(error, InferenceError):  # Beam names its step in the message
            with inferring(parser, files):
                raise FeatureError(without_beam_step(str(error))) from None

    return Conversion(options, args, read, features, metadata_of(tabular, args), explain)
