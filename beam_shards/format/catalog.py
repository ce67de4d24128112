"""Reading the versions of a cache: the latest, a pinned one, or every version still kept.

Readers open `_metadata.json` (the latest version's header) and look for the version
after it, which a writer may have committed without moving the pointer yet
(`latest.resolve`, the rule every reader, writer and gc follows): two small reads,
whatever the number of shards and versions. A pinned version is read from
`_versions/<N>.json`; `list_versions` lists `_versions/`. Shard tables (`_tables/`) are
read when a reader first needs them: memory-mapped locally, in one request from an
object store. A format-1 cache (no `_versions/`) is version 1.
"""

from __future__ import annotations

from beam_shards.errors import CorruptCacheError, VersionNotFoundError
from beam_shards.format.latest import VersionFolder, history, resolve
from beam_shards.format.manifest import Manifest, size_problem
from beam_shards.format.version_files import read_version, version_numbers
from beam_shards.storage import folders


def read_metadata(path: str, *, version: int | None = None, check_files: bool = False) -> Manifest:
    """Reads and validates the manifest of one version of the cache at `path`.

    Example:
        >>> manifest = read_metadata("/tmp/my_cache")  # doctest: +SKIP
        >>> manifest.version, manifest.num_rows, manifest.num_shards  # doctest: +SKIP
        >>> first = read_metadata("/tmp/my_cache", version=1)  # doctest: +SKIP

    The latest version is the one every reader, writer and gc takes (`latest.py`):
    `_metadata.json`, unless versions were committed after it in `_versions/` (a writer
    died before it moved the pointer, or an older writer's slow pointer update landed
    after a newer one's), so the latest never moves back once a publish returned.
    Reading it costs two small reads (the header, and a look for the next version) at
    any size; each shard's size is checked when a reader first opens it.

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
    folder = resolve(path, strict=True)
    manifest = folder.latest
    if version is not None and version != manifest.version:
        if type(version) is not int or version < 1:
            raise ValueError(f"version must be a positive int or None; got {version!r}")
        manifest = _pinned(folder, version)
    if check_files:
        problems = check_shard_sizes(manifest)
        if problems:
            raise CorruptCacheError(f"version {manifest.version} of the cache at {path} is damaged: "
                                    + "; ".join(problems))
    return manifest


def _pinned(folder: VersionFolder, version: int) -> Manifest:
    """Version `version`, other than the latest, of the cache `folder` holds."""
    if version in folder.passed:
        raise CorruptCacheError(f"the cache at {folder.path} has no version {version}: {folder.passed[version]}")
    try:
        if version < folder.latest.version:
            return folder.run.get(version) or read_version(folder.path, version, folder.pointer)
    except (FileNotFoundError, NotADirectoryError):
        pass
    kept = [n for n in version_numbers(folder.path) if n <= folder.latest.version and n not in folder.passed]
    raise VersionNotFoundError(
        f"the cache at {folder.path} has no version {version}: it was never published or retention removed it "
        f"(kept: {_ranges(sorted(set(kept) | {folder.latest.version}))})")


def list_versions(path: str, limit: int | None = None) -> list[Manifest]:
    """Every version of the cache at `path` still kept (the newest `limit` of them), oldest first.

    Only the manifests listed are read, so `limit` bounds the cost whatever the history.
    A version file that is no version (damaged, another cache's, a stray; see
    `latest.py`) is left out: `version_log` names them.

    Raises:
      CacheNotFoundError: no cache at `path`. CorruptCacheError: `_metadata.json` is invalid.
      ValueError: a `limit` that is not a positive int.
    """
    return version_log(path, limit)[0]


def version_log(path: str, limit: int | None = None) -> tuple[list[Manifest], dict[str, str]]:
    """`list_versions(path, limit)`, and the version files that are no version: path relative to
    the cache -> why each is ignored.

    Raises:
      As `list_versions`.
    """
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"limit must be a positive int or None; got {limit!r}")
    folder = resolve(path, strict=True, listed=True)
    found = history(folder, limit)
    return found.versions, folder.ignored(found.ignored)


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
