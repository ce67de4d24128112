"""The merge plan of a deterministic write: bins of record batches that keep key order and the shard sizes.

A deterministic write's chunks are written apart, so each chunk's last shard may be small,
and the next chunk's first shard full. Merging whole shards in order could then only leave
the small one (many small shards) or take in the full one (a shard past the target: three
rows of ~510 KB against 1 MiB). So the plan works on record batches: a small run of shards
takes in the next shard whole when it fits; when it does not, that shard is cut at a
record batch that leaves both sides over half the target (`_cut`), the run taking its
first batches and the rest starting the next bin. Each bin is at most the target (unless a single batch is
larger), and every bin but the last is over half of it whenever batches allow (they are
at most a quarter of the target, unless a single row is larger); a shard left whole
passes through uncopied.

Batch sizes come from the chunk writer (`batch_bytes`): each batch's message in its shard's
file and its footer entry, which is what a merged shard of those batches holds past
`file_overhead`, so a bin's planned size is the merged shard's size, and the plan depends
on the rows alone. (Shares of a shard's bytes by the rows' sizes in memory gave a batch of
small rows none of its ~300 bytes of message framing: bins of them passed the target.)
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

from beam_shards.beam.staging import Span
from beam_shards.shards.ipc_layout import FOOTER_BLOCK_BYTES
from beam_shards.shards.merge import is_small
from beam_shards.shards.options import WriterOptions, WrittenShard

Order = tuple[int, ...]


def batch_bytes(shard: WrittenShard) -> tuple[int, ...]:
    """Each record batch's bytes in `shard`: its message in the file and its 24-byte entry in the footer.

    Raises:
      ValueError: a shard the writer did not say where its batches lie (an input given to a merge).
    """
    if shard.batch_spans is None:
        raise ValueError(f"shard {shard.path} gives no record batch spans; only a shard a writer closed does")
    return tuple(length + FOOTER_BLOCK_BYTES for _, length, _ in shard.batch_spans)


def plan_ordered_bins(items: Iterable[tuple[str, WrittenShard, Order, Sequence[int]]], options: WriterOptions,
                      overhead: int) -> list[tuple[str, list[Span], Order]]:
    """Bins of the tagged shards `(write id, shard, order, batch bytes)` that keep their order:
    `(write id, spans, order of the first span)` (see the module doc)."""
    target = options.shard_size_bytes
    cap = options.max_rows_per_shard if options.max_rows_per_shard is not None else float("inf")
    bins: list[tuple[str, list[Span], Order]] = []
    current: list[tuple[str, WrittenShard, Order, int, int]] = []
    size = rows = 0
    for write_id, shard, order, sizes in sorted(items, key=operator.itemgetter(2)):
        counts = shard.batch_rows
        first, end = 0, len(counts)
        while True:
            span_size, span_rows = sum(sizes[first:end]), sum(counts[first:end])
            if not current or overhead + size + span_size <= target and rows + span_rows <= cap:
                current.append((write_id, shard, order, first, end))
                size, rows = size + span_size, rows + span_rows
                break
            cut = _cut(sizes, counts, first, end, size, rows, overhead, target, cap)
            if is_small(overhead + size, target) and cut is not None:
                current.append((write_id, shard, order, first, cut))
                first = cut
            bins.append(_bin(current))
            current, size, rows = [], 0, 0
    if current:
        bins.append(_bin(current))
    return bins


def _cut(sizes: Sequence[int], counts: Sequence[int], first: int, end: int, size: int, rows: int, overhead: int,
         target: int, cap: float) -> int | None:
    """The batch of `[first, end)` to cut at, for a small bin of `size` bytes and `rows` rows to take
    the batches before it (within the target and the cap): the first cut that leaves neither side
    under half the target, else the first that leaves the bin over half (the rest starts the next
    bin), else the last that fits; None if none fits."""
    fitting, before, before_rows, after = [], size, rows, sum(sizes[first:end])
    for cut in range(first + 1, end):
        before, before_rows, after = before + sizes[cut - 1], before_rows + counts[cut - 1], after - sizes[cut - 1]
        if overhead + before > target or before_rows > cap:
            break
        fitting.append((cut, is_small(overhead + before, target), is_small(overhead + after, target)))
    full = [cut for cut, small, _ in fitting if not small]
    even = [cut for cut, small, rest_small in fitting if not small and not rest_small]
    return next(iter(even or full or [cut for cut, _, _ in fitting[-1:]]), None)


def _bin(spans: list[tuple[str, WrittenShard, Order, int, int]]) -> tuple[str, list[Span], Order]:
    """A bin of `(write id, shard, order, first, end)` spans: a span that starts after its shard's first
    batch orders after the span of the batches before it, by its first batch."""
    listed: list[Any] = [shard if (start, end) == (0, len(shard.batch_rows)) else (shard, start, end)
                         for _, shard, _, start, end in spans]
    write_id, _, order, first, _ = spans[0]
    return write_id, listed, order + (first,) if first else order
