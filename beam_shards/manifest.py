"""The manifest `_metadata.json`: the commit point of a cache, and its validation.

A cache exists exactly when `<path>/_metadata.json` exists, and only the shards it
lists belong to it. This module holds the format (pure logic) and `read_metadata`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import secrets
import sys
from typing import Any

from beam_shards import fs
from beam_shards.errors import CacheNotFoundError, CorruptCacheError, FeatureError
from beam_shards.features import Features
from beam_shards.writer import COMPRESSIONS, ShardInfo

FORMAT_NAME = "beam_shards"
FORMAT_VERSION = 1
MANIFEST_NAME = "_metadata.json"
STAGING_DIR = "_staging"
LOCK_NAME = ".lock"
_WRITE_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}$")
_SHARD_NAME = re.compile(r"^shard-(?P<write_id>\d{8}T\d{6}Z-[0-9a-f]{8})-\d{5,}-of-\d{5,}\.arrow$")
_REQUIRED = ("format", "format_version", "write_id", "features", "schema_fingerprint", "num_rows",
             "shards", "compression", "writer", "metadata")


def new_write_id() -> str:
    """A fresh write id: UTC time (sortable) and 32 random bits."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def is_write_id(text: Any) -> bool:
    return isinstance(text, str) and _WRITE_ID.match(text) is not None


def shard_file_name(write_id: str, index: int, count: int) -> str:
    return f"shard-{write_id}-{index:05d}-of-{count:05d}.arrow"


def write_id_of_shard(file_name: str) -> str | None:
    """The write id in a shard file name, None if the name is not a shard's."""
    match = _SHARD_NAME.match(file_name)
    return match.group("write_id") if match else None


def staging_dir(path: str, write_id: str) -> str:
    return fs.join(path, STAGING_DIR, write_id)


def writer_versions() -> dict[str, str]:
    import apache_beam
    import pyarrow

    from beam_shards import __version__

    return {
        "package": f"beam_shards {__version__}",
        "pyarrow": pyarrow.__version__,
        "apache_beam": apache_beam.__version__,
        "python": sys.version.split()[0],
    }


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What `_metadata.json` says: the features, the shards and how they were written.

    Attributes:
      path: the cache folder (not stored in the file).
      write_id: the id of the write that published this version.
      features: the schema.
      shards: per shard its file name (relative to `path`), rows, bytes and checksum.
      compression: None, "zstd" or "lz4".
      metadata: free user metadata.
      writer: package, pyarrow, Beam and Python versions of the writer.
      created: when the write was published (UTC, ISO 8601).
      previous_write_id: the version this one replaced, for idempotent clean-up.
    """

    path: str
    write_id: str
    features: Features
    shards: tuple[ShardInfo, ...]
    compression: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    writer: dict[str, str] = dataclasses.field(default_factory=dict)
    created: str = ""
    previous_write_id: str | None = None

    @property
    def num_rows(self) -> int:
        return sum(shard.num_rows for shard in self.shards)

    @property
    def num_bytes(self) -> int:
        return sum(shard.num_bytes for shard in self.shards)

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def schema_fingerprint(self) -> str:
        return self.features.fingerprint()

    def __hash__(self) -> int:
        return hash((self.path, self.write_id))

    def shard_path(self, index: int) -> str:
        return fs.join(self.path, self.shards[index].path)

    def __repr__(self) -> str:
        return (f"Manifest(path={self.path!r}, write_id={self.write_id!r}, num_rows={self.num_rows}, "
                f"num_shards={self.num_shards}, num_bytes={self.num_bytes}, compression={self.compression!r})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "write_id": self.write_id,
            "created": self.created,
            "features": self.features.to_dict(),
            "schema_fingerprint": self.schema_fingerprint,
            "num_rows": self.num_rows,
            "num_bytes": self.num_bytes,
            "compression": self.compression,
            "shards": [
                {"file": s.path, "num_rows": s.num_rows, "num_bytes": s.num_bytes, "checksum": s.checksum}
                for s in self.shards
            ],
            "writer": self.writer,
            "previous_write_id": self.previous_write_id,
            "metadata": self.metadata,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_dict(cls, data: Any, path: str) -> Manifest:
        """Parses and checks a manifest. Raises CorruptCacheError naming what is wrong."""
        where = fs.join(path, MANIFEST_NAME)
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise CorruptCacheError(f"{where} is not a beam_shards manifest (no \"format\": \"{FORMAT_NAME}\")")
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise CorruptCacheError(
                f"{where} has format version {version!r}; this beam_shards reads version {FORMAT_VERSION}"
                + (" (upgrade beam_shards to read it)" if isinstance(version, int) and version > FORMAT_VERSION else ""))
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise CorruptCacheError(f"{where} lacks the field(s) {', '.join(missing)}")
        if data["compression"] not in COMPRESSIONS:
            raise CorruptCacheError(f"{where} has an unknown compression {data['compression']!r}")
        if not isinstance(data["metadata"], dict) or not isinstance(data["writer"], dict):
            raise CorruptCacheError(f"{where}: \"metadata\" and \"writer\" must be JSON objects")
        try:
            features = Features.from_dict(data["features"])
        except FeatureError as error:
            raise CorruptCacheError(f"{where} has invalid features: {error}") from None
        if features.fingerprint() != data["schema_fingerprint"]:
            raise CorruptCacheError(
                f"{where}: schema fingerprint {data['schema_fingerprint']!r} does not match its features "
                f"({features.fingerprint()!r}); the manifest was edited")
        shards = tuple(_parse_shard(entry, i, where) for i, entry in enumerate(_as_list(data["shards"], where)))
        names = [s.path for s in shards]
        if len(set(names)) != len(names):
            raise CorruptCacheError(f"{where} lists a shard file more than once")
        total = sum(s.num_rows for s in shards)
        if data["num_rows"] != total:
            raise CorruptCacheError(f"{where} says num_rows={data['num_rows']!r} but its shards hold {total} rows")
        return cls(path=path, write_id=str(data["write_id"]), features=features, shards=shards,
                   compression=data["compression"], metadata=data["metadata"], writer=data["writer"],
                   created=data.get("created", ""), previous_write_id=data.get("previous_write_id"))


def _as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise CorruptCacheError(f"{where}: \"shards\" must be a list")
    return value


def _parse_shard(entry: Any, index: int, where: str) -> ShardInfo:
    try:
        name, rows, size, checksum = entry["file"], entry["num_rows"], entry["num_bytes"], entry["checksum"]
    except (TypeError, KeyError) as error:
        raise CorruptCacheError(f"{where}: shard {index} lacks {error}") from None
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise CorruptCacheError(f"{where}: shard {index} has an invalid file name {name!r}")
    if not all(isinstance(n, int) and n >= 0 for n in (rows, size)) or not isinstance(checksum, str):
        raise CorruptCacheError(f"{where}: shard {index} ({name}) has invalid rows, bytes or checksum")
    return ShardInfo(name, rows, size, checksum)


def read_metadata(path: str, *, check_files: bool = True) -> Manifest:
    """Reads and validates the manifest of the cache at `path`.

    Example:
        >>> manifest = read_metadata("/tmp/my_cache")  # doctest: +SKIP
        >>> manifest.num_rows, manifest.num_shards  # doctest: +SKIP

    Args:
      path: the cache folder (local, gs://, s3://...).
      check_files: also check that every listed shard exists with its recorded size.

    Raises:
      CacheNotFoundError: no `_metadata.json` at `path`.
      CorruptCacheError: the manifest is invalid, of an unknown format version, or a
        shard is missing or has another size than recorded.
    """
    where = fs.join(path, MANIFEST_NAME)
    try:
        raw = fs.read_bytes(where)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise CacheNotFoundError(_not_found_message(path)) from None
    except OSError as error:
        if not fs.is_local(path) and not fs.exists(where):
            raise CacheNotFoundError(_not_found_message(path)) from None
        raise CorruptCacheError(f"cannot read {where}: {error}") from error
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptCacheError(f"{where} is not valid JSON ({error})") from None
    manifest = Manifest.from_dict(data, path)
    if check_files:
        problems = check_shard_sizes(manifest)
        if problems:
            raise CorruptCacheError(f"cache at {path} is damaged: " + "; ".join(problems))
    return manifest


def _not_found_message(path: str) -> str:
    text = f"no beam_shards cache at {path}: {fs.join(path, MANIFEST_NAME)} does not exist"
    if fs.exists(fs.join(path, STAGING_DIR)):
        text += " (a write is in progress there, or was killed: `beam-shards gc` cleans up after it)"
    return text


def check_shard_sizes(manifest: Manifest) -> list[str]:
    """One problem per listed shard that is missing or not of its recorded size."""
    paths = [manifest.shard_path(i) for i in range(manifest.num_shards)]
    found = fs.sizes(paths)
    problems = []
    for shard, path in zip(manifest.shards, paths):
        size = found[path]
        if size is None:
            problems.append(f"shard {shard.path} is missing")
        elif size != shard.num_bytes:
            problems.append(size_problem(f"shard {shard.path}", size, shard.num_bytes))
    return problems


def size_problem(what: str, size: int, expected: int) -> str:
    """The message for a shard whose size on disk is not the manifest's."""
    return (f"{what} has {size} bytes, the manifest says {expected} "
            f"({'truncated' if size < expected else 'altered'})")
