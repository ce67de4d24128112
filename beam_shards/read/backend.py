"""`ArrowBackend`: Arrow-native random access over a published cache or an in-memory table."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import short_repr
from beam_shards.features import Features
from beam_shards.format.catalog import read_metadata
from beam_shards.format.manifest import Manifest
from beam_shards.format.shard_table import ShardTable
from beam_shards.format.table_files import ShardInfo
from beam_shards.read.forks import forks
from beam_shards.read.indexing import as_int, check_index, check_indices
from beam_shards.read.open_shard import CachedBatch, OpenShard, readers_of, rows_of
from beam_shards.read.shard_loading import load_shard
from beam_shards.storage.disk_cache import DiskCache

DEFAULT_MAX_OPEN_SHARDS = 512
DEFAULT_MAX_MEMORY_BYTES = 256 << 20
DEFAULT_CACHE_MAX_BYTES = 16 << 30
# How an in-memory table is routed: as one shard of this (never opened) name.
_TABLE_SHARD = "shard-19700101T000000Z-00000000-00000-of-00001.arrow"


class ArrowBackend:
    """Random access to the rows of a sharded Arrow cache, as Arrow tables or rows.

    Shards open lazily, at most `max_open_shards` at a time (least recently used are
    closed first), and each record batch is read and checked when first touched, so
    reading one row reads one batch. A format-5 shard's batch is found where the shard
    table says, without reading the file's footer, and its CRC-32 is checked by this
    backend before it serves a row of it (`shard_loading`), so a byte damaged on disk
    since is never served, whatever other readers checked before; point reads advise
    the map for random access, scans for sequential. Local uncompressed shards are memory-mapped and
    read without copies. Batches that hold real memory (compressed, or read from an
    object store with ranged reads of the footer and of the batches needed) are kept
    up to `max_memory_bytes`, least recently used dropped first.
    A backend pickles without its maps and reopens them in each process (fork or spawn).
    Nothing here decodes images: see `ShardedDataset` for that.

    Example:
        >>> import pyarrow as pa
        >>> backend = ArrowBackend.from_table(pa.table({"x": list(range(10))}))
        >>> backend.take([3, 1, 3]).column("x").to_pylist()
        [3, 1, 3]
        >>> backend.get_row(-1)
        {'x': 9}

    Build one with `ArrowBackend.open(path)` (a published cache) or
    `ArrowBackend.from_table(table)` (an in-memory table).

    Raises:
      CorruptCacheError (from `open` and reads): a shard is missing, truncated, or does
        not match the manifest.
      IndexError: an index out of range (the error carries the index and the length).
    """

    def __init__(self, manifest: Manifest | None, table: pa.Table | None, max_open_shards: int,
                 max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES, disk_cache: DiskCache | None = None):
        if type(max_open_shards) is not int or max_open_shards < 1:
            raise ValueError(f"max_open_shards must be an int of at least 1; got {max_open_shards!r}")
        if type(max_memory_bytes) is not int or max_memory_bytes < 0:
            raise ValueError(f"max_memory_bytes must be an int of at least 0; got {max_memory_bytes!r}")
        self._max_open = max_open_shards
        self._max_memory = max_memory_bytes
        self._disk_cache = disk_cache
        self._manifest = manifest
        self._table = table
        if manifest is not None:
            self._schema = manifest.storage_schema
            self._shards = manifest.shards
        else:
            self._schema = table.schema
            self._shards = ShardTable.of([ShardInfo(_TABLE_SHARD, table.num_rows, 0, "crc32:00000000")])
        self._reset()

    @classmethod
    def open(cls, path: str, *, version: int | None = None, max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
             max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES, cache_dir: str | None = None,
             cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> ArrowBackend:
        """Opens one version of the published cache at `path` (checks the manifest and shard sizes).

        Args:
          path: the cache folder (local, gs:// or s3://).
          version: the version to read, pinned for the backend's life; None for the latest.
          max_open_shards: how many shards may be open at once.
          max_memory_bytes: how many bytes of compressed or downloaded batches are kept.
          cache_dir: for a cache on an object store, a local folder where whole shards
            are kept once downloaded (checked against their checksum; a format-5 shard's
            copy then has each record batch checked when this reader first reads it, and
            is fetched again once if damaged, an older shard's copy is read whole and
            checked by each process before it first reads it; shared by every process on the machine;
            least recently used evicted first; when the folder cannot be written, shards
            are read with ranged reads and a warning says so); None reads only the
            batches needed, with ranged reads.
          cache_max_bytes: the most bytes `cache_dir` holds.

        Raises:
          CacheNotFoundError, VersionNotFoundError, CorruptCacheError: see `read_metadata`.
          ValueError: `cache_max_bytes` is not a positive int.
        """
        disk_cache = None if cache_dir is None else DiskCache(cache_dir, cache_max_bytes)
        return cls(read_metadata(path, version=version), None, max_open_shards, max_memory_bytes, disk_cache)

    @classmethod
    def from_table(cls, table: pa.Table, *, max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS) -> ArrowBackend:
        """Serves an in-memory table (binary and string columns widened to 64-bit offsets).

        Raises:
          TypeError: `table` is not a pyarrow Table.
        """
        if not isinstance(table, pa.Table):
            raise TypeError(f"ArrowBackend.from_table takes a pyarrow Table; got {type(table).__name__}")
        return cls(None, _widen_binary(table), max_open_shards)

    def _reset(self) -> None:
        self._open: OrderedDict[int, OpenShard] = OrderedDict()
        self._resident: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._resident_bytes = 0
        self._lock = threading.Lock()
        self._forks = forks()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_open", "_resident", "_resident_bytes", "_lock", "_forks"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        source = (f"path={self._manifest.path!r}, version={self._manifest.version}" if self._manifest
                  else "in-memory table")
        return (f"ArrowBackend({source}, num_rows={self.num_rows}, num_shards={self.num_shards}, "
                f"open_shards={len(self._open)})")

    def __len__(self) -> int:
        return self.num_rows

    @property
    def num_rows(self) -> int:
        return self._shards.num_rows

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def manifest(self) -> Manifest | None:
        """The manifest of the cache, None for an in-memory table."""
        return self._manifest

    @property
    def features(self) -> Features | None:
        return self._manifest.features if self._manifest else None

    @property
    def shard_offsets(self) -> np.ndarray:
        """The global index of each shard's first row, then the total (length num_shards + 1)."""
        return self._shards.row_starts()

    def get_row(self, index: int) -> dict[str, Any]:
        """Row `index` (negative counts from the end) as a dict: Python values, Array features as numpy views."""
        return self.read_row(check_index(index, self.num_rows), "bytes")

    def read_row(self, index: int, image_mode: str, columns: tuple[str, ...] = ()) -> dict[str, Any]:
        """Row `index` (in range, not checked) decoded as the features say for `image_mode`.

        Only `columns` (all when empty) are read. Without features (an in-memory table),
        values are what `to_pylist` gives.
        """
        shard_id, first = self._shards.locate(index)
        shard = self._shard(shard_id)
        local = index - first
        b = shard.locate(local)
        position = local - shard.starts[b]
        readers = self._batch(shard_id, shard, b).readers(self.features, image_mode, columns)
        return {name: read(position) for name, read in readers}

    def take(self, indices: Sequence[int] | np.ndarray) -> pa.Table:
        """The rows at `indices`, in that order and with duplicates kept, as one table (no data copied)."""
        idx = check_indices(indices, self.num_rows)
        if len(idx) == 0:
            return self._schema.empty_table()
        if len(idx) > 1 and idx[-1] - idx[0] == len(idx) - 1 and np.all(np.diff(idx) == 1):
            return self.slice(int(idx[0]), len(idx))
        batches, which, positions = self.route(idx)
        arrow = [None if batch is None else batch.batch for batch in batches]
        pieces = list(map(pa.RecordBatch.slice, map(arrow.__getitem__, which.tolist()), positions.tolist(),
                          itertools.repeat(1)))
        # Without a schema to check against, the batches of one shard share theirs and compare by identity.
        table = pa.Table.from_batches(pieces)
        return table if table.schema.equals(self._schema, check_metadata=True) else table.cast(self._schema)

    def read_rows(self, indices: np.ndarray, image_mode: str, columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """`read_row` for each of `indices` (int64, in range, not checked), routed together."""
        if len(indices) == 0:
            return []
        batches, which, positions = self.route(indices)
        return rows_of(readers_of(batches, self.features, image_mode, columns), which.tolist(), positions.tolist())

    def route(self, idx: np.ndarray) -> tuple[list[CachedBatch | None], np.ndarray, np.ndarray]:
        """The batches of the shards holding rows `idx` (int64, in range, not checked; None for the
        batches no row is in), and for each row its batch (an index into them) and its position there
        (int64 arrays). Opens each shard once, in shard order, reads each batch once, and routes rows
        by one search over the first rows of every batch of the shards touched.
        """
        # A fixed cost of each read: a batch of a mixture pays it once per source, so a one-shard
        # cache skips the shard search and a one-shard read the concatenation.
        shard_ids = [0] if len(self._shards) == 1 else np.unique(self._shards.shard_ids(idx)).tolist()
        shards = [self._shard(shard_id) for shard_id in shard_ids]
        firsts = shards[0].firsts if len(shards) == 1 else np.concatenate([shard.firsts for shard in shards])
        slot = firsts.searchsorted(idx, side="right") - 1
        positions = idx - firsts[slot]
        used = np.flatnonzero(np.bincount(slot, minlength=len(firsts))).tolist()
        # Batches of mapped shards read before are picked up as they are; one not read yet, or of a
        # resident shard (its LRU marks it used), goes through `_batch`.
        read = [batch for shard in shards for batch in shard.batches]
        batches: list[CachedBatch | None] = [None] * len(read)
        for s in used:
            batches[s] = read[s]
        if any(batches[s] is None for s in used) or any(shard.resident for shard in shards):
            bases = np.cumsum([0] + [len(shard.batches) for shard in shards])
            owners = (np.searchsorted(bases, used, side="right") - 1).tolist()
            for k, s in zip(owners, used):
                batches[s] = self._batch(shard_ids[k], shards[k], s - int(bases[k]))
        return batches, slot, positions

    def slice(self, start: int, length: int) -> pa.Table:
        """Rows `start` to `start + length` (clipped at the end), reading only their batches.

        Raises:
          TypeError: `start` or `length` is not an int. IndexError: `start` is out of
            range. ValueError: `length` is negative.
        """
        start, length = as_int(start, "slice start"), as_int(length, "slice length")
        if not 0 <= start <= self.num_rows:
            raise IndexError(f"slice start {start} out of range for a cache of {self.num_rows} rows")
        if length < 0:
            raise ValueError(f"slice length must be >= 0; got {length}")
        stop = min(start + length, self.num_rows)
        pieces = []
        position = start
        while position < stop:
            shard_id, first = self._shards.locate(position)
            shard = self._shard(shard_id)
            local = position - first
            b = shard.locate(local)
            batch = self._batch(shard_id, shard, b).batch
            offset = local - shard.starts[b]
            piece = batch.slice(offset, min(batch.num_rows - offset, stop - position))
            pieces.append(piece)
            position += piece.num_rows
        return pa.Table.from_batches(pieces, schema=self._schema)

    def iter_batches(self, shard_indices: Sequence[int] | None = None, shuffle: bool = False,
                     seed: int | None = None) -> Iterator[pa.RecordBatch]:
        """Yields the record batches of the given shards (all by default).

        With `shuffle`, shard order and batch order within each shard are shuffled
        by a generator seeded with `seed` (rows inside a batch keep their order).

        Raises:
          TypeError: `shard_indices` is not a sequence of ints (a bool, float or string
            is not a shard index). IndexError: a shard index out of range.
        """
        order = list(range(self.num_shards)) if shard_indices is None else self._shard_ids(shard_indices)
        rng = np.random.default_rng(seed) if shuffle else None
        if rng is not None:
            order = [order[i] for i in rng.permutation(len(order))]
        for shard_id in order:
            shard = self._shard(shard_id, sequential=rng is None)
            count = len(shard.batches)
            for b in (rng.permutation(count).tolist() if rng is not None else range(count)):
                yield self._batch(shard_id, shard, b).batch

    def _shard_ids(self, shard_indices: Sequence[int]) -> list[int]:
        """`shard_indices` as a list of ints in range.

        Raises:
          TypeError: not a sequence of ints (bools, floats and strings are not). IndexError:
            a shard index out of range.
        """
        if isinstance(shard_indices, (str, bytes)) or not isinstance(shard_indices, Iterable):
            raise TypeError(f"shard_indices must be a sequence of ints; got {short_repr(shard_indices)}")
        ids = [as_int(i, "shard index") for i in shard_indices]
        for shard_id in ids:
            if not 0 <= shard_id < self.num_shards:
                raise IndexError(f"shard index {shard_id} out of range for {self.num_shards} shards")
        return ids

    def _shard(self, shard_id: int, sequential: bool = False) -> OpenShard:
        if forks() != self._forks:  # a child forked since (a DataLoader worker): its parent's maps, locks
            self._reset()
        with self._lock:
            shard = self._open.get(shard_id)
            if shard is not None:
                self._open.move_to_end(shard_id)
                return shard
        shard = self._load(shard_id, sequential)
        with self._lock:
            self._open[shard_id] = shard
            self._open.move_to_end(shard_id)
            while len(self._open) > self._max_open:
                closed, _ = self._open.popitem(last=False)
                for key in [key for key in self._resident if key[0] == closed]:
                    self._resident_bytes -= self._resident.pop(key)
            return shard

    def _batch(self, shard_id: int, shard: OpenShard, b: int) -> CachedBatch:
        batch = shard.batches[b]
        if batch is None:
            batch = shard.batches[b] = CachedBatch(shard.read(b))
            if shard.resident:
                self._keep_resident(shard_id, b, batch.batch.get_total_buffer_size())
        elif shard.resident:
            with self._lock:
                if (shard_id, b) in self._resident:
                    self._resident.move_to_end((shard_id, b))
        return batch

    def _keep_resident(self, shard_id: int, b: int, nbytes: int) -> None:
        """Counts batch `b` of a resident shard, dropping the least recently used over the limit (never this one)."""
        with self._lock:
            self._resident[(shard_id, b)] = nbytes
            self._resident_bytes += nbytes
            while self._resident_bytes > self._max_memory and len(self._resident) > 1:
                (old_shard, old_b), size = self._resident.popitem(last=False)
                self._resident_bytes -= size
                opened = self._open.get(old_shard)
                if opened is not None:
                    opened.batches[old_b] = None

    def _load(self, shard_id: int, sequential: bool) -> OpenShard:
        if self._manifest is None:
            batches = self._table.to_batches()
            return OpenShard([len(batch) for batch in batches], 0, batches.__getitem__, resident=False)
        return load_shard(self._manifest, shard_id, self._disk_cache, sequential)

    @property
    def memory_bytes(self) -> int:
        """Bytes of record batches held in memory now (compressed or read over the network; maps cost none)."""
        return self._resident_bytes

    @property
    def open_shards(self) -> list[int]:
        """The shards open now, least recently used first."""
        return list(self._open)


def _widen_binary(table: pa.Table) -> pa.Table:
    """Casts binary/string columns to their 64-bit-offset forms, so no column overflows at 2 GiB."""
    widened = {pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}
    fields = [f.with_type(widened.get(f.type, f.type)) for f in table.schema]
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)
