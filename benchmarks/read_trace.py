"""What a reader reads from disk, step by step: which file, where, how many bytes and how long.

A `ReadTrace` wraps chosen functions of a reader (its steps: read a header, map a shard, read a
batch, ...). Around each call it times the call and asks the kernel which pages of the dataset's
files the call brought into the page cache (`mincore` over a map of each file, which faults in
nothing): with the files evicted first, those pages are what the call read from disk, readahead
included, whether it read them with `read` or by touching a memory map. It also counts the bytes the
process read from storage (`read_bytes` in /proc/self/io), which takes in everything else (imports
included). The trace's own `mincore` time is taken out of the steps' times. Linux only.

    trace = ReadTrace([cache_folder])
    trace.wrap(SomeReader, "read_header", "header")
    ...run the reader...
    print("\\n".join(trace.lines()))
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import mmap
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: str | os.PathLike) -> np.ndarray:
    """One bool per page of the file at `path`: whether the page is in the page cache now."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return np.zeros(0, bool)
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap of {path} for mincore failed")
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return (np.frombuffer(vector, np.uint8) & 1).astype(bool)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def files_under(folders: Iterable[str | os.PathLike]) -> list[str]:
    return sorted(os.path.join(root, name) for folder in folders for root, _, names in os.walk(folder)
                  for name in names)


def storage_read_bytes() -> int:
    """Bytes this process has read from storage (its own reads, its page faults and their readahead)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise OSError("/proc/self/io has no read_bytes")


@dataclasses.dataclass
class Step:
    label: str
    depth: int
    seconds: float
    reads: list[tuple[str, int, int]]  # (file, offset, bytes) of the pages it brought in
    storage: int  # bytes the process read from storage meanwhile

    @property
    def read_bytes(self) -> int:
        return sum(size for _, _, size in self.reads)


class ReadTrace:
    """Steps of a reader over the files under `folders` (see the module's docstring)."""

    def __init__(self, folders: Iterable[str | os.PathLike]):
        self.files = files_under(folders)
        self.root = os.path.commonpath(self.files) if self.files else ""
        self.steps: list[Step] = []
        self._overhead = 0.0  # seconds spent in mincore so far
        self._depth = 0
        self.before, self.start_storage = self._snapshot()

    def _snapshot(self) -> tuple[dict[str, np.ndarray], int]:
        """(the files' resident pages, the process's storage reads) now; its time counts as overhead."""
        start = time.perf_counter()
        pages = {path: resident_pages(path) for path in self.files}
        storage = storage_read_bytes()
        self._overhead += time.perf_counter() - start
        return pages, storage

    def resident_bytes(self) -> int:
        """Bytes of the traced files in the page cache when the trace began (after an eviction: about 0)."""
        return int(sum(pages.sum() for pages in self.before.values())) * _PAGE

    def wrap(self, owner: Any, name: str, label: str | Callable[..., str]) -> None:
        """Times every call of `owner.name` as a step named `label` (or `label(*args)`)."""
        original = getattr(owner, name)
        trace = self

        @functools.wraps(original)
        def traced(*args: Any, **kwargs: Any) -> Any:
            (before, storage), overhead = trace._snapshot(), trace._overhead
            index, trace._depth = len(trace.steps), trace._depth + 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - start - (trace._overhead - overhead)  # less nested snapshots
                trace._depth -= 1
                after, storage_after = trace._snapshot()
                text = label(*args) if callable(label) else label
                trace.steps.insert(index, Step(text, trace._depth, seconds, trace._new_pages(before, after),
                                               storage_after - storage))
        setattr(owner, name, traced)

    def _new_pages(self, before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[tuple[str, int, int]]:
        reads = []
        for path, pages in after.items():
            fresh = np.flatnonzero(pages & ~before[path])
            if not len(fresh):
                continue
            breaks = np.flatnonzero(np.diff(fresh) != 1) + 1
            for run in np.split(fresh, breaks):
                reads.append((path, int(run[0]) * _PAGE, len(run) * _PAGE))
        return reads

    def lines(self, total_seconds: float | None = None) -> list[str]:
        """The steps (nested ones indented), each page range it read, and the totals."""
        out = []
        for step in self.steps:
            indent = "  " * step.depth
            out.append(f"  {indent}{step.label:<{44 - len(indent)}} {step.seconds * 1e3:8.2f} ms "
                       f"{step.read_bytes:>12,} B from the dataset, {step.storage:>10,} B from storage")
            for path, offset, size in step.reads:
                out.append(f"  {indent}    {os.path.relpath(path, self.root):<56} @{offset:>11,} {size:>11,} B")
        top = [step for step in self.steps if step.depth == 0]
        dataset = sum(step.read_bytes for step in top)
        files = {path for step in top for path, _, _ in step.reads}
        timed = f"{total_seconds * 1e3:.2f} ms timed, " if total_seconds is not None else ""
        out.append(f"  total: {timed}{sum(s.seconds for s in top) * 1e3:.2f} ms in the steps; {dataset:,} B of "
                   f"{len(files)} file(s) of the dataset brought into the page cache; "
                   f"{storage_read_bytes() - self.start_storage:,} B read from storage by the process")
        return out
