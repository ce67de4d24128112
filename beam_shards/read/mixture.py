"""`Mixture`: a weighted mixture of caches, each epoch holding each source's share of rows exactly."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from beam_shards.errors import SchemaMismatchError
from beam_shards.features import Features, Value
from beam_shards.read.dataset import ShardedDataset, read_together
from beam_shards.read.indexing import check_index, check_indices, check_slice
from beam_shards.read.mixture_plan import EpochSlots, apportion, stream_position, stream_positions, stream_table
from beam_shards.read.mixture_streams import SourceStreams
from beam_shards.read.mixture_tables import tabled
from beam_shards.read.row_identity import mixture_name
from beam_shards.read.saved_state import is_int

# Indices of later epochs go up to here; every stream position stays below it too.
_LIMIT = 1 << 62
_MAX_SEED = (1 << 63) - 1
_CHUNK = 256  # rows read at once by iteration
# Reads in order (a sampler without shuffle, iteration) take their plan from a block of this many
# consecutive indices, planned at once on the block's second read in a row: about 0.11 us an index,
# against 0.35 for a batch of 256 planned alone (numpy's fixed cost a call) and 0.15 for blocks of
# 16,384 (arrays past the CPU's caches); a smaller block also plans fewer indices a run leaves unread.
_BLOCK_BITS = 12
_BLOCK_MASK = (1 << _BLOCK_BITS) - 1
# ds[i] plans a block only once reads step forward by one stride up to this (a sampler's rank reads
# every world_size-th index): reads at random in an epoch of a few blocks are often in the block
# of the last one, and planning a block for each (~0.5 ms) would cost them far more than it saves.
_STRIDE = 64
# (block, sources, rows, the same as lists) of a planned block
_BlockPlan = tuple[int, np.ndarray, np.ndarray, list[int], list[int]]
_NO_BLOCK: _BlockPlan = (-1, np.zeros(0, np.int64), np.zeros(0, np.int64), [], [])


class Mixture:
    """A weighted mixture of caches: every epoch holds each source's share of rows exactly.

    An epoch of `epoch_size` rows holds round(weight x epoch_size) rows of each source,
    the weights normalised to sum to 1 and the counts rounded by largest remainder so they
    sum to `epoch_size` (`rows_per_epoch`). A source with fewer rows is repeated, each of
    its rows once before any again; one with more is subsampled, its rows read in turn
    over the epochs, each epoch's from one pass over it, so none twice in an epoch. Each source's rows come shuffled for (seed, pass over the source), and
    spread evenly through the epoch: two rows of a source are at most epoch_size / its
    rows per epoch + the number of sources apart. Rows are a source's rows (dicts) with a
    `source` column naming the source: its path.

    Row i of epoch e is index e * len(mixture) + i (`len` is `epoch_size`): a
    `ShardedSampler` over a mixture yields those indices for its epoch, so DataLoader
    workers, which hold their own copy, read each epoch's rows, and exact and elastic
    resume work as on one cache (`shuffle=False` keeps the mixture's even spread; `True`
    also shuffles each epoch's positions). `m[i]` and `m[a:b]` (a list of rows) for
    0 <= i < len, and iteration, read epoch 0; so do Grain's samplers, whose record keys
    stay below `len`. A sampler state records each source's rows, weight and the mixture's
    seed, epoch size and columns; a state of a changed mixture is refused naming what changed.

    Example:
        >>> mix = Mixture({"/tmp/web": 0.7, "/tmp/books": 0.3}, epoch_size=1000)  # doctest: +SKIP
        >>> mix.rows_per_epoch  # doctest: +SKIP
        {'/tmp/web': 700, '/tmp/books': 300}
        >>> batch = mix.__getitems__([0, 1, 1000])  # epoch 0's rows 0 and 1, epoch 1's row 0  # doctest: +SKIP
        >>> sampler = ShardedSampler(mix, shuffle=False, rank=rank, world_size=world_size)  # doctest: +SKIP

    Args:
      sources: {source: weight}; a source is a path (its latest version is read) or a
        `ShardedDataset` (any version, view, image_mode, or transform that returns dicts).
      epoch_size: rows an epoch holds; by default the sum of the sources' lengths.
      seed: the seed, 0 <= seed < 2^63; the same (seed, epoch) gives the same rows.
      columns: the columns to read, which every source must hold with equal features; by
        default the first source's.
      source_column: the name of the column naming each row's source.

    Raises:
      ValueError: no sources, a weight not a positive finite number, an epoch_size below 1
        or a seed out of range, a source without rows, two sources of one path, or a
        source_column among the columns.
      TypeError: a source that is neither a path nor a `ShardedDataset`, an epoch_size or
        seed not an int.
      KeyError: a source without one of the columns.
      SchemaMismatchError: sources whose features for a column differ (both are named).
    """

    epoch_indexed = True  # ShardedSampler reads epoch e's rows at e * len + i

    def __init__(self, sources: Mapping[str | ShardedDataset, float], *, epoch_size: int | None = None, seed: int = 0,
                 columns: Sequence[str] | None = None, source_column: str = "source"):
        if not isinstance(sources, Mapping) or not sources:
            raise ValueError(f"a Mixture needs at least one source in a {{source: weight}} mapping; got {sources!r}")
        datasets = [_opened(source, columns) for source in sources]
        self._names = [_name(source, dataset) for source, dataset in zip(sources, datasets)]
        repeated = sorted({name for name in self._names if self._names.count(name) > 1})
        if repeated:
            raise ValueError(f"two sources of the mixture read one cache, {repeated}: its rows would not say which "
                             "source they came from; mix views of one cache through one source instead")
        self._weights = [_weight(weight, name) for weight, name in zip(sources.values(), self._names)]
        self._columns = list(columns) if columns is not None else datasets[0].columns
        self._features = _shared_features(datasets, self._names, self._columns)
        if source_column in self._columns:
            raise ValueError(f"the source column {source_column!r} is one of the columns {self._columns}; "
                             "give another name with source_column=")
        self._source_column = source_column
        self._sources = [dataset.select_columns(self._columns) for dataset in datasets]
        self._alike = all(source._reads_like(self._sources[0]) for source in self._sources)
        self._lengths = [len(dataset) for dataset in self._sources]
        for name, length in zip(self._names, self._lengths):
            if length == 0:
                raise ValueError(f"source {name!r} has no rows")
        self._epoch_size = _count(sum(self._lengths) if epoch_size is None else epoch_size, "epoch_size", 1, _LIMIT)
        self._seed = _count(seed, "seed", 0, _MAX_SEED)
        self._counts_list = apportion(self._weights, self._epoch_size)
        self._slots = EpochSlots(self._counts_list)
        self._stream_table = stream_table(self._counts_list, self._lengths)
        # Every source repeated, and the slots periodic: a source's k-th row of epoch e is its stream's
        # position e * count + k, the occurrence the slots give index e * epoch_size + p itself.
        self._continuous = self._slots.periodic and all(c > n for c, n in zip(self._counts_list, self._lengths))
        # sources read a few passes an epoch keep tables of those read at random (dropped by a copy)
        self._streams = tabled(SourceStreams(self._lengths, self._seed), self._lengths, self._counts_list)
        # (block, sources, rows, the same as lists) of the block planned last; one attribute, so a
        # thread reading it while another plans a block sees one block's plan whole.
        self._block: _BlockPlan = _NO_BLOCK
        self._touched = -1  # the block of the last read
        self._last, self._step = -1, 0  # the last ds[i]'s index; the last step between two outside a planned block

    def __getstate__(self) -> dict[str, Any]:
        """What a copy (a DataLoader worker's) takes: everything but the planned block."""
        return {**self.__dict__, "_block": _NO_BLOCK, "_touched": -1, "_last": -1, "_step": 0}

    @property
    def rows_per_epoch(self) -> dict[str, int]:
        """How many rows of each source (by name) every epoch holds."""
        return dict(zip(self._names, self._counts_list))

    @property
    def features(self) -> Features:
        """The features of the columns read, and the source column (a string)."""
        return Features({**self._features, self._source_column: Value("string")})

    @property
    def identity(self) -> str:
        """What this mixture's rows are, as a checkpoint must match (`row_identity.mixture_name`)."""
        return mixture_name(self._seed, self._epoch_size, self._columns, self._source_column,
                            [(name, weight, count, source.identity) for name, weight, count, source
                             in zip(self._names, self._weights, self._counts_list, self._sources)])

    def __repr__(self) -> str:
        sources = ", ".join(f"{source!r}: {weight!r}" for source, weight in zip(self._sources, self._weights))
        return (f"Mixture({{{sources}}}, epoch_size={self._epoch_size}, seed={self._seed}, "
                f"source_column={self._source_column!r})")

    def __len__(self) -> int:
        return self._epoch_size

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Any:
        if type(index) is int and 0 <= index < _LIMIT:  # the common case, checked as it is
            return self._row(index)
        if isinstance(index, slice):
            return self.__getitems__(np.arange(self._epoch_size)[check_slice(index)])
        if isinstance(index, (int, np.integer)):
            return self._row(check_index(index, self._epoch_size, "mixture", limit=_LIMIT))
        return self.__getitems__(index)

    def _row(self, index: int) -> dict[str, Any]:
        """The row at `index` (0 <= index < 2^62)."""
        block, _, _, sources, rows = self._block
        if index >> _BLOCK_BITS == block:
            source, row = sources[index & _BLOCK_MASK], rows[index & _BLOCK_MASK]
            self._last = index  # so that reads in order on past the block's end plan the next one at once
        elif self._steady(index) and self._planned_block(index >> _BLOCK_BITS) is not None:
            return self._row(index)
        elif self._continuous:
            source, position = self._slots.one(index)
            row = self._streams.row(position, source)
        else:
            epoch, position = divmod(index, self._epoch_size)
            source, occurrence = self._slots.one(position)
            position = stream_position(epoch, occurrence, self._counts_list[source], self._lengths[source])
            row = self._streams.row(position, source)
        found = self._sources[source]._read_position(row)
        if not isinstance(found, dict):
            raise self._refused(found, source)
        found[self._source_column] = self._names[source]
        return found

    def _steady(self, index: int) -> bool:
        """Whether `index` is as far past the last ds[i]'s as that was past its own, at most `_STRIDE` (reads in order)."""
        step = index - self._last
        steady = step == self._step and 0 < step <= _STRIDE
        self._last, self._step = index, step
        return steady

    def _planned_block(self, block: int) -> _BlockPlan | None:
        """Plans `block` whole if the last read was in it too (reads in order), and gives its plan; None if not."""
        if block != self._touched:
            self._touched = block
            return None
        sources, rows = self._plan(np.arange(block << _BLOCK_BITS, (block + 1) << _BLOCK_BITS, dtype=np.int64))
        self._block = planned = (block, sources, rows, sources.tolist(), rows.tolist())
        return planned

    def _block_of(self, indices: np.ndarray) -> _BlockPlan | None:
        """The plan of the block all of `indices` (not empty) lie in, if it is planned or is now (`_planned_block`)."""
        block = int(indices[0]) >> _BLOCK_BITS
        if int(indices[-1]) >> _BLOCK_BITS != block:  # random indices: settled without a pass over them
            return None
        if int(indices.max()) >> _BLOCK_BITS != block or int(indices.min()) >> _BLOCK_BITS != block:
            return None
        planned = self._block  # one read: another thread may plan another block meanwhile
        return planned if planned[0] == block else self._planned_block(block)

    def _plan(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The source of each of `indices` (in range), and the row of that source it reads."""
        if self._continuous:
            sources, stream = self._slots.many(indices)
        else:
            epochs, positions = np.divmod(indices, self._epoch_size)
            sources, occurrences = self._slots.many(positions)
            stream = stream_positions(epochs, occurrences, sources, self._stream_table)
        return sources, self._streams.rows(stream, sources)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """The rows at `indices` (torch's batched fetch).

        Sources that give their rows alike (`ShardedDataset._reads_like`) are read in one pass,
        whose rows are built, made writable and named at once, as one cache's read builds its
        rows; others each in one fetch of their own. The rows the plan computed (in range by
        construction) are read without their indices checked again.
        """
        indices = check_indices(indices, self._epoch_size, "mixture", limit=_LIMIT)
        planned = self._block_of(indices) if len(indices) else None
        if planned is not None:
            _, planned_sources, planned_rows, _, _ = planned
            within = indices & _BLOCK_MASK
            sources, rows = planned_sources.take(within), planned_rows.take(within)
        else:
            sources, rows = self._plan(indices)
        if len(self._sources) == 1:
            return self._named(self._sources[0]._read_positions(rows), 0)
        if self._alike:  # one read across the sources, its rows built at once and named in one pass
            together = read_together(self._sources, sources, rows)
            column = self._source_column
            for row, name in zip(together, map(self._names.__getitem__, sources.tolist())):
                row[column] = name
            return together
        order = sources.argsort(kind="stable")  # each source's indices together, in their order
        rows = rows.take(order)
        ends = np.bincount(sources, minlength=len(self._sources)).cumsum().tolist()
        read: list[Any] = []
        for source, (start, end) in enumerate(zip([0, *ends], ends)):
            if start < end:
                read += self._named(self._sources[source]._read_positions(rows[start:end]), source)
        places = np.empty_like(order)
        places[order] = np.arange(len(order))  # where each index's row is in `read`
        return [read[place] for place in places.tolist()]

    def _named(self, rows: list[Any], source: int) -> list[Any]:
        """`rows` of source `source`, each with its name in the source column."""
        if rows and not isinstance(rows[0], dict):
            raise self._refused(rows[0], source)
        name, column = self._names[source], self._source_column
        for row in rows:
            row[column] = name
        return rows

    def _refused(self, row: Any, source: int) -> TypeError:
        return TypeError(f"source {self._names[source]!r} gives rows of type {type(row).__name__}; "
                         "a mixture's sources give dicts (a transform must return one)")

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        """The rows at `indices` (Grain's batched fetch)."""
        return self.__getitems__(indices)

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, self._epoch_size, _CHUNK):
            yield from self.__getitems__(np.arange(start, min(start + _CHUNK, self._epoch_size)))


def _opened(source: Any, columns: Sequence[str] | None) -> ShardedDataset:
    if isinstance(source, ShardedDataset):
        return source
    if isinstance(source, str):
        return ShardedDataset(source, columns=columns)
    raise TypeError(f"a mixture's source is a cache path or a ShardedDataset; got {type(source).__name__}")


def _name(source: str | ShardedDataset, dataset: ShardedDataset) -> str:
    return source if isinstance(source, str) else dataset.backend.manifest.path


def _weight(weight: Any, name: str) -> float:
    if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating)) \
            or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"the weight of source {name!r} must be a positive finite number; got {weight!r}")
    return float(weight)


def _count(value: Any, what: str, low: int, high: int) -> int:
    if not is_int(value):
        raise TypeError(f"{what} must be an int; got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low}..{high}; got {value}")
    return int(value)


def _shared_features(datasets: list[ShardedDataset], names: list[str], columns: list[str]) -> dict[str, Any]:
    """The features of `columns`, which every source holds with equal features."""
    for dataset, name in zip(datasets, names):
        missing = [column for column in columns if column not in dataset.columns]
        if missing:
            raise KeyError(f"source {name!r} lacks the column(s) {missing} of the mixture; it holds {dataset.columns}")
    first = datasets[0].features
    for dataset, name in zip(datasets[1:], names[1:]):
        for column in columns:
            if dataset.features[column] != first[column]:
                raise SchemaMismatchError(f"column {column!r} is {first[column]!r} in source {names[0]!r} but "
                                          f"{dataset.features[column]!r} in source {name!r}; a mixture's sources "
                                          "share the features of its columns")
    return {column: first[column] for column in columns}
