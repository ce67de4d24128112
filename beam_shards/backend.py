"""`ArrowBackend`: Arrow-native random access over a published cache or an in-memory table."""

from __future__ import annotations

import bisect
import contextlib
import operator
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards import fs
from beam_shards.errors import CorruptCacheError, short_repr
from beam_shards.features import Features
from beam_shards.manifest import Manifest, read_metadata, size_problem

DEFAULT_MAX_OPEN_SHARDS = 512


class _OpenShard:
    """The record batches of one opened shard and the row offset of each."""

    __slots__ = ("batches", "offsets", "starts")

    def __init__(self, batches: list[pa.RecordBatch]):
        self.batches = batches
        self.offsets = np.cumsum([0] + [b.num_rows for b in batches], dtype=np.int64)
        # The same as Python ints: bisect on a list routes one row ~20x faster than numpy.
        self.starts = self.offsets.tolist()

    def locate(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, rows, side="right") - 1


class ArrowBackend:
    """Random access to the rows of a sharded Arrow cache, as Arrow tables.

    Shards are memory-mapped lazily, at most `max_open_shards` at a time (least
    recently used are closed first), so reading one row opens one shard. Uncompressed
    shards are read without copies; compressed shards are decompressed whole when first
    touched and held while open, so lower `max_open_shards` for large compressed caches.
    A backend pickles without its maps and reopens them in each process (fork or spawn).
    Nothing here decodes images: see `ShardedDataset` for that.

    Example:
        >>> import pyarrow as pa
        >>> backend = ArrowBackend(pa.table({"x": list(range(10))}))
        >>> backend.take([3, 1, 3]).column("x").to_pylist()
        [3, 1, 3]
        >>> backend.get_row(-1)
        {'x': 9}

    Args:
      table: an in-memory table to serve (use `ArrowBackend.open` for a cache).
      max_open_shards: how many shards may be open at once.

    Raises:
      CorruptCacheError (from `open` and reads): a shard is missing, truncated, or does
        not match the manifest.
      IndexError: an index out of range (the error carries the index and the length).
    """

    def __init__(self, table: pa.Table | None = None, *, max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
                 _manifest: Manifest | None = None):
        if max_open_shards < 1:
            raise ValueError(f"max_open_shards must be at least 1; got {max_open_shards}")
        self._max_open = max_open_shards
        self._manifest = _manifest
        if _manifest is not None:
            self._table = None
            self._schema = _manifest.features.arrow_schema()
            shard_rows = [s.num_rows for s in _manifest.shards]
        elif isinstance(table, pa.Table):
            self._table = _widen_binary(table)
            self._schema = self._table.schema
            shard_rows = [self._table.num_rows]
        else:
            raise TypeError(f"ArrowBackend takes a pyarrow Table, or use ArrowBackend.open(path); got {type(table).__name__}")
        self._offsets = np.cumsum([0] + shard_rows, dtype=np.int64)
        self._starts = self._offsets.tolist()
        self._reset()

    @classmethod
    def open(cls, path: str, *, max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS) -> ArrowBackend:
        """Opens the published cache at `path` (checks the manifest and shard sizes)."""
        return cls(max_open_shards=max_open_shards, _manifest=read_metadata(path))

    def _reset(self) -> None:
        self._open: OrderedDict[int, _OpenShard] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_open", "_lock", "_pid"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        source = f"path={self._manifest.path!r}" if self._manifest else "in-memory table"
        return (f"ArrowBackend({source}, num_rows={self.num_rows}, num_shards={self.num_shards}, "
                f"open_shards={len(self._open)})")

    def __len__(self) -> int:
        return self.num_rows

    @property
    def num_rows(self) -> int:
        return self._starts[-1]

    @property
    def num_shards(self) -> int:
        return len(self._offsets) - 1

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
        return self._offsets.copy()

    def get_row(self, index: int) -> dict[str, Any]:
        """Row `index` (negative counts from the end) as a dict of Python values."""
        index = check_index(index, self.num_rows)
        shard_id = bisect.bisect_right(self._starts, index) - 1
        shard = self._shard(shard_id)
        local = index - self._starts[shard_id]
        b = bisect.bisect_right(shard.starts, local) - 1
        return shard.batches[b].slice(local - shard.starts[b], 1).to_pylist()[0]

    def take(self, indices: Sequence[int] | np.ndarray) -> pa.Table:
        """The rows at `indices`, in that order and with duplicates kept, as one table."""
        idx = check_indices(indices, self.num_rows)
        if len(idx) == 0:
            return self._schema.empty_table()
        if len(idx) > 1 and np.all(np.diff(idx) == 1):
            return self.slice(int(idx[0]), len(idx))
        order = np.argsort(idx, kind="stable")
        ordered = idx[order]
        pieces = []
        shard_ids = np.searchsorted(self._offsets, ordered, side="right") - 1
        bounds = np.flatnonzero(np.diff(shard_ids)) + 1
        for run in np.split(np.arange(len(ordered)), bounds):
            shard_id = int(shard_ids[run[0]])
            shard = self._shard(shard_id)
            local = ordered[run] - self._offsets[shard_id]
            batch_ids = shard.locate(local)
            batch_bounds = np.flatnonzero(np.diff(batch_ids)) + 1
            for piece in np.split(np.arange(len(local)), batch_bounds):
                b = int(batch_ids[piece[0]])
                pieces.append(shard.batches[b].take(pa.array(local[piece] - shard.offsets[b])))
        table = pa.Table.from_batches(pieces, schema=self._schema)
        if np.all(order[:-1] < order[1:]):
            return table
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return table.combine_chunks().take(pa.array(inverse))

    def slice(self, start: int, length: int) -> pa.Table:
        """Rows `start` to `start + length` (clipped at the end), reading only their batches.

        Raises:
          TypeError: `start` or `length` is not an int. IndexError: `start` is out of
            range. ValueError: `length` is negative.
        """
        start, length = _as_int(start, "slice start"), _as_int(length, "slice length")
        if not 0 <= start <= self.num_rows:
            raise IndexError(f"slice start {start} out of range for a cache of {self.num_rows} rows")
        if length < 0:
            raise ValueError(f"slice length must be >= 0; got {length}")
        stop = min(start + length, self.num_rows)
        pieces = []
        position = start
        while position < stop:
            shard_id = int(np.searchsorted(self._offsets, position, side="right")) - 1
            shard = self._shard(shard_id)
            local = position - int(self._offsets[shard_id])
            b = int(shard.locate(np.int64(local)))
            batch = shard.batches[b]
            offset = local - int(shard.offsets[b])
            piece = batch.slice(offset, min(batch.num_rows - offset, stop - position))
            pieces.append(piece)
            position += piece.num_rows
        return pa.Table.from_batches(pieces, schema=self._schema)

    def iter_batches(self, shard_indices: Sequence[int] | None = None, shuffle: bool = False,
                     seed: int | None = None) -> Iterator[pa.RecordBatch]:
        """Yields the record batches of the given shards (all by default).

        With `shuffle`, shard order and batch order within each shard are shuffled
        by a generator seeded with `seed` (rows inside a batch keep their order).
        """
        order = list(range(self.num_shards)) if shard_indices is None else [int(i) for i in shard_indices]
        for shard_id in order:
            if not 0 <= shard_id < self.num_shards:
                raise IndexError(f"shard index {shard_id} out of range for {self.num_shards} shards")
        rng = np.random.default_rng(seed) if shuffle else None
        if rng is not None:
            order = [order[i] for i in rng.permutation(len(order))]
        for shard_id in order:
            batches = self._shard(shard_id).batches
            batch_order = rng.permutation(len(batches)) if rng is not None else range(len(batches))
            for b in batch_order:
                yield batches[b]

    def _shard(self, shard_id: int) -> _OpenShard:
        if os.getpid() != self._pid:
            self._reset()
        with self._lock:
            shard = self._open.get(shard_id)
            if shard is not None:
                self._open.move_to_end(shard_id)
                return shard
            shard = self._load(shard_id)
            self._open[shard_id] = shard
            while len(self._open) > self._max_open:
                self._open.popitem(last=False)
            return shard

    def _load(self, shard_id: int) -> _OpenShard:
        if self._manifest is None:
            return _OpenShard(self._table.to_batches())
        return _OpenShard(read_shard_batches(self._manifest, shard_id))

    @property
    def open_shards(self) -> list[int]:
        """The shards open now, least recently used first."""
        return list(self._open)


def _as_int(value: Any, what: str = "index") -> int:
    """`value` as a Python int: an int or numpy integer, not a bool, float, None or string.

    Raises:
      TypeError: naming `what` and the value.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, not a bool; got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int; got {short_repr(value)}") from None


def check_index(index: int, length: int, what: str = "cache") -> int:
    """`index` as a position in 0..length-1 (negative counts from the end).

    Raises:
      TypeError: `index` is not an int (a bool is not taken for one). IndexError: it
        is out of range (names both).
    """
    index = _as_int(index)
    if not -length <= index < length:
        raise IndexError(f"index {index} out of range for a {what} of {length} rows")
    return index + length if index < 0 else index


def check_indices(indices: Sequence[int] | np.ndarray, length: int, what: str = "cache") -> np.ndarray:
    """`check_index` over many indices at once, as an int64 array.

    Raises:
      TypeError: an index is not an int (floats, bools, None, objects). ValueError:
        `indices` is not flat (its shape is named). IndexError: an index is out of range.
    """
    try:
        idx = np.asarray(indices)
    except ValueError:
        raise ValueError(f"indices must be a flat sequence of ints; got {short_repr(indices)}") from None
    if idx.ndim > 1:
        raise ValueError(f"indices must be one-dimensional; got shape {idx.shape}")
    if idx.dtype.kind == "b" or _holds_bools(indices, idx):
        raise TypeError(f"indices must be ints, not bools; got {short_repr(indices)}")
    if idx.dtype.kind not in "iu" and idx.size:
        raise TypeError(f"indices must be ints; got {short_repr(indices)}")
    idx = idx.reshape(-1)
    bad = (idx < -length) | (idx >= length)
    if bad.any():
        raise IndexError(f"index {int(idx[np.argmax(bad)])} out of range for a {what} of {length} rows")
    idx = idx.astype(np.int64, copy=False)
    return np.where(idx < 0, idx + length, idx)


def _holds_bools(indices: Any, idx: np.ndarray) -> bool:
    """Whether a sequence that numpy read as ints holds bools (numpy takes them for 0 and 1)."""
    return idx.dtype.kind in "iu" and idx.ndim == 1 and not isinstance(indices, np.ndarray) and any(
        isinstance(i, (bool, np.bool_)) for i in indices)


def read_shard_batches(manifest: Manifest, shard_id: int) -> list[pa.RecordBatch]:
    """Opens shard `shard_id` of a cache and checks it against the manifest.

    Local shards are memory-mapped; other schemes are read into memory.

    Raises:
      CorruptCacheError: the shard is missing, truncated, not an Arrow file, or its
        schema or row count differ from the manifest.
    """
    reader = open_shard(manifest, shard_id)
    batches = [read_batch(reader, i, manifest, shard_id) for i in range(reader.num_record_batches)]
    check_shard_rows(manifest, shard_id, sum(b.num_rows for b in batches))
    return batches


def read_batch(reader: pa.ipc.RecordBatchFileReader, index: int, manifest: Manifest, shard_id: int) -> pa.RecordBatch:
    """Record batch `index` of a shard opened by `open_shard`, its offsets and lengths checked.

    pyarrow trusts the offsets it reads: a damaged one sends a later read outside the
    memory map (SIGBUS or SIGSEGV, the process dies). Full validation checks every
    offset against its buffer, and UTF-8 in string columns, without touching binary
    data. Damage inside a data buffer stays invisible here; `verify`'s checksum sees it.

    Raises:
      CorruptCacheError: the batch cannot be read or is not a valid Arrow batch.
    """
    with unreadable_as_corrupt(manifest, shard_id):
        batch = reader.get_batch(index)
        batch.validate(full=True)
    return batch


def open_shard(manifest: Manifest, shard_id: int, *, columns: Sequence[str] | None = None,
               stream: bool = False) -> pa.ipc.RecordBatchFileReader:
    """Opens shard `shard_id` of a cache and checks its size and schema against the manifest.

    Local shards are memory-mapped. Other schemes are read whole into memory or, with
    `stream`, through a seekable `FileSystems` stream, so that only the footer and the
    batches asked for are fetched. With `columns`, the reader's batches hold only those
    columns (in schema order) and only their buffers are read.

    Raises:
      CorruptCacheError: the shard is missing, truncated, not an Arrow file, or its
        schema differs from the manifest's.
    """
    entry = manifest.shards[shard_id]
    path = manifest.shard_path(shard_id)
    where = shard_where(manifest, shard_id)
    try:
        if fs.is_local(path):
            source = pa.memory_map(fs.local_path(path))
        elif stream:
            source = pa.PythonFile(fs.open_read(path), mode="r")
        else:
            source = pa.BufferReader(fs.read_bytes(path))
    except FileNotFoundError:
        raise CorruptCacheError(f"{where} is missing{_overwritten_hint(manifest)}") from None
    if source.size() != entry.num_bytes:
        raise CorruptCacheError(size_problem(where, source.size(), entry.num_bytes))
    expected = manifest.features.arrow_schema()
    with unreadable_as_corrupt(manifest, shard_id):
        reader = pa.ipc.open_file(source)
    if not reader.schema.equals(expected, check_metadata=False):
        raise CorruptCacheError(f"{where} has schema {reader.schema.to_string(show_schema_metadata=False)!r}, "
                                f"the manifest's features give {expected.to_string(show_schema_metadata=False)!r}")
    if columns is None:
        return reader
    # A second reader over the same source: its footer says which buffers the projection skips.
    options = pa.ipc.IpcReadOptions(included_fields=[expected.get_field_index(name) for name in columns])
    with unreadable_as_corrupt(manifest, shard_id):
        return pa.ipc.open_file(source, options=options)


def shard_where(manifest: Manifest, shard_id: int) -> str:
    """How errors name a shard: its index, file name and cache."""
    return f"shard {shard_id} ({manifest.shards[shard_id].path}) of the cache at {manifest.path}"


@contextlib.contextmanager
def unreadable_as_corrupt(manifest: Manifest, shard_id: int) -> Iterator[None]:
    """Turns pyarrow's errors reading a shard into a CorruptCacheError naming the shard."""
    try:
        yield
    except (pa.ArrowException, OSError) as error:
        raise CorruptCacheError(f"{shard_where(manifest, shard_id)} is not a readable Arrow IPC file: {error}") from None


def check_shard_rows(manifest: Manifest, shard_id: int, rows: int) -> None:
    """Raises CorruptCacheError unless the shard's batches hold the rows its manifest entry says."""
    expected = manifest.shards[shard_id].num_rows
    if rows != expected:
        raise CorruptCacheError(f"{shard_where(manifest, shard_id)} holds {rows} rows, the manifest says {expected}")


def _overwritten_hint(manifest: Manifest) -> str:
    from beam_shards.commit import current_write_id

    now = current_write_id(manifest.path)
    if now is not None and now != manifest.write_id:
        return (f": the cache was overwritten by write {now} after this reader opened write "
                f"{manifest.write_id}; open it again")
    return ""


def _widen_binary(table: pa.Table) -> pa.Table:
    """Casts binary/string columns to their 64-bit-offset forms, so no column overflows at 2 GiB."""
    widened = {pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}
    fields = [f.with_type(widened.get(f.type, f.type)) for f in table.schema]
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)
