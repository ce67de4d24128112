"""JSON Lines index files into a cache: one JSON object per line, one example per object.

    {"image": "images/0001.jpg", "label": "cat", "caption": "a cat", "boxes": [1, 2, 3, 4]}

Image paths are relative to the index file (or absolute, or URIs). Features come
from `--features features.json` or are inferred from the first rows; see
`python -m pipelines.jsonl --help`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, BinaryIO

from beam_shards.features import Features
from pipelines import common, lines, nesting, tabular


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
            yield line_number, common.Malformed(f"is a JSON {type(row).__name__}, not an object")
            continue
        yield line_number, row


def to_example(row: dict[str, Any], features: Features) -> dict[str, Any]:
    return row


FORMAT = tabular.TabularFormat(
    "jsonl", read_rows, to_example,
    description="Convert JSON Lines index files (one example per line) into a cache.",
    example_file="data/train.jsonl")


build_parser = FORMAT.build_parser
run = FORMAT.run


if __name__ == "__main__":
    common.run_script(__spec__.name)
