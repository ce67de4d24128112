"""`are_counts` says of a list what `is_count` says of each item, which a manifest's class counts rely on."""

import pytest

from beam_shards.format.counts import MAX_COUNT, are_counts, is_count


@pytest.mark.parametrize("values", [[], [0], [0, 5, MAX_COUNT - 1], [True], [1, True], [-1], [1.0], [MAX_COUNT],
                                    [None], [3, "3"], [2, -2**70], [1 << 80]])
def test_a_list_is_counts_exactly_when_each_item_is_one(values):
    assert are_counts(values) == all(map(is_count, values))
