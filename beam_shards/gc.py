"""Garbage collection: what killed writes left in a cache folder, and nothing else.

A write that was killed can leave its staging folder (`_staging/<write id>/...`), a
temporary manifest or bad-inputs list (`_metadata.json.<id>.tmp`), and shard files
it moved into place but never published. `leftovers` decides from names alone which
files those are (pure logic); `find_garbage` lists a folder and `collect_garbage`
deletes. The published manifest, the shards it lists, `.lock`, `_bad_inputs.jsonl` and
any file beam_shards does not name are never touched.

Run it when no write to the folder is running: a running write's staged files look
exactly like a killed one's.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable

import filelock

from beam_shards import fs
from beam_shards.bad_inputs import BAD_INPUTS_NAME
from beam_shards.errors import BeamShardsError, CacheNotFoundError
from beam_shards.manifest import LOCK_NAME, MANIFEST_NAME, STAGING_DIR, read_metadata, write_id_of_shard

class WriteInProgressError(BeamShardsError):
    """A local write holds the cache folder's lock, so its files must not be collected."""


_TEMPORARY = re.compile(rf"^({re.escape(MANIFEST_NAME)}|{re.escape(BAD_INPUTS_NAME)})\..+\.tmp$")


def leftovers(files: Iterable[str], listed: set[str] | None) -> list[str]:
    """The files, of `files` (paths relative to the cache folder, with `/`), that killed writes left.

    Args:
      files: every file in the folder, recursively.
      listed: the shard file names the published manifest lists; None when there is
        no manifest, so that no shard file belongs to a cache.
    """
    found = []
    for name in files:
        if name.startswith(STAGING_DIR + "/"):
            found.append(name)
        elif "/" not in name and (_TEMPORARY.match(name) or (write_id_of_shard(name) is not None
                                                             and (listed is None or name not in listed))):
            found.append(name)
    return sorted(found)


@dataclasses.dataclass
class Garbage:
    """What `find_garbage` found: files (relative path -> bytes) and whether a cache is published there.

    Example:
        >>> garbage = find_garbage("/tmp/my_cache")  # doctest: +SKIP
        >>> sorted(garbage.files), garbage.num_bytes  # doctest: +SKIP
        >>> collect_garbage(garbage)  # doctest: +SKIP
    """

    path: str
    files: dict[str, int]
    published: bool

    @property
    def num_bytes(self) -> int:
        return sum(self.files.values())

    def __repr__(self) -> str:
        return f"Garbage(path={self.path!r}, files={len(self.files)}, num_bytes={self.num_bytes})"


def _list_all(path: str) -> dict[str, int]:
    """Relative path (with `/`) -> size of every file under `path`."""
    prefix = len(fs.join(path, "x")) - 1
    return {full[prefix:].replace(os.sep, "/"): size for full, size in fs.list_dir(path, recursive=True).items()}


def find_garbage(path: str) -> Garbage:
    """Lists what killed writes left in the cache folder `path`.

    Raises:
      CacheNotFoundError: `path` holds neither a cache nor anything a write left.
      CorruptCacheError: the manifest cannot be read, so which shards belong to the
        cache is unknown; nothing is removed then.
    """
    try:
        listed = {shard.path for shard in read_metadata(path, check_files=False).shards}
    except CacheNotFoundError:
        listed = None
    files = _list_all(path)
    garbage = {name: files[name] for name in leftovers(files, listed)}
    if listed is None and not garbage and not _has_staging_dir(path):
        raise CacheNotFoundError(f"{path} is not a beam_shards cache (it has no {MANIFEST_NAME}) "
                                 "and holds nothing a killed write left")
    return Garbage(path, garbage, listed is not None)


def _has_staging_dir(path: str) -> bool:
    return fs.is_local(path) and os.path.isdir(os.path.join(fs.local_path(path), STAGING_DIR))


def collect_garbage(garbage: Garbage) -> None:
    """Deletes what `find_garbage` found (and, locally, the emptied staging folders).

    Raises:
      WriteInProgressError: a local write holds the folder's lock, so it is running now.
    """
    path = garbage.path
    lock = _try_lock(path)
    try:
        fs.delete([fs.join(path, *name.split("/")) for name in sorted(garbage.files)])
        if fs.is_local(path):
            _remove_empty_dirs(os.path.join(fs.local_path(path), STAGING_DIR))
    finally:
        if lock is not None:
            lock.release()


def _try_lock(path: str) -> filelock.BaseFileLock | None:
    # `write_shards` holds this lock while it writes; the Beam sink takes none.
    if not fs.is_local(path) or not os.path.exists(os.path.join(fs.local_path(path), LOCK_NAME)):
        return None
    lock = filelock.FileLock(os.path.join(fs.local_path(path), LOCK_NAME))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise WriteInProgressError(f"a write to {path} is running (it holds {LOCK_NAME}); run gc once it is done") from None
    return lock


def _remove_empty_dirs(folder: str) -> None:
    for current, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        fs.remove_empty_dir(current)

