"""Reading the versions of a cache: the latest, a pinned one, or every version still kept.

Readers open `_metadata.json` (the latest version's header) and look for the version
after it, which a writer may have committed without moving the pointer yet: two small
reads, whatever the number of shards and versions. A pinned version is read from
`_versions/<N>.json`; writers and gc list `_versions/`. Shard tables (`_tables/`) are
read when a reader first needs them: memory-mapped locally, in one request from an
object store. A format-1 cache (no `_versions/`) is version 1.
"""

from __future__ import annotations

import functools
import os

import pyarrow as pa

from beam_shards.errors import (CacheNotFoundError, CorruptCacheError, FileTooLargeError, NewerFormatError,
                                VersionNotFoundError)
from beam_shards.format.layout import TABLES_DIR, CacheLayout, parse_version_name
from beam_shards.format.manifest import MAX_MANIFEST_BYTES, Manifest, size_problem
from beam_shards.format.shard_table import TableRef
from beam_shards.storage import folders, fs
from beam_shards.storage.checksum import checksum_of


def _read(path: str, where: str) -> Manifest:
    try:
        raw = fs.read_bytes(where, limit=MAX_MANIFEST_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except FileTooLargeError:
        raise CorruptCacheError(f"{where} holds more than {MAX_MANIFEST_BYTES:,} bytes, more than a manifest may"
                                ) from None
    except OSError as error:
        if not fs.is_local(where) and not fs.exists(where):
            raise FileNotFoundError(where) from None
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


def read_pointer(path: str) -> Manifest:
    """The manifest `_metadata.json` holds: the latest published version.

    Raises:
      CacheNotFoundError: there is no `_metadata.json`. CorruptCacheError: it is invalid.
    """
    layout = CacheLayout(path)
    try:
        return _read(path, layout.manifest)
    except (FileNotFoundError, NotADirectoryError):
        raise CacheNotFoundError(_not_found_message(layout)) from None
    except NewerFormatError:
        raise
    except CorruptCacheError as error:
        if not version_numbers(path):
            raise
        raise CorruptCacheError(f"{error}. It is a copy of the newest version's header in {layout.versions_dir}: "
                                f"move it aside and run `beam-shards gc {path}`, which writes it again") from None


def read_version(path: str, number: int, pointer: Manifest | None = None) -> Manifest:
    """Version `number` from `_versions/`; `pointer` (the manifest `_metadata.json` holds) stands in
    for a damaged file of the same version, since it is a copy of it.

    Raises:
      FileNotFoundError: no such version file. CorruptCacheError: it is invalid, or
        holds another version than its name says (the message says the way out).
    """
    where = CacheLayout(path).version(number)
    try:
        manifest = _read(path, where)
        if manifest.version != number:
            raise CorruptCacheError(f"{where} holds version {manifest.version}, not {number}")
    except NewerFormatError:
        raise
    except CorruptCacheError as error:
        if pointer is not None and pointer.version == number:
            return pointer
        raise CorruptCacheError(f"{error}. No reader can open version {number} from it: move it aside, and writes, "
                                "log and gc work again") from None
    return manifest


def version_numbers(path: str) -> list[int]:
    """The numbers of the versions in `_versions/`, oldest first (one listing).

    Locally every entry counts, not only files: a folder or a FIFO where a version
    should be is that version, damaged, not a version that is gone.

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


def read_metadata(path: str, *, version: int | None = None, check_files: bool = False) -> Manifest:
    """Reads and validates the manifest of one version of the cache at `path`.

    Example:
        >>> manifest = read_metadata("/tmp/my_cache")  # doctest: +SKIP
        >>> manifest.version, manifest.num_rows, manifest.num_shards  # doctest: +SKIP
        >>> first = read_metadata("/tmp/my_cache", version=1)  # doctest: +SKIP

    The latest version is the newest committed one: `_metadata.json`, unless the version
    file after it is committed in `_versions/` (a writer died before it moved the
    pointer, or an older writer's slow pointer update landed after a newer one's), so the
    latest never moves back once a publish returned. Reading it costs two small reads
    (the header, and a look for the next version) at any size; each shard's size is
    checked when a reader first opens it.

    Args:
      path: the cache folder (local, gs://, s3://...).
      version: the version to read; None for the latest.
      check_files: also check now that every listed shard exists with its recorded
        size (a request per shard on an object store).

    Raises:
      CacheNotFoundError: no `_metadata.json` at `path`.
      VersionNotFoundError: `version` is not kept (the message lists those that are).
      CorruptCacheError: the manifest is invalid, of an unknown format version, or a
        shard is missing or has another size than recorded.
    """
    latest = read_pointer(path)
    latest = _newer_committed(path, latest) or latest
    manifest = latest
    if version is not None and version != latest.version:
        if type(version) is not int or version < 1:
            raise ValueError(f"version must be a positive int or None; got {version!r}")
        try:
            manifest = read_version(path, version)
        except (FileNotFoundError, NotADirectoryError):
            kept = version_numbers(path) or [latest.version]
            raise VersionNotFoundError(
                f"the cache at {path} has no version {version}: it was never published or retention removed it "
                f"(kept: {_ranges(kept)})") from None
    if check_files:
        problems = check_shard_sizes(manifest)
        if problems:
            raise CorruptCacheError(f"version {manifest.version} of the cache at {path} is damaged: "
                                    + "; ".join(problems))
    return manifest


def list_versions(path: str, limit: int | None = None) -> list[Manifest]:
    """Every version of the cache at `path` still kept (the newest `limit` of them), oldest first.

    Only the manifests listed are read, so `limit` bounds the cost whatever the history.

    Raises:
      CacheNotFoundError: no cache at `path`. CorruptCacheError: a manifest is invalid.
      ValueError: a `limit` that is not a positive int.
    """
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"limit must be a positive int or None; got {limit!r}")
    latest = read_pointer(path)
    found = {}
    numbers = version_numbers(path)
    for number in numbers if limit is None else numbers[-limit:]:
        try:
            found[number] = read_version(path, number, latest)
        except FileNotFoundError:  # removed by gc since the listing
            continue
    found.setdefault(latest.version, latest)
    return [found[n] for n in sorted(found)][-limit if limit else None:]


def latest_committed(path: str) -> Manifest | None:
    """The newest committed version, for writers and gc: the newest of `_versions/` and `_metadata.json`.

    A version is committed once its `_versions/` file exists, even if a writer died
    before `_metadata.json` caught up; a format-1 cache has only `_metadata.json`, and
    a pointer newer than every version file (the newest file lost) is the latest too,
    so the next write takes the number after it rather than reusing it.
    """
    try:
        pointer = read_pointer(path)
    except CacheNotFoundError:
        pointer = None
    numbers = version_numbers(path)
    for number in reversed(numbers):
        if pointer is not None and number < pointer.version:
            break
        try:
            return read_version(path, number, pointer)
        except FileNotFoundError:
            continue
    return pointer


# How many version files past `_metadata.json`'s a reader looks at, at most (a writer moves the pointer
# after each commit, so it lags by one or two), so that a folder of damaged files cannot hold it long.
MAX_VERSIONS_PAST_POINTER = 100


def _newer_committed(path: str, pointer: Manifest) -> Manifest | None:
    """The newest readable version committed after the pointer's, if any: the version files after
    it, looked for one by one until one is missing (one read when the pointer is up to date). A
    damaged one is passed over: the pointer, or an older committed version, still serves."""
    newest = None
    for number in range(pointer.version + 1, pointer.version + 1 + MAX_VERSIONS_PAST_POINTER):
        try:
            newest = read_version(path, number)
        except (FileNotFoundError, NotADirectoryError):
            break
        except CorruptCacheError:
            continue
    return newest


def check_shard_sizes(manifest: Manifest) -> list[str]:
    """One problem per listed shard that is missing, not a file, or not of its recorded size."""
    paths = [manifest.shard_path(i) for i in range(manifest.num_shards)]
    found = folders.sizes(paths) if paths else {}
    problems = []
    for shard, path in zip(manifest.shards, paths):
        size = found[path]
        if size is None:
            problems.append(f"shard {shard.file} is missing")
        elif size < 0:
            problems.append(f"shard {shard.file} is not a regular file")
        elif size != shard.num_bytes:
            problems.append(size_problem(f"shard {shard.file}", size, shard.num_bytes))
    return problems


def _not_found_message(layout: CacheLayout) -> str:
    text = f"no beam_shards cache at {layout.path}: {layout.manifest} does not exist"
    if fs.exists(layout.staging_root):
        text += " (a write is in progress there, or was killed: `beam-shards gc` cleans up after it)"
    return text


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> "1-3, 5"."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def shard_paths(path: str, version: int | None = None) -> list[str]:
    """The shard files of one version of the cache at `path` (the latest by default), in row order.

    A glob of the folder would also find the shards of older versions that retention
    keeps; these are what Polars, DuckDB or `pyarrow.dataset` should read.

    Example:
        >>> import pyarrow.dataset as pads  # doctest: +SKIP
        >>> pads.dataset(shard_paths("/tmp/my_cache"), format="arrow").count_rows()  # doctest: +SKIP

    Raises:
      CacheNotFoundError, VersionNotFoundError, CorruptCacheError: as `read_metadata`.
    """
    manifest = read_metadata(path, version=version)
    return [manifest.shard_path(index) for index in range(manifest.num_shards)]
