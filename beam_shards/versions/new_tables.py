"""The shard tables of a new version, written to `_tables/` under their content's name (so a file
there never changes): a write's own shards, an append's (the base version's tables, the small ones
at their end merged with the new shards' where `shard_table.plan_tables` says), and a rewrite's
that keeps some of its parent's shards (`compact`). Tables of a version in format 5 give each
shard's batch spans; those of an older format (an append in "large" column types) are written
in the older schema, which the releases that wrote their base read.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.format.layout import CacheLayout
from beam_shards.format.manifest import Manifest
from beam_shards.format.manifest import SPANS_FORMAT_VERSION
from beam_shards.format.shard_table import TableRef
from beam_shards.format.table_files import ShardInfo, Spans, build_table, concat_tables, plan_tables, table_file
from beam_shards.format.version_files import read_table
from beam_shards.storage import fs
from beam_shards.storage.checksum import checksum_of


def write_table(layout: CacheLayout, write_id: str, table: pa.Table) -> TableRef:
    """Writes `table` to `_tables/` under its content's name (kept if there already); returns its ref."""
    name, data = table_file(table, write_id)
    target = layout.table(name)
    fs.create_if_absent(target, data, layout.temporary(target, write_id))
    rows, sizes = (pc.sum(table.column(column)).as_py() or 0 for column in ("num_rows", "num_bytes"))
    return TableRef(name, table.num_rows, rows, sizes, len(data), checksum_of(data))


def append_tables(layout: CacheLayout, write_id: str, base: Manifest, own: pa.Table) -> list[TableRef]:
    """The tables of an append: the base version's, then the new shards' `own`, written with the
    small tables at the end merged into it where `plan_tables` says (a base of format 1 or 2 is
    written as one table first)."""
    if not base.has_tables:
        refs = [write_table(layout, write_id, base.shards.arrow())] if len(base.shards) else []
    else:
        refs = list(base.shards.refs)
    keep = len(refs) + 1 - plan_tables([r.num_shards for r in refs] + [own.num_rows])
    tables = [read_table(layout.path, ref) for ref in refs[keep:]] + [own]
    return refs[:keep] + [write_table(layout, write_id, concat_tables(tables) if len(tables) > 1 else own)]


# A shard a write adds: its entry, the rows of its batches and where they lie (None: not known).
Added = tuple[ShardInfo, tuple[int, ...] | None, Spans]


def added_table(added: list[Added], format_version: int) -> pa.Table:
    """The table of the `added` shards, for a version in `format_version`."""
    return _table(added, format_version)


def table_with_kept(parent: Manifest, added: list[Added], kept: dict[int, int], format_version: int) -> pa.Table:
    """The table of a rewrite of `parent` (compact) in `format_version`: its shards at `kept` positions,
    the added ones between."""
    new, entries = iter(added), []
    for position in range(len(added) + len(kept)):
        if position in kept:
            index = kept[position]
            entries.append((parent.shards[index], parent.shards.batch_rows(index), parent.shards.spans_of(index)))
        else:
            entries.append(next(new))
    return _table(entries, format_version)


def _table(entries: list[Added], format_version: int) -> pa.Table:
    spans = [entry[2] for entry in entries] if format_version >= SPANS_FORMAT_VERSION else None
    return build_table([entry[0] for entry in entries], [entry[1] for entry in entries], spans)
