"""Opening an index file: decompressed when its name ends in `.gz` or `.zst`, and read again in part."""

from __future__ import annotations

import gzip
import io
from typing import BinaryIO

from beam_shards.storage import fs

_SKIP_BYTES = 1 << 20
COMPRESSED = (".gz", ".zst")  # the endings of the files read decompressed


def open_input(path: str) -> BinaryIO:
    """An index file for reading, decompressed when its name ends in `.gz` or `.zst`.

    Raises:
      FileNotFoundError: no file at `path`. IsADirectoryError: a folder.
    """
    handle = fs.open_read(path)
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if path.endswith(".zst"):
        import pyarrow as pa

        return io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(handle, mode="r"), "zstd"))
    return handle


def read_range(path: str, offset: int, length: int) -> bytes:
    """`length` bytes of the (decompressed) file at `path` from byte `offset`."""
    with open_input(path) as handle:
        if offset and handle.seekable() and not path.endswith(COMPRESSED):
            handle.seek(offset)
        else:
            while offset > 0:
                piece = handle.read(min(offset, _SKIP_BYTES))
                if not piece:
                    break
                offset -= len(piece)
        return handle.read(length)
