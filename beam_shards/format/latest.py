"""The one rule for the latest version of a cache, which readers, writers, gc and log all follow.

Versions are numbered without gaps, and `_metadata.json` (the pointer) is a copy of the
latest version's header, written after that version's file in `_versions/`. A writer may
die between the two, or update the pointer late, so the latest is found from the pointer,
looking at the version files after it one by one: the run of files numbered pointer+1,
pointer+2, ... up to the first number that has none (at most `MAX_PAST_POINTER` of them).

- In the run, a file becomes the latest when it is a readable header of its number, names
  the cache's id (or none: written before ids) and was published on top of the latest so
  far (its parent is that version of the same write, or a file between them that could
  not be read).
- Any other file of the run (garbled, empty, a link to nothing, another cache's, published
  on top of another version) is passed over: not a version, but its number is taken, so
  the next version is numbered after the run and built on the latest.
- A file past the run (after a gap) is a stray.

Passed-over files and strays are ignored by every reader, writer, gc and log, reported by
`gc --dry_run` and `verify`, and never deleted. Before the latest, the versions are its
history (`history`): the version it was published on top of, and so on down.

Readers find the run by reading (a missing file ends it: one request when the pointer is
up to date); writers and gc read the same files, so they agree with readers whatever the
folder holds. gc and log also list `_versions/`, for the history and for strays. Without
a readable pointer (a first write killed before it wrote one, or a damaged one), writers
and gc start the run at the oldest listed file, and rewrite the pointer. A header without
a cache id (written before ids) is taken as the cache's own; a cache whose pointer has
none takes the id of the first version in its run that has one.
"""

from __future__ import annotations

import dataclasses

from beam_shards.errors import CorruptCacheError, NewerFormatError
from beam_shards.format.layout import VERSIONS_DIR, CacheLayout, version_name
from beam_shards.format.manifest import Manifest
from beam_shards.format.version_files import find_pointer, read_pointer, read_version, version_numbers

# How many version files after the pointer's the rule reads at most (a writer moves the pointer
# after each commit, so it lags by one or two), so that a folder of damaged files cannot hold anyone long.
MAX_PAST_POINTER = 100


@dataclasses.dataclass(frozen=True)
class VersionFolder:
    """What the rule found in a cache's `_versions/`.

    Attributes:
      path: the cache folder.
      pointer: the manifest `_metadata.json` holds; None when it is missing or unreadable.
      latest: the latest version; None when the cache has none.
      next_number: the number the next version takes: the one after the run.
      run: the files of the run taken as the latest in turn, by number.
      passed: the files of the run that are not versions, by number, with why.
      unreadable: those of `passed` that could not be read at all (what they list is unknown).
      cache_id: the cache's id; None while no version read names one.
      numbers: the numbers of the files in `_versions/`, when it was listed.
    """

    path: str
    pointer: Manifest | None
    latest: Manifest | None
    next_number: int
    run: dict[int, Manifest]
    passed: dict[int, str]
    unreadable: frozenset[int]
    cache_id: str | None
    numbers: tuple[int, ...] | None = None

    def with_listing(self) -> VersionFolder:
        """This folder with `numbers` listed (unless they were)."""
        return self if self.numbers is not None else dataclasses.replace(
            self, numbers=tuple(version_numbers(self.path)))

    def strays(self) -> dict[int, str]:
        """The listed files past the run, with why."""
        if self.next_number in (self.numbers or ()):  # the run stopped at the bound
            why = f"past the {MAX_PAST_POINTER} version files after the pointer's that readers look at"
        else:
            why = f"a stray past a gap (there is no version {self.next_number})"
        return {number: why for number in self.numbers or () if number >= self.next_number}

    def ignored(self, older: dict[int, str] | None = None) -> dict[str, str]:
        """Every version file that is no version (path relative to the cache -> why): those of the run
        passed over, the strays, and the `older` ones `history` found; readers, writers and gc ignore each."""
        found = {**(older or {}), **self.passed, **self.strays()}
        return {f"{VERSIONS_DIR}/{version_name(n)}": f"{found[n]}; readers, writers and gc ignore it"
                for n in sorted(found)}


def resolve(path: str, *, strict: bool = False, listed: bool = False, known: Manifest | None = None) -> VersionFolder:
    """Applies the rule to the cache at `path`.

    Args:
      path: the cache folder.
      strict: for readers: a missing or invalid `_metadata.json` is an error (a cache exists
        exactly when it does). Otherwise (writers, gc) the run starts at the oldest listed
        file, unless an invalid `_metadata.json` is all there is.
      listed: also list `_versions/` (`VersionFolder.numbers`), for older versions and strays.
      known: a version known to be committed (a write's own): where `_metadata.json` is
        older or missing, the run is followed from it (it is in that run), with no listing.

    Raises:
      CacheNotFoundError, CorruptCacheError: with `strict`, as `read_pointer`; without,
        CorruptCacheError when `_metadata.json` is invalid and `_versions/` empty.
      NewerFormatError: the pointer or a header of the run is of a newer format.
    """
    pointer, numbers = _pointer(path, strict)
    start = known if known is not None and (pointer is None or pointer.version < known.version) else pointer
    if numbers is None and (listed or start is None):
        numbers = tuple(version_numbers(path))
    if start is not None:
        first, bound = start.version + 1, start.version + 1 + MAX_PAST_POINTER
    else:  # where no pointer says where to start, every file of the run is read
        first, bound = (numbers[0] if numbers else 1), None
    latest, cache_id = start, start.cache_id if start is not None else None
    run: dict[int, Manifest] = {}
    passed: dict[int, str] = {}
    unreadable = set()
    number = first
    while bound is None or number < bound:
        candidate = _read(path, number)
        if candidate is None:
            break
        if isinstance(candidate, str):
            passed[number] = candidate
            unreadable.add(number)
        else:
            problem = _unlinked(candidate, latest, passed, cache_id)
            if problem is not None:
                passed[number] = f"{CacheLayout(path).version(number)} {problem}"
            else:
                latest, run[number], cache_id = candidate, candidate, cache_id or candidate.cache_id
        number += 1
    return VersionFolder(path, pointer, latest, number, run, passed, frozenset(unreadable), cache_id, numbers)


def _pointer(path: str, strict: bool) -> tuple[Manifest | None, tuple[int, ...] | None]:
    """The manifest `_metadata.json` holds (None if missing, or invalid and not `strict`), and the
    listing of `_versions/` when it was needed to tell whether an invalid one may be passed by."""
    if strict:
        return read_pointer(path), None
    try:
        return find_pointer(path), None
    except NewerFormatError:
        raise
    except CorruptCacheError:
        numbers = tuple(version_numbers(path))
        if not numbers:  # the pointer is the only record of the cache (format 1)
            raise
        return None, numbers


def _read(path: str, number: int, pointer: Manifest | None = None) -> Manifest | str | None:
    """Version file `number` (`pointer` standing in for a damaged copy of its own): its manifest,
    why it cannot be read, or None when there is no such file."""
    try:
        return read_version(path, number, pointer)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NewerFormatError:
        raise
    except CorruptCacheError as error:
        return str(error)


def _unlinked(candidate: Manifest, latest: Manifest | None, passed: dict[int, str], cache_id: str | None) -> str | None:
    """Why `candidate`, the next file of the run, is not the next version; None if it is."""
    if cache_id is not None and candidate.cache_id not in (None, cache_id):
        return f"names another cache ({candidate.cache_id}; this cache is {cache_id})"
    if latest is None:
        return None
    parent = candidate.parent_version
    # A header naming a cache id names the write of its parent too; one before ids names neither.
    unrecorded = candidate.cache_id is None and candidate.parent_write_id is None
    if parent == latest.version and (unrecorded or candidate.parent_write_id == latest.write_id):
        return None
    if parent is not None and parent > latest.version and parent in passed:
        return None
    return (f"was published on top of version {parent} (write {candidate.parent_write_id or 'unrecorded'}), not on "
            f"the latest, version {latest.version} (write {latest.write_id})")


@dataclasses.dataclass(frozen=True)
class History:
    """The versions of a cache, oldest first, and the files before its latest that are no versions
    (by number, with why); `unreadable` are those of them that could not be read at all."""

    versions: list[Manifest]
    ignored: dict[int, str]
    unreadable: frozenset[int]


def history(folder: VersionFolder, limit: int | None = None) -> History:
    """The versions of a listed folder (the newest `limit` of them), and the files before its
    latest that are no versions.

    The versions are the latest, the version it was published on top of, and so on down the
    listed files (each as its file holds it, `_metadata.json` standing in for a damaged or
    missing copy of its own version: it may be written in an older format). Where a
    parent is gone (retention) or damaged, the next older readable file of the cache carries the
    history on. A file passed by on the way (damaged, another cache's, or published on top of
    another version than the next one down names) is no version.
    """
    latest = folder.latest
    if latest is None:
        return History([], {}, frozenset())
    if latest.version not in folder.run and latest.version in (folder.numbers or ()):
        copy = _read(folder.path, latest.version, latest)  # the pointer stands in for a damaged one
        latest = copy if isinstance(copy, Manifest) and copy.write_id == latest.write_id else latest
    versions, ignored, unreadable = [latest], {}, set()
    parent, parent_write = latest.parent_version, latest.parent_write_id
    for number in sorted((n for n in folder.numbers or () if n < latest.version and n not in folder.passed),
                         reverse=True):
        if limit and len(versions) >= limit:
            break
        where = CacheLayout(folder.path).version(number)
        manifest = folder.run.get(number) or _read(folder.path, number, folder.pointer)
        if manifest is None:  # removed by gc since the listing
            continue
        if isinstance(manifest, str):
            ignored[number] = manifest
            unreadable.add(number)
            if number == parent:
                parent = parent_write = None  # its parent is unknown: the next older file carries on
            continue
        if parent is not None and number > parent:
            ignored[number] = (f"{where} is not on the history of the latest version: version {versions[-1].version} "
                               f"was published on top of version {parent}")
        elif number == parent and parent_write not in (None, manifest.write_id):
            ignored[number] = (f"{where} holds write {manifest.write_id}, but version {versions[-1].version} was "
                               f"published on top of write {parent_write}")
            parent = parent_write = None
        elif number != parent and folder.cache_id is not None and manifest.cache_id not in (None, folder.cache_id):
            ignored[number] = f"{where} names another cache ({manifest.cache_id}; this cache is {folder.cache_id})"
        else:
            versions.append(manifest)
            parent, parent_write = manifest.parent_version, manifest.parent_write_id
    return History(versions[::-1], ignored, frozenset(unreadable))
