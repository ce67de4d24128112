"""CSV index files into a cache: a header line, then one example per row.

    image,label,caption,boxes
    images/0001.jpg,cat,a cat on a mat,"[1, 2, 3, 4]"

Image paths are relative to the index file (or absolute, or URIs). List and
array cells are JSON lists; an empty cell is null where the feature allows it.
Features come from `--features features.json` or are inferred from the first rows.
The module is `pipelines.csv`; with absolute imports it does not hide the standard
library's `csv`, which it uses.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from beam_shards.display import short_repr
from beam_shards.features import (Array, ClassLabel, Feature, Features, Image, Sequence as SequenceFeature, Struct, Value,
                                  Video)
from pipelines import common, tabular

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def read_rows(handle: BinaryIO) -> Iterator[tuple[int, Any]]:
    """`(line number, {column: cell} or Malformed)` for each non-blank row after the header."""
    text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    line = 0
    try:
        header = next(reader, None)
        if header is None:
            return
        line = reader.line_num
        if header and header[0].lstrip().startswith("{"):
            yield 1, common.Malformed("looks like JSON lines, not CSV; convert it with python -m pipelines.jsonl")
            return
        if len(set(header)) != len(header) or "" in header:
            yield 1, common.Malformed(f"the header {header} has an empty or repeated column name")
            return
        for row in reader:
            start, line = line + 1, reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                yield start, common.Malformed(
                    f"has {len(row)} fields, the header has {len(header)} ({', '.join(header)})")
                continue
            yield start, dict(zip(header, row))
    except (csv.Error, UnicodeDecodeError) as error:
        # The rest of the file cannot be split into rows reliably.
        yield line + 1, common.Malformed(f"cannot be read as CSV from here on: {error}")


def guess_value(cell: str) -> Any:
    """The Python value a cell most likely holds, for type inference."""
    if cell == "":
        return None
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    if _INT.match(cell):
        return int(cell)
    if _FLOAT.match(cell):
        return float(cell)
    if cell.startswith(("[", "{")):
        try:
            return json.loads(cell)
        except json.JSONDecodeError:
            pass
    return cell


def cell_value(cell: str, feature: Feature, column: str) -> Any:
    """A cell read as `feature` declares. Raises ValueError naming the column and the cell."""
    if cell == "" and feature.nullable:
        return None
    if isinstance(feature, (Image, Video)):
        return cell
    try:
        if isinstance(feature, ClassLabel):
            return int(cell) if _INT.match(cell) and cell not in (feature.names or ()) else cell
        if isinstance(feature, (SequenceFeature, Array, Struct)):
            value = json.loads(cell)
            if not isinstance(value, dict if isinstance(feature, Struct) else list):
                raise ValueError
            return value
        if isinstance(feature, Value):
            return _scalar(cell, feature.dtype)
    except ValueError:
        raise ValueError(f"column {column!r} ({feature!r}): cannot read {short_repr(cell)} as "
                         f"{_expected(feature)}") from None
    raise ValueError(f"column {column!r}: CSV cells cannot hold {feature!r}; use the jsonl pipeline")


def _expected(feature: Feature) -> str:
    if isinstance(feature, (SequenceFeature, Array)):
        return "a JSON list"
    if isinstance(feature, Struct):
        return "a JSON object"
    return "a class id" if isinstance(feature, ClassLabel) else feature.dtype


def _scalar(cell: str, dtype: str) -> Any:
    if dtype == "string":
        return cell
    if dtype == "binary":
        return cell.encode("utf-8")
    if dtype == "bool":
        if cell.lower() in _TRUE + _FALSE:
            return cell.lower() in _TRUE
        raise ValueError(cell)
    if dtype.startswith(("int", "uint")):
        return int(cell)
    return float(cell)


def to_example(row: dict[str, str], features: Features) -> dict[str, Any]:
    return {name: cell_value(cell, features[name], name) if name in features else cell for name, cell in row.items()}


FORMAT = tabular.TabularFormat(
    "csv", read_rows, to_example, guess_value,
    description="Convert CSV index files (a header, then one example per row) into a cache.",
    example_file="data/train.csv")


build_parser = FORMAT.build_parser
run = FORMAT.run


if __name__ == "__main__":
    common.run_script(__spec__.name)
