"""The manifest: what one version of a cache holds, and its JSON form (pure logic, no I/O).

A version's manifest names its features, how and when it was written, its statistics
and its shards. Since format 3 the shard list is kept out of the JSON: the header names
the shard tables (`shard_table`) that hold it, so a header stays a few KB at any size and
is stored twice, immutable as `_versions/<N>.json` and as the copy of the latest in
`_metadata.json`. Format 4 adds `column_types`: new caches store their columns in Hugging
Face's types (`features.COLUMN_TYPES`), while appends keep their base's, so every shard of
a version has one schema. Two optional fields tie a version to its cache: `cache_id`, given with
the cache's first version and carried by every version after it, and `parent_write_id`, the
write of the version it was published on top of (`format.latest` reads them; headers written
before them lack them). A third, `rows_id`, names the write whose rows a version holds in their
order where that is not its own: a version `compact` made keeps its parent's rows, so training
states taken on either stay valid on both. A version in "large" column types (an append onto a cache
begun before format 4) is written in format 3, which implies them, so the beam_shards
that wrote its base still reads it. Format 5 changes no field here: its shard tables say where
each record batch of a shard lies and its CRC-32 (`shard_table.BatchSpan`), and a version
written in it is refused by the releases before it, naming the format. Formats 1 and 2 listed every shard in the JSON; they
are still read. Parsing trusts nothing in the file: every field is checked and any
problem is a `CorruptCacheError` naming the file and the field (a `NewerFormatError` for
a format newer than this reads).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from beam_shards.errors import CorruptCacheError, FeatureError, NewerFormatError
from beam_shards.features import COLUMN_TYPES, MAX_DEPTH, Features, json_depth
from beam_shards.format.counts import is_count
from beam_shards.format.layout import CacheLayout, is_cache_id, is_write_id, write_id_of_shard
from beam_shards.format.shard_table import ShardTable, TableRef
from beam_shards.format.table_files import ShardInfo
from beam_shards.format.statistics import Statistics
from beam_shards.storage.checksum import CHECKSUM_PATTERN

FORMAT_NAME = "beam_shards"
FORMAT_VERSION = 5
# Format 2 listed the shards in the JSON; a format-1 cache's only version is kept in it.
LISTED_FORMAT_VERSION = 2
# Format 3 named shard tables; its shards store "large" column types, and versions in them still take it.
LARGE_FORMAT_VERSION = 3
# The first format to name "column_types".
TYPED_FORMAT_VERSION = 4
# The first whose shard tables give each record batch's offset, length and CRC-32.
SPANS_FORMAT_VERSION = 5


def format_for(column_types: str) -> int:
    """The format a new version in `column_types` is written in: the first that can say them."""
    return FORMAT_VERSION if column_types != "large" else LARGE_FORMAT_VERSION

COMPRESSIONS = (None, "zstd", "lz4")
MODES = ("overwrite", "append", "error")
MAX_MANIFEST_BYTES = 256 << 20
_REQUIRED = ("format", "format_version", "write_id", "features", "schema_fingerprint", "num_rows",
             "compression", "writer", "metadata")
# Reads one shard table of a cache, for the lazy `ShardTable` of a format-3 manifest.
TableLoader = Callable[[TableRef], pa.Table]


@dataclasses.dataclass(frozen=True)
class Manifest:
    """One published version of a cache: its features, its shards and how it was written.

    Attributes:
      path: the cache folder (not stored in the file).
      version: the version number, 1 for the first publish (and for a format-1 cache).
      write_id: the id of the write that published this version.
      features: the schema.
      shards: the shards, in row order (a `ShardTable`; a tuple is taken too).
      compression: None, "zstd" or "lz4".
      metadata: free user metadata.
      writer: package, pyarrow, Beam and Python versions of the writer.
      created: when the version was published (UTC, ISO 8601).
      parent_version: the latest version when this one was published (None for the first).
      mode: "overwrite", "append" or "error", as the write was asked.
      statistics: rows, nulls, min and max, class counts per column; None for versions
        of formats 1 and 2 and for appends onto them (not recorded then).
      format_version: the format the manifest was read in, or will be written in (`format_for`).
      column_types: how its shards store their columns (`features.COLUMN_TYPES`):
        "large" up to format 3, "hf" for new caches since.
      cache_id: the id of the cache, given with its first version; None in headers
        written before ids.
      parent_write_id: the write id of version `parent_version`; None where that is
        not recorded.
      rows_id: the write id of the version whose rows, in their order, this one holds,
        where that is another version's (one `compact` rewrote); None for its own.
    """

    path: str
    version: int
    write_id: str
    features: Features
    shards: ShardTable
    compression: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    writer: dict[str, str] = dataclasses.field(default_factory=dict)
    created: str = ""
    parent_version: int | None = None
    mode: str = "overwrite"
    statistics: Statistics | None = None
    format_version: int = FORMAT_VERSION
    column_types: str = "hf"
    cache_id: str | None = None
    parent_write_id: str | None = None
    rows_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.shards, ShardTable):
            object.__setattr__(self, "shards", ShardTable.of(tuple(self.shards)))

    @property
    def num_rows(self) -> int:
        return self.shards.num_rows

    @property
    def rows_identity(self) -> str:
        """The write id of the rows this version holds in their order: `rows_id`, or its own write id."""
        return self.rows_id or self.write_id

    @property
    def num_bytes(self) -> int:
        return self.shards.num_bytes

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def schema_fingerprint(self) -> str:
        return self.features.fingerprint()

    def __hash__(self) -> int:
        return hash((self.path, self.version, self.write_id))

    @property
    def created_at(self) -> datetime.datetime | None:
        """`created` as a UTC time; None when it is missing or not ISO 8601."""
        try:
            parsed = datetime.datetime.fromisoformat(self.created)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)

    @property
    def has_tables(self) -> bool:
        """Whether its shards are listed in shard tables (format 3 on), not in its JSON."""
        return self.format_version > LISTED_FORMAT_VERSION

    @property
    def storage_schema(self) -> pa.Schema:
        """The schema of its shards: its features in its column types."""
        return self.features.storage_schema(self.column_types)

    def shard_path(self, index: int) -> str:
        """The full path of shard `index`."""
        return CacheLayout(self.path).shard(self.shards[index].file)

    def __repr__(self) -> str:
        return (f"Manifest(path={self.path!r}, version={self.version}, write_id={self.write_id!r}, "
                f"num_rows={self.num_rows}, num_shards={self.num_shards}, num_bytes={self.num_bytes}, "
                f"compression={self.compression!r})")

    def to_dict(self, format_version: int | None = None) -> dict[str, Any]:
        """The manifest as JSON data in its `format_version` or the one given: a header naming the
        shard tables, or (`format_version=2`) with every shard listed. Column types other than
        "large" are named in any format (a listed form of such a version is only ever made to
        be edited, in tests)."""
        format_version = self.format_version if format_version is None else format_version
        listed = format_version <= LISTED_FORMAT_VERSION
        typed = format_version >= TYPED_FORMAT_VERSION or self.column_types != "large"
        return {
            "format": FORMAT_NAME,
            "format_version": format_version,
            "version": self.version,
            "write_id": self.write_id,
            "created": self.created,
            "parent_version": self.parent_version,
            **({"parent_write_id": self.parent_write_id} if self.parent_write_id is not None else {}),
            **({"cache_id": self.cache_id} if self.cache_id is not None else {}),
            **({"rows_id": self.rows_id} if self.rows_id is not None else {}),
            "mode": self.mode,
            "features": self.features.to_dict(),
            "schema_fingerprint": self.schema_fingerprint,
            "num_rows": self.num_rows,
            "num_bytes": self.num_bytes,
            "compression": self.compression,
            **({"column_types": self.column_types} if typed else {}),
            **({"shards": [dataclasses.asdict(s) for s in self.shards]} if listed else {
                "num_shards": self.num_shards, "tables": [ref.to_dict() for ref in self.shards.refs],
                "statistics": self.statistics.to_dict() if self.statistics is not None else None}),
            "writer": self.writer,
            "metadata": self.metadata,
        }

    def to_json(self, format_version: int | None = None) -> bytes:
        return manifest_json(self.to_dict(format_version))

    @classmethod
    def from_json(cls, raw: bytes, path: str, where: str, load: TableLoader | None = None) -> Manifest:
        """Parses and checks the manifest bytes read from `where`, for the cache at `path`; `load`
        reads its shard tables (format 3) when they are first used.

        Raises:
          CorruptCacheError: not UTF-8 JSON, nested more than `MAX_DEPTH` levels, NaN or
            infinite numbers, or any field missing or invalid; the message names `where`
            and the field.
        """
        return cls.from_dict(parse_json(raw, where), path, where, load)

    @classmethod
    def from_dict(cls, data: Any, path: str, where: str, load: TableLoader | None = None) -> Manifest:
        """Checks parsed manifest data; raises CorruptCacheError naming what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise CorruptCacheError(f"{where} is not a beam_shards manifest (no \"format\": \"{FORMAT_NAME}\")")
        format_version = data.get("format_version")
        if type(format_version) is int and format_version > FORMAT_VERSION:
            raise NewerFormatError(f"{where} has format version {_shown(format_version)}; this beam_shards reads "
                                   f"versions 1 to {FORMAT_VERSION} (upgrade beam_shards to read it)")
        if type(format_version) is not int or not 1 <= format_version <= FORMAT_VERSION:
            raise CorruptCacheError(
                f"{where} has format version {_shown(format_version)}; this beam_shards reads versions 1 to "
                f"{FORMAT_VERSION}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise CorruptCacheError(f"{where} lacks the field(s) {', '.join(missing)}")
        if data["compression"] not in COMPRESSIONS:
            raise CorruptCacheError(f"{where} has an unknown compression {_shown(data['compression'])}")
        if not isinstance(data["metadata"], dict) or not isinstance(data["writer"], dict):
            raise CorruptCacheError(f"{where}: \"metadata\" and \"writer\" must be JSON objects")
        if not all(isinstance(value, str) for value in data["writer"].values()):
            raise CorruptCacheError(f"{where}: \"writer\" must name each package's version as a string")
        try:
            features = Features.from_dict(data["features"])
        except FeatureError as error:
            raise CorruptCacheError(f"{where} has invalid features: {error}") from None
        if features.fingerprint() != data["schema_fingerprint"]:
            raise CorruptCacheError(
                f"{where}: schema fingerprint {_shown(data['schema_fingerprint'])} does not match its features "
                f"({features.fingerprint()!r}); the manifest was edited")
        column_types = data.get("column_types", None if format_version >= TYPED_FORMAT_VERSION else "large")
        if column_types not in COLUMN_TYPES:
            raise CorruptCacheError(f"{where} has column types {_shown(column_types)}; they are one of {COLUMN_TYPES}")
        # Format 3 implies "large", and its readers ignore the field: they must not read the version otherwise.
        if format_version == LARGE_FORMAT_VERSION and column_types != "large":
            raise CorruptCacheError(f"{where} has format version 3, whose shards are stored in 'large' column types, "
                                    f"but names {column_types!r}")
        statistics = None
        if format_version <= LISTED_FORMAT_VERSION:
            shards = _parse_listed(data, where)
        else:
            shards = _parse_tables(data, where, load)
            if data.get("statistics") is not None:
                statistics = Statistics.from_dict(data["statistics"], features, where)
                if statistics.num_rows != shards.num_rows:
                    raise CorruptCacheError(f"{where}: its statistics count {statistics.num_rows} rows, its shards "
                                            f"{shards.num_rows}")
        for field, unit in (("num_rows", "rows"), ("num_bytes", "bytes")):
            total = getattr(shards, field)
            # num_rows is required; num_bytes, a sum kept for people, is checked when present.
            if field in data and (type(data[field]) is not int or data[field] != total):
                raise CorruptCacheError(
                    f"{where} says {field}={_shown(data[field])} but its shards hold {total} {unit}")
        version = data.get("version", 1)
        parent = data.get("parent_version")
        mode = data.get("mode", "overwrite")
        if not is_count(version) or version < 1 or not (parent is None or is_count(parent) and parent < version):
            raise CorruptCacheError(f"{where} has an invalid version {_shown(version)} or parent {_shown(parent)}")
        if mode not in MODES or not isinstance(data["write_id"], str) or not isinstance(data.get("created", ""), str):
            raise CorruptCacheError(f"{where} has an invalid mode, write id or creation time")
        cache_id, parent_write_id, rows_id = data.get("cache_id"), data.get("parent_write_id"), data.get("rows_id")
        if not (cache_id is None or is_cache_id(cache_id)) or not all(
                write is None or is_write_id(write) for write in (parent_write_id, rows_id)):
            raise CorruptCacheError(f"{where} has an invalid cache id {_shown(cache_id)}, parent write id "
                                    f"{_shown(parent_write_id)} or rows id {_shown(rows_id)}")
        return cls(path=path, version=version, write_id=data["write_id"], features=features, shards=shards,
                   compression=data["compression"], metadata=data["metadata"], writer=data["writer"],
                   created=data.get("created", ""), parent_version=parent, mode=mode, statistics=statistics,
                   format_version=format_version, column_types=column_types, cache_id=cache_id,
                   parent_write_id=parent_write_id, rows_id=rows_id)


def _parse_listed(data: dict[str, Any], where: str) -> ShardTable:
    """The shards a format-1 or format-2 manifest lists in its JSON."""
    if not isinstance(data.get("shards"), list):
        raise CorruptCacheError(f"{where}: \"shards\" must be a list")
    shards = tuple(_parse_shard(entry, i, where) for i, entry in enumerate(data["shards"]))
    names = [s.file for s in shards]
    if len(set(names)) != len(names):
        raise CorruptCacheError(f"{where} lists a shard file more than once")
    if not _totals_fit(shards, ("num_rows", "num_bytes")):
        raise CorruptCacheError(f"{where} lists shards of more rows or bytes in all than a cache may hold")
    return ShardTable.of(shards, where=where)


def _parse_tables(data: dict[str, Any], where: str, load: TableLoader | None) -> ShardTable:
    """The shard table a header of format 3 or later names, read when first used."""
    if not isinstance(data.get("tables"), list):
        raise CorruptCacheError(f"{where}: \"tables\" must be a list")
    refs = [TableRef.from_dict(entry, where) for entry in data["tables"]]
    if len({ref.file for ref in refs}) != len(refs):
        raise CorruptCacheError(f"{where} names a shard table more than once")
    if not _totals_fit(refs, ("num_shards", "num_rows", "num_bytes")):
        raise CorruptCacheError(f"{where} names tables of more shards, rows or bytes than a cache may hold")
    shards = ShardTable(refs, where, load)
    if data.get("num_shards") != len(shards):
        raise CorruptCacheError(f"{where} says num_shards={_shown(data.get('num_shards'))} but its tables hold "
                                f"{len(shards)}")
    return shards


def _totals_fit(items: Any, fields: tuple[str, ...]) -> bool:
    """Whether each of `fields`, summed over `items`, is a count a cache may hold (checked before
    any int64 sum of them could overflow)."""
    return all(is_count(sum(getattr(item, field) for item in items)) for field in fields)


def manifest_json(data: dict[str, Any]) -> bytes:
    """`data` as a manifest file holds it (so a size measured on it is the file's)."""
    return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False).encode("utf-8")


def parse_json(raw: bytes, where: str) -> Any:
    """`raw` read as UTF-8 JSON without NaN or infinities, nested at most `MAX_DEPTH` levels.

    Raises:
      CorruptCacheError: it is not, naming `where`.
    """
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        too_deep = json_depth(data) > MAX_DEPTH
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as error:
        raise CorruptCacheError(f"{where} is not valid JSON ({error})") from None
    except RecursionError:  # deeper than Python's parser goes
        too_deep = True
    if too_deep:
        raise CorruptCacheError(f"{where} is nested too deeply (more than {MAX_DEPTH} levels)")
    return data


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a manifest may hold")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_shard(entry: Any, index: int, where: str) -> ShardInfo:
    if not isinstance(entry, dict):
        raise CorruptCacheError(f"{where}: shard {index} is not a JSON object")
    try:
        name, rows, size, checksum = entry["file"], entry["num_rows"], entry["num_bytes"], entry["checksum"]
    except KeyError as error:
        raise CorruptCacheError(f"{where}: shard {index} lacks {error}") from None
    if not isinstance(name, str) or write_id_of_shard(name) is None:
        raise CorruptCacheError(f"{where}: shard {index} has an invalid file name {_shown(name)}")
    if not (is_count(rows) and is_count(size)) or not isinstance(checksum, str) \
            or not CHECKSUM_PATTERN.fullmatch(checksum):
        raise CorruptCacheError(f"{where}: shard {index} ({name}) has invalid rows, bytes or checksum")
    return ShardInfo(name, rows, size, checksum)


def check_metadata(metadata: Any) -> dict[str, Any]:
    """Returns `metadata` as a dict if it is a JSON object without NaN; raises ValueError otherwise."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict; got {type(metadata).__name__}")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"metadata must be JSON-serializable: {error}") from None
    return metadata


def size_problem(what: str, size: int, expected: int) -> str:
    """The message for a shard whose size on disk is not the manifest's."""
    return (f"{what} has {size} bytes, the manifest says {expected} "
            f"({'truncated' if size < expected else 'altered'})")
