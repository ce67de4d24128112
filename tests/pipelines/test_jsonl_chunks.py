"""JSON Lines read as Arrow give what the Python reader gives: lines pyarrow's JSON reader
mishandles go to the Python reader rather than crash it (a `null` first: apache/arrow#47409)
or read as rows it should not (a later `null` line as a row of nulls, two objects on a line
as two rows)."""

from __future__ import annotations

import io
import json
import random
import re

import pytest

from beam_shards import Features, Sequence, Value
from pipelines import jsonl

pytestmark = pytest.mark.timeout(60)


def read(tmp_path, data: bytes) -> list:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(data)
    return list(jsonl.FORMAT.read_file(str(path)))


@pytest.mark.parametrize("data", [
    b'null\n{"a": 1}\n', b' \r\n\tnull\n{"a": 1}\n', b'\xef\xbb\xbfnull\n{"a": 1}\n', b'null',
    b'{"a": 1}\nnull\n{"a": 2}\n', b'{"a": 1}\n  null  \n', b'{"a": 1} {"a": 2}\n{"a": 3}\n',
    b'{"a": 1} null\n{"a": 2}\n', b'{"a": 1}\n[]\n',
], ids=["null first", "null after blank lines", "null after a BOM", "null alone", "null later", "null in spaces",
        "two objects on a line", "an object then null", "a list later"])
def test_lines_pyarrow_mishandles_are_read_as_the_python_reader_reads_them(tmp_path, data):
    batches = read(tmp_path, data)
    assert all(batch.table is None for batch in batches), batches
    rows = [row for batch in batches for row in batch.rows]
    assert repr(rows) == repr(list(jsonl.read_rows(io.BytesIO(data))))
    assert any(isinstance(row, jsonl.common.Malformed) for _, row in rows)


def test_objects_with_blank_and_indented_lines_are_still_read_as_arrow(tmp_path):
    [batch] = read(tmp_path, b'{"a": 1}\n\n  {"a": null}\r\n\t{"a": 3}\n \n')
    assert batch.table is not None and batch.table.to_pylist() == [{"a": 1}, {"a": None}, {"a": 3}]


def test_an_int_past_64_bits_among_text_is_its_digits(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"v": ["]]", 777777777777777777777777777777]}\n{"v": ["a", 7, 1.5, true]}\n')
    features = Features({"v": Sequence(Value("string"))})
    rows = [jsonl.to_example(row, features) for _, row in jsonl.read_rows(path.open("rb"))]
    assert rows == [{"v": ["]]", "777777777777777777777777777777"]}, {"v": ["a", "7", "1.5", "true"]}]


def test_floats_of_many_digits_are_read_as_arrow_and_as_python_reads_them(tmp_path):
    # A fraction of 19 digits or more (0.0008028631942388342) is no int past 64 bits: once it sent
    # every batch holding one to the Python reader, row by row.
    rng = random.Random(0)
    values = [rng.random() * 10.0 ** rng.randint(-300, 300) for _ in range(3000)] + [rng.random() / 1000
                                                                                      for _ in range(3000)]
    data = "".join(json.dumps({"x": value}) + "\n" for value in values).encode()
    assert re.search(rb"\d{19}", data), "the input should hold fractions of 19 digits"
    batches = read(tmp_path, data)
    assert all(batch.table is not None for batch in batches)
    assert [value for batch in batches for value in batch.table.column("x").to_pylist()] == values


@pytest.mark.parametrize("number", [b"12345678901234567890", b"-9223372036854775809", b"1.5e12345678901234567890"])
def test_ints_past_64_bits_still_go_to_the_python_reader(tmp_path, number):
    [batch] = read(tmp_path, b'{"x": 1}\n{"x": ' + number + b'}\n')
    assert batch.table is None
