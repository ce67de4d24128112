"""The cache lock: local publishes and gc of one cache folder take turns; and the folders they
write in, refused where they are links.

A local folder has `<cache>/.lock` (a `filelock` lock, so it works across processes
and is released if its holder dies). Publishing holds it from moving shards into place
until `_metadata.json` points at the new version, and gc holds it from listing to
deleting, so gc never sees a publish half done. Object stores have no lock: there the
create-if-absent commit and gc's age rule (see `gc.py`) keep them apart.

`filelock` (3.20.3 and later, the floor setup.py sets) opens the lock file without
following a link, so a `.lock` planted as a symbolic link to another file can neither
truncate nor lock that file: it is refused with an error that says to remove it.
For the same reason `_staging`, `_tables` and `_versions` that are links are refused
(`refuse_links`) by every write and gc, before anything is created or deleted in them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import filelock

from beam_shards.errors import CacheError, WriteInProgressError
from beam_shards.format.layout import LOCK_NAME, STAGING_DIR, TABLES_DIR, VERSIONS_DIR, CacheLayout
from beam_shards.storage import fs


@contextlib.contextmanager
def cache_lock(layout: CacheLayout, *, wait: bool = True) -> Iterator[None]:
    """Holds the lock of a local cache folder (creating the folder); does nothing on object stores.

    Raises:
      WriteInProgressError: `wait` is False and another process holds the lock.
      CacheError: the lock file cannot be opened (a symbolic link, or no permission), or
        a folder of the cache is a link (`refuse_links`).
    """
    if not fs.is_local(layout.path):
        yield
        return
    refuse_links(layout)
    folder = fs.local_path(layout.path)
    os.makedirs(folder, exist_ok=True)
    lock = filelock.FileLock(fs.local_path(layout.lock))
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except filelock.Timeout:
        raise WriteInProgressError(f"a write or gc of {layout.path} is running (it holds {LOCK_NAME}); "
                                   "try again once it is done") from None
    except OSError as error:
        link = " is a symbolic link, which beam_shards never follows; remove it" if os.path.islink(
            fs.local_path(layout.lock)) else f" cannot be opened ({error.strerror or error})"
        raise CacheError(f"the cache lock {layout.lock}{link}") from None
    try:
        yield
    finally:
        lock.release()


def refuse_links(layout: CacheLayout) -> None:
    """Raises CacheError if `_staging`, `_tables` or `_versions` of a local cache is a symbolic link:
    a write or gc creates and deletes files in them, and never through a link (whose target may be
    anywhere). Object stores have no links.
    """
    if not fs.is_local(layout.path):
        return
    for name in (STAGING_DIR, TABLES_DIR, VERSIONS_DIR):
        where = fs.join(layout.path, name)
        if os.path.islink(fs.local_path(where)):
            raise CacheError(f"{where} is a symbolic link; beam_shards never writes or deletes through a link: "
                             "replace it with the folder it points to")
