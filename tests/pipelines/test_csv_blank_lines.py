"""A CSV line of spaces and tabs alone is blank, as pandas (under HF's `load_dataset("csv")`)
reads it: skipped, whether pyarrow or the Python reader reads the chunk."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from pipelines import csv as csv_pipeline

pytestmark = pytest.mark.timeout(60)


def cells(tmp_path, data: bytes) -> list[dict]:
    path = tmp_path / "rows.csv"
    path.write_bytes(data)
    rows = []
    for batch in csv_pipeline.FORMAT.read_file(str(path)):
        rows += batch.table.to_pylist() if batch.table is not None else [row for _, row in batch.rows]
    return rows


@pytest.mark.parametrize("data", [
    b"a,b\n1,2\n \n3,4\n\t\n", b"a,b\n \n1,2\r\n \t \r\n3,4\n  ", b"a\n0\n \n1\n", b"a\n\t\n0\n",
    b'a,b\n1," x\n \ny"\n', b"\na,b\n1,2\n", b"\xef\xbb\xbf \r\n\t\na,b\n1,2\n", b'\n"a\nb",c\n1,2\n',
], ids=["two columns", "crlf and a last line", "one column", "one column, tab first", "spaces in a quoted value",
        "a blank line before the header", "a BOM and spaces before the header", "a quoted header after a blank"])
def test_a_line_of_spaces_alone_is_skipped_as_pandas_skips_it(tmp_path, data):
    theirs = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False).to_dict("records")
    assert cells(tmp_path, data) == theirs


def test_a_bad_row_after_blank_lines_before_the_header_names_its_own_line(tmp_path):
    rows = cells(tmp_path, b"\n \na,b\n1,2\n3\n")
    assert rows[0] == {"a": "1", "b": "2"}
    path = tmp_path / "rows.csv"
    [(line, bad)] = [(line, row) for batch in csv_pipeline.FORMAT.read_file(str(path)) for line, row in batch.rows or []
                     if isinstance(row, csv_pipeline.common.Malformed)]
    assert line == 5 and "has 1 fields, the header has 2" in bad.reason
