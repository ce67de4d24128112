"""What a write asks of its shards (`WriterOptions`) and what it made (`WrittenShard`): plain values,
checked when made, shared by the writer, the merge, the commit and the Beam sink."""

from __future__ import annotations

import dataclasses

from beam_shards.features import COLUMN_TYPES
from beam_shards.format.manifest import COMPRESSIONS
from beam_shards.format.statistics import Statistics
from beam_shards.units import parse_count, parse_size

DEFAULT_SHARD_SIZE_BYTES = 128 << 20
DEFAULT_BATCH_SIZE = 1000
DEFAULT_BATCH_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    """A shard the writer closed: the path it was written to, its rows, size on disk and checksum,
    the rows of each of its record batches, its statistics, and where each record batch lies
    in the file, `(offset, length, crc32)` (None where not known: a shard given as input to
    a merge)."""

    path: str
    num_rows: int
    num_bytes: int
    checksum: str
    batch_rows: tuple[int, ...] | None = None
    statistics: Statistics | None = None
    batch_spans: tuple[tuple[int, int, int], ...] | None = None


@dataclasses.dataclass(frozen=True)
class WriterOptions:
    """How a write cuts its rows into batches and shards; checked when made.

    Example:
        >>> WriterOptions(shard_size_bytes=64 << 20).batch_size
        1000

    Args:
      shard_size_bytes: target size of a shard on disk (bytes, or text like "128MB" or
        "64MiB"); a shard closes before a batch would take it past this.
      max_rows_per_shard: optional cap on rows per shard.
      batch_size: rows per record batch at most.
      batch_bytes: bytes per record batch at most (bounds the memory a writer holds;
        bytes or text, as `shard_size_bytes`).
      compression: None, "zstd" or "lz4" (Arrow IPC buffer compression).
      column_types: how the shards store their columns (`COLUMN_TYPES`): "hf" for a
        new cache, the base version's for an append (`commit.check_write` says which).

    Raises:
      ValueError: an option out of range, naming it.
    """

    shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES
    max_rows_per_shard: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    batch_bytes: int = DEFAULT_BATCH_BYTES
    compression: str | None = None
    column_types: str = "hf"

    def __post_init__(self) -> None:
        checks = {"shard_size_bytes": parse_size, "batch_bytes": parse_size, "batch_size": parse_count}
        if self.max_rows_per_shard is not None:
            checks["max_rows_per_shard"] = parse_count
        for name, parse in checks.items():
            try:
                object.__setattr__(self, name, parse(getattr(self, name)))
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}; got {self.compression!r}")
        if self.column_types not in COLUMN_TYPES:
            raise ValueError(f"column_types must be one of {COLUMN_TYPES}; got {self.column_types!r}")
