"""An index file cut into chunks of whole rows, for pyarrow's readers, each knowing its first line.

A chunk ends at a line break outside CSV quotes (an even number of `"` since the chunk
began), so each one parses alone. When the rest of a file cannot be cut that way (a row
longer than `lines.MAX_LINE_BYTES`, a line break that is a lone `\\r`), `Chunk.rest` is
set instead: the rest of the file, from that chunk on, is for the Python readers, which
name what is wrong with today's words.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import numpy as np

from pipelines import lines

# Bytes read at a time; a chunk holds about this many (whole rows).
CHUNK_BYTES = 4 << 20


class Chunk(NamedTuple):
    """Whole rows of an index file: `data` begins at line `first_line` (counted from 1), byte `offset`
    of the decompressed file. With `rest` set, `data` is empty and `rest` reads the file's
    remaining bytes from there."""

    first_line: int
    offset: int
    data: bytes
    rest: BinaryIO | None = None

    @property
    def last_line(self) -> int:
        return self.first_line + max(self.data.count(b"\n") - self.data.endswith(b"\n"), 0)


def chunks(handle: BinaryIO, quoted: bool, first_line: int = 1, offset: int = 0,
           chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """The chunks of `handle` (from line `first_line`, byte `offset`); `quoted`: rows end only
    outside `"` quotes (CSV)."""
    pieces: list[bytes] = []
    size = quotes = 0
    while True:
        piece = handle.read(chunk_bytes)
        remainder = b""
        if piece:
            cut = _cut(piece, quotes) if quoted else piece.rfind(b"\n") + 1
            if cut <= 0:
                pieces.append(piece)
                size += len(piece)
                quotes += piece.count(b'"') if quoted else 0
                if size > lines.MAX_LINE_BYTES:
                    yield Chunk(first_line, offset, b"", Chained(pieces, handle))
                    return
                continue
            pieces.append(piece[:cut])
            remainder = piece[cut:]
        data = b"".join(pieces)
        if data:
            if not _splits_cleanly(data):
                yield Chunk(first_line, offset, b"", Chained([data, remainder], handle))
                return
            yield Chunk(first_line, offset, data)
            first_line += data.count(b"\n")
            offset += len(data)
        if not piece:
            return
        pieces, size = [remainder], len(remainder)
        quotes = remainder.count(b'"') if quoted else 0


def _cut(piece: bytes, quotes_before: int) -> int:
    """Where `piece` may end a chunk: after its last line break with an even number of quotes
    before it (counting `quotes_before`); 0 when none has."""
    parity = (quotes_before + piece.count(b'"')) & 1
    end = len(piece)
    while True:
        newline = piece.rfind(b"\n", 0, end)
        if newline < 0:
            return 0
        parity ^= piece.count(b'"', newline + 1, end) & 1
        if not parity:
            return newline + 1
        end = newline


def _splits_cleanly(data: bytes) -> bool:
    """Whether pyarrow splits `data` into the lines Python's readers see: no lone `\\r` line break
    and no line longer than the bound."""
    if data.count(b"\r") != data.count(b"\r\n"):
        return False
    if len(data) <= lines.MAX_LINE_BYTES:
        return True
    breaks = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(data)]])
    return int((ends - starts).max()) <= lines.MAX_LINE_BYTES


class Chained(io.RawIOBase):
    """Bytes already read, then the rest of a stream: what the Python readers read on from."""

    def __init__(self, pieces: list[bytes], handle: BinaryIO):
        self._pieces = [piece for piece in pieces if piece]
        self._handle = handle

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._pieces:
            data = self._handle.read(len(buffer))
        else:
            first = self._pieces[0]
            data, rest = first[:len(buffer)], first[len(buffer):]
            if rest:
                self._pieces[0] = rest
            else:
                self._pieces.pop(0)
        buffer[:len(data)] = data
        return len(data)


def reader(chunk: Chunk) -> BinaryIO:
    """The bytes of a chunk with `rest`, buffered for the Python readers."""
    return io.BufferedReader(chunk.rest, buffer_size=1 << 20)
