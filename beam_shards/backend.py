"""`ArrowBackend`: Arrow-native random access over a published cache or an in-memory table."""

from __future__ import annotations

import bisect
import operator
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import short_repr
from beam_shards.features import Features
from beam_shards.manifest import Manifest
from beam_shards.shard_file import ShardFile
from beam_shards.versions import read_metadata

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

    def __init__(self, manifest: Manifest | None, table: pa.Table | None, max_open_shards: int):
        if type(max_open_shards) is not int or max_open_shards < 1:
            raise ValueError(f"max_open_shards must be an int of at least 1; got {max_open_shards!r}")
        self._max_open = max_open_shards
        self._manifest = manifest
        self._table = table
        if manifest is not None:
            self._schema = manifest.features.arrow_schema()
            shard_rows = [s.num_rows for s in manifest.shards]
        else:
            self._schema = table.schema
            shard_rows = [table.num_rows]
        self._offsets = np.cumsum([0] + shard_rows, dtype=np.int64)
        self._starts = self._offsets.tolist()
        self._reset()

    @classmethod
    def open(cls, path: str, *, version: int | None = None,
             max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS) -> ArrowBackend:
        """Opens one version of the published cache at `path` (checks the manifest and shard sizes).

        Args:
          path: the cache folder.
          version: the version to read, pinned for the backend's life; None for the latest.
          max_open_shards: how many shards may be open at once.

        Raises:
          CacheNotFoundError, VersionNotFoundError, CorruptCacheError: see `read_metadata`.
        """
        return cls(read_metadata(path, version=version), None, max_open_shards)

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
        source = (f"path={self._manifest.path!r}, version={self._manifest.version}" if self._manifest
                  else "in-memory table")
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

        Raises:
          TypeError: `shard_indices` is not a sequence of ints (a bool, float or string
            is not a shard index). IndexError: a shard index out of range.
        """
        order = list(range(self.num_shards)) if shard_indices is None else self._shard_ids(shard_indices)
        rng = np.random.default_rng(seed) if shuffle else None
        if rng is not None:
            order = [order[i] for i in rng.permutation(len(order))]
        for shard_id in order:
            batches = self._shard(shard_id).batches
            batch_order = rng.permutation(len(batches)) if rng is not None else range(len(batches))
            for b in batch_order:
                yield batches[b]

    def _shard_ids(self, shard_indices: Sequence[int]) -> list[int]:
        """`shard_indices` as a list of ints in range.

        Raises:
          TypeError: not a sequence of ints (bools, floats and strings are not). IndexError:
            a shard index out of range.
        """
        if isinstance(shard_indices, (str, bytes)) or not isinstance(shard_indices, Iterable):
            raise TypeError(f"shard_indices must be a sequence of ints; got {short_repr(shard_indices)}")
        ids = [_as_int(i, "shard index") for i in shard_indices]
        for shard_id in ids:
            if not 0 <= shard_id < self.num_shards:
                raise IndexError(f"shard index {shard_id} out of range for {self.num_shards} shards")
        return ids

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
        return _OpenShard(ShardFile(self._manifest, shard_id).read_batches())

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
        raise _out_of_range(index, length, what)
    return index + length if index < 0 else index


def check_slice(index: slice) -> slice:
    """`index` with each of its bounds an int or None.

    Raises:
      TypeError: a bound is a bool, a float or a string (naming it).
    """
    bounds = {"start": index.start, "stop": index.stop, "step": index.step}
    return slice(*(None if value is None else _as_int(value, f"slice {name}") for name, value in bounds.items()))


def _out_of_range(index: int, length: int, what: str) -> IndexError:
    return IndexError(f"index {index} out of range for a {what} of {length} rows")


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
    if idx.dtype == object and idx.ndim == 1 and all(_is_int(i) for i in idx):
        # numpy keeps ints past int64 and uint64 as objects: such an index is out of range.
        raise _out_of_range(next(i for i in idx if not -length <= i < length), length, what)
    if idx.dtype.kind not in "iu" and idx.size:
        raise TypeError(f"indices must be ints; got {short_repr(indices)}")
    idx = idx.reshape(-1)
    bad = (idx < -length) | (idx >= length)
    if bad.any():
        raise _out_of_range(int(idx[np.argmax(bad)]), length, what)
    idx = idx.astype(np.int64, copy=False)
    return np.where(idx < 0, idx + length, idx)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _holds_bools(indices: Any, idx: np.ndarray) -> bool:
    """Whether a sequence that numpy read as ints holds bools (numpy takes them for 0 and 1)."""
    return idx.dtype.kind in "iu" and idx.ndim == 1 and not isinstance(indices, np.ndarray) and any(
        isinstance(i, (bool, np.bool_)) for i in indices)


def _widen_binary(table: pa.Table) -> pa.Table:
    """Casts binary/string columns to their 64-bit-offset forms, so no column overflows at 2 GiB."""
    widened = {pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}
    fields = [f.with_type(widened.get(f.type, f.type)) for f in table.schema]
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)
