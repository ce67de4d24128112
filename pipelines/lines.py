"""The lines of an index file, each read up to a bound, so that a line inflating to gigabytes
(from a small `.jsonl.gz`) costs bounded memory.

A line longer than `MAX_LINE_BYTES` (decompressed) is a bad input: it is read past piece by
piece, never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

# The most bytes one line (or CSV field) of an index file may hold, decompressed, its line break aside.
MAX_LINE_BYTES = 256 << 20
# A line is read in pieces of at most this many bytes.
_PIECE_BYTES = 1 << 20


def too_long_reason() -> str:
    """Why a line `bounded_lines` gives as None is a bad input, for a person."""
    return f"is longer than {MAX_LINE_BYTES:,} bytes (decompressed), the most one line or field may hold"


def bounded_lines(handle: BinaryIO) -> Iterator[bytearray | None]:
    """Each line of `handle` with its line break, or None for a line longer than
    `MAX_LINE_BYTES`; at most that many bytes of a line are held at once.

    Example:
        >>> import io
        >>> list(bounded_lines(io.BytesIO(b'{"a": 1}\\n{"a": 2}')))
        [bytearray(b'{"a": 1}\\n'), bytearray(b'{"a": 2}')]
    """
    while True:
        line = _read_line(handle, MAX_LINE_BYTES)
        if line is not None and not line:
            return
        yield line


def _read_line(handle: BinaryIO, limit: int) -> bytearray | None:
    """The next line (empty at the end of `handle`), or None when it is longer than `limit`."""
    line = bytearray()
    while not line.endswith(b"\n"):
        piece = handle.readline(_PIECE_BYTES)
        if not piece:
            break
        if len(line) + len(piece) - piece.endswith(b"\n") > limit:
            while piece and not piece.endswith(b"\n"):
                piece = handle.readline(_PIECE_BYTES)
            return None
        line += piece
    return line
