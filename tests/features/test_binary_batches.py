"""A binary column of a MiB or more is built from one join of its values: the same array pyarrow's builder makes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from beam_shards import Value
from beam_shards.features.value import _JOIN_BYTES

BIG = bytes(range(256)) * (_JOIN_BYTES // 256)


@pytest.mark.parametrize("values", [
    [BIG, b"", b"after"],
    [None, BIG, None, b"x", None, None, None, None, None, b"tenth"],  # nulls past the first byte of the bitmap
    [BIG[:_JOIN_BYTES // 2], BIG[_JOIN_BYTES // 2:]],  # exactly the threshold
], ids=["no nulls", "nulls", "at the threshold"])
def test_a_large_binary_batch_is_the_array_pyarrow_builds(values):
    built = Value("binary", nullable=True).build_array(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, type=pa.large_binary())) and built.null_count == values.count(None)


def test_a_batch_not_all_bytes_is_built_by_pyarrow_as_before():
    values = [BIG, bytearray(b"a bytearray"), memoryview(b"a view")]
    assert Value("binary").build_array(values).equals(pa.array(values, type=pa.large_binary()))
