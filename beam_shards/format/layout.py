"""The cache layout: every file name beam_shards writes in a cache folder, and how to recognise it.

One object, `CacheLayout`, builds each path; the `parse_*` functions and `classify`
recognise the same names, so what gc may delete is decided by the very rules that
named the files. Pure logic: nothing here touches a file system.

    <cache>/_metadata.json                              the latest version (the commit point readers open)
    <cache>/_versions/00000000000000000007.json         version 7's header, created once, never changed
    <cache>/_tables/<write id>-<16 hex>.arrow            a shard table versions share, named by its content
    <cache>/shard-<write id>-00003-of-00010.arrow       a shard, named by the write that made it
    <cache>/_staging/<write id>/<attempt>/part-00003.arrow   a bundle attempt's staged shard
    <cache>/<file>.<write id>.<token>.tmp               a file being written (manifest, version, bad inputs)
    <cache>/.lock                                       serialises local publishes and gc
    <cache>/_bad_inputs.jsonl                           inputs the conversion pipelines skipped

A write id is `YYYYmmddTHHMMSSZ-<8 hex>`: the UTC time the write started and 32
random bits, so names sort by time and a leftover's age is known from its name alone.
A cache id (32 hex, random) is given to a cache with its first version and carried by
every version after it, so a version file of another cache is told from its own.
"""

from __future__ import annotations

import datetime
import re
import secrets
import uuid
from typing import Any

from beam_shards.storage.fs import join

MANIFEST_NAME = "_metadata.json"
VERSIONS_DIR = "_versions"
TABLES_DIR = "_tables"
STAGING_DIR = "_staging"
LOCK_NAME = ".lock"
BAD_INPUTS_NAME = "_bad_inputs.jsonl"

_WRITE_ID = r"\d{8}T\d{6}Z-[0-9a-f]{8}"
_WRITE_ID_RE = re.compile(rf"^{_WRITE_ID}$")
_SHARD_RE = re.compile(rf"^shard-(?P<write_id>{_WRITE_ID})-\d{{5,}}-of-\d{{5,}}\.arrow$")
_TABLE_RE = re.compile(rf"^(?P<write_id>{_WRITE_ID})-[0-9a-f]{{16}}\.arrow$")
_VERSION_RE = re.compile(r"^(?P<number>\d{20})\.json$")
_STAGED_RE = re.compile(rf"^{STAGING_DIR}/(?P<write_id>{_WRITE_ID})/[0-9a-f]{{32}}/part-\d{{5,}}\.arrow$")
_TEMPORARY_RE = re.compile(
    rf"^(?:{re.escape(MANIFEST_NAME)}|{re.escape(BAD_INPUTS_NAME)}|{VERSIONS_DIR}/\d{{20}}\.json"
    rf"|{TABLES_DIR}/{_WRITE_ID}-[0-9a-f]{{16}}\.arrow)"
    rf"\.(?P<write_id>{_WRITE_ID})\.[0-9a-f]{{8}}\.tmp$")
_VERSION_DIGITS = 20
_CACHE_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def new_write_id(now: datetime.datetime | None = None) -> str:
    """A fresh write id: the UTC time (sortable) and 32 random bits."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def is_write_id(text: Any) -> bool:
    return isinstance(text, str) and _WRITE_ID_RE.match(text) is not None


def new_cache_id() -> str:
    """A fresh cache id: 128 random bits, as 32 hex digits."""
    return uuid.uuid4().hex


def is_cache_id(text: Any) -> bool:
    return isinstance(text, str) and _CACHE_ID_RE.match(text) is not None


def check_write_id(write_id: Any) -> str:
    """Returns `write_id`; raises ValueError unless it has the form `new_write_id` makes.

    Anything that deletes by write id checks it first, so `""`, `"*"` or `"../x"` can
    never widen what is deleted.
    """
    if not is_write_id(write_id):
        raise ValueError(f"not a beam_shards write id (like {new_write_id()!r}): {write_id!r}")
    return write_id


def write_id_time(write_id: str) -> datetime.datetime:
    """When the write `write_id` started (UTC)."""
    return datetime.datetime.strptime(write_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)


def shard_name(write_id: str, index: int, count: int) -> str:
    return f"shard-{write_id}-{index:05d}-of-{count:05d}.arrow"


def version_name(number: int) -> str:
    return f"{number:0{_VERSION_DIGITS}d}.json"


def parse_version_name(name: str) -> int | None:
    """The version number of a file name in `_versions/`, None if it is not a version's."""
    match = _VERSION_RE.match(name)
    return int(match.group("number")) if match else None


def table_name(write_id: str, digest: str) -> str:
    return f"{write_id}-{digest}.arrow"


def write_id_of_table(name: str) -> str | None:
    """The write id in a shard table's file name (in `_tables/`), None if the name is not a table's."""
    match = _TABLE_RE.match(name)
    return match.group("write_id") if match else None


def write_id_of_shard(name: str) -> str | None:
    """The write id in a shard file name, None if the name is not a shard's."""
    match = _SHARD_RE.match(name)
    return match.group("write_id") if match else None


def classify(relative: str) -> tuple[str, str | None] | None:
    """What a file is, from its path relative to the cache folder (with `/`): (kind, write id).

    Kinds: "manifest", "lock", "bad_inputs", "version", "table", "shard", "staged" and
    "temporary"; the write id is the one a table, a shard, a staged file or a temporary
    file names (None for the others). None for a file beam_shards does not name.
    """
    if relative in (MANIFEST_NAME, LOCK_NAME, BAD_INPUTS_NAME):
        return {MANIFEST_NAME: "manifest", LOCK_NAME: "lock", BAD_INPUTS_NAME: "bad_inputs"}[relative], None
    if relative.startswith(VERSIONS_DIR + "/") and parse_version_name(relative[len(VERSIONS_DIR) + 1:]) is not None:
        return "version", None
    if relative.startswith(TABLES_DIR + "/") and write_id_of_table(relative[len(TABLES_DIR) + 1:]) is not None:
        return "table", write_id_of_table(relative[len(TABLES_DIR) + 1:])
    for kind, pattern in (("shard", _SHARD_RE), ("staged", _STAGED_RE), ("temporary", _TEMPORARY_RE)):
        match = pattern.match(relative)
        if match:
            return kind, match.group("write_id")
    return None


class CacheLayout:
    """Every path of one cache folder: `CacheLayout(path).version(3)`, `.staged(...)`, ...

    Example:
        >>> layout = CacheLayout("/data/cache")
        >>> layout.version(3)
        '/data/cache/_versions/00000000000000000003.json'
        >>> classify("_versions/00000000000000000003.json")
        ('version', None)

    Args:
      path: the cache folder (local, gs://, s3://...).
    """

    def __init__(self, path: str):
        self.path = path

    def __repr__(self) -> str:
        return f"CacheLayout({self.path!r})"

    @property
    def manifest(self) -> str:
        return join(self.path, MANIFEST_NAME)

    @property
    def lock(self) -> str:
        return join(self.path, LOCK_NAME)

    @property
    def bad_inputs(self) -> str:
        return join(self.path, BAD_INPUTS_NAME)

    @property
    def versions_dir(self) -> str:
        return join(self.path, VERSIONS_DIR)

    @property
    def staging_root(self) -> str:
        return join(self.path, STAGING_DIR)

    def version(self, number: int) -> str:
        return join(self.path, VERSIONS_DIR, version_name(number))

    def table(self, name: str) -> str:
        return join(self.path, TABLES_DIR, name)

    @property
    def tables_dir(self) -> str:
        return join(self.path, TABLES_DIR)

    def shard(self, name: str) -> str:
        return join(self.path, name)

    def staging(self, write_id: str) -> str:
        """The staging folder of one write (its id checked, since it is deleted whole)."""
        return join(self.path, STAGING_DIR, check_write_id(write_id))

    def new_attempt(self, write_id: str) -> str:
        """A fresh folder for one bundle attempt of a write: retried bundles never collide."""
        return join(self.staging(write_id), uuid.uuid4().hex)

    @staticmethod
    def staged_name(index: int) -> str:
        return f"part-{index:05d}.arrow"

    @staticmethod
    def shards_of(write_id: str) -> str:
        """The glob, within the cache folder, of the shard files of one write (its id checked)."""
        return f"shard-{check_write_id(write_id)}-*.arrow"

    @staticmethod
    def temporaries_of(write_id: str) -> str:
        """The glob, within one folder, of the temporary files of one write (its id checked)."""
        return f"*.{check_write_id(write_id)}.*.tmp"

    @staticmethod
    def temporary(target: str, write_id: str) -> str:
        """A temporary name beside `target` for one run of one write: runs never share one."""
        return f"{target}.{check_write_id(write_id)}.{secrets.token_hex(4)}.tmp"
