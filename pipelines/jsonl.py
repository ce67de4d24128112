"""JSON Lines index files into a cache: one JSON object per line, one example per object.

    {"image": "images/0001.jpg", "label": "cat", "caption": "a cat", "boxes": [1, 2, 3, 4]}

Image paths are relative to the index file (or absolute, or URIs). Features come
from `--features features.json` or are inferred from every row; see
`python -m pipelines.jsonl --help`.
"""

from __future__ import annotations

from pipelines import command

# Run as a script, the flags are read before the imports below, which take seconds (Beam's).
build_parser = command.index_file_entry(
    "jsonl", "Convert JSON Lines index files (one example per line) into a cache.", "data/train.jsonl",
    script=__name__ == "__main__")

import io
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from beam_shards import Manifest
from beam_shards.features import Features
from beam_shards.format import MAX_DEPTH, json_text_depth
from beam_shards.inference import NullTokens
from pipelines import common, lines, nesting, tabular, tabular_local
from pipelines.cast_batches import conform_row

# An integer of 19 digits or more: a number an int64 may not hold (or text that looks like one).
# Not the digits of a fraction or before one (0.0008028631942388342 is a float, which pyarrow
# reads as Python does): lines of small floats went to the Python reader, row by row.
_LONG_NUMBER = re.compile(rb"(?<![\d.])\d{19,}(?![\d.eE])")
_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_rows(handle: BinaryIO) -> Iterator[tuple[int, Any]]:
    """`(line number, object or Malformed)` for each non-blank line of a JSONL stream; a line
    too long (`lines.MAX_LINE_BYTES`) or nested too deeply (`nesting.MAX_DEPTH`) is a Malformed."""
    for line_number, line in enumerate(lines.bounded_lines(handle), start=1):
        if line is None:
            yield line_number, common.Malformed(lines.too_long_reason())
            continue
        if line.isspace():
            continue
        try:
            row = nesting.loads(line.decode("utf-8-sig"))
        except UnicodeDecodeError as error:
            yield line_number, common.Malformed(f"is not UTF-8 text (byte {error.start})")
            continue
        except json.JSONDecodeError as error:
            yield line_number, common.Malformed(f"is not valid JSON ({error.msg} at column {error.colno})")
            continue
        except nesting.TooDeep as error:
            yield line_number, common.Malformed(str(error))
            continue
        except ValueError as error:  # an int of more digits than Python converts
            yield line_number, common.Malformed(f"cannot be read as JSON: {error}")
            continue
        if not isinstance(row, dict):
            yield line_number, common.Malformed(f"is a JSON {_JSON_KINDS[type(row)]}, not an object")
            continue
        yield line_number, row


def parse_chunk(data: bytes, names: list[str] | None = None) -> pa.Table:
    """Whole JSON lines as a table, strings kept as text (pyarrow would read ISO dates as
    timestamps). Raises where the Python reader must read the lines instead: a line does not
    start with `{` (pyarrow crashes on a `null` first, apache/arrow#47409, and reads a later
    one as a row of nulls), a line holds more than one value, pyarrow refuses the lines (a key
    whose values change kind), they nest past `nesting.MAX_DEPTH`, or a number has more digits
    than an int64 holds (which pyarrow would read as a float)."""
    objects = _object_lines(data)
    if objects is None or _LONG_NUMBER.search(data) or json_text_depth(data) > MAX_DEPTH:
        raise ValueError("for the Python reader")
    read_options = pa_json.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20))
    table = pa_json.read_json(io.BytesIO(data), read_options=read_options)
    schema = pa.schema([field.with_type(_as_text(field.type)) for field in table.schema])
    if schema != table.schema:
        table = pa_json.read_json(io.BytesIO(data), read_options=read_options,
                                  parse_options=pa_json.ParseOptions(explicit_schema=schema))
    if table.num_rows != objects:
        raise ValueError("for the Python reader")
    return table


def _object_lines(data: bytes) -> int | None:
    """How many lines of `data` are not blank, when each starts with `{` (after spaces); None
    when one starts with anything else."""
    view = np.frombuffer(data, np.uint8)
    starts = np.concatenate([[0], np.flatnonzero(view == ord("\n")) + 1])
    starts = starts[starts < len(data)]
    first = view[starts]
    objects = int(np.count_nonzero(first == ord("{")))
    for start in starts[first != ord("{")].tolist():  # blank lines and lines led by spaces
        end = data.find(b"\n", start)
        line = data[start:end if end >= 0 else len(data)].lstrip(b" \t\r")
        if line and not line.startswith(b"{"):
            return None
        objects += bool(line)
    return objects


def _as_text(arrow_type: pa.DataType) -> pa.DataType:
    """`arrow_type` with each timestamp in it made a string."""
    if pa.types.is_timestamp(arrow_type):
        return pa.string()
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_as_text(arrow_type.value_type)))
    if pa.types.is_struct(arrow_type):
        return pa.struct([field.with_type(_as_text(field.type)) for field in arrow_type])
    return arrow_type


def to_example(row: dict[str, Any], features: Features, null_tokens: NullTokens | None = None) -> dict[str, Any]:
    """A JSON row in the form the features encode (`cast_batches.conform_row`)."""
    return conform_row(row, features)


FORMAT = tabular.TabularFormat("jsonl", read_rows, to_example, parse_chunk, build_parser)



def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The conversion the command-line flags `argv` ask for, on Beam, ready to run (`common.run_conversions`)."""
    from pipelines.tabular_beam import plan as plan_on_beam

    return plan_on_beam(FORMAT, argv)


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv` (in this process when small, `tabular_local`);
    returns the published manifest."""
    return tabular_local.run(FORMAT, argv)
