"""What the `jsonl` and `csv` pipelines share: one row per example in index files.

A row holds text, numbers, bools, dates, lists and nested objects, and image columns
holding paths (relative to the index file, absolute, or a URI). Each file is read in
chunks of whole rows by pyarrow's readers (`raw_batches`); without a `--features` file
the features come from every row (or the first `--infer_rows`): per-batch summaries of
each column's kinds (`summaries`), merged. Each batch is then cast to the features
column by column (`cast_batches`) and handed to the sink whole; a batch that does not
fit goes row by row, so a bad row is named by file, line and column.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import apache_beam as beam

from beam_shards import FeatureError, Features, Manifest
from beam_shards.units import count_flag
from pipelines import common, summaries
from pipelines.cast_batches import ToExample, examples, parent, resolve_paths
from pipelines.null_tokens import NullTokens
from pipelines.opening import open_input
from pipelines.raw_batches import ParseChunk, RawBatch, ReadRows, read_file
from pipelines.summaries import DEFAULT_IMAGE_COLUMN, Summary

__all__ = ["DEFAULT_IMAGE_COLUMN", "TabularFormat", "infer_features", "open_input", "parent", "resolve_paths"]


class TabularFormat:
    """How one index file format is read: `jsonl` and `csv` each make one.

    Example:
        >>> from pipelines import jsonl
        >>> jsonl.FORMAT
        TabularFormat('jsonl')

    Args:
      name: the pipeline name, as in `python -m pipelines.NAME`.
      read_rows: yields `(line number, raw row)` from a binary stream, the Python reader
        every row a batch cannot convert goes through; a raw row that cannot be parsed is
        a `common.Malformed`.
      to_example: a raw row, the features and the null tokens to the example dict; raises
        ValueError naming the column when a value cannot be read.
      parse_chunk: pyarrow's reader of whole rows (`raw_batches.ParseChunk`).
      text: a header row, then cells of text (CSV), rather than JSON values.
      infer_value: a raw value to the Python value inference looks at.
      description: the pipeline's one-line `--help` description.
      example_file: an input file name for the help's examples.
    """

    def __init__(self, name: str, read_rows: ReadRows, to_example: ToExample, parse_chunk: ParseChunk, *,
                 text: bool = False, infer_value: Callable[[Any], Any] = lambda value: value,
                 description: str = "", example_file: str = "data/train"):
        self.name = name
        self.read_rows = read_rows
        self.to_example = to_example
        self.parse_chunk = parse_chunk
        self.text = text
        self.infer_value = infer_value
        self.description = description
        self.example_file = example_file

    def read_file(self, path: str) -> Iterator[RawBatch]:
        """The raw batches of one input file."""
        return read_file(path, self.read_rows, self.parse_chunk, self.text)

    def empty_hint(self, files: list[str]) -> str:
        """What to say when `files` hold no row at all."""
        if len(files) > 1:
            return f"none of the {len(files)} input files ({files[0]}, ...) holds a row"
        with open_input(files[0]) as handle:
            empty = not handle.read(1 << 16).strip()
        return f"{files[0]} is empty" if empty else f"{files[0]} holds no row after its header"

    def build_parser(self) -> argparse.ArgumentParser:
        """The pipeline's command-line parser (its `--help`)."""
        parser = common.make_parser(self.name, self.description)
        add_flags(parser, self.example_file, self.text)
        return parser

    def run(self, argv: Sequence[str] | None = None) -> Manifest:
        """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
        return run(self, self.build_parser(), argv)

    def __repr__(self) -> str:
        return f"TabularFormat({self.name!r})"


def infer_features(rows: Sequence[dict[str, Any]], *, image_columns: Sequence[str] | None = None,
                   label_column: str | None = None, label_values: Iterable[Any] = ()) -> Features:
    """Features for rows of JSON values (`summaries.features_of` of them), the classes of
    `label_column` from `label_values`.

    Raises:
      FeatureError: no rows, a named column missing, or a column no one feature holds.
    """
    summarize = summaries.Summarizer(False, label_column=label_column, image_candidates=[DEFAULT_IMAGE_COLUMN])
    summary = summarize(RawBatch("rows", 1, len(rows), rows=list(enumerate(rows, start=1))))
    summary.labels = {value for value in label_values if value is not None}
    return summaries.features_of(summary, image_columns=image_columns, label_column=label_column)


def add_flags(parser: argparse.ArgumentParser, example_file: str, text: bool) -> None:
    """The flags of an index-file pipeline besides the common ones."""
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help=f"the index file (CSV or JSON Lines), or a glob pattern of several (local, gs://...), like {example_file}")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() or beam-shards infer gives); inferred "
                             "when left out")
    parser.add_argument("--image_column", action="append", metavar="NAME",
                        help="a column of image paths; repeat it for several, or give '' for none (default: the "
                             "column named image, when it holds image paths)")
    parser.add_argument("--label_column", metavar="NAME",
                        help="a column of class names or ids, stored as a ClassLabel with the classes of all rows")
    parser.add_argument("--infer_rows", type=count_flag, default=None, metavar="N",
                        help="infer the features from the first N rows only, read before the conversion (default: "
                             "from every row, as the conversion reads them)")
    if text:
        parser.add_argument("--na_values", nargs="+", metavar="TOKEN",
                            help="the cells that are null (an empty cell always is), replacing pandas' defaults "
                                 "(NA, N/A, NaN, null, None, #N/A...); COLUMN=TOKEN adds one for a column alone")


class Inference:
    """How a pipeline infers features: the summaries of raw batches and the features of their merge."""

    def __init__(self, tabular: TabularFormat, args: argparse.Namespace):
        self.text = tabular.text
        self.null_tokens = NullTokens.from_flags(getattr(args, "na_values", None))
        # --image_column '' names none; without the flag, `image` if it holds image paths.
        self.image_columns = None if args.image_column is None else [name for name in args.image_column if name]
        self.label_column = args.label_column
        self.summarize = summaries.Summarizer(tabular.text, self.null_tokens, args.label_column,
                                              [DEFAULT_IMAGE_COLUMN] if self.image_columns is None else [])

    def features(self, summary: Summary) -> Features:
        """The features of the rows `summary` sums up (raises FeatureError)."""
        return summaries.features_of(summary, image_columns=self.image_columns, label_column=self.label_column,
                                     text=self.text)


def summary_of_files(tabular: TabularFormat, files: list[str], inference: Inference,
                     limit: int | None = None) -> Summary:
    """The summary of every row of `files` (only the first `limit` rows for types; the label's
    classes still from every row)."""
    summary, rest = summaries.Summary(), summaries.Summary()
    for path in files:
        for batch in tabular.read_file(path):
            if limit is not None and summary.rows >= limit:
                if not inference.label_column:
                    return summary
                rest = summaries.merge(rest, inference.summarize(_only(batch, inference.label_column)))
                continue
            if limit is not None:
                batch = _first(batch, limit - summary.rows)
            summary = summaries.merge(summary, inference.summarize(batch))
    summary.labels |= rest.labels
    summary.nulls |= rest.nulls & {inference.label_column}
    return summary


def _first(batch: RawBatch, rows: int) -> RawBatch:
    """The batch's first `rows` rows (read ones: bad rows do not count)."""
    if batch.table is not None:
        return RawBatch(batch.path, batch.first_line, batch.last_line, table=batch.table.slice(0, rows))
    kept, count = [], 0
    for line, raw in batch.rows:
        if count == rows:
            break
        kept.append((line, raw))
        count += not isinstance(raw, common.Malformed)
    return RawBatch(batch.path, batch.first_line, batch.last_line, rows=kept)


def _only(batch: RawBatch, column: str) -> RawBatch:
    """The batch with one column alone."""
    if batch.table is not None:
        table = batch.table.select([column]) if column in batch.table.column_names else batch.table.select([])
        return RawBatch(batch.path, batch.first_line, batch.last_line, table=table)
    rows = [(line, raw if isinstance(raw, common.Malformed) else {key: raw[key] for key in raw if key == column})
            for line, raw in batch.rows]
    return RawBatch(batch.path, batch.first_line, batch.last_line, rows=rows)


def infer_from_files(tabular: TabularFormat, files: list[str], inference: Inference, limit: int | None) -> Features:
    """The features of `files`, read here (raises FeatureError, naming the files when they hold no row)."""
    summary = summary_of_files(tabular, files, inference, limit)
    if not summary.rows and summary.problem is None:
        raise FeatureError(f"{tabular.empty_hint(files)}; give --features (with --allow_empty) to publish no rows")
    return inference.features(summary)


class _CastFn(beam.DoFn):
    """Casts each raw batch to the features: `(where, Rows or example or Malformed)` pairs."""

    def __init__(self, tabular: TabularFormat, null_tokens: NullTokens):
        self._format = tabular
        self._tokens = null_tokens

    def process(self, batch: RawBatch, features: Features) -> Iterator[tuple[Any, Any]]:
        yield from examples(batch, features, self._format.read_rows, self._format.to_example, self._tokens,
                            self._format.text)


def run(tabular: TabularFormat, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> Manifest:
    """Runs the index-file pipeline of `tabular` with command-line flags `argv`."""
    args, options = common.parse_args(parser, argv)
    files = common.input_files(parser, args.input)
    inference = Inference(tabular, args)
    features = common.given_features(parser, args)
    if features is None:
        with common.inferring(parser, files):
            features = infer_from_files(tabular, files, inference, args.infer_rows)

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "IndexFiles" >> beam.Create(files)
                | "ReadBatches" >> beam.FlatMap(tabular.read_file)
                | "Spread" >> beam.Reshuffle()
                | "Cast" >> beam.ParDo(_CastFn(tabular, inference.null_tokens), features))

    return common.run_pipeline(options, args, read, features, {"pipeline": tabular.name, "input": args.input})
