"""The checksum of a shard file as manifests write it: `crc32:%08x` of zlib's CRC-32 over the whole file."""

from __future__ import annotations

import re
import zlib

CHECKSUM_PATTERN = re.compile(r"crc32:[0-9a-f]{8}")
"""What a well-formed checksum looks like (use `fullmatch`)."""


def format_checksum(crc: int) -> str:
    """How a shard's CRC-32 is written in the manifest."""
    return f"crc32:{crc:08x}"


def checksum_of(data: bytes | memoryview) -> str:
    """The checksum of bytes held in memory whole (a buffer, a pyarrow Buffer), as a manifest writes it."""
    crc = Crc32()
    crc.update(data)
    return crc.checksum()


class Crc32:
    """The CRC-32 and the length of bytes fed in chunks, so a file is checked while it streams by.

    Example:
        >>> crc = Crc32()
        >>> crc.update(b"hello ")
        >>> crc.update(b"world")
        >>> crc.checksum(), crc.size
        ('crc32:0d4a1185', 11)
    """

    def __init__(self) -> None:
        self.crc = 0
        self.size = 0

    def update(self, chunk: bytes) -> None:
        """Adds the next chunk."""
        self.crc = zlib.crc32(chunk, self.crc)
        self.size += len(chunk)

    def checksum(self) -> str:
        """The checksum of every chunk so far, as a manifest writes it."""
        return format_checksum(self.crc)
