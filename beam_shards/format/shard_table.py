"""The shard table of a version (format 3): which shards it lists, read lazily from Arrow IPC files
that versions share (pure logic: files are read through a loader the caller gives).

A version lists its shards as a few table files, oldest first, named in its header by
`TableRef`s; what a table file holds, and how one is built, is `table_files`'. An append
writes a table of its new shards only, and `plan_tables` merges small tail tables the
way a binary counter carries, so a version has O(log shards) tables and an entry is
rewritten O(log shards) times over a cache's life.

`ShardTable` is the sequence of `ShardInfo` a `Manifest` holds. Tables load on first
use (memory-mapped where they are local) and an entry is checked when it is touched,
so opening a version costs the same at 10 shards as at 10 million; it pickles as its
refs alone.

A shard listed twice would serve its rows twice. Finding one takes a look at every name, about
a microsecond each however it is vectorized (measured: 0.35 us hashed with numpy, 1.3 us with
Arrow's hash), so seconds at 10 million shards against milliseconds for an open: an open does not
look. Instead each entry, on its first touch, goes into a reverse index (file name -> shard) of
the entries this table touched (about 170 bytes each), and a name already there under another
shard is refused: whatever one process reads, it never serves a shard's rows twice. Readers of a
whole version spread over processes (a pipeline's source) call `check_distinct` once, which looks
at every name.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.errors import CorruptCacheError
from beam_shards.features.columns import numpy_values
from beam_shards.format.counts import is_count
from beam_shards.format.layout import TABLES_DIR, table_name, write_id_of_shard, write_id_of_table
from beam_shards.format.table_files import (LEGACY_TABLE_SCHEMA, SPAN_COLUMNS, TABLE_SCHEMA, BatchSpan, ShardInfo,
                                            build_table, concat_tables, has_spans, spans_fit)
from beam_shards.storage.checksum import CHECKSUM_PATTERN

# A table of up to this many shards keeps its row starts as a Python list too: bisect on a list
# routes one row ~20x faster than numpy.
_LIST_ROUTING_SHARDS = 1 << 16


@dataclasses.dataclass(frozen=True)
class TableRef:
    """A table file as a version's header names it: its shards, rows and shard bytes, and the file's
    own size and checksum."""

    file: str
    num_shards: int
    num_rows: int
    num_bytes: int
    size: int
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> TableRef:
        """Checks a table entry of a header; raises CorruptCacheError naming `where`."""
        fields = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(data, dict) or sorted(data) != sorted(fields):
            raise CorruptCacheError(f"{where}: a table entry must have exactly the fields {', '.join(fields)}")
        if not isinstance(data["file"], str) or write_id_of_table(data["file"]) is None:
            raise CorruptCacheError(f"{where}: invalid table file name {str(data['file'])[:80]!r}")
        if not all(is_count(data[f]) for f in fields[1:5]) \
                or not isinstance(data["checksum"], str) or not CHECKSUM_PATTERN.fullmatch(data["checksum"]) \
                or data["num_shards"] == 0 and (data["num_rows"] or data["num_bytes"]):
            raise CorruptCacheError(f"{where}: table {data['file']} has invalid counts, size or checksum")
        return cls(**data)


class _Segment:
    """One loaded table: its Arrow columns, and numpy views of row starts and rows."""

    __slots__ = ("table", "starts", "rows", "starts_list", "checked", "spans")

    def __init__(self, table: pa.Table):
        self.table = table
        self.spans = has_spans(table)
        self.starts = _numpy(table.column("row_start"))
        self.rows = _numpy(table.column("num_rows"))
        self.starts_list = self.starts.tolist() if len(self.starts) <= _LIST_ROUTING_SHARDS else None
        self.checked = np.zeros(len(self.rows), dtype=bool)  # a byte a shard, whatever is touched

    def locate(self, local_row: int) -> int:
        if self.starts_list is not None:
            return bisect.bisect_right(self.starts_list, local_row) - 1
        return int(np.searchsorted(self.starts, local_row, side="right")) - 1


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    return numpy_values(column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())


class ShardTable(Sequence[ShardInfo]):
    """The shards of one version, in row order: a sequence of `ShardInfo` read lazily from its tables.

    Example:
        >>> table = ShardTable.of([ShardInfo("shard-20260101T000000Z-0000000a-00000-of-00001.arrow",
        ...                                  5, 100, "crc32:00000000")])
        >>> len(table), table.num_rows, table.locate(3)
        (1, 5, (0, 0))

    Args:
      refs: the table files, in order, as the header names them.
      where: how errors name the version (its header file).
      load: reads one table file (its ref given) as an Arrow table; None for a table built
        in memory (`ShardTable.of`).

    Raises:
      CorruptCacheError (from any access): a table file is missing, damaged, or does
        not match its ref; an entry touched is invalid. The message names the file.
    """

    def __init__(self, refs: Sequence[TableRef], where: str, load: Callable[[TableRef], pa.Table] | None,
                 loaded: Sequence[pa.Table] | None = None):
        self.refs = tuple(refs)
        self.where = where
        self._load = load
        self._first_shards = np.cumsum([0] + [r.num_shards for r in self.refs]).tolist()
        self._first_rows = np.cumsum([0] + [r.num_rows for r in self.refs]).tolist()
        self._segments: list[_Segment | None] = [None] * len(self.refs)
        self._owners: dict[str, int] = {}  # the shard each touched entry's file name is listed as
        self._lock = threading.Lock()
        for k, table in enumerate(loaded or ()):
            self._segments[k] = self._check(k, table)

    @classmethod
    def of(cls, shards: Sequence[ShardInfo], batch_rows: Sequence[Sequence[int] | None] | None = None,
           where: str = "the shard list") -> ShardTable:
        """A table held in memory, of `shards` (format 1 and 2 manifests, a write being published)."""
        table = build_table(shards, batch_rows if batch_rows is not None else [None] * len(shards))
        ref = TableRef(table_name("00000000T000000Z-00000000", "0" * 16), len(shards),
                       sum(s.num_rows for s in shards), sum(s.num_bytes for s in shards), 0, "crc32:00000000")
        return cls([ref], where, None, [table])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        if self._load is not None:  # tables read and entries checked again in the new process; built ones travel
            state["_segments"] = [None] * len(self.refs)
            state["_owners"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardTable({self.where}, num_shards={len(self)}, num_rows={self.num_rows}, tables={len(self.refs)})"

    def __len__(self) -> int:
        return self._first_shards[-1]

    @property
    def num_rows(self) -> int:
        return self._first_rows[-1]

    @property
    def num_bytes(self) -> int:
        return sum(r.num_bytes for r in self.refs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ShardTable, tuple, list)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if not -len(self) <= index < len(self):
            raise IndexError(f"shard {index} out of range for {len(self)} shards")
        index %= len(self)
        k = bisect.bisect_right(self._first_shards, index) - 1
        segment, local = self._segment(k), index - self._first_shards[k]
        return self._entry(k, segment, local)

    def __iter__(self) -> Iterator[ShardInfo]:
        for k in range(len(self.refs)):
            segment = self._segment(k)
            # Each column made Python values once, not an Arrow scalar per value.
            files, rows, sizes, checksums, batch_rows = (segment.table.column(i).to_pylist() for i in (0, 1, 2, 3, 5))
            spans = [segment.table.column(i).to_pylist() for i in SPAN_COLUMNS] if segment.spans else None
            for local, values in enumerate(zip(files, rows, sizes, checksums)):
                yield self._checked(k, segment, local, ShardInfo(*values), batch_rows[local],
                                    spans and [column[local] for column in spans])

    def names(self) -> list[str]:
        """Every shard's file name (not checked), loading every table."""
        return [name for k in range(len(self.refs)) for name in self._segment(k).table.column("file").to_pylist()]

    def check_distinct(self) -> None:
        """Checks that no shard is listed twice, looking at every name at once (loads every table): for a
        reader of the whole version whose shards are touched in many processes.

        Raises:
          CorruptCacheError: a shard is listed twice (the message names it and both places).
        """
        names = pa.chunked_array([self._segment(k).table.column("file").combine_chunks()
                                  for k in range(len(self.refs))], pa.string())
        if pc.count_distinct(names).as_py() == len(names):
            return
        counts = pc.value_counts(names)
        name = counts.field("values").filter(pc.greater(counts.field("counts"), 1))[0].as_py()
        first, second = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))[:2].tolist()
        raise CorruptCacheError(self._listed_twice(name, first, second))

    def arrow(self) -> pa.Table:
        """Every entry, as one Arrow table (loads every table)."""
        return concat_tables([self._segment(k).table for k in range(len(self.refs))])

    def batch_rows(self, index: int) -> list[int] | None:
        """The rows of each record batch of shard `index` (in range), None when the table does not say."""
        k = bisect.bisect_right(self._first_shards, index) - 1
        rows = self._segment(k).table.column("batch_rows")[index - self._first_shards[k]].as_py()
        return rows

    def batch_spans(self, index: int) -> list[BatchSpan] | None:
        """Where each record batch of shard `index` (in range) lies in its file, its CRC-32 and rows
        (format 5); None when the table does not say (older formats). Checked with the entry when
        it was first touched."""
        k = bisect.bisect_right(self._first_shards, index) - 1
        segment, local = self._segment(k), index - self._first_shards[k]
        if not segment.spans:
            return None
        self._entry(k, segment, local)
        parts = [segment.table.column(i)[local].as_py() for i in (*SPAN_COLUMNS, 5)]
        return None if parts[0] is None else [BatchSpan(*span) for span in zip(*parts)]

    def spans_of(self, index: int) -> tuple[tuple[int, int, int], ...] | None:
        """`batch_spans` of shard `index` as a writer records them, `(offset, length, crc32)` each."""
        spans = self.batch_spans(index)
        return None if spans is None else tuple(span[:3] for span in spans)

    def locate(self, row: int) -> tuple[int, int]:
        """(the shard holding `row`, in range, and that shard's first row)."""
        k = bisect.bisect_right(self._first_rows, row) - 1
        segment = self._segment(k)
        local = segment.locate(row - self._first_rows[k])
        starts = segment.starts_list  # a list's item is a Python int already: no numpy scalar to convert
        return self._first_shards[k] + local, self._first_rows[k] + (int(segment.starts[local]) if starts is None
                                                                        else starts[local])

    def shard_ids(self, rows: np.ndarray) -> np.ndarray:
        """The shard holding each of `rows` (int64, in range)."""
        if len(self.refs) == 1:  # most versions: one table, whose row starts are the version's
            return self._segment(0).starts.searchsorted(rows, side="right") - 1
        ks = np.searchsorted(self._first_rows, rows, side="right") - 1
        ids = np.empty(len(rows), dtype=np.int64)
        for k in np.unique(ks).tolist():
            mask = ks == k
            segment = self._segment(k)
            ids[mask] = np.searchsorted(segment.starts, rows[mask] - self._first_rows[k], side="right") - 1 \
                + self._first_shards[k]
        return ids

    def start(self, index: int) -> int:
        """The first row of shard `index` (in range) in the whole version."""
        k = bisect.bisect_right(self._first_shards, index) - 1
        return self._first_rows[k] + int(self._segment(k).starts[index - self._first_shards[k]])

    def row_starts(self) -> np.ndarray:
        """The first row of every shard, then the total (loads every table)."""
        parts = [self._segment(k).starts + self._first_rows[k] for k in range(len(self.refs))]
        return np.concatenate(parts + [np.array([self.num_rows], dtype=np.int64)]).astype(np.int64)

    def _segment(self, k: int) -> _Segment:
        segment = self._segments[k]
        if segment is None:
            with self._lock:
                segment = self._segments[k]
                if segment is None:
                    segment = self._segments[k] = self._check(k, self._load(self.refs[k]))
        return segment

    def _check(self, k: int, table: pa.Table) -> _Segment:
        ref = self.refs[k]
        where = f"shard table {TABLES_DIR}/{ref.file} of {self.where}"
        if not (table.schema.equals(TABLE_SCHEMA) or table.schema.equals(LEGACY_TABLE_SCHEMA)):
            raise CorruptCacheError(f"{where} has schema {table.schema.to_string()!r}, not a shard table's")
        if table.num_rows != ref.num_shards:
            raise CorruptCacheError(f"{where} lists {table.num_rows} shards, the header says {ref.num_shards}")
        if any(table.column(name).null_count for name in TABLE_SCHEMA.names[:5]):
            raise CorruptCacheError(f"{where} has nulls where a shard entry needs a value")
        segment = _Segment(table)
        total = int(segment.starts[-1]) + int(segment.rows[-1]) if len(segment.rows) else 0  # no int64 overflow
        if len(segment.rows) and segment.starts[0] != 0 or total != ref.num_rows:
            raise CorruptCacheError(f"{where}: its row starts do not add up to the {ref.num_rows} rows the header says")
        return segment

    def _entry(self, k: int, segment: _Segment, local: int) -> ShardInfo:
        columns = segment.table.columns
        info = ShardInfo(*(columns[i][local].as_py() for i in range(4)))
        if segment.checked[local]:
            return info
        spans = [columns[i][local].as_py() for i in SPAN_COLUMNS] if segment.spans else None
        return self._checked(k, segment, local, info, columns[5][local].as_py(), spans)

    def _checked(self, k: int, segment: _Segment, local: int, info: ShardInfo,
                 batch_rows: list[int | None] | None, spans: list[list[int | None] | None] | None = None) -> ShardInfo:
        """`info`, entry `local` of table `k`, checked on its first touch (with its `batch_rows`, and
        its span columns' values where the table has them)."""
        if not segment.checked[local]:
            start = int(segment.starts[local])  # Python ints: a hostile table's starts must not overflow
            end = int(segment.starts[local + 1]) if local + 1 < len(segment.starts) else self.refs[k].num_rows
            where = f"shard table {TABLES_DIR}/{self.refs[k].file} of {self.where}"
            if write_id_of_shard(info.file) is None:
                raise CorruptCacheError(f"{where}: entry {local} has an invalid file name {info.file[:80]!r}")
            if not (is_count(info.num_rows) and is_count(info.num_bytes)) \
                    or not CHECKSUM_PATTERN.fullmatch(info.checksum) or end - start != info.num_rows:
                raise CorruptCacheError(f"{where}: entry {local} ({info.file}) has invalid rows, bytes or checksum")
            if batch_rows is not None and (None in batch_rows or sum(batch_rows) != info.num_rows
                                           or min(batch_rows, default=1) < 0):
                raise CorruptCacheError(f"{where}: entry {local} ({info.file}) has batch rows that do not add up")
            if spans is not None and spans != [None] * 3 and not spans_fit(spans, batch_rows, info.num_bytes):
                raise CorruptCacheError(f"{where}: entry {local} ({info.file}) has batch offsets, lengths or CRCs "
                                        f"that do not fit its {info.num_bytes} bytes and batch rows")
            index = self._first_shards[k] + local
            owner = self._owners.setdefault(info.file, index)
            if owner != index:
                raise CorruptCacheError(self._listed_twice(info.file, *sorted((owner, index))))
            segment.checked[local] = True
        return info

    def _listed_twice(self, name: str, first: int, second: int) -> str:
        shown = name if write_id_of_shard(name) is not None else repr(name[:80])  # no control character printed
        return (f"{self.where} lists shard {shown} twice, as shards {first} and {second} of {len(self)}; a shard "
                f"listed twice would serve its rows twice")
