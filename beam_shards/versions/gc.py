"""Garbage collection: retention of old versions, and what killed writes left behind.

`retained` decides which versions retention removes, and `plan` which files may go,
from names, ages and the shards and tables the versions list (pure logic);
`find_garbage` lists a cache, reads each shard table the versions name once (tables
are shared between versions, so this costs the distinct shards, not versions x
shards) and plans; `collect_garbage` does the same under the cache lock and deletes.
The rules:

- Versions: the newest `keep` versions and the one `_metadata.json` names are always
  kept, and so is every version superseded less than `min_age` ago (a reader may
  have opened it just before the next one was published). Other versions go: their
  header, and the shard tables and shards no kept version lists.
- Leftovers: a staging folder, a temporary file, a shard table or a shard no version lists is
  removed once its write started, and the file last changed, at least `min_age` ago,
  so a write still running (a Beam job stages without any lock) keeps its files.
  `min_age=0` removes them at once: use it only when no write to the cache runs.
  Finding them lists the whole folder, so the retention a write runs after it
  publishes (`sweep=False`) leaves them to `beam-shards gc`.
- Versions are those of the rule every reader and writer follows (`format.latest`): the
  latest and its history. A version file that is no version (damaged, another cache's,
  a stray past a gap) is reported (`Garbage.ignored`) and never deleted. One that can be
  read protects nothing: the shards only it lists are leftovers like any other. While one
  up to the latest cannot be read at all, what it lists is unknown, so gc removes no
  shard or shard table (it still removes versions' headers, staging and temporary files).
- Only files that `layout.classify` recognises are ever deleted, never a link's
  target, and only in a folder that holds a cache or staging in beam_shards' layout;
  `_staging`, `_tables` and `_versions` that are links are refused (`lock.refuse_links`).
"""

from __future__ import annotations

import dataclasses
import datetime
import os

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.errors import CacheNotFoundError, CorruptCacheError
from beam_shards.format.latest import history, resolve
from beam_shards.format.layout import (STAGING_DIR, TABLES_DIR, VERSIONS_DIR, CacheLayout, classify, is_write_id,
                                       parse_version_name, version_name, write_id_time)
from beam_shards.format.manifest import Manifest
from beam_shards.format.shard_table import TableRef
from beam_shards.format.version_files import read_table
from beam_shards.storage import folders, fs
from beam_shards.units import parse_duration
from beam_shards.versions.commit import update_pointer
from beam_shards.versions.lock import cache_lock, refuse_links

DEFAULT_KEEP = 2
DEFAULT_MIN_AGE = datetime.timedelta(days=7)


@dataclasses.dataclass(frozen=True)
class Retention:
    """How many versions and how much history gc keeps.

    Example:
        >>> Retention(keep=5, min_age=datetime.timedelta(hours=1))
        Retention(keep=5, min_age=1:00:00)

    Args:
      keep: the newest versions always kept (at least 1).
      min_age: versions superseded, and leftovers last changed, less than this long
        ago are kept (a timedelta, seconds, or text like "7d" or "12h").

    Raises:
      ValueError: `keep` below 1, or `min_age` not a duration from 0 to 1000 years.
    """

    keep: int = DEFAULT_KEEP
    min_age: datetime.timedelta = DEFAULT_MIN_AGE

    def __post_init__(self) -> None:
        if type(self.keep) is not int or self.keep < 1:
            raise ValueError(f"keep must be an int of at least 1 (the latest version is always kept); got {self.keep!r}")
        try:
            object.__setattr__(self, "min_age", parse_duration(self.min_age))
        except ValueError as error:
            raise ValueError(f"min_age: {error}") from None

    def __repr__(self) -> str:
        return f"Retention(keep={self.keep}, min_age={self.min_age})"


@dataclasses.dataclass
class Garbage:
    """What gc found (or removed): files by path relative to the cache, with their sizes and reasons,
    and the version files it ignores (no versions: damaged, another cache's, strays), with why.

    Example:
        >>> garbage = find_garbage("/tmp/my_cache")  # doctest: +SKIP
        >>> garbage.removed_versions, sorted(garbage.files), garbage.num_bytes  # doctest: +SKIP
    """

    path: str
    files: dict[str, int]
    reasons: dict[str, str]
    removed_versions: list[int]
    kept_versions: list[int]
    published: bool
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def num_bytes(self) -> int:
        return sum(self.files.values())

    def __repr__(self) -> str:
        return (f"Garbage(path={self.path!r}, files={len(self.files)}, num_bytes={self.num_bytes}, "
                f"removed_versions={self.removed_versions})")


def retained(versions: list[Manifest], pointer: int | None, retention: Retention,
             now: datetime.datetime) -> list[int]:
    """The numbers of the versions retention removes, oldest first.

    Args:
      versions: the manifests of every version in `_versions/` (or the format-1 one).
      pointer: the version `_metadata.json` names, None if there is none.
      retention: what to keep.
      now: the current time (UTC).
    """
    numbers = sorted(m.version for m in versions)
    by_number = {m.version: m for m in versions}
    kept = set(numbers[-retention.keep:]) | ({pointer} & set(numbers) if pointer is not None else set())
    for older, newer in zip(numbers, numbers[1:]):
        superseded = by_number[newer].created_at
        if superseded is None or now - superseded < retention.min_age:
            kept.add(older)
    return [n for n in numbers if n not in kept]


def plan(files: dict[str, folders.FileStat], removed: list[int], referenced: set[str], listed_by_removed: set[str],
         retention: Retention, now: datetime.datetime) -> dict[str, str]:
    """Which of `files` (relative path -> stat) gc removes, with why.

    Args:
      files: every file under the cache folder.
      removed: the versions retention removes.
      referenced: the shards and shard tables (relative paths) kept versions list.
      listed_by_removed: those the removed versions list.
      retention: what to keep.
      now: the current time (UTC).
    """
    reasons = {}
    for relative, stat in files.items():
        found = classify(relative)
        if found is None:
            continue
        kind, write_id = found
        if kind == "version" and parse_version_name(relative.rsplit("/", 1)[-1]) in removed:
            reasons[relative] = "manifest of a version retention removes"
        elif kind in ("shard", "table") and relative not in referenced:
            if relative in listed_by_removed:
                reasons[relative] = f"{kind} only versions that retention removes list"
            elif _stale(write_id, stat, retention, now):
                reasons[relative] = f"{kind} no version lists, of a write that never published"
        elif kind in ("staged", "temporary") and _stale(write_id, stat, retention, now):
            reasons[relative] = "staged by a write that stopped" if kind == "staged" else "temporary file of a write that stopped"
    return reasons


def listed_files(path: str, versions: list[Manifest], known: set[str] = frozenset()) -> set[str]:
    """The shards and shard tables (paths relative to the cache) `versions` list, each table read
    once, none of those in `known` (whose shards are known already)."""
    listed: set[str] = set()
    for manifest in versions:
        if not manifest.has_tables:
            listed.update(manifest.shards.names())
            continue
        for ref in manifest.shards.refs:
            table = f"{TABLES_DIR}/{ref.file}"
            if table not in listed and table not in known:
                listed.add(table)
                listed.update(_table(path, manifest, ref).column("file").to_pylist())
    return listed


def still_listed(path: str, versions: list[Manifest], candidates: set[str]) -> set[str]:
    """Those of `candidates` (shards and shard tables, relative paths) that `versions` list. Each
    table is read once and searched for the candidate shards in Arrow, so a large table's names
    never become Python strings: the cost follows the candidates."""
    found = candidates & {f"{TABLES_DIR}/{ref.file}" for m in versions if m.has_tables for ref in m.shards.refs}
    shards = pa.array(sorted(c for c in candidates if not c.startswith(TABLES_DIR + "/")), pa.string())
    read: set[str] = set()
    for manifest in versions if len(shards) else ():
        if not manifest.has_tables:
            found |= candidates & set(manifest.shards.names())
            continue
        for ref in manifest.shards.refs:
            if ref.file not in read:
                read.add(ref.file)
                column = _table(path, manifest, ref).column("file")
                found.update(pc.filter(column, pc.is_in(column, value_set=shards)).to_pylist())
    return found


def _table(path: str, manifest: Manifest, ref: TableRef) -> pa.Table:
    """A shard table of `manifest`; unreadable, gc stops saying which version and the way out."""
    try:
        return read_table(path, ref)
    except CorruptCacheError as error:
        raise CorruptCacheError(
            f"{error}; gc cannot tell which shards version {manifest.version} lists, so it removes nothing: restore "
            f"the file, or move {VERSIONS_DIR}/{version_name(manifest.version)} aside if that version may go") from None


def _stale(write_id: str, stat: folders.FileStat, retention: Retention, now: datetime.datetime) -> bool:
    changed = max(write_id_time(write_id), datetime.datetime.fromtimestamp(stat.mtime, datetime.timezone.utc))
    return now - changed >= retention.min_age


def find_garbage(path: str, retention: Retention = Retention(), *, now: datetime.datetime | None = None,
                 sweep: bool = True) -> Garbage:
    """Lists what gc would remove from the cache at `path` (removes nothing).

    Args:
      path: the cache folder.
      retention: what to keep.
      now: the current time (UTC); the clock's by default.
      sweep: also list the whole folder for what stopped writes left. Without it only
        the files of the versions retention removes are found, by name, so the cost
        follows what is removed (what a write runs after it publishes).

    Raises:
      CacheNotFoundError: `path` holds neither a cache nor staging in beam_shards' layout.
      CorruptCacheError: a shard table a version names cannot be read, so which shards
        belong to it is unknown, or a version is of a newer format; nothing is removed then.
      CacheError: `_staging`, `_tables` or `_versions` is a link.
    """
    refuse_links(CacheLayout(path))
    folder = resolve(path, listed=sweep)  # the pointer before the listing, so every version up to its is in it
    latest, published = folder.latest, folder.latest is not None
    if not sweep and (latest is None or latest.version <= retention.keep):  # no more versions than kept
        return Garbage(path, {}, {}, [], [], published, folder.ignored())
    folder = folder.with_listing()
    pointer = folder.pointer.version if folder.pointer is not None else None
    files = folders.walk(path) if sweep and _is_folder(path) else {}
    numbers = sorted({n for n in folder.numbers if n <= latest.version and n not in folder.passed}
                     | {latest.version}) if published else []
    if not sweep and len(numbers) <= retention.keep:  # nothing to remove: no version need be read
        return Garbage(path, {}, {}, [], numbers, published, folder.ignored())
    found = history(folder)
    versions, ignored = found.versions, folder.ignored(found.ignored)
    unknown = [f"{VERSIONS_DIR}/{version_name(n)}" for n in sorted(folder.unreadable | found.unreadable)]
    for name in unknown:
        ignored[name] += "; while it cannot be read, gc removes no shard or shard table (it may list them)"
    if not published and not _holds_our_layout(path, files):
        raise CacheNotFoundError(f"{path} is not a beam_shards cache (no _metadata.json, no versions) and holds no "
                                 "staging a beam_shards write left; nothing removed")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    removed = retained(versions, pointer, retention, now)
    if not sweep and not removed:
        return Garbage(path, {}, {}, [], [m.version for m in versions], published, ignored)
    kept = [m for m in versions if m.version not in removed]
    gone = [m for m in versions if m.version in removed]
    if sweep:  # every file is classified: every listed name is needed
        referenced = listed_files(path, kept)
        listed_by_removed = listed_files(path, gone, referenced) - referenced
    else:  # only the removed versions' own files are candidates
        shared = {f"{TABLES_DIR}/{ref.file}" for m in kept if m.has_tables for ref in m.shards.refs}
        candidates = listed_files(path, gone, shared)
        referenced = still_listed(path, kept, candidates)
        listed_by_removed = candidates - referenced
        files = _stats(path, [f"{VERSIONS_DIR}/{version_name(n)}" for n in removed] + sorted(listed_by_removed))
    reasons = plan(files, removed, referenced, listed_by_removed, retention, now)
    if unknown:
        reasons = {r: why for r, why in reasons.items() if classify(r)[0] not in ("shard", "table")}
    return Garbage(path, {r: files[r].size for r in sorted(reasons)}, reasons, removed,
                   [m.version for m in versions if m.version not in removed], published, ignored)


def _stats(path: str, relatives: list[str]) -> dict[str, folders.FileStat]:
    """The files among `relatives` (paths relative to `path`) that exist, with their sizes."""
    paths = [fs.join(path, *relative.split("/")) for relative in relatives]
    found = folders.sizes(paths) if paths else {}
    return {relative: folders.FileStat(found[full], 0.0) for relative, full in zip(relatives, paths)
            if found[full] is not None and found[full] >= 0}


def _holds_our_layout(path: str, files: dict[str, folders.FileStat]) -> bool:
    """Whether a folder without versions holds what a beam_shards write leaves: staged or temporary
    files, or (locally) a staging folder named for a write id."""
    if any((classify(r) or ("",))[0] in ("staged", "temporary") for r in files):
        return True
    staging = os.path.join(fs.local_path(path), STAGING_DIR)
    return (fs.is_local(path) and os.path.isdir(staging) and not os.path.islink(staging)
            and any(is_write_id(name) for name in os.listdir(staging)))


def _is_folder(path: str) -> bool:
    return not fs.is_local(path) or os.path.isdir(fs.local_path(path))


def collect_garbage(path: str, retention: Retention = Retention(), *, now: datetime.datetime | None = None,
                    sweep: bool = True) -> Garbage:
    """Removes what `find_garbage` lists (with the same `sweep`), under the cache lock; returns what was removed.

    Also brings `_metadata.json` up to the newest committed version, should a writer
    have died between its commit and that update.

    Raises:
      CacheNotFoundError, CorruptCacheError: as `find_garbage`; nothing is removed.
      WriteInProgressError: a local publish or gc holds the lock now; nothing is removed.
    """
    layout = CacheLayout(path)
    if sweep:
        find_garbage(path, retention, now=now)  # a folder that is not a cache gets no lock file either
    with cache_lock(layout, wait=False):
        garbage = find_garbage(path, retention, now=now, sweep=sweep)
        if garbage.published or garbage.kept_versions:
            update_pointer(layout)
        # Manifests before shards: a version is gone before any of its files are.
        ordered = sorted(garbage.files, key=lambda r: (classify(r)[0] != "version", r))
        fs.delete([fs.join(path, *relative.split("/")) for relative in ordered])
        if fs.is_local(path):
            _remove_empty_dirs(os.path.join(fs.local_path(path), STAGING_DIR))
    return garbage


def _remove_empty_dirs(folder: str) -> None:
    if os.path.islink(folder):
        return
    for current, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        folders.remove_empty_dir(current)
