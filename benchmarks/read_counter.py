"""Counting the bytes a reader fetches from an object store: what `bench_remote.py` reports
and what `tests/read/test_remote_reads.py` bounds."""

from __future__ import annotations

from typing import Any, Callable


class Counting:
    """A file over a pyarrow input file that counts the bytes read; it keeps its own position and reads with
    `read_at`, never seeking the inner file (pyarrow's S3 and GCS files may refuse a seek to their end)."""

    def __init__(self, inner: Any, tally: list[int]):
        self._inner, self._tally = inner, tally
        self._size = inner.size()
        self._position = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        left = self._size - self._position
        n = left if n is None or n < 0 else min(n, left)
        data = self._inner.read_at(n, self._position) if n > 0 else b""
        self._position += len(data)
        self._tally.append(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self._position = {0: 0, 1: self._position, 2: self._size}[whence] + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._inner.close()
        self.closed = True


def counting_opener(open_random_access: Callable[[str], Any], tally: list[int]) -> Callable[[str], Any]:
    """`fs.open_random_access` whose remote files append the size of each read to `tally` (local ones pass)."""
    import pyarrow as pa

    from beam_shards.storage import fs

    def counting(path: str) -> pa.NativeFile:
        inner = open_random_access(path)
        return inner if fs.is_local(path) else pa.PythonFile(Counting(inner, tally), mode="r")
    return counting
