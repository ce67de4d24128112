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
from collections.abc import Callable, Iterator

from beam_shards import FeatureError, Features
from beam_shards.inference import DEFAULT_IMAGE_COLUMN, NullTokens, merge as merge_kinds
from beam_shards.terminal import say
from pipelines import classes
from pipelines.flags import input_files
from pipelines.inference import given_features, inferring
from pipelines.cast_batches import ToExample, parent, resolve_paths
from pipelines.opening import open_input
from pipelines.raw_batches import ParseChunk, RawBatch, ReadRows, read_file
from pipelines.summaries import Summarizer, Summary, first_rows, merge, one_column

__all__ = ["DEFAULT_IMAGE_COLUMN", "TabularFormat", "open_input", "parent", "resolve_paths"]


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
      build_parser: makes the pipeline's command-line parser (its `--help`).
    """

    def __init__(self, name: str, read_rows: ReadRows, to_example: ToExample, parse_chunk: ParseChunk,
                 build_parser: Callable[[], argparse.ArgumentParser], *, text: bool = False):
        self.name = name
        self.read_rows = read_rows
        self.to_example = to_example
        self.parse_chunk = parse_chunk
        self.text = text
        self.build_parser = build_parser

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

    def __repr__(self) -> str:
        return f"TabularFormat({self.name!r})"


def summarizer_of(tabular: TabularFormat, args: argparse.Namespace) -> Summarizer:
    """How a pipeline run with `args` sums up raw batches and makes features of them."""
    try:
        null_tokens = NullTokens.parse(getattr(args, "na_values", None))
    except ValueError as error:
        raise FeatureError(f"--na_values: {error}") from None
    # --image_column '' names none; without the flag, `image` if it holds image paths.
    image_columns = None if args.image_column is None else [name for name in args.image_column if name]
    # --classes / --classes_from, or an append's cache, pin the label's classes.
    pinned = classes.pinned_classes(args, args.label_column) if args.label_column else None
    return Summarizer(tabular.text, null_tokens, args.label_column, image_columns, pinned, args.skip_bad)


def summary_of_files(tabular: TabularFormat, files: list[str], summarize: Summarizer,
                     limit: int | None = None) -> Summary:
    """The summary of every row of `files`: only the first `limit` rows for the types, and
    the label's classes still from every row."""
    summary, rest = Summary(), Summary()
    for path in files:
        for batch in tabular.read_file(path):
            if limit is not None and summary.rows >= limit:
                if not summarize.label_column:
                    return summary
                rest = merge(rest, summarize(one_column(batch, summarize.label_column)))
                continue
            summary = merge(summary, summarize(batch if limit is None else first_rows(batch, limit - summary.rows)))
    label = summarize.label_column
    if label in rest.kinds.fields and label in summary.kinds.fields:
        summary.kinds.fields[label] = merge_kinds(summary.kinds.fields[label], rest.kinds.fields[label])
    return summary


def features_of_summary(summary: Summary, tabular: TabularFormat, files: list[str],
                        summarize: Summarizer) -> tuple[Features, list[str]]:
    """The features of the rows of `files` that `summary` sums up, and the lines naming the
    columns that widened (raises FeatureError, naming the files when they hold no row)."""
    if not summary.rows and summary.problem is None:
        raise FeatureError(f"{tabular.empty_hint(files)}; give --features (with --allow_empty) to publish no rows")
    return summarize.features(summary)


class InferenceError(FeatureError):
    """The features could not be inferred as the pipeline ran (a usage error, as before a run)."""


def say_widened(widened: list[str]) -> None:
    """Names the columns whose values widened (ints and floats, numbers and text...), one line each."""
    for line in widened:
        say(f"Widened column {line}")


def before_reading(tabular: TabularFormat, parser: argparse.ArgumentParser,
                   args: argparse.Namespace) -> tuple[list[str], Summarizer, Features | None]:
    """What a run of `tabular` with `args` knows before it reads the rows: its input files, how it
    sums up raw batches, and its features when they are given (`--features`) or come from the
    first `--infer_rows` rows (None: they come from every row, as the rows are read). Exits
    with a usage error for flags or inputs that cannot be used."""
    files = input_files(parser, args.input)
    with inferring(parser, files):
        summarize = summarizer_of(tabular, args)
    features = given_features(parser, args)
    if features is None and args.infer_rows is not None:
        with inferring(parser, files):
            features, widened = features_of_summary(summary_of_files(tabular, files, summarize, args.infer_rows),
                                                    tabular, files, summarize)
        say_widened(widened)
    return files, summarize, features


def metadata_of(tabular: TabularFormat, args: argparse.Namespace) -> dict[str, str]:
    """What the version a run of `tabular` with `args` publishes records of it."""
    return {"pipeline": tabular.name, "input": args.input}
