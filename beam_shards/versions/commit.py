"""Publishing a write as a new version: shards to their final names, then a commit that cannot succeed twice.

`publish` is the finalize step of both `write_shards` and the Beam sink, modelled on
Lance's and Delta's commits:

1. Find the latest version by the rule readers follow (`format.latest`), and look for a
   kept version this write already published; a retried or repeated finalize finds it
   and publishes nothing more (even if newer versions followed).
2. Move the staged shards to `shard-<write id>-NNNNN-of-NNNNN.arrow`, names no other
   write uses; each rename checks source and destination, so a re-run continues.
3. Write the shard table of the new shards to `_tables/` (`new_tables.py`; an append
   merges the small tables at the end of the base version's list into it), named by
   its content, so a file there never changes. Then create the header of the
   version after the run (`_versions/<N+1>.json`, where N is the latest unless files
   that are no versions follow it) only if it does not exist (a hard link on local
   disks, a conditional write on S3 and GCS). The header names the cache's id and the
   write it builds on. A writer that loses the race finds the latest again, rebuilds
   its header (an append re-bases on the winner) and tries the next number: two racing
   writes end as two successive versions.
4. Bring `_metadata.json` up to the newest version; it never moves back.
5. Remove the write's own staging. Older versions are never touched here: only
   retention (`gc.py`) removes them.

Locally, steps 1 to 4 hold the cache lock (`lock.py`), which gc takes too.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from beam_shards._version import __version__
from beam_shards.errors import (CacheExistsError, CorruptCacheError, FeatureError, PublishError, SchemaMismatchError,
                                best_effort)
from beam_shards.features import Features
from beam_shards.format.latest import MAX_PAST_POINTER, VersionFolder, resolve
from beam_shards.format.layout import (CacheLayout, check_write_id, is_write_id, new_cache_id, new_write_id,
                                       shard_name, write_id_of_shard, write_id_time)
from beam_shards.format.manifest import (LISTED_FORMAT_VERSION, MAX_DEPTH, MAX_MANIFEST_BYTES, MODES, Manifest,
                                         check_metadata, format_for, json_depth, manifest_json)
from beam_shards.format.shard_table import ShardTable, TableRef
from beam_shards.format.table_files import ShardInfo
from beam_shards.format.statistics import Statistics
from beam_shards.format.version_files import read_table, read_version, version_numbers
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.storage import folders, fs
from beam_shards.versions.lock import cache_lock, refuse_links
from beam_shards.versions.new_tables import Added, added_table, append_tables, table_with_kept, write_table
from beam_shards.versions.staging import move_into_place, remove_staging, staged_order

MAX_COMMIT_ATTEMPTS = 100
# Versions created this long before a write started cannot be that write's: a retried
# finalize stops looking for its own version there (allowing for clock skew).
_CLOCK_SKEW = datetime.timedelta(hours=1)


def writer_versions() -> dict[str, str]:
    """The versions recorded in a manifest; read from package metadata, so Beam is not imported for them."""
    return {"package": f"beam_shards {__version__}", "pyarrow": pa.__version__,
            "apache_beam": _installed("apache-beam"), "python": sys.version.split()[0]}


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def check_write(path: str, features: Features | None, metadata: Any, mode: str) -> tuple[dict[str, Any], int, str]:
    """Checks the arguments of a write before anything runs; returns the metadata as a dict, the
    newest version committed now (0 for none), which a write with a fresh id publishes after
    (`publish(since=...)` looks for its own version only above it), and the column types
    its shards are to be stored in (`WriterOptions.column_types`): an append's base
    version's, so all the shards of a version share one schema; "hf" for any other write.

    `features` None stands for features made when a pipeline runs: what needs them
    (`check_features`) is left for then, but a `mode="error"` write is refused now.

    Raises:
      TypeError: `features` is not a Features object.
      ValueError: a bad path, mode or metadata. FeatureError (a ValueError): features and
        metadata nested more deeply than a manifest may be, naming it.
      CacheError: `_staging`, `_tables` or `_versions` is a link (`lock.refuse_links`).
      CacheExistsError: `mode="error"` and a cache is already at `path`.
      SchemaMismatchError: `mode="append"` to a cache of other features.
    """
    if features is not None:
        _check_type(features)
    fs.check_cache_path(path)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    metadata = check_metadata(metadata)
    _check_described(features, metadata)
    refuse_links(CacheLayout(path))
    latest = resolve(path).latest
    if mode != "overwrite":
        _check_mode(path, features, None, mode, latest)
    column_types = latest.column_types if mode == "append" and latest is not None else "hf"
    return metadata, latest.version if latest is not None else 0, column_types


def check_features(path: str, features: Any, metadata: dict[str, Any], mode: str) -> Features:
    """The checks of `check_write` that need the features, for features made when a pipeline
    runs (after `check_write(path, None, ...)`), against the cache as it is now; returns them.

    Raises:
      TypeError, FeatureError, ValueError, CacheExistsError, SchemaMismatchError: as `check_write`.
    """
    _check_type(features)
    _check_described(features, metadata)
    if mode != "overwrite":
        _check_mode(path, features, None, mode, resolve(path).latest)
    return features


def _check_type(features: Any) -> None:
    if not isinstance(features, Features):
        raise TypeError(f"features must be a Features object; got {type(features).__name__}")


def _check_described(features: Features | None, metadata: dict[str, Any]) -> None:
    """Raises unless the features and metadata (the metadata alone, for features None) fit in a manifest."""
    described = {"metadata": metadata} if features is None else {"features": features.to_dict(), "metadata": metadata}
    depth = json_depth(described)
    if depth > MAX_DEPTH:
        raise FeatureError(f"the features and metadata nest {depth} levels of lists and objects in the manifest; a "
                         f"manifest may nest {MAX_DEPTH}")
    size = len(manifest_json(described))
    if size > MAX_MANIFEST_BYTES:
        raise ValueError(f"the features and metadata take {size:,} bytes in the manifest, more than the "
                         f"{MAX_MANIFEST_BYTES:,} a reader takes; keep large metadata in a file beside the cache")


def _check_mode(path: str, features: Features | None, options: WriterOptions | None, mode: str,
                latest: Manifest | None) -> None:
    """Raises unless a write of `mode` may publish over `latest`; with `options` (at commit), also
    unless an append's shards are compressed and typed as `latest`'s. Features None (made when
    a pipeline runs) leave an append's features unchecked."""
    if latest is None:
        return
    if mode == "error":
        raise CacheExistsError(f"a cache is already at {path} (version {latest.version}, {latest.num_rows:,} rows) "
                               "and the write has mode='error'; use mode='overwrite' or 'append', or another path")
    if mode == "append":
        if features is not None and latest.features != features:
            raise SchemaMismatchError(
                f"cannot append to the cache at {path}: its features are {latest.features!r}, the write's are "
                f"{features!r}")
        if options is not None and latest.compression != options.compression:
            raise SchemaMismatchError(
                f"cannot append to the cache at {path}: its shards use compression {latest.compression!r}, the write "
                f"asks for {options.compression!r}; append with compression={latest.compression!r}")
        if options is not None and latest.column_types != options.column_types:
            raise SchemaMismatchError(
                f"cannot append to the cache at {path}: version {latest.version}, published while the append ran, "
                f"stores its columns in {latest.column_types!r} types and the append's shards are in "
                f"{options.column_types!r} types; nothing was published, run the append again")


def publish(path: str, *, write_id: str, features: Features, staged: Iterable[WrittenShard],
            options: WriterOptions, metadata: dict[str, Any], mode: str = "overwrite",
            parent: int | None = None, kept: dict[int, int] | None = None, same_rows: bool = False,
            ordered: bool = False, since: int | None = None) -> Manifest:
    """Publishes the staged shards of a write as the next version of the cache at `path`.

    Idempotent: run again after a partial or complete run (or concurrently with
    itself), it publishes the write once.

    Args:
      path: the cache folder.
      write_id: the id of this write; it is in every final shard name.
      features: the schema the shards were written with.
      staged: the shards to publish, with their staged paths.
      options: the writer options (their compression is recorded).
      metadata: free user metadata; for an append without any, the latest version's.
      mode: "overwrite", "append" or "error".
      parent: publish only as the version after this one (a rewrite of it, such as
        `compact`); if another write published first, nothing is published.
      kept: shards of version `parent` that the new one lists again, by name and
        unchanged: new position -> index in `parent`; the staged shards fill the
        others in order (the rows stay those of `parent`, and so its statistics).
      same_rows: the new version holds the rows of version `parent` in their order (as
        `compact` makes it): it records their identity (`Manifest.rows_id`), so training
        states taken on either version stay valid on both.
      ordered: `staged` is in the order to publish (a deterministic write); otherwise
        the shards are ordered by their staged paths.
      since: a version committed before the write started (from `check_write`, for a
        write id made after it): a retried finalize looks for its own version above it
        alone, so the look costs the versions published since, not the cache's history.

    Returns:
      The manifest of the version holding this write.

    Raises:
      PublishError: a staged shard is gone from both places, other writers kept
        publishing first, or one did so after `parent`; nothing was published.
      CacheExistsError, SchemaMismatchError: the mode does not allow publishing over
        the cache that is there now; nothing was published.
    """
    if same_rows and parent is None:
        raise ValueError(f"write {write_id}: same_rows says the rows are those of the parent version; give parent")
    layout = CacheLayout(path)
    check_write_id(write_id)
    with cache_lock(layout):
        folder = resolve(path)
        manifest = find_published(path, write_id, since, folder)
        rerun = manifest is not None  # an earlier run of this finalize got far: it may have left temporary files
        if manifest is None:
            staged = list(staged) if ordered else sorted(staged, key=staged_order)
            names = [shard_name(write_id, i, len(staged)) for i in range(len(staged))]
            rerun = move_into_place(layout, staged, names)
            added = [(ShardInfo(name, s.num_rows, s.num_bytes, s.checksum), s.batch_rows, s.batch_spans)
                     for name, s in zip(names, staged)]
            statistics = Statistics.total(features, [s.statistics for s in staged])
            try:
                manifest = _commit(layout, write_id, features, added, statistics, options, metadata, mode,
                                   parent, kept or {}, since, folder, same_rows)
            except (CacheExistsError, SchemaMismatchError, PublishError):
                fs.delete([layout.shard(name) for name in names])
                remove_staging(layout, write_id)
                raise
        update_pointer(layout, manifest)
    with best_effort(f"remove the staging of write {write_id} at {path}", path):
        remove_staging(layout, write_id, temporaries=rerun)
    return manifest


def find_published(path: str, write_id: str, since: int | None = None,
                   folder: VersionFolder | None = None) -> Manifest | None:
    """The kept version that write `write_id` published, None if it published none.

    Looks from the latest version (by `latest.resolve`, or `folder` if given) down, and
    stops at version `since` (committed before the write started; without it,
    `_versions/` is listed) and at versions made well before the write started, which
    cannot be its own.
    """
    folder = folder or resolve(path)
    latest = folder.latest
    if latest is None:
        return None
    started = write_id_time(write_id) - _CLOCK_SKEW
    if since is None:
        numbers = sorted({n for n in version_numbers(path) if n < latest.version} | {latest.version}, reverse=True)
    else:
        numbers = range(latest.version, since, -1)
    for number in numbers:
        if number in folder.passed:
            continue
        try:
            manifest = folder.run.get(number) or (
                latest if number == latest.version else read_version(path, number, folder.pointer))
        except (FileNotFoundError, NotADirectoryError, CorruptCacheError):  # gone, or damaged: not known to be its
            continue
        if manifest.write_id == write_id:
            return manifest
        created = manifest.created_at
        if created is not None and created < started:
            return None
    return None


def _commit(layout: CacheLayout, write_id: str, features: Features, added: list[Added],
            statistics: Statistics | None, options: WriterOptions, metadata: dict[str, Any], mode: str,
            parent: int | None, kept: dict[int, int], since: int | None, seen: VersionFolder | None = None,
            same_rows: bool = False) -> Manifest:
    """Commits the new version; `seen` is the folder `publish` found, in which it looked for this
    write's own version (its first attempt builds on it: a commit since makes the create fail)."""
    path = layout.path
    format_version = format_for(options.column_types)
    own = added_table(added, format_version) if not kept else None  # the added shards'
    own_ref: TableRef | None = None  # `own` written alone, once whatever the attempts
    folder, tried = seen, None
    # The versions up to `looked` were searched for this write's own already (None: none were).
    looked = (seen.latest.version if seen.latest else 0) if seen is not None else since
    for _ in range(MAX_COMMIT_ATTEMPTS):
        if folder is None:
            folder = resolve(path)
            newest = folder.latest.version if folder.latest else 0
            # This write's own finalize, running at once where no lock serializes them (object
            # stores), may have committed since this one looked: an append on top of it would
            # list the write's shards twice.
            mine = find_published(path, write_id, looked, folder) if looked is None or newest > looked else None
            if mine is not None:
                return mine
            looked = newest
            if folder.next_number == tried:
                raise PublishError(f"write {write_id} cannot publish at {path}: {layout.version(tried)} exists but is "
                                   f"past the {MAX_PAST_POINTER} version files after the pointer's that readers look "
                                   "at; nothing was published")
        latest = folder.latest
        if parent is not None and (latest is None or latest.version != parent):
            raise PublishError(f"write {write_id} rewrites version {parent} of {path}, but version "
                               f"{latest.version if latest else None} was published since; nothing was published")
        _check_mode(path, features, options, mode, latest)
        if latest is not None and latest.format_version == 1 and latest.version == 1:  # format 1, or written as it
            _adopt_format1(layout, latest, write_id)
        base = latest if mode == "append" and latest is not None else None
        version_statistics = statistics
        if kept:
            refs = [write_table(layout, write_id, table_with_kept(latest, added, kept, format_version))]
            version_statistics = latest.statistics
        else:
            if base is None:
                own_ref = own_ref or write_table(layout, write_id, own)
                refs = [own_ref]
            else:
                refs = append_tables(layout, write_id, base, own)
                version_statistics = Statistics.total(features, [base.statistics, statistics])
        manifest = Manifest(
            path=path, version=folder.next_number, write_id=write_id, features=features,
            shards=ShardTable(refs, layout.version(folder.next_number), functools.partial(read_table, path)),
            compression=options.compression, column_types=options.column_types,
            format_version=format_version,
            metadata=metadata or (base.metadata if base else {}), writer=writer_versions(),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
            parent_version=latest.version if latest else None, mode=mode, statistics=version_statistics,
            cache_id=folder.cache_id or new_cache_id(), parent_write_id=latest.write_id if latest else None,
            rows_id=latest.rows_identity if same_rows and latest else None)
        target, text = layout.version(manifest.version), manifest.to_json()
        if len(text) > MAX_MANIFEST_BYTES:  # every reader would refuse it, and the cache take no more writes
            raise PublishError(f"version {manifest.version} of {path} would have a header of {len(text):,} bytes, "
                               f"more than the {MAX_MANIFEST_BYTES:,} a reader takes; nothing was published")
        if fs.create_if_absent(target, text, layout.temporary(target, write_id)):
            return manifest
        folder, tried = None, manifest.version
    raise PublishError(f"write {write_id} could not publish at {path}: other writers published first "
                       f"{MAX_COMMIT_ATTEMPTS} times in a row; nothing was published")


def _adopt_format1(layout: CacheLayout, manifest: Manifest, write_id: str) -> None:
    """Keeps a format-1 cache's only version as `_versions/<1>.json`, so retention governs it too."""
    target = layout.version(manifest.version)
    fs.create_if_absent(target, manifest.to_json(LISTED_FORMAT_VERSION), layout.temporary(target, write_id))


def update_pointer(layout: CacheLayout, known: Manifest | None = None) -> Manifest | None:
    """Makes `_metadata.json` hold the latest version (`latest.resolve`, from `known` where the
    pointer is older: a version this write committed); returns it.

    Writes only when the pointer is behind (or unreadable), and checks again after
    writing, so that whichever writer finishes last leaves the latest version in place.
    """
    for _ in range(MAX_COMMIT_ATTEMPTS):
        folder = resolve(layout.path, known=known)
        newest = folder.latest
        if newest is None:
            return None
        if folder.pointer is not None and folder.pointer.version >= newest.version:
            return newest
        owner = newest.write_id if is_write_id(newest.write_id) else new_write_id()  # names the temporary file
        temporary = layout.temporary(layout.manifest, owner)
        try:
            fs.write_bytes_atomic(layout.manifest, newest.to_json(), temporary)
        except IsADirectoryError:
            fs.delete([temporary])
            raise CorruptCacheError(f"{layout.manifest} is a folder, not a regular file: remove it, and gc writes the "
                                    "latest version's header there again") from None
    raise PublishError(f"{layout.manifest} kept changing while this write brought it up to date")


def abandon(path: str, write_id: str) -> None:
    """Removes what an unpublished write left: its staging folder and any shard it moved.

    Shards of the write that a kept version lists are left alone.

    Raises:
      ValueError: `write_id` is not a write id (so nothing else can be matched).
    """
    layout = CacheLayout(path)
    check_write_id(write_id)
    with cache_lock(layout):
        if find_published(path, write_id) is None:
            fs.delete(sorted(p for p in folders.list_dir(path, layout.shards_of(write_id))
                             if write_id_of_shard(p.replace("\\", "/").rsplit("/", 1)[-1]) == write_id))
    remove_staging(layout, write_id)
