"""The features a pipeline converts with: those of a `--features` file, or those inferred from its input.

The csv, jsonl, parquet and tfrecord pipelines begin alike: a `--features` file is taken
as it is (and `--label_column`, which only guides inference, is then refused); otherwise
types come from the first `--infer_rows` rows, the classes of `--label_column` from
every row (`class_label_of_values`), and what cannot be inferred is a usage error naming
the first input file.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from beam_shards import ClassLabel, FeatureError, Features
from beam_shards.inference import class_label_of, summarize_values
from pipelines.flags import load_features

Row = TypeVar("Row")


def given_features(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Features | None:
    """The features of the `--features` file, or None when they are to be inferred."""
    pinned = "--classes_from" if getattr(args, "classes_from", None) else "--classes"
    if not args.features:
        if getattr(args, "classes", None) is not None and not args.label_column:
            parser.error(f"{pinned} gives the classes of the --label_column; name that column")
        return None
    if args.label_column:
        parser.error("--label_column only guides inference; with --features declare the label as a ClassLabel")
    if getattr(args, "classes", None) is not None:
        parser.error(f"{pinned} pins the classes inference makes; with --features declare them in the ClassLabel")
    return load_features(parser, args.features)


@contextlib.contextmanager
def inferring(parser: argparse.ArgumentParser, files: list[str]) -> Iterator[None]:
    """Makes a FeatureError raised inside a usage error: the features of `files` cannot be inferred."""
    try:
        yield
    except FeatureError as error:
        parser.error(f"cannot infer the features of {files[0]}: {error}")


def infer_from_rows(parser: argparse.ArgumentParser, args: argparse.Namespace, files: list[str], *,
                    rows: Callable[[], Iterable[Row]], label: Callable[[Row, str], Any],
                    infer: Callable[[list[Row], list[Any]], Features]) -> Features:
    """The features of `--features`, or those `infer(first rows, labels)` finds in the input.

    Args:
      rows: reads the input's rows from its start, each time it is called.
      label: the value of a row's label column (None where the row has none).
      infer: features from the first `--infer_rows` rows and, with `--label_column`,
        the label of every row (empty without it).
    """
    given = given_features(parser, args)
    if given is not None:
        return given
    with inferring(parser, files):
        labels = [label(row, args.label_column) for row in rows()] if args.label_column else []
        return infer(list(itertools.islice(rows(), args.infer_rows)), labels)


def class_label_of_values(column: str, values: Iterable[Any], nullable: bool, classes: Sequence[str] | None = None,
                          *, skip_bad: bool = False) -> ClassLabel:
    """The ClassLabel of a label column from all its values: class ids (ints) or class names (strings),
    by the rules of `beam_shards.inference.class_label_of`, nullable as the caller says.

    With `classes` (`classes.pinned_classes`), the ClassLabel has exactly those names in
    that order, so a split lacking a class keeps the ids of the others; the values are
    only checked against them: a name outside them, or an id past them, is an error
    naming it, unless `skip_bad`, when the write refuses that value's row (a bad input).

    Raises:
      FeatureError: a negative id, one past int64, values that are neither all ids nor
        all names, or (with `classes`, without `skip_bad`) a value outside the classes.
    """
    label = class_label_of(column, summarize_values(list(values), labels=True), classes, skip_bad=skip_bad)
    if label.names is not None:
        return ClassLabel(names=label.names, nullable=nullable)
    return ClassLabel(num_classes=label.num_classes, nullable=nullable)
