"""CSV index files into a cache: a header line, then one example per row.

    image,label,caption,boxes
    images/0001.jpg,cat,a cat on a mat,"[1, 2, 3, 4]"

Image paths are relative to the index file (or absolute, or URIs). List and
array cells are JSON lists; a cell equal to a null token (pandas' defaults, or
`--na_values`) is null where the feature allows it. Features come from `--features
features.json` or are inferred from every row (`pipelines.tabular`).
The module is `pipelines.csv`; with absolute imports it does not hide the standard
library's `csv`, which it uses.
"""

from __future__ import annotations

from pipelines import command

# Run as a script, the flags are read before the imports below, which take seconds (Beam's).
build_parser = command.index_file_entry(
    "csv", "Convert CSV index files (a header, then one example per row) into a cache.", "data/train.csv", text=True,
    script=__name__ == "__main__")

import collections
import csv
import io
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.csv as pa_csv

from beam_shards import Manifest
from beam_shards.display import few, short_repr
from beam_shards.features import (Array, ClassLabel, Feature, Features, Image, Sequence as SequenceFeature, Struct, Value,
                                  Video, temporal_type)
from beam_shards.features import Json
from beam_shards.inference import NullTokens
from pipelines import common, lines, nesting, raw_batches, tabular, tabular_local
from pipelines.cast_batches import conform

# A line of text and its line break: "\r\n", "\n" or a lone "\r".
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_INT = re.compile(r"^[+-]?\d+$")
# A line of spaces and tabs alone, which pandas (and so HF) skips as blank and pyarrow reads as a row.
_SPACES_LINE = re.compile(rb"(?:^|\n)[ \t]+(?:\r?\n|\r?$)")
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def read_rows(handle: BinaryIO) -> Iterator[tuple[int, Any]]:
    """`(line number, {column: cell} or Malformed)` for each non-blank row after the header
    (a line of spaces and tabs alone is blank, as pandas reads it; blank lines before the
    header are skipped).

    A line longer than `lines.MAX_LINE_BYTES` is a Malformed, and reading goes on after
    it; a row of several lines longer than that together, or text that cannot be split
    into rows, ends the file with a Malformed.
    """
    # The csv module's own bound on a field (128 KiB by default) would refuse what the line bound allows.
    csv.field_size_limit(max(csv.field_size_limit(), lines.MAX_LINE_BYTES))
    source = _Lines(handle)
    header, end = None, 0
    while True:
        try:
            reader = csv.reader(source)
            if header is None:
                header = next(reader, None)
                while header is not None and raw_batches.blank_row(header):
                    header = next(reader, None)
                if header is None:
                    return
                if header and header[0].lstrip().startswith("{"):
                    yield 1, common.Malformed("looks like JSON lines, not CSV; convert it with "
                                              "python -m pipelines.jsonl")
                    return
                if len(set(header)) != len(header) or "" in header:
                    yield 1, common.Malformed(f"the header ({few(header)}) has an empty or repeated column name")
                    return
                end = source.number
            source.row_chars = 0
            for row in reader:
                start, end, source.row_chars = end + 1, source.number, 0
                if raw_batches.blank_row(row):
                    continue
                if len(row) != len(header):
                    yield start, common.Malformed(
                        f"has {len(row)} fields, the header has {len(header)} ({few(header)})")
                    continue
                yield start, dict(zip(header, row))
            return
        except _LineTooLong:
            yield source.number, common.Malformed(lines.too_long_reason())
            if header is None:
                return
            end = source.number  # and on, with a reader from the next line
        except (csv.Error, UnicodeDecodeError, _RowTooLong) as error:
            # The rest of the file cannot be split into rows reliably.
            yield end + 1, raw_batches.Unsplittable(f"cannot be read as CSV from here on: {error}")
            return


def parse_chunk(data: bytes, names: list[str] | None) -> pa.Table:
    """Whole CSV rows (no header) as a table of text columns named `names`; pyarrow's
    errors (a row of the wrong field count, bad UTF-8) raise, and so does a line of spaces
    alone, for the Python reader to skip."""
    if (data[:1] in (b" ", b"\t") or b"\n " in data or b"\n\t" in data) and _SPACES_LINE.search(data):
        raise ValueError("for the Python reader")
    text = pa.string()
    return pa_csv.read_csv(
        io.BytesIO(data),
        read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=max(len(data), 1 << 20)),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(column_types={name: text for name in names}, null_values=[],
                                              strings_can_be_null=False, quoted_strings_can_be_null=False))


class _LineTooLong(Exception):
    """A line longer than `lines.MAX_LINE_BYTES`: a new csv reader reads on from the next line."""


class _RowTooLong(ValueError):
    """A row of several lines, together longer than `lines.MAX_LINE_BYTES`."""


class _Lines:
    """The lines of a CSV stream as text, for a csv reader: split at each line break (a lone
    `\\r` too, as a text file opened with `newline=""` is), and counted. A line too long
    raises _LineTooLong; a line that makes the row it is part of too long, _RowTooLong."""

    def __init__(self, handle: BinaryIO):
        self._lines = lines.bounded_lines(handle)
        self._split: collections.deque[str] = collections.deque()
        self.number = 0  # lines read
        self.row_chars = 0  # characters read since the row began (the reader's caller sets it to 0 between rows)

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        if not self._split:
            line = next(self._lines)
            if line is None:
                self.number += 1
                raise _LineTooLong
            text = line.decode("utf-8-sig" if self.number == 0 else "utf-8")
            self._split.extend(_LINE.findall(text) if 0 <= text.find("\r", 0, len(text) - 2) else (text,))
        text = self._split.popleft()
        self.number += 1
        self.row_chars += len(text)  # at most as many as the bytes they were read from
        if self.row_chars > lines.MAX_LINE_BYTES:
            raise _RowTooLong(f"the row that reaches line {self.number} {lines.too_long_reason()}")
        return text


def cell_value(cell: str, feature: Feature, column: str, null_tokens: Sequence[str] = ("",)) -> Any:
    """A cell read as `feature` declares (a null token is null where the feature allows it).
    Raises ValueError naming the column and the cell."""
    if cell in null_tokens and feature.nullable:
        return None
    if isinstance(feature, (Image, Video)):
        return cell
    try:
        if isinstance(feature, ClassLabel):
            return int(cell) if _INT.match(cell) and cell not in (feature.names or ()) else cell
        if isinstance(feature, Json):
            return nesting.loads(cell)
        if isinstance(feature, (SequenceFeature, Array, Struct)):
            value = nesting.loads(cell)
            if not isinstance(value, dict if isinstance(feature, Struct) else list):
                raise ValueError
            return conform(value, feature)
        if isinstance(feature, Value):
            return _scalar(cell, feature)
    except nesting.TooDeep as error:
        raise ValueError(f"column {column!r}: {error}") from None
    except ValueError:
        raise ValueError(f"column {column!r} ({feature!r}): cannot read {short_repr(cell)} as "
                         f"{_expected(feature)}") from None
    raise ValueError(f"column {column!r}: CSV cells cannot hold {feature!r}; use the jsonl pipeline")


def _expected(feature: Feature) -> str:
    if isinstance(feature, (SequenceFeature, Array)):
        return "a JSON list"
    if isinstance(feature, Struct):
        return "a JSON object"
    if isinstance(feature, Json):
        return "JSON"
    return "a class id" if isinstance(feature, ClassLabel) else feature.dtype


def _scalar(cell: str, feature: Value) -> Any:
    dtype = feature.dtype
    if temporal_type(dtype) is not None:
        return conform(cell, feature)
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
    number = float(cell)
    if math.isinf(number) and "inf" not in cell.lower():
        raise ValueError(f"{cell} is past the largest float")
    return number


def to_example(row: dict[str, str], features: Features, null_tokens: NullTokens | None = None) -> dict[str, Any]:
    """A row's cells read as the features declare; raises ValueError naming the column."""
    null_tokens = null_tokens or NullTokens.parse(None)
    return {name: cell_value(cell, features[name], name, null_tokens.tokens_for(name)) if name in features else cell
            for name, cell in row.items()}


FORMAT = tabular.TabularFormat("csv", read_rows, to_example, parse_chunk, build_parser, text=True)



def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The conversion the command-line flags `argv` ask for, on Beam, ready to run (`common.run_conversions`)."""
    from pipelines.tabular_beam import plan as plan_on_beam

    return plan_on_beam(FORMAT, argv)


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv` (in this process when small, `tabular_local`);
    returns the published manifest."""
    return tabular_local.run(FORMAT, argv)
