"""File access for caches: local paths through the OS, every other scheme through Beam's `FileSystems`.

Local paths (and `file://`) are read, written, renamed and deleted with the OS
directly (what folders hold is listed by `folders`): training processes that only read a cache never import Beam, and Beam's
local delete takes its argument as a glob, which a folder name with `[` in it would
break. gs://, s3:// and any other scheme Beam knows go through
`apache_beam.io.filesystems.FileSystems` (configured by `stores`), except the
conditional create, which `store_calls` makes with each store's own client.
`open_random_access` serves random-access readers: a memory map locally
(`is_memory_mapped` tells), ranged reads on object stores.
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
import re
import shutil
import stat
import weakref
from typing import TYPE_CHECKING, BinaryIO

from beam_shards.errors import FileTooLargeError
from beam_shards.storage import local_files, store_calls, store_errors

if TYPE_CHECKING:
    import pyarrow as pa

# HDFS renames refuse an existing destination, so it takes the single-write path too.
_RENAME_SCHEMES = ("", "file")
_MAPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # source of `open_random_access` -> its map


def beam_filesystems(path: str):
    """Beam's FileSystems, configured (see `stores`), once the store holding `path` answered."""
    from beam_shards.storage import stores

    filesystems = stores.beam_filesystems()
    store_calls.check_store(path)
    return filesystems


def scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else ""


def is_local(path: str) -> bool:
    return scheme(path) in ("", "file")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def beam_path(path: str) -> str:
    """`path` as Beam's FileSystems takes it (Beam has no file:// scheme)."""
    return local_path(path) if is_local(path) else path


def check_cache_path(path: str) -> str:
    """Returns `path`; raises ValueError for a remote path with glob characters in it.

    Object stores delete and list by glob on some schemes and not on others, so such a
    name cannot be handled safely there.
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"a cache path must be a non-empty string; got {path!r}")
    if not is_local(path) and re.search(r"[*?\[]", path):
        raise ValueError(f"a {scheme(path)}:// cache path may not contain *, ? or [: {path!r}")
    return path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(base, *parts)
    return posixpath.join(base.rstrip("/"), *parts)


def has_atomic_rename(path: str) -> bool:
    """Whether a rename over an existing file is atomic (local disks; not object stores or HDFS)."""
    return scheme(path) in _RENAME_SCHEMES


_CREATE_ATTEMPTS = 5


def create(path: str) -> BinaryIO:
    """Opens a new file for writing (its folder made if missing); local paths need no Beam.

    A local file is created exclusively, never through a link (`local_files.create_new`): nothing may be
    at `path` yet (FileExistsError), which holds since every writer picks names no other run uses.
    """
    if is_local(path):
        target = local_path(path)
        folder = os.path.dirname(os.path.abspath(target))
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                os.makedirs(folder, exist_ok=True)
                return local_files.create_new(target)
            except FileNotFoundError:
                # Another write removed an empty parent (`_staging/`) between our makedirs' steps, or
                # between it and the open: make the folders again.
                if attempt == _CREATE_ATTEMPTS - 1:
                    raise
    from apache_beam.io.filesystem import CompressionTypes

    return beam_filesystems(path).create(beam_path(path), mime_type="application/octet-stream",
                                 compression_type=CompressionTypes.UNCOMPRESSED)


def open_read(path: str) -> BinaryIO:
    """Opens a file for reading; a local path that is not a regular file (a folder, a FIFO) is an OSError.

    Opened without blocking, so a FIFO where a file should be cannot hang a reader.

    Raises:
      FileNotFoundError: nothing is at `path`, on every scheme (the error names it).
      StoreAccessError: the store denied the read, or throttled or did not answer
        every attempt.
    """
    if is_local(path):
        fd = os.open(local_path(path), os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
        return os.fdopen(fd, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    def attempt() -> BinaryIO:
        try:
            return beam_filesystems(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)
        except Exception as error:  # each store's client has its own error for a missing object
            if store_errors.kind(error) is None and not exists(path):
                raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
            raise

    return store_errors.retried(path, "read", attempt)


def open_random_access(path: str) -> pa.NativeFile:
    """A seekable file whose reads fetch only the bytes asked for.

    A local file is memory-mapped; `s3://` and `gs://` objects are read with ranged
    requests through pyarrow's filesystems, configured from the environment and a
    pipeline's options (see `stores`); any other scheme reads through Beam's FileSystems.

    Raises:
      FileNotFoundError: nothing is at `path` (the error names it).
      IsADirectoryError: a local `path` is not a regular file.
      StoreAccessError: the store denied the read, or throttled or did not answer
        every attempt.
    """
    import pyarrow as pa

    if is_local(path):
        mapped, _ = map_file(path)
        if mapped is None:
            return pa.BufferReader(b"")
        source = pa.BufferReader(pa.py_buffer(mapped))
        _MAPS[source] = mapped
        return source
    if scheme(path) in store_calls.STORE_SCHEMES:
        from beam_shards.storage import stores

        store_calls.check_store(path)

        def attempt() -> pa.NativeFile:
            try:
                return stores.pyarrow_filesystem(scheme(path)).open_input_file(path.split("://", 1)[1])
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, "no such object", path) from None

        try:
            return store_errors.retried(path, "open", attempt)
        except OSError as error:  # pyarrow's own message names no scheme
            if isinstance(error, FileNotFoundError):
                raise
            raise OSError(error.errno, f"cannot open ({error})", path) from error
    if not exists(path):
        raise FileNotFoundError(errno.ENOENT, "no such object", path)
    return pa.PythonFile(open_read(path), mode="r")


def map_file(path: str) -> tuple[mmap.mmap | None, os.stat_result]:
    """The local file at `path` memory-mapped read-only (None when it is empty: an empty file cannot
    be mapped), and its status when mapped (size, device and inode).

    Read it through `pa.py_buffer(mapped)`: pyarrow's own `memory_map` advises the kernel
    (madvise WILLNEED) over every range read, for a record batch a walk of the page cache
    over its whole body that costs several times the read itself; a Python map wrapped as a
    buffer gives the same zero-copy slices without that call, and takes the advice its
    reader gives (`mmap.madvise`).

    Raises:
      FileNotFoundError: nothing is at `path` (the error names it).
      IsADirectoryError: `path` is not a regular file.
    """
    if not stat.S_ISREG(os.stat(local_path(path)).st_mode):  # a FIFO would block the open
        raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
    with open(local_path(path), "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_size == 0:
            return None, info
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), info


def mapped_size(source: pa.NativeFile) -> int | None:
    """The size now of the file `source` (from `open_random_access`) maps, by an fstat of the map's own
    descriptor (the file mapped, even if another has since taken its name); None when it maps none."""
    mapped = _MAPS.get(source)
    return None if mapped is None else mapped.size()


def is_memory_mapped(source: pa.NativeFile) -> bool:
    """Whether `source`, from `open_random_access`, reads a local map (its reads cost no memory)."""
    import pyarrow as pa

    return isinstance(source, pa.BufferReader)


def read_bytes(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The whole content of a file, byte for byte (compressed files are not decompressed).

    An `s3://` or `gs://` object is read in one request, so an object replaced meanwhile
    is read whole, old or new, never a part of each (Beam's reader asks for ranges).

    Raises:
      FileTooLargeError: the file holds more than `limit` bytes (a local file's or an
        object's size is checked before reading; other schemes are read up to `limit + 1`
        bytes).
      StoreAccessError: the store denied the read, or throttled or did not answer
        every attempt.
    """
    path = os.fspath(path)
    if scheme(path) in store_calls.STORE_SCHEMES:
        return store_errors.retried(path, "read", lambda: store_calls.read_object(path, limit))
    with open_read(path) as handle:
        if limit is None:
            return handle.read()
        # read(n) sets n bytes aside first: ask for what the file holds, not for the limit.
        size = os.fstat(handle.fileno()).st_size if is_local(path) else limit
        data = handle.read(size + 1) if size <= limit else b""
        if size < len(data) <= limit:  # a local file that grew while it was read
            data += handle.read(limit + 1 - len(data))
    if size > limit or len(data) > limit:
        raise FileTooLargeError(errno.EFBIG, f"more than {limit:,} bytes", path)
    return data


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return store_errors.retried(path, "look for", lambda: beam_filesystems(path).exists(path))


def write_bytes(path: str, data: bytes) -> None:
    with create(path) as handle:
        handle.write(data)


def write_bytes_atomic(path: str, data: bytes, temp: str) -> None:
    """Writes `path` so readers see the old content or the new, never a part.

    Where rename is atomic the data goes to the temporary name `temp` first; on
    object stores a single object write is already atomic.
    """
    if not has_atomic_rename(path):
        write_bytes(path, data)
        return
    write_bytes(temp, data)
    if is_local(path):
        _fsync(local_path(temp))
    rename([temp], [path])
    sync_dir(path)


def create_if_absent(path: str, data: bytes, temp: str) -> bool:
    """Writes `path` only if no file is there yet; returns whether this call created it.

    On a local disk the data goes to `temp` first and is then hard-linked to `path`:
    `link` fails when `path` exists, so two writers can never both create it and a
    reader never sees a partial file. On S3 and GCS the store checks it in the same
    request (`If-None-Match: *`, `ifGenerationMatch=0`; see `store_calls`). Other
    schemes have no such call in Beam's FileSystems: there a check for the object
    precedes one whole-object write, which leaves a window between the check and the
    write in which a racing writer's object can be replaced.
    """
    if scheme(path) in store_calls.STORE_SCHEMES:
        return store_calls.create_if_absent(path, data)
    if not is_local(path):
        if exists(path):
            return False
        write_bytes(path, data)
        return True
    os.makedirs(os.path.dirname(os.path.abspath(local_path(path))), exist_ok=True)
    write_bytes(temp, data)
    _fsync(local_path(temp))
    try:
        os.link(local_path(temp), local_path(path))
    except FileExistsError:
        return False
    finally:
        _delete_local(local_path(temp))
    sync_dir(path)
    return True


def sync_dir(path: str) -> None:
    """Makes renames into the folder of local `path` durable; nothing to do on object stores."""
    if is_local(path):
        _fsync(os.path.dirname(os.path.abspath(local_path(path))))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Moves files; on gs:// a copy of each then per-object deletes (see `delete`)."""
    if not sources:
        return
    if all(is_local(p) for p in sources + destinations):
        for source, destination in zip(sources, destinations):
            os.rename(local_path(source), local_path(destination))
        return
    if scheme(sources[0]) == "gs":
        beam_filesystems(sources[0]).copy(sources, destinations)  # one request per object, not a batch
        delete(sources)
        return
    beam_filesystems(sources[0]).rename([beam_path(p) for p in sources], [beam_path(p) for p in destinations])


def delete(paths: list[str]) -> None:
    """Deletes files or folders, ignoring those already gone.

    gs:// objects are deleted one request each rather than by Beam's batch delete
    (which also treats each path as a glob), a call some GCS-compatible servers lack.
    """
    remote = [path for path in paths if not is_local(path)]
    for path in paths:
        if is_local(path):
            _delete_local(local_path(path))
    gcs = [path for path in remote if scheme(path) == "gs"]
    if gcs:
        store_calls.gcs_delete(gcs)
        remote = [path for path in remote if scheme(path) != "gs"]
    if not remote:
        return
    from apache_beam.io.filesystem import BeamIOError

    try:
        beam_filesystems(remote[0]).delete(remote)  # one batched call where the store has one
    except BeamIOError:
        for path in remote:
            try:
                beam_filesystems(path).delete([path])
            except BeamIOError:
                if beam_filesystems(path).exists(path):
                    raise


def _delete_local(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
