"""Reading the files that describe a cache's versions: the pointer, a version's header, a shard table,
and the listing of `_versions/`. Which version is the latest is `latest.py`'s to say.

Every read is bounded (`MAX_MANIFEST_BYTES`, a table's recorded size) and checked whole.
A file whose content cannot be a header of its version (garbled, empty, a link to nothing,
a folder or a FIFO where a file should be) is a `CorruptCacheError`; an error of the store
itself (denied, throttled, a broken connection) is not damage and is raised as such.
"""

from __future__ import annotations

import functools
import os

import pyarrow as pa

from beam_shards.errors import CacheError, CacheNotFoundError, CorruptCacheError, FileTooLargeError, NewerFormatError
from beam_shards.format.layout import TABLES_DIR, CacheLayout, parse_version_name
from beam_shards.format.manifest import MAX_MANIFEST_BYTES, Manifest, size_problem
from beam_shards.format.shard_table import TableRef
from beam_shards.storage import folders, fs
from beam_shards.storage.checksum import checksum_of


def _read(path: str, where: str) -> Manifest:
    try:
        raw = fs.read_bytes(where, limit=MAX_MANIFEST_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        if fs.is_local(where) and os.path.islink(fs.local_path(where)):
            raise CorruptCacheError(f"{where} is a link to nothing") from None
        raise
    except FileTooLargeError:
        raise CorruptCacheError(f"{where} holds more than {MAX_MANIFEST_BYTES:,} bytes, more than a manifest may"
                                ) from None
    except OSError as error:
        if not fs.is_local(where):
            if not fs.exists(where):
                raise FileNotFoundError(where) from None
            raise CacheError(f"cannot read {where}: {error}") from None
        raise CorruptCacheError(f"cannot read {where}: {error}") from None
    return Manifest.from_json(raw, path, where, functools.partial(read_table, path))


def read_table(path: str, ref: TableRef) -> pa.Table:
    """The shard table `ref` of the cache at `path`, checked whole: memory-mapped locally, else read
    in one request, then its size and checksum compared with `ref` and its Arrow data fully
    validated (a shard table is small, and one wrong byte in it would send rows to another shard).

    Raises:
      CorruptCacheError: the file is missing, of another size or checksum than `ref`
        says, or not a valid Arrow IPC file (the message names it).
    """
    where = f"shard table {TABLES_DIR}/{ref.file} of the cache at {path}"
    table_path = CacheLayout(path).table(ref.file)
    try:
        if fs.is_local(table_path):
            source = fs.open_random_access(table_path)
            size = source.size()
        else:
            raw = fs.read_bytes(table_path, limit=ref.size)
            source, size = pa.BufferReader(raw), len(raw)
        if size != ref.size:
            raise CorruptCacheError(size_problem(where, size, ref.size))
        checksum = checksum_of(source.read_buffer(size))
        if checksum != ref.checksum:
            raise CorruptCacheError(f"{where} has checksum {checksum}, its version says {ref.checksum}")
        table = pa.ipc.open_file(source).read_all()
        table.validate(full=True)
        return table
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise CorruptCacheError(f"{where} is missing") from None
    except FileTooLargeError:
        raise CorruptCacheError(f"{where} holds more than the {ref.size:,} bytes its version says") from None
    except (pa.ArrowException, OSError) as error:
        raise CorruptCacheError(f"{where} is not a readable Arrow IPC file: {error}") from None


def find_pointer(path: str) -> Manifest | None:
    """The manifest `_metadata.json` holds, None if there is none.

    Raises:
      CorruptCacheError: it is invalid.
    """
    try:
        return _read(path, CacheLayout(path).manifest)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_pointer(path: str) -> Manifest:
    """The manifest `_metadata.json` holds: the latest published version, unless a writer has
    committed a newer one since (`latest.py` looks).

    Raises:
      CacheNotFoundError: there is no `_metadata.json`. CorruptCacheError: it is invalid
        (when `_versions/` holds versions, the message says that gc writes it again).
    """
    layout = CacheLayout(path)
    try:
        pointer = find_pointer(path)
    except NewerFormatError:
        raise
    except CorruptCacheError as error:
        if not version_numbers(path):
            raise
        raise CorruptCacheError(f"{error}. It is a copy of the newest version's header in {layout.versions_dir}: "
                                f"`beam-shards gc {path}` writes it again") from None
    if pointer is None:
        raise CacheNotFoundError(_not_found_message(layout))
    return pointer


def read_version(path: str, number: int, pointer: Manifest | None = None) -> Manifest:
    """Version `number` from `_versions/`; `pointer` (the manifest `_metadata.json` holds) stands in
    for a damaged file of the same version, since it is a copy of it.

    Raises:
      FileNotFoundError: no such version file. CorruptCacheError: it is invalid, or
        holds another version than its name says.
    """
    where = CacheLayout(path).version(number)
    try:
        manifest = _read(path, where)
    except NewerFormatError:
        raise
    except CorruptCacheError:
        if pointer is not None and pointer.version == number:
            return pointer
        raise
    if manifest.version != number:
        if pointer is not None and pointer.version == number:
            return pointer
        raise CorruptCacheError(f"{where} holds version {manifest.version}, not {number}")
    return manifest


def version_numbers(path: str) -> list[int]:
    """The numbers of the files in `_versions/`, oldest first (one listing).

    Locally every entry counts, not only files: a folder, a FIFO or a link where a
    version should be is that version's file, damaged, not a version that is gone.

    Raises:
      CorruptCacheError: `_versions/` cannot be listed.
    """
    layout = CacheLayout(path)
    if fs.is_local(path):
        folder = fs.local_path(layout.versions_dir)
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        except OSError as error:
            raise CorruptCacheError(f"cannot list {layout.versions_dir}: {error}") from None
    else:
        names = [p.rsplit("/", 1)[-1] for p in folders.list_dir(layout.versions_dir)]
    return sorted(n for n in map(parse_version_name, names) if n is not None)


def _not_found_message(layout: CacheLayout) -> str:
    text = f"no beam_shards cache at {layout.path}: {layout.manifest} does not exist"
    if fs.exists(layout.staging_root):
        text += " (a write is in progress there, or was killed: `beam-shards gc` cleans up after it)"
    return text
