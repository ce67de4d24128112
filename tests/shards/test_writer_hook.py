"""A `ShardWriter`'s `BatchHook`: it may leave rows out of each batch before it is written (a batch left empty
opens no shard), and learns where each batch went; `merge_shards(..., drop=...)` copies a shard without given rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import Features, Value
from beam_shards.format.layout import new_write_id
from beam_shards.shards import ShardFile
from beam_shards.shards.merge import merge_shards
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter
from beam_shards.versions.staging import staged_shards

from _support import stage

pytestmark = pytest.mark.timeout(60)

FEATURES = Features({"id": Value("int64"), "text": Value("string")})


class OddIdsOut:
    """Leaves out the rows of odd ids, and notes where each batch written went."""

    def __init__(self):
        self.calls: list[tuple[str, int, list[int]]] = []

    def keep(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.filter(pa.array([i % 2 == 0 for i in batch.column("id").to_pylist()]))

    def written(self, path: str, first: int, batch: pa.RecordBatch) -> None:
        self.calls.append((path, first, batch.column("id").to_pylist()))


def _ids(shard) -> list[int]:
    file = ShardFile.staged(shard.path, shard.num_rows, shard.num_bytes, shard.checksum, FEATURES, None, "hf")
    return [i for batch in file.iter_batches() for i in batch.column("id").to_pylist()]


def test_the_hook_leaves_rows_out_and_learns_each_batch_s_shard_and_first_row(tmp_path):
    hook = OddIdsOut()
    # Rows 1, 3 and 5 make batches of odd ids alone: left empty, they are not written.
    ids = [0, 2, 1, 3, 5, 4, 6, 8, 10, 12, 14]
    writer = ShardWriter(FEATURES, staged_shards(str(tmp_path)),
                         WriterOptions(batch_size=2, max_rows_per_shard=4), hook=hook)
    for i in ids:
        writer.add({"id": i, "text": str(i)}, i)
    shards = writer.close()
    assert [_ids(shard) for shard in shards] == [[0, 2, 4, 6], [8, 10, 12, 14]]
    assert all(shard.num_rows for shard in shards), "no empty shard"
    assert hook.calls == [
        (shards[0].path, 0, [0, 2]), (shards[0].path, 2, [4]), (shards[0].path, 3, [6]),
        (shards[1].path, 0, [8, 10]), (shards[1].path, 2, [12, 14])]


def test_merge_shards_drops_the_given_rows_across_batches_and_inputs(tmp_path):
    shards = stage(str(tmp_path), new_write_id(), [{"id": i, "text": str(i)} for i in range(45)], FEATURES)
    assert len(shards) >= 2 and max(len(shard.batch_rows) for shard in shards) >= 2, "several batches to cut across"
    first, second = shards[0], shards[1]
    drop_first = np.array([0, 9, 10, first.num_rows - 1])  # the ends of batches of 10, and the last row
    merged = merge_shards([first, second], FEATURES, staged_shards(str(tmp_path / "merged")), None, "hf",
                          drop=[drop_first, None])
    expected = [i for row, i in enumerate(_ids(first)) if row not in set(drop_first.tolist())] + _ids(second)
    assert _ids(merged) == expected and merged.num_rows == len(expected)
