"""Summaries of raw batches: each column's kind, its nulls, the label's classes; merged into the features.

`Summarizer(...)(batch)` sums up one raw batch, `merge` two summaries (in any grouping:
it is what a Beam combine calls), and `features_of` turns the summary of every row into
the features the pipeline converts with, naming the columns whose values had to widen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards import Feature, FeatureError, Features, Image, Sequence as SequenceFeature, Struct, Value
from beam_shards.display import few
from pipelines import column_kinds, flags
from pipelines.bad_inputs import Malformed
from pipelines.column_kinds import Kind
from pipelines.inference import class_label_of_values
from pipelines.null_tokens import NullTokens
from pipelines.raw_batches import RawBatch

DEFAULT_IMAGE_COLUMN = "image"
_IMAGE_PATH = r"(?i)\.(?:" + "|".join(extension.lstrip(".") for extension in flags.IMAGE_EXTENSIONS) + r")$"
_FEATURES = {"bool": Value("bool", nullable=True), "int": Value("int64", nullable=True),
             "float": Value("float64", nullable=True), "string": Value("string", nullable=True),
             "null": Value("string", nullable=True),  # a column null in every row is most often text
             "date": Value("date32", nullable=True), "timestamp": Value("timestamp[us]", nullable=True)}


class Summary:
    """What the rows of some raw batches hold, column by column.

    Attributes:
      first: `(path, line)` of the earliest batch summed up (merges keep columns in its order).
      columns: each column's kind. nulls: the columns null or missing in some row.
      kinds: the kinds of values each column held (more than one: the column widened).
      rows: the rows read. problem: the first bad row, named, when one was found.
      labels: the label column's values. image_paths: per image candidate, whether it holds only image paths.
    """

    def __init__(self):
        self.first: tuple[str, int] | None = None
        self.columns: dict[str, Kind] = {}
        self.nulls: set[str] = set()
        self.kinds: dict[str, set[str]] = {}
        self.rows = 0
        self.problem: tuple[str, int, str] | None = None
        self.labels: set[Any] = set()
        self.image_paths: dict[str, bool] = {}

    def add_column(self, name: str, kind: Kind, nulls: bool) -> None:
        self.columns[name] = column_kinds.merge(self.columns.get(name, column_kinds.NULL), kind)
        if kind != column_kinds.NULL:
            self.kinds.setdefault(name, set()).add(kind[0])
        if nulls:
            self.nulls.add(name)

    def widened(self) -> dict[str, str]:
        """The columns whose values held several kinds, each with what they held and became."""
        return {name: " and ".join(sorted(kinds)) for name, kinds in self.kinds.items() if len(kinds) > 1}


def merge(a: Summary, b: Summary) -> Summary:
    """The summary of the rows of `a` and of `b`."""
    if b.first is not None and (a.first is None or b.first < a.first):
        a, b = b, a
    merged = Summary()
    merged.first = a.first or b.first
    for summary in (a, b):
        for name, kind in summary.columns.items():
            merged.columns[name] = column_kinds.merge(merged.columns.get(name, column_kinds.NULL), kind)
        for name, kinds in summary.kinds.items():
            merged.kinds.setdefault(name, set()).update(kinds)
        merged.labels |= summary.labels
        for name, holds in summary.image_paths.items():
            merged.image_paths[name] = merged.image_paths.get(name, True) and holds
    # A column one side never saw was missing from its rows.
    merged.nulls = a.nulls | b.nulls | (set(a.columns) ^ set(b.columns) if a.rows and b.rows else set())
    merged.rows = a.rows + b.rows
    problems = [problem for problem in (a.problem, b.problem) if problem is not None]
    merged.problem = min(problems) if problems else None
    return merged


class Summarizer:
    """Sums up raw batches of a format.

    Args:
      text: CSV (cells are text, `null_tokens` make them null) rather than JSON.
      null_tokens: the CSV cells that are null.
      label_column: the column whose values are gathered as classes.
      image_candidates: columns that are images only if they hold image paths.
    """

    def __init__(self, text: bool, null_tokens: NullTokens | None = None, label_column: str | None = None,
                 image_candidates: Iterable[str] = ()):
        self._text = text
        self._tokens = null_tokens or NullTokens()
        self._label = label_column
        self._candidates = frozenset(image_candidates)

    def __call__(self, batch: RawBatch) -> Summary:
        summary = Summary()
        summary.first = (batch.path, batch.first_line)
        table = batch.table
        if table is None:
            good = [(line, raw) for line, raw in batch.rows if not isinstance(raw, Malformed)]
            bad = next(((line, raw) for line, raw in batch.rows if isinstance(raw, Malformed)), None)
            if bad is not None:
                summary.problem = (batch.path, bad[0], bad[1].reason)
            if self._text:
                names = list(dict.fromkeys(name for _, row in good for name in row))
                table = pa.table({name: pa.array([row.get(name) for _, row in good], pa.string()) for name in names})
            else:
                self._python_rows(summary, [row for _, row in good])
                return summary
        summary.rows = table.num_rows
        for name, column in zip(table.column_names, table.columns):
            column = column.combine_chunks()
            if self._text:
                column = self._tokens.apply(name, column)
            kind = column_kinds.text_kind(column) if self._text else column_kinds.arrow_kind(column)
            summary.add_column(name, kind, column.null_count > 0)
            self._look_at(summary, name, column)
        return summary

    def _python_rows(self, summary: Summary, rows: list[dict[str, Any]]) -> None:
        summary.rows = len(rows)
        names = list(dict.fromkeys(name for row in rows for name in row))
        for name in names:
            values = [row.get(name) for row in rows]
            kind = column_kinds.NULL
            for value in values:
                kind = column_kinds.merge(kind, column_kinds.python_kind(value))
            summary.add_column(name, kind, any(value is None for value in values))
            if name == self._label:
                summary.labels |= {value if _hashable(value) else ("not a class",) for value in values
                                   if value is not None}
            if name in self._candidates:
                present = [value for value in values if value is not None]
                summary.image_paths[name] = all(isinstance(value, str) for value in present) and _image_paths(
                    pa.array([value for value in present if isinstance(value, str)], pa.string()))

    def _look_at(self, summary: Summary, name: str, column: pa.Array) -> None:
        if name == self._label:
            summary.labels |= {value if _hashable(value) else ("not a class",)
                               for value in pc.unique(column.drop_null()).to_pylist()}
        if name in self._candidates:
            summary.image_paths[name] = pa.types.is_string(column.type) and _image_paths(column.drop_null())


def _hashable(value: Any) -> bool:
    return not isinstance(value, (list, dict))


def _image_paths(values: pa.Array) -> bool:
    return bool(pc.all(pc.match_substring_regex(values, _IMAGE_PATH)).as_py()) if len(values) else True


def feature_of(path: str, kind: Kind) -> Feature:
    """The feature of values of `kind` found at `path` (a column, or a field or item of one), nullable.

    Raises:
      FeatureError: values of shapes no one feature holds, or objects with no key.
    """
    if kind[0] in _FEATURES:
        return _FEATURES[kind[0]]
    if kind[0] == "list":
        item = feature_of(f"{path}[]", kind[1]) if kind[1] != column_kinds.NULL else Value("float64", nullable=True)
        return SequenceFeature(item, nullable=True)
    if kind[0] == "struct":
        if not kind[1]:
            raise FeatureError(f"{path!r} holds only empty objects: declare its feature in a --features file")
        return Struct({key: feature_of(f"{path}.{key}", item) for key, item in kind[1]}, nullable=True)
    raise FeatureError(f"{path!r} holds values of different shapes (lists, objects, numbers or text): cannot infer "
                       "one type for it; declare its feature in a --features file")


def features_of(summary: Summary, *, image_columns: Iterable[str] | None = None,
                label_column: str | None = None, text: bool = False) -> Features:
    """The features of the rows `summary` sums up: Images for `image_columns` (None: the column
    named `image` when it holds image paths), a ClassLabel of every class for `label_column`,
    the widest kind of the values elsewhere. Images and the label are nullable only where a
    row lacks one; every other column is nullable.

    Raises:
      FeatureError: no rows, a named column missing, a label of values neither all class
        names nor all ids, or a column no one feature holds.
    """
    if not summary.rows:
        if summary.problem is not None:
            path, line, reason = summary.problem
            raise FeatureError(f"no row could be read: {path}, line {line}: {reason}")
        raise FeatureError("the input has no rows to infer features from; give --features")
    columns = list(summary.columns)
    if image_columns is None:
        image_columns = [name for name in (DEFAULT_IMAGE_COLUMN,) if summary.image_paths.get(name)
                         and summary.columns.get(name) not in (None, column_kinds.NULL)]
    image_columns = list(image_columns)
    for name in image_columns + ([label_column] if label_column else []):
        if name not in summary.columns:
            raise FeatureError(f"column {name!r} is not in the input (its columns: {few(columns)})")
    features: dict[str, Feature] = {}
    for name, kind in summary.columns.items():
        nullable = name in summary.nulls
        if name in image_columns:
            features[name] = Image(nullable=nullable)
        elif name == label_column:
            features[name] = class_label_of_values(name, _labels(summary.labels, text), nullable)
        else:
            features[name] = feature_of(name, kind)
    return Features(features)


def _labels(values: set[Any], text: bool) -> list[Any]:
    """Label values as classes: CSV cells that all read as ints are class ids."""
    if text and values and all(isinstance(value, str) and value.lstrip("+-").isdigit() for value in values):
        return [int(value) for value in values]
    return list(values)
