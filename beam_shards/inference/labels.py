"""The ClassLabel of a label column: from its distinct values, or the classes a run names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from beam_shards.display import clip, few
from beam_shards.errors import FeatureError
from beam_shards.features import ClassLabel
from beam_shards.inference.kinds import Kinds, kinds_found

# num_classes = the largest id + 1 must fit the int64 that ClassLabel ids are stored in.
_MAX_CLASS_ID = 2**63 - 1
_ID_CELL = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")


def class_label_of(column: str, kinds: Kinds, classes: Sequence[str] | None = None, *,
                   skip_bad: bool = False) -> ClassLabel:
    """The ClassLabel of label column `column` from its summary (with its distinct `labels`).

    Class ids (ints) make `num_classes` the largest id + 1; class names (strings, or any CSV
    cells) make the sorted names. With `classes` the names are exactly those: a value must be
    one of them, or an id below their count (an int, or a CSV cell that is one and no name);
    with `skip_bad` the values are not checked (the write refuses a row whose label is outside
    them, as a bad input). Nullable where a row has no label.

    Raises:
      FeatureError: values that are neither ids nor names (naming the kinds found), a negative
        id or one past int64, or a value outside `classes`.
    """
    if kinds.labels is None and kinds.present:
        raise ValueError(f"label column {column!r} was summarized without its labels: name it in label_columns")
    nullable = bool(kinds.nulls or kinds.absent)
    labels = kinds.labels or frozenset()
    ids = kinds.present > 0 and kinds.ints == kinds.present
    texts = kinds.cells > 0 and not kinds.lists and not kinds.objects
    named = texts or kinds.present == kinds.strings + kinds.dates + kinds.datetimes + kinds.zoned
    if classes is not None:
        names = list(classes)
        outside = [] if skip_bad else [value for value in sorted(labels, key=repr) if not _is_class(value, names, texts)]
        if outside:
            raise FeatureError(f"label column {column!r} holds {clip(repr(outside[0]))}, which is not one of its "
                               f"{len(names)} classes ({few(names)})")
        return ClassLabel(names=names, nullable=nullable)
    if kinds.present and not (ids or named) or not labels:
        found = kinds_found(kinds) or "only nulls"
        raise FeatureError(f"label column {column!r} holds {found}: it must hold class names (strings) or class "
                           "ids (ints)")
    if ids:
        values = {int(value) for value in labels}
        if min(values) < 0:
            raise FeatureError(f"label column {column!r} holds a negative class id {min(values)}")
        if max(values) >= _MAX_CLASS_ID:
            raise FeatureError(f"label column {column!r} holds class id {max(values)}; ids must be below "
                               f"{_MAX_CLASS_ID} (they are stored as int64)")
        return ClassLabel(num_classes=max(values) + 1, nullable=nullable)
    return ClassLabel(names=sorted(str(value) for value in labels), nullable=nullable)


def _is_class(value: Any, names: list[str], texts: bool) -> bool:
    """Whether a label is one of `names`, or an id below their count (an int, or a CSV cell `texts`)."""
    if isinstance(value, str) and value in names:
        return True
    if type(value) is int or texts and _ID_CELL.fullmatch(value):
        return 0 <= int(value) < len(names)
    return False
