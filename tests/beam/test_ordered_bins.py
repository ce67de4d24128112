"""The deterministic write's merge plan: record batches in order, no bin past the target, one under half at most."""

from __future__ import annotations

import random

import pytest

from beam_shards.beam.ordered_bins import plan_ordered_bins
from beam_shards.shards.merge import is_small
from beam_shards.shards.options import WriterOptions, WrittenShard

OVERHEAD = 300


def _chunk_shards(rng: random.Random, target: int, chunks: int) -> list[tuple[str, WrittenShard, tuple, tuple]]:
    """Shards as the chunk writer makes them: each chunk's closed before a batch would pass the target,
    its last one holding what is left (often small)."""
    items = []
    for rank in range(chunks):
        batches = [rng.randint(1, target // 4) for _ in range(rng.randint(1, 30))]
        shards, current = [], []
        for size in batches:
            if current and OVERHEAD + sum(current) + size > target:
                shards.append(current)
                current = []
            current.append(size)
        shards.append(current)
        for index, sizes in enumerate(shards):
            shard = WrittenShard(f"staged-{rank}-{index}", 10 * len(sizes), OVERHEAD + sum(sizes), "crc",
                                 tuple([10] * len(sizes)))
            items.append(("write", shard, (rank, index), tuple(sizes)))
    return items


def _batches(items, bins) -> tuple[list, list]:
    """Every batch the items hold, in order, and every batch the bins copy, in order, with each bin's bytes."""
    sizes = {shard.path: batch_sizes for _, shard, _, batch_sizes in items}
    expected = [(shard.path, i) for _, shard, _, batch_sizes in items for i in range(len(batch_sizes))]
    copied, totals = [], []
    for _, spans, _ in bins:
        total = OVERHEAD
        for span in spans:
            shard, first, end = (span, 0, len(span.batch_rows)) if isinstance(span, WrittenShard) else span
            copied.extend((shard.path, i) for i in range(first, end))
            total += sum(sizes[shard.path][first:end])
        totals.append(total)
    return expected, copied, totals


@pytest.mark.parametrize("seed", range(40))
def test_bins_keep_every_batch_in_order_within_the_target_and_one_small_at_most(seed):
    rng = random.Random(seed)
    target = rng.choice([10_000, 64_000, 1 << 20])
    items = _chunk_shards(rng, target, rng.randint(1, 12))
    shuffled = rng.sample(items, len(items))
    bins = plan_ordered_bins(shuffled, WriterOptions(shard_size_bytes=target), OVERHEAD)
    expected, copied, totals = _batches(items, bins)
    assert copied == expected, "every batch once, in order"
    assert max(totals) <= target, totals
    assert sum(is_small(total, target) for total in totals[:-1]) == 0, totals
    orders = [order for _, _, order in bins]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert bins == plan_ordered_bins(items, WriterOptions(shard_size_bytes=target), OVERHEAD), "order of arrival"


def test_full_shards_pass_through_whole_and_a_small_one_before_a_full_one_takes_part_of_it():
    target = 1000
    full = [("w", WrittenShard(f"s{i}", 4, 900, "c", (1, 1, 1, 1)), (i, 0), (150, 150, 150, 150)) for i in range(3)]
    assert [spans for _, spans, _ in plan_ordered_bins(full, WriterOptions(shard_size_bytes=target), 300)] == [
        [item[1]] for item in full]

    small = ("w", WrittenShard("tail", 1, 450, "c", (1,)), (0, 1), (150,))
    first, *rest = full
    bins = plan_ordered_bins([first, small, *[(w, s, (o[0] + 1, 0), b) for w, s, o, b in rest]],
                             WriterOptions(shard_size_bytes=target), 300)
    assert [(spans, order) for _, spans, order in bins] == [
        ([first[1]], (0, 0)), ([small[1], (rest[0][1], 0, 1)], (0, 1)), ([(rest[0][1], 1, 4)], (2, 0, 1)),
        ([rest[1][1]], (3, 0))]

