"""What folders hold: listing them (names, sizes, changes), the sizes of many files at once,
and removing a folder whole.

Locally through `os`; on object stores a folder is a prefix, listed through Beam's
FileSystems (one listing, not a call per object). The single-file calls these build on
are in `fs`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import posixpath
import re
import stat

from beam_shards.storage import fs, store_errors

# A glob character, as Beam's FileSystems.match reads patterns.
_GLOB = re.compile(r"[*?[]")


def sizes(paths: list[str]) -> dict[str, int | None]:
    """The size of each path, None where it does not exist; -1 where a local path is not a
    regular file (a folder, a FIFO, a device, a link that loops)."""
    if all(fs.is_local(p) for p in paths):
        result: dict[str, int | None] = {}
        for p in paths:
            try:
                info = os.stat(fs.local_path(p))
            except (FileNotFoundError, NotADirectoryError):
                result[p] = None
            except OSError:
                result[p] = -1
            else:
                result[p] = info.st_size if stat.S_ISREG(info.st_mode) else -1
        return result
    # One listing of the folder they share, not a metadata call per object.
    prefix = fs.scheme(paths[0]) + "://" if "://" in paths[0] else ""
    folder = prefix + posixpath.commonpath([posixpath.dirname(p[len(prefix):]) for p in paths])
    found = list_dir(folder, recursive=True)
    return {p: found.get(p) for p in paths}


def list_files(patterns: list[str]) -> dict[str, int]:
    """Path -> size of every file matching any of the glob `patterns` (-1 for a local path without a glob
    character that is not a regular file, as `sizes` gives it)."""
    if not patterns:
        return {}
    if all(fs.is_local(p) and not _GLOB.search(p) for p in patterns):
        # Local paths without a glob character: every one that exists, as Beam's match gives them,
        # without importing Beam.
        found = sizes([fs.beam_path(p) for p in patterns])
        return {p: n for p, n in found.items() if n is not None}
    results = store_errors.retried(patterns[0], "list", lambda: fs.beam_filesystems(patterns[0]).match(
        [fs.beam_path(p) for p in patterns]))
    return {meta.path: meta.size_in_bytes for result in results for meta in result.metadata_list}


def list_dir(folder: str, pattern: str = "*", *, recursive: bool = False) -> dict[str, int]:
    """Path -> size of the files in `folder` (a literal path) whose name matches `pattern`.

    With `recursive`, files in sub-folders are included and `pattern` matches their
    path relative to `folder` (with `/` separators).
    """
    if not fs.is_local(folder):
        matched = list_files([fs.join(folder, "**" if recursive else pattern)])
        return {p: n for p, n in matched.items() if fnmatch.fnmatchcase(_relative(folder, p), pattern)}
    root = fs.local_path(folder)
    found = {}
    for current, dirs, files in os.walk(root):
        relative_dir = os.path.relpath(current, root)
        for name in files:
            relative = name if relative_dir == "." else f"{relative_dir}/{name}".replace(os.sep, "/")
            if fnmatch.fnmatchcase(relative, pattern):
                full = os.path.join(current, name)
                try:
                    found[fs.join(folder, *relative.split("/"))] = os.stat(full).st_size
                except FileNotFoundError:
                    pass
        if not recursive:
            break
    return found


@dataclasses.dataclass(frozen=True)
class FileStat:
    """A listed file: its size and when it was last changed (seconds since the epoch)."""

    size: int
    mtime: float


def walk(folder: str) -> dict[str, FileStat]:
    """Every file under `folder`, by its path relative to `folder` (with `/`).

    Links are listed as themselves and never followed, so nothing outside `folder`
    is ever listed (and so never deleted by a caller acting on the listing).
    """
    if not fs.is_local(folder):
        results = store_errors.retried(folder, "list",
                                       lambda: fs.beam_filesystems(folder).match([fs.join(folder, "**")]))
        return {_relative(folder, meta.path): FileStat(meta.size_in_bytes, meta.last_updated_in_seconds or 0.0)
                for result in results for meta in result.metadata_list}
    root = fs.local_path(folder)
    found = {}
    for current, _, files in os.walk(root):
        for name in files:
            full = os.path.join(current, name)
            try:
                info = os.lstat(full)
            except FileNotFoundError:
                continue
            found[os.path.relpath(full, root).replace(os.sep, "/")] = FileStat(info.st_size, info.st_mtime)
    return found


def _relative(folder: str, path: str) -> str:
    return path[len(folder.rstrip("/")) + 1:]


def delete_tree(path: str) -> None:
    """Deletes a folder and everything under it; on object stores, every object under the prefix."""
    if fs.is_local(path):
        fs.delete([path])
        return
    fs.delete(sorted(list_dir(path, recursive=True)))


def remove_empty_dir(path: str) -> None:
    """Removes a local folder if it is empty; object stores have no folders."""
    if fs.is_local(path):
        try:
            os.rmdir(fs.local_path(path))
        except OSError:
            pass
