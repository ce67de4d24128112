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
from beam_shards.display import few
from pipelines.flags import load_features

Row = TypeVar("Row")
# num_classes = the largest id + 1 must fit the int64 that ClassLabel ids are stored in.
_MAX_CLASS_ID = 2**63 - 1


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
    """The ClassLabel of a label column from all its values: class ids (ints) or class names (strings).

    With `classes` (`classes.pinned_classes`), the ClassLabel has exactly those names in
    that order, so a split lacking a class keeps the ids of the others; the values are
    only checked against them: a name outside them, or an id past them, is an error
    naming it, unless `skip_bad`, when the write refuses that value's row (a bad input).

    Raises:
      FeatureError: a negative id, one past int64, values that are neither all ids nor
        all names, or (with `classes`, without `skip_bad`) a value outside the classes.
    """
    if classes is not None:
        label = ClassLabel(names=list(classes), nullable=nullable)
        outside = None if skip_bad else next((value for value in values if not _is_class(value, label)), None)
        if outside is not None:
            raise FeatureError(f"label column {column!r} holds {outside!r}, which is not one of its "
                               f"{len(label.names)} classes ({few(label.names)})")
        return label
    present = {value for value in values if value is not None}
    if present and all(isinstance(value, int) and not isinstance(value, bool) for value in present):
        if min(present) < 0:
            raise FeatureError(f"label column {column!r} holds a negative class id {min(present)}")
        if max(present) >= _MAX_CLASS_ID:
            raise FeatureError(f"label column {column!r} holds class id {max(present)}; ids must be below "
                               f"{_MAX_CLASS_ID} (they are stored as int64)")
        return ClassLabel(num_classes=max(present) + 1, nullable=nullable)
    if not present or not all(isinstance(value, str) for value in present):
        raise FeatureError(f"label column {column!r} must hold class names (strings) or class ids (ints)")
    return ClassLabel(names=sorted(present), nullable=nullable)


def _is_class(value: Any, label: ClassLabel) -> bool:
    """Whether `value` is null (the ClassLabel's nullability is checked when writing), or one of its names or ids."""
    if value is None:
        return True
    if isinstance(value, str):
        return value in label.names
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < label.num_classes
