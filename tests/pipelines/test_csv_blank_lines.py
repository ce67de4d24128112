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
    b'a,b\n1," x\n \ny"\n',
], ids=["two columns", "crlf and a last line", "one column", "one column, tab first", "spaces in a quoted value"])
def test_a_line_of_spaces_alone_is_skipped_as_pandas_skips_it(tmp_path, data):
    theirs = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False).to_dict("records")
    assert cells(tmp_path, data) == theirs
