"""An index file read into raw batches: rows as pyarrow's readers give them, or as the Python readers do.

Each chunk of whole rows (`chunks`) is parsed by the format's pyarrow reader into a
table (CSV: every column as text; JSONL: JSON types, strings kept as text). A chunk
pyarrow refuses (a row of the wrong field count, bad UTF-8, a number past int64,
nesting past `nesting.MAX_DEPTH`, a row past the line bound...) is read by the format's
Python reader instead, row by row, with today's reasons for a bad row; where that reader
cannot go on (CSV it cannot split), it reads the rest of the file. Every batch knows its
file and lines, so what goes wrong later names them, and `rows_again` reads a batch's
rows again one by one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from pipelines import chunks, lines
from pipelines.bad_inputs import Malformed
from pipelines.opening import open_input, read_range

# Rows the Python readers put in one raw batch.
PYTHON_BATCH_ROWS = 1024
# A chunk of more columns is read row by row: Arrow's costs per column are for tables, not rows of 100,000 keys.
MAX_ARROW_COLUMNS = 4096
_BOM = b"\xef\xbb\xbf"
# A format's pyarrow reader: a chunk's bytes and the header's column names (None: no header) to a table.
ParseChunk = Callable[[bytes, "list[str] | None"], pa.Table]
ReadRows = Callable[[BinaryIO], Iterator[tuple[int, Any]]]


class Unsplittable(Malformed):
    """What a Python reader yields last when it cannot read the rest of its file (CSV it cannot split)."""


class RawBatch:
    """Rows of lines `first_line` to `last_line` of `path`, read by pyarrow (`table`) or by the
    Python reader (`rows`: `(line, raw row or Malformed)` pairs).

    Args:
      path: the input file.
      first_line, last_line: the lines the rows are on (counted from 1).
      table: the rows, for a chunk pyarrow read.
      rows: the rows, for one the Python reader read.
      chunk: `(offset, length)` of the chunk's bytes in the decompressed file, to read them again.
      header: the file's header row (CSV), its bytes as in the file.
    """

    def __init__(self, path: str, first_line: int, last_line: int, *, table: pa.Table | None = None,
                 rows: list[tuple[int, Any]] | None = None, chunk: tuple[int, int] = (0, 0), header: bytes = b""):
        self.path = path
        self.first_line = first_line
        self.last_line = last_line
        self.table = table
        self.rows = rows
        self.chunk = chunk
        self.header = header

    @property
    def num_rows(self) -> int:
        return self.table.num_rows if self.table is not None else len(self.rows)

    def __repr__(self) -> str:
        kind = "table" if self.table is not None else "rows"
        return f"RawBatch({self.path}, lines {self.first_line} to {self.last_line}, {self.num_rows} {kind})"


def read_file(path: str, read_rows: ReadRows, parse_chunk: ParseChunk, header: bool,
              chunk_bytes: int = chunks.CHUNK_BYTES) -> Iterator[RawBatch]:
    """The raw batches of the index file at `path`, in order."""
    with open_input(path) as handle:
        names: list[str] | None = None
        head = b""
        if header:
            head, names = _header(handle, read_rows)
            if names is None:  # a header the Python reader refuses, or too long: it names what is wrong
                yield from _python_batches(path, read_rows, io.BufferedReader(chunks.Chained([head], handle)), 1, b"")
                return
        start = head.count(b"\n") + 1
        for chunk in chunks.chunks(handle, quoted=header, first_line=start, offset=len(head), chunk_bytes=chunk_bytes):
            if chunk.rest is not None:
                yield from _python_batches(path, read_rows, chunks.reader(chunk), chunk.first_line, head)
                return
            try:
                table = parse_chunk(chunk.data, names)
                if table.num_columns > MAX_ARROW_COLUMNS:
                    raise ValueError("too many columns for a table")
                table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8
                _check_row_bytes(table, len(chunk.data))
            except (pa.ArrowException, ValueError):
                batches = list(_python_batches(path, read_rows, io.BytesIO(chunk.data), chunk.first_line, head))
                yield from batches
                if any(isinstance(raw, Unsplittable) for batch in batches for _, raw in batch.rows):
                    return
                continue
            yield RawBatch(path, chunk.first_line, chunk.last_line, table=table,
                           chunk=(chunk.offset, len(chunk.data)), header=head)


def _header(handle: BinaryIO, read_rows: ReadRows) -> tuple[bytes, list[str] | None]:
    """The header row's bytes and its column names (None when the Python reader finds a problem
    with it, or it is longer than the line bound)."""
    head = bytearray()
    for line in lines.bounded_lines(handle):
        if line is None:
            return bytes(head), None
        head += line
        if not head.removeprefix(_BOM).strip(b" \t\r\n"):
            continue  # blank lines before the header, which pandas skips too
        if not head.count(b'"') & 1:
            break
    found = list(read_rows(io.BytesIO(bytes(head))))
    if found or not head.strip():
        return bytes(head), None
    rows = [row for row in csv.reader(io.StringIO(head.decode("utf-8-sig"), newline="")) if not blank_row(row)]
    return bytes(head), rows[0] if rows else None


def blank_row(row: list[str]) -> bool:
    """Whether a CSV row is a blank line: empty, or spaces and tabs alone (as pandas reads it)."""
    return not row or (len(row) == 1 and not row[0].strip(" \t"))


def _check_row_bytes(table: pa.Table, data_bytes: int) -> None:
    """Raises ValueError when a row is longer than the line bound (only a chunk longer than it may hold one)."""
    if data_bytes <= lines.MAX_LINE_BYTES or not table.num_columns:
        return
    total = None
    for column in table.columns:
        size = pc.fill_null(pc.binary_length(column), 0) if pa.types.is_string(column.type) else None
        if size is not None:
            total = size if total is None else pc.add(total, size)
    if total is not None and pc.max(total).as_py() > lines.MAX_LINE_BYTES:
        raise ValueError("a row longer than the line bound")


def _python_batches(path: str, read_rows: ReadRows, handle: BinaryIO, first_line: int,
                    head: bytes) -> Iterator[RawBatch]:
    """Raw batches of the rows the Python reader reads from `handle` (the file's lines from
    `first_line` on), the header `head` put back before them."""
    rows: list[tuple[int, Any]] = []
    for line, raw in shifted_rows(read_rows, head, handle, first_line):
        rows.append((line, raw))
        if len(rows) == PYTHON_BATCH_ROWS:
            yield RawBatch(path, rows[0][0], rows[-1][0], rows=rows, header=head)
            rows = []
    if rows:
        yield RawBatch(path, rows[0][0], rows[-1][0], rows=rows, header=head)


def shifted_rows(read_rows: ReadRows, head: bytes, handle: BinaryIO, first_line: int) -> Iterator[tuple[int, Any]]:
    """The Python reader's `(line, raw)` pairs for lines of a file from `first_line` on (`head`,
    the header, put back before them), numbered as in the file."""
    shift = first_line - 1 - head.count(b"\n")
    stream = io.BufferedReader(chunks.Chained([head], handle)) if head else handle
    for line, raw in read_rows(stream):
        yield line + shift, raw


def rows_again(batch: RawBatch, read_rows: ReadRows) -> Iterator[tuple[int, Any]]:
    """The `(line, raw)` pairs of a batch, its table's rows read again by the Python reader."""
    if batch.rows is not None:
        yield from batch.rows
        return
    offset, length = batch.chunk
    data = read_range(batch.path, offset, length)
    yield from shifted_rows(read_rows, batch.header, io.BytesIO(data), batch.first_line)
