"""Statistics of a version: per column its rows and nulls (and for a list column its items), the min
and max of numeric `Value`s and the count of each class of a `ClassLabel` (pure logic, no I/O).

A shard writer counts each record batch as it writes it (`Statistics.of_batch`); a publish
adds those of the new shards to the base version's (`Statistics.merge`), so a version's
statistics cost what the write added and `beam-shards info` reads no shard for them.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.errors import CorruptCacheError
from beam_shards.features import Array, ClassLabel, Features, Sequence, Value
from beam_shards.features.base import FLOAT_DTYPES, INT_DTYPES
from beam_shards.format.counts import are_counts, is_count

# Class counts are kept for ClassLabels of at most this many classes (a count each, in every
# version's header, which every open reads).
_MAX_COUNTED_CLASSES = 1 << 16
_NUMERIC = INT_DTYPES + FLOAT_DTYPES


@dataclasses.dataclass(frozen=True)
class ColumnStatistics:
    """One column's statistics.

    Attributes:
      rows: rows of the column (every column of a set of rows has them all).
      nulls: rows holding null.
      items: for a column of lists (a `Sequence`, an `Array` of a variable first dimension),
        the items of its lists together, at the outer level; None for other columns, and for versions written
        before items were counted.
      min, max: the smallest and largest value of a numeric `Value` column (NaN
        skipped); None for other columns, or when every value is null or NaN.
      classes: for a `ClassLabel` (or a `Sequence` of one) of at most
        `_MAX_COUNTED_CLASSES` classes, the values of each class id; None otherwise.
    """

    rows: int = 0
    nulls: int = 0
    min: int | float | None = None
    max: int | float | None = None
    classes: tuple[int, ...] | None = None
    items: int | None = None

    def merge(self, other: ColumnStatistics) -> ColumnStatistics:
        classes = None
        if self.classes is not None and other.classes is not None:
            classes = tuple(map(operator.add, self.classes, other.classes))
        items = None if self.items is None or other.items is None else self.items + other.items
        return ColumnStatistics(self.rows + other.rows, self.nulls + other.nulls, _pick(min, self.min, other.min),
                                _pick(max, self.max, other.max), classes, items)


@dataclasses.dataclass(frozen=True)
class Statistics:
    """The statistics of a set of rows (a batch, a shard, a version), column by column.

    Example:
        >>> import pyarrow as pa
        >>> features = Features({"x": Value("int64"), "y": ClassLabel(names=["a", "b"])})
        >>> batch = pa.record_batch({"x": [3, -1], "y": [1, 1]}, schema=features.arrow_schema())
        >>> stats = Statistics.of_batch(features, batch)
        >>> stats.num_rows, stats.columns["x"].min, stats.columns["y"].classes
        (2, -1, (0, 2))
        >>> tags = Features({"tags": Sequence(Value("string"))})
        >>> Statistics.of_batch(tags, pa.record_batch({"tags": [["a", "b"], None, []]},
        ...                                          schema=tags.arrow_schema())).columns["tags"]
        ColumnStatistics(rows=3, nulls=1, min=None, max=None, classes=None, items=2)
    """

    num_rows: int
    columns: dict[str, ColumnStatistics]

    @classmethod
    def empty(cls, features: Features) -> Statistics:
        return cls(0, {name: ColumnStatistics(classes=_zero_classes(features[name]),
                                              items=0 if _is_list(features[name]) else None) for name in features})

    @classmethod
    def of_batch(cls, features: Features, batch: pa.RecordBatch | pa.Table) -> Statistics:
        """The statistics of `batch`, whose schema is `features.arrow_schema()`."""
        columns = {}
        for name in features:
            feature, column = features[name], batch.column(name)
            low = high = classes = None
            label = _counted_label(feature)
            if isinstance(feature, Value) and feature.dtype in _NUMERIC and len(column) > column.null_count:
                found = pc.min_max(column.cast(pa.float32()) if feature.dtype == "float16" else column)
                low, high = found["min"].as_py(), found["max"].as_py()
            elif label is not None:
                values = pc.list_flatten(column) if isinstance(feature, Sequence) else column
                ids = pc.drop_null(values).to_numpy(zero_copy_only=False)
                classes = tuple(np.bincount(ids, minlength=label.num_classes)[:label.num_classes].tolist())
            items = None
            if _is_list(feature):
                items = int(pc.sum(pc.list_value_length(column)).as_py() or 0)
            columns[name] = ColumnStatistics(len(column), column.null_count, _finite_or_none(low),
                                             _finite_or_none(high), classes, items)
        return cls(batch.num_rows, columns)

    def merge(self, other: Statistics) -> Statistics:
        """The statistics of both sets of rows together (their columns must be the same)."""
        return Statistics(self.num_rows + other.num_rows,
                          {name: stats.merge(other.columns[name]) for name, stats in self.columns.items()})

    @classmethod
    def total(cls, features: Features, parts: list[Statistics | None]) -> Statistics | None:
        """The merge of `parts`; None when any is unknown."""
        result = cls.empty(features)
        for part in parts:
            if part is None:
                return None
            result = result.merge(part)
        return result

    def to_dict(self) -> dict[str, Any]:
        columns = {}
        for name, stats in self.columns.items():
            entry: dict[str, Any] = {"rows": self.num_rows, "nulls": stats.nulls}
            if stats.min is not None:
                entry.update(min=_to_json(stats.min), max=_to_json(stats.max))
            if stats.classes is not None:
                entry["classes"] = list(stats.classes)
            if stats.items is not None:
                entry["items"] = stats.items
            columns[name] = entry
        return {"num_rows": self.num_rows, "columns": columns}

    @classmethod
    def from_dict(cls, data: Any, features: Features, where: str) -> Statistics:
        """Checks statistics read from a manifest against its features.

        Raises:
          CorruptCacheError: anything missing or out of place, naming `where`.
        """
        problem = f"{where} has invalid statistics"
        if not isinstance(data, dict) or not is_count(data.get("num_rows")) \
                or not isinstance(data.get("columns"), dict) or sorted(data["columns"]) != sorted(features):
            raise CorruptCacheError(f"{problem}: they must give num_rows and one entry per column")
        num_rows, columns = data["num_rows"], {}
        for name in features:
            entry = data["columns"][name]
            if not isinstance(entry, dict) or entry.get("rows") != num_rows or not is_count(entry.get("nulls")) \
                    or entry["nulls"] > num_rows:
                raise CorruptCacheError(f"{problem} for column {name!r}")
            low, high = (_from_json(entry.get(key), f"{problem} for column {name!r}") for key in ("min", "max"))
            classes = entry.get("classes")
            if classes is not None:
                label = _counted_label(features[name])
                if label is None or not isinstance(classes, list) \
                        or len(classes) != label.num_classes or not are_counts(classes):
                    raise CorruptCacheError(f"{problem}: class counts of column {name!r}")
                classes = tuple(classes)
            items = entry.get("items")
            if items is not None and not (_is_list(features[name]) and is_count(items)):
                raise CorruptCacheError(f"{problem}: item count of column {name!r}")
            columns[name] = ColumnStatistics(num_rows, entry["nulls"], low, high, classes, items)
        return cls(num_rows, columns)


def _counted_label(feature: Any) -> ClassLabel | None:
    """The ClassLabel whose classes a column's statistics count: the column's own, or its
    Sequence's; None for other columns and for labels of more than _MAX_COUNTED_CLASSES classes."""
    if isinstance(feature, Sequence):
        feature = feature.feature
    if isinstance(feature, ClassLabel) and feature.num_classes <= _MAX_COUNTED_CLASSES:
        return feature
    return None


def _is_list(feature: Any) -> bool:
    """Whether `feature`'s column holds lists whose lengths vary, so that their items are worth
    counting: a `Sequence`, or an `Array` of a variable first dimension (of a fixed shape, its items
    are `rows x shape[0]`)."""
    return isinstance(feature, Sequence) or (isinstance(feature, Array) and feature.variable)


def _zero_classes(feature: Any) -> tuple[int, ...] | None:
    label = _counted_label(feature)
    return (0,) * label.num_classes if label is not None else None


def _pick(choose: Any, a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else choose(a, b)


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _to_json(value: int | float) -> int | float | str:
    """JSON holds no infinities: they are written as the strings "inf" and "-inf"."""
    return value if not isinstance(value, float) or math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _from_json(value: Any, problem: str) -> int | float | None:
    if value is None or (type(value) in (int, float)):
        return value
    if value in ("inf", "-inf"):
        return float(value)
    raise CorruptCacheError(f"{problem}: {value!r} is not a number")
