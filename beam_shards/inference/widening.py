"""The features a summary of the input calls for, widening kinds as pandas and Hugging Face do.

- Ints -> int64 (uint64 when some pass int64 and none is negative, as pandas reads them;
  float64 past 64 bits, as pyarrow's JSON reader does); ints with floats -> float64.
- Bools -> bool; ISO dates -> date32; datetimes (and dates with them) -> timestamp[us], or
  timestamp[us, tz=UTC] when every one has a time zone; some with and some without -> string.
- Scalars of different kinds (bools and numbers, numbers and text, dates and text) -> string,
  as pandas reads such a CSV column (and an HF JSON load cannot store them otherwise).
- Lists -> a Sequence of what their items widen to; objects -> a Struct of each key's values,
  a key some objects lack included (every inferred feature is nullable).
- Values of different shapes (scalars, lists, objects under one key) -> Json(); in a CSV column
  -> string, since every cell is text. Objects that are always empty -> Json().
- A column null in every row -> string.
Each widening is named in `widened` (`"mpg: ints and floats -> float64"`).
"""

from __future__ import annotations

from collections.abc import Sequence

from beam_shards.display import few
from beam_shards.errors import FeatureError
from beam_shards.features import Feature, Features, Image, Json, Sequence as SequenceFeature, Struct, Value
from beam_shards.inference.kinds import Kinds, kinds_found
from beam_shards.inference.labels import class_label_of
from beam_shards.inference.strings import DEFAULT_IMAGE_COLUMN

def features_of(summary: Kinds, *, image_columns: Sequence[str] | None = None, label_column: str | None = None,
                classes: Sequence[str] | None = None, skip_bad: bool = False) -> tuple[Features, list[str]]:
    """The features of the table `summary` summarizes (`summarize_table`, merged), and the
    columns whose kinds were widened, one line each.

    Args:
      image_columns: the columns of image paths (made Images); None means the column named
        `image` when it holds image paths (and only those), and none otherwise.
      label_column: the column made a ClassLabel (`class_label_of`, with `classes`).
      classes: the class names of the label column, when the run names them.
      skip_bad: labels outside `classes` are left for the write to refuse (bad inputs), not an error.

    Raises:
      FeatureError: no rows or no columns, a named column the input lacks, or a label column that is not one.
    """
    if not summary.objects:
        raise FeatureError("the input has no rows to infer features from; give --features")
    if not summary.fields:
        raise FeatureError(f"the input's {summary.objects} rows hold no columns to infer features from")
    columns = ordered(summary.fields)
    if image_columns is None:
        image = summary.fields.get(DEFAULT_IMAGE_COLUMN)
        holds_paths = image is not None and 0 < image.present == image.image_paths
        image_columns = [DEFAULT_IMAGE_COLUMN] if holds_paths else []
    for name in [*image_columns, *([label_column] if label_column else [])]:
        if name not in summary.fields:
            raise FeatureError(f"column {name!r} is not in the input (its columns: {few(columns)})")
    widened: list[str] = []
    features: dict[str, Feature] = {}
    for name, kinds in columns.items():
        if name in image_columns:
            features[name] = Image(nullable=bool(kinds.nulls or kinds.absent))
        elif name == label_column:
            features[name] = class_label_of(name, kinds, classes, skip_bad=skip_bad)
        else:
            features[name] = feature_of(kinds, name, widened)
    return Features(features), widened


def ordered(fields: dict[str, Kinds]) -> dict[str, Kinds]:
    """`fields` in the order they were first seen in the input (then by name)."""
    return dict(sorted(fields.items(), key=lambda item: (item[1].first is None, item[1].first or (), item[0])))


def feature_of(kinds: Kinds, path: str, widened: list[str]) -> Feature:
    """The (nullable) feature of the values `kinds` summarizes, found at `path`; what it widens
    is added to `widened`."""
    shapes = [count for count in (kinds.present - kinds.lists - kinds.objects, kinds.lists, kinds.objects) if count]
    if len(shapes) > 1:
        return _widen(widened, path, kinds_found(kinds),
                      Value("string", nullable=True) if kinds.cells else Json(nullable=True))
    if kinds.lists:
        items = feature_of(kinds.items, f"{path}[]", widened) if kinds.items else Value("float64", nullable=True)
        return SequenceFeature(items, nullable=True)
    if kinds.objects:
        if not kinds.fields:
            return _widen(widened, path, "only empty objects", Json(nullable=True))
        return Struct({key: feature_of(field, f"{path}.{key}", widened) for key, field in ordered(kinds.fields).items()},
                      nullable=True)
    return _scalar(kinds, path, widened)


def _scalar(kinds: Kinds, path: str, widened: list[str]) -> Value:
    if sum(1 for count in (kinds.bools, kinds.ints + kinds.floats, kinds.dates + kinds.datetimes + kinds.zoned,
                           kinds.strings) if count) > 1:
        return _widen(widened, path, kinds_found(kinds), Value("string", nullable=True))
    if kinds.bools:
        return Value("bool", nullable=True)
    if kinds.floats:
        return _widen(widened, path, "ints and floats", Value("float64", nullable=True)) if kinds.ints \
            else Value("float64", nullable=True)
    if kinds.ints:
        if kinds.beyond_64_bits or kinds.over_int64 and kinds.negative:
            return _widen(widened, path, "ints beyond 64 bits", Value("float64", nullable=True))
        if kinds.over_int64:
            return _widen(widened, path, "ints past int64", Value("uint64", nullable=True))
        return Value("int64", nullable=True)
    if kinds.zoned:
        if kinds.dates or kinds.datetimes:
            return _widen(widened, path, "datetimes with and without a time zone", Value("string", nullable=True))
        return Value("timestamp[us, tz=UTC]", nullable=True)
    if kinds.datetimes:
        return _widen(widened, path, "dates and datetimes", Value("timestamp[us]", nullable=True)) if kinds.dates \
            else Value("timestamp[us]", nullable=True)
    if kinds.dates:
        return Value("date32", nullable=True)
    return Value("string", nullable=True)


def _widen(widened: list[str], path: str, found: str, feature: Feature) -> Feature:
    widened.append(f"{path}: {found} -> {_short(feature)}")
    return feature


def _short(feature: Feature) -> str:
    return feature.dtype if isinstance(feature, Value) else type(feature).__name__
