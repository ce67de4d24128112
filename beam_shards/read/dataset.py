"""`ShardedDataset`: the training-facing view of a cache, with decoding."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.errors import FeatureError
from beam_shards.features import Array, Feature, Features, Image, Sequence as SequenceFeature, Struct
from beam_shards.features.decode import check_image_mode
from beam_shards.hf.to_datasets import hf_dataset
from beam_shards.read.backend import (DEFAULT_CACHE_MAX_BYTES, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_OPEN_SHARDS,
                                      ArrowBackend)
from beam_shards.read.indexing import check_index, check_indices, check_slice
from beam_shards.read.open_shard import Readers, readers_of, rows_of
from beam_shards.read.row_identity import rows_name


class ShardedDataset:
    """A random-access dataset over a published cache, decoding rows for training.

    Works as a torch `Dataset` (including `DataLoader` workers, which it supports
    through `__getitems__` for batched fetching) and as a Grain random-access data
    source, without importing either. It pickles small: workers reopen shards lazily.

    Example:
        >>> ds = ShardedDataset("/tmp/my_cache")  # doctest: +SKIP
        >>> len(ds), ds[0]["label"], ds[-1]["image"].size  # doctest: +SKIP
        >>> first_ten = ds[:10]  # a view, no data copied  # doctest: +SKIP
        >>> batch = ds.__getitems__([5, 2, 5])  # list of 3 dicts  # doctest: +SKIP

    Args:
      source: the cache path, or an `ArrowBackend` opened on one.
      version: with a path, the version to read (pinned); None for the latest.
      columns: the columns to return (all by default).
      image_mode: "pil" (default), "numpy" (HxWxC or, single-channel, HxW) or "bytes" (undecoded).
      transform: an optional function applied to each decoded example.
      writable: numpy arrays (Array features, images with `image_mode="numpy"`) that
        torch and in-place code may write to; False gives zero-copy read-only views of
        the cache's memory where there are any.
      max_open_shards, max_memory_bytes, cache_dir, cache_max_bytes: passed to
        `ArrowBackend.open` (for a cache on an object store, `cache_dir` keeps whole
        shards on local disk, shared by every DataLoader worker).

    Raises:
      CacheNotFoundError, CorruptCacheError: the cache cannot be opened.
      KeyError: a column that the cache does not have.
      IndexError: an index out of range (the message carries index and length).
      TypeError: an index, or a slice bound, that is not an int (a bool, float, None or
        string; None is a slice bound).
      ValueError: an index array of more than one dimension.
    """

    def __init__(self, source: str | ArrowBackend, *, version: int | None = None, columns: Sequence[str] | None = None,
                 image_mode: str = "pil", transform: Callable[[dict[str, Any]], Any] | None = None,
                 writable: bool = True, max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS, max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
                 cache_dir: str | None = None, cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES):
        backend = (source if isinstance(source, ArrowBackend)
                   else ArrowBackend.open(source, version=version, max_open_shards=max_open_shards,
                                          max_memory_bytes=max_memory_bytes, cache_dir=cache_dir,
                                          cache_max_bytes=cache_max_bytes))
        if backend.features is None:
            raise FeatureError("ShardedDataset needs a backend opened on a cache (its features drive decoding)")
        self._backend = backend
        self._features = backend.features
        self._columns = tuple(columns) if columns is not None else tuple(self._features)
        unknown = [c for c in self._columns if c not in self._features]
        if unknown:
            raise KeyError(f"unknown column(s) {unknown}; the cache has {list(self._features)}")
        self._image_mode = check_image_mode(image_mode)
        if not isinstance(writable, bool):
            raise TypeError(f"writable must be a bool; got {writable!r}")
        self._writable = writable
        # The columns whose values may be read-only numpy views, copied when `writable`.
        self._array_columns = tuple(name for name in self._columns
                                    if writable and _may_hold_arrays(self._features[name], self._image_mode))
        self._transform = transform
        self._indices: range | np.ndarray = range(backend.num_rows)

    @property
    def backend(self) -> ArrowBackend:
        return self._backend

    @property
    def features(self) -> Features:
        return self._features

    @property
    def columns(self) -> list[str]:
        """The columns each row holds, in order."""
        return list(self._columns)

    def select_columns(self, columns: Sequence[str]) -> ShardedDataset:
        """A view of these rows holding only `columns` (some of this dataset's), nothing copied.

        Raises:
          KeyError: a column this dataset does not hold.
        """
        unknown = [c for c in columns if c not in self._columns]
        if unknown:
            raise KeyError(f"unknown column(s) {unknown}; the dataset holds {list(self._columns)}")
        view = self._view(self._indices)
        view._columns = tuple(columns)
        view._array_columns = tuple(c for c in self._array_columns if c in view._columns)
        return view

    def __repr__(self) -> str:
        manifest = self._backend.manifest
        transform = "" if self._transform is None else \
            f", transform={getattr(self._transform, '__qualname__', self._transform)!s}"
        writable = "" if self._writable else ", writable=False"
        return (f"ShardedDataset(path={manifest.path!r}, version={manifest.version}, view={self._describe_view()}, "
                f"num_rows={len(self)}, columns={list(self._columns)}, image_mode={self._image_mode!r}"
                f"{writable}{transform})")

    @property
    def identity(self) -> str:
        """What this dataset's rows are, as a checkpoint must match: the write that wrote them (the
        same for a version `compact` made of another), the version, the view and the row count; the
        same wherever the cache was copied to (`row_identity`)."""
        manifest = self._backend.manifest
        return rows_name(manifest.rows_identity, manifest.version, self._describe_view(), len(self))

    def _describe_view(self) -> str:
        """Which rows of the version this dataset holds, so Grain's checkpoint check sees a changed view."""
        indices = self._indices
        if isinstance(indices, range):
            return f"rows[{indices.start}:{indices.stop}:{indices.step}]"
        digest = hashlib.blake2b(np.ascontiguousarray(indices, dtype=np.int64).tobytes(), digest_size=8).hexdigest()
        return f"{len(indices)} chosen rows (blake2b {digest})"

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Any:
        if type(index) is int and 0 <= index < len(self._indices):  # the common case, checked as it is
            return self._read_position(index)
        if isinstance(index, slice):
            return self._view(self._indices[check_slice(index)])
        if isinstance(index, (int, np.integer)):
            return self._read_position(check_index(index, len(self), "dataset"))
        return self.__getitems__(index)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """The examples at `indices` (torch's batched fetch)."""
        return self._read_positions(check_indices(indices, len(self), "dataset"))

    def _read_position(self, position: int) -> Any:
        """The example at `position` (in range: not checked again, as a `Mixture`'s are not)."""
        return self._read(int(self._indices[position]))

    def _read_positions(self, positions: np.ndarray) -> list[Any]:
        """The examples at `positions` (int64, in range: not checked again, as a `Mixture`'s are not)."""
        return self._finished(self._backend.read_rows(self._global(positions), self._image_mode, self._columns))

    def _finished(self, rows: list[dict[str, Any]]) -> list[Any]:
        """`rows` as read, made writable and transformed."""
        if self._array_columns:
            rows = [self._made_writable(row) for row in rows]
        return rows if self._transform is None else [self._transform(row) for row in rows]

    def _reads_like(self, other: ShardedDataset) -> bool:
        """Whether `other` gives its rows as this dataset does (columns, decoding, no transform), so
        that both read in one pass (`read_together`)."""
        return (self._transform is None and other._transform is None and self._columns == other._columns
                and self._image_mode == other._image_mode and self._array_columns == other._array_columns)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        """The examples at `indices` (Grain's batched fetch)."""
        return self.__getitems__(indices)

    def __iter__(self) -> Iterator[Any]:
        for index in self._indices:
            yield self._read(int(index))

    def to_hf(self) -> Any:
        """These rows (this view's, of its columns) as a Hugging Face `datasets.Dataset` whose
        features are the equals of these (`beam_shards.hf.features`).

        The shards are read memory-mapped, and columns Hugging Face stores as this cache
        does are not copied: all but binary, Image, Audio, Video and ArrayND columns in a
        cache of Hugging Face's column types (format 4); those, and strings and lists in
        older caches, are cast to Hugging Face's storage types, a copy of those columns.

        Example:
            >>> ShardedDataset("/tmp/my_cache").to_hf().features  # doctest: +SKIP

        Raises:
          ImportError: Hugging Face datasets is not installed (pip install 'beam_shards[hf]').
          FeatureError: a feature with no equal in Hugging Face datasets.
        """
        def read() -> pa.Table:
            indices = self._indices
            if isinstance(indices, range) and indices.step == 1:
                table = self._backend.slice(indices.start, len(indices))
            else:
                table = self._backend.take(np.asarray(indices, dtype=np.int64))
            return table.select(list(self._columns))

        return hf_dataset(Features({name: self._features[name] for name in self._columns}), read)

    def _global(self, positions: np.ndarray) -> np.ndarray:
        if isinstance(self._indices, range):
            r = self._indices
            return positions if r.start == 0 and r.step == 1 else r.start + positions * r.step
        return self._indices[positions]

    def _read(self, index: int) -> Any:
        row = self._backend.read_row(index, self._image_mode, self._columns)
        if self._array_columns:
            row = self._made_writable(row)
        return row if self._transform is None else self._transform(row)

    def _made_writable(self, row: dict[str, Any]) -> dict[str, Any]:
        for name in self._array_columns:
            row[name] = _writable(row[name])
        return row

    def _view(self, indices: range | np.ndarray) -> ShardedDataset:
        view = object.__new__(ShardedDataset)
        view.__dict__.update(self.__dict__)
        view._indices = indices
        return view


def read_together(datasets: Sequence[ShardedDataset], owners: np.ndarray, positions: np.ndarray) -> list[Any]:
    """The example at each of `positions` of dataset `owners` (an index into `datasets`; int64, in range,
    not checked), in that order, read in one pass: each dataset routes its own rows, then every row is
    built and made writable at once, as one dataset's read does (the datasets `_reads_like` each other)."""
    first = datasets[0]
    which, within = np.empty_like(positions), np.empty_like(positions)
    readers: list[Readers | None] = []
    for owner, dataset in enumerate(datasets):
        places = np.flatnonzero(owners == owner)
        if len(places):
            batches, batch_of, rows = dataset._backend.route(dataset._global(positions.take(places)))
            which[places] = np.add(batch_of, len(readers), out=batch_of)
            within[places] = rows
            readers += readers_of(batches, dataset._features, first._image_mode, first._columns)
    return first._finished(rows_of(readers, which.tolist(), within.tolist()))


def _may_hold_arrays(feature: Feature, image_mode: str) -> bool:
    """Whether values of `feature` decode to numpy arrays (at any depth) in `image_mode`."""
    if isinstance(feature, SequenceFeature):
        return _may_hold_arrays(feature.feature, image_mode)
    if isinstance(feature, Struct):
        return any(_may_hold_arrays(field, image_mode) for field in feature.fields.values())
    return isinstance(feature, Array) or (isinstance(feature, Image) and image_mode == "numpy")


def _writable(value: Any) -> Any:
    """`value` with every read-only numpy array in it copied."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, list):
        return [_writable(item) for item in value]
    if isinstance(value, dict):
        return {name: _writable(item) for name, item in value.items()}
    return value
