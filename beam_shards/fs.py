"""File access for caches: Beam's `FileSystems` for every write, rename and delete.

Writes go through `apache_beam.io.filesystems.FileSystems`, so local paths, gs:// and
s3:// behave alike. Reads of local paths use the OS directly, so that training
processes that only read a cache do not import Beam; other schemes read through
`FileSystems` too.
"""

from __future__ import annotations

import os
import posixpath
from typing import BinaryIO

_RENAME_SCHEMES = ("", "file", "hdfs")


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else ""


def is_local(path: str) -> bool:
    return scheme(path) in ("", "file")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(base, *parts)
    return posixpath.join(base.rstrip("/"), *parts)


def has_atomic_rename(path: str) -> bool:
    """Whether a rename over an existing file is atomic (local disks and HDFS; not object stores)."""
    return scheme(path) in _RENAME_SCHEMES


def create(path: str) -> BinaryIO:
    from apache_beam.io.filesystem import CompressionTypes

    return _filesystems().create(path, mime_type="application/octet-stream",
                                 compression_type=CompressionTypes.UNCOMPRESSED)


def open_read(path: str) -> BinaryIO:
    if is_local(path):
        return open(local_path(path), "rb")
    from apache_beam.io.filesystem import CompressionTypes

    return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    with open_read(path) as handle:
        return handle.read()


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return _filesystems().exists(path)


def sizes(paths: list[str]) -> dict[str, int | None]:
    """The size of each path, None where it does not exist."""
    if all(is_local(p) for p in paths):
        result: dict[str, int | None] = {}
        for p in paths:
            try:
                result[p] = os.stat(local_path(p)).st_size
            except FileNotFoundError:
                result[p] = None
        return result
    found = list_files(paths)
    return {p: found.get(p) for p in paths}


def list_files(patterns: list[str]) -> dict[str, int]:
    """Path -> size of every file matching any of the glob `patterns`."""
    if not patterns:
        return {}
    results = _filesystems().match(patterns)
    return {meta.path: meta.size_in_bytes for result in results for meta in result.metadata_list}


def write_bytes(path: str, data: bytes) -> None:
    with create(path) as handle:
        handle.write(data)


def write_bytes_atomic(path: str, data: bytes, temp_suffix: str) -> None:
    """Writes `path` so readers see the old content or the new, never a part.

    Where rename is atomic the data goes to a temporary name first; on object stores
    a single object write is already atomic.
    """
    if not has_atomic_rename(path):
        write_bytes(path, data)
        return
    temp = f"{path}.{temp_suffix}.tmp"
    write_bytes(temp, data)
    if is_local(path):
        _fsync(local_path(temp))
    _filesystems().rename([temp], [path])


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename(sources: list[str], destinations: list[str]) -> None:
    if sources:
        _filesystems().rename(sources, destinations)


def delete(paths: list[str]) -> None:
    """Deletes files, ignoring those already gone."""
    from apache_beam.io.filesystem import BeamIOError

    fs = _filesystems()
    for path in paths:
        try:
            fs.delete([path])
        except BeamIOError:
            if fs.exists(path):
                raise


def delete_tree(path: str) -> None:
    """Deletes a folder and everything under it; on object stores, every object under the prefix."""
    if is_local(path):
        if os.path.exists(local_path(path)):
            delete([path])
        return
    delete(sorted(list_files([join(path, "**")])))


def remove_empty_dir(path: str) -> None:
    """Removes a local folder if it is empty; object stores have no folders."""
    if is_local(path):
        try:
            os.rmdir(local_path(path))
        except OSError:
            pass
