"""What a `ShardWriter`'s callers hand it besides rows: keyed items (`split_key`), and a `BatchHook`
told of each record batch it writes."""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa


class BatchHook(Protocol):
    """What a `ShardWriter` tells of each record batch it is about to write (in the shards' column
    types): `keep` returns the batch to write, which may leave rows out (a batch left empty is not
    written), and `written` learns where that went: its shard's path and the row of that shard it
    starts at."""

    def keep(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

    def written(self, path: str, first: int, batch: pa.RecordBatch) -> None: ...


def split_key(item: Any, position: Any) -> tuple[Any, Any]:
    """`(key, example)` for a `(key, example)` pair; `(position, item)` for anything else.

    Any 2-tuple is taken as a pair: a tuple is never an example itself, so when its
    second item is not a dict either, the error names the pair's key.
    """
    if isinstance(item, tuple) and len(item) == 2:
        return item
    return position, item
