"""Fixed-size lists of numbers are digested from their buffers: a null item differs from a zero, and a row's digest
is its own whatever else its batch holds or where the batch starts."""

from __future__ import annotations

import pyarrow as pa

from beam_shards.shards.row_digest import row_digests

KIND = pa.list_(pa.float32(), 3)


def _digests(values: list) -> list[bytes]:
    return row_digests(pa.table({"v": pa.array(values, KIND)}))


def test_a_null_item_a_zero_and_a_null_list_differ():
    rows = [[1.0, 0.0, 2.0], [1.0, None, 2.0], None, [0.0, 0.0, 0.0], [None, None, None]]
    assert len(set(_digests(rows))) == len(rows)


def test_a_row_s_digest_does_not_depend_on_nulls_elsewhere_in_its_batch_nor_on_its_offset():
    alone = _digests([[1.0, 2.0, 3.0]])[0]
    with_nulls = _digests([[None, 5.0, 6.0], None, [1.0, 2.0, 3.0]])
    assert with_nulls[2] == alone
    table = pa.table({"v": pa.array([[7.0, 8.0, 9.0], [None, 1.0, 1.0], [1.0, 2.0, 3.0]], KIND)})
    assert row_digests(table.slice(2)) == [alone]
    assert row_digests(table.slice(1)) == _digests([[None, 1.0, 1.0], [1.0, 2.0, 3.0]])
