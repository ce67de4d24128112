"""Guarantee 4: a writer holds about one batch and one open shard, whatever the input size."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import tracemalloc

import pyarrow as pa

from beam_shards import Features, Value, write_shards

FEATURES = Features({"id": Value("int64"), "blob": Value("binary")})
BLOB = 20_000
BATCH_BYTES = 256 << 10
# What the shard streams may queue while the disk is slow (a busy machine), in either run: half a
# batch, plus the one piece written past that bound (`PendingBytes`), at most a batch's data buffer.
QUEUED = BATCH_BYTES // 2 + BATCH_BYTES


def _peak_held_bytes(tmp_path, num_examples: int) -> int:
    """The most memory (Python objects plus Arrow buffers) alive while the write ran."""
    peak = 0

    def examples():
        nonlocal peak
        for i in range(num_examples):
            current, _ = tracemalloc.get_traced_memory()
            peak = max(peak, current + pa.total_allocated_bytes())
            yield {"id": i, "blob": bytes([i % 256]) * BLOB}

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes()
        manifest = write_shards(examples(), str(tmp_path / f"cache{num_examples}"), FEATURES,
                                shard_size_bytes=2 << 20, batch_bytes=BATCH_BYTES)
    finally:
        tracemalloc.stop()
    assert manifest.num_rows == num_examples and manifest.num_shards > 1
    return peak - base


def _in_a_fresh_process(tmp_path, num_examples: int) -> int:
    # tracemalloc and Arrow's allocation count are the whole process's: measured where no
    # thread or leftover of another test can allocate meanwhile.
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_warm_then_peak_held_bytes, tmp_path, num_examples).result(timeout=120)


def _warm_then_peak_held_bytes(tmp_path, num_examples: int) -> int:
    # A first write imports and caches what every write uses: not memory the write holds.
    write_shards([{"id": 0, "blob": b"x"}], str(tmp_path / f"warm{num_examples}"), FEATURES)
    return _peak_held_bytes(tmp_path, num_examples)


def test_memory_held_does_not_grow_with_the_input(tmp_path):
    small = _in_a_fresh_process(tmp_path, 500)     # 10 MB of input
    large = _in_a_fresh_process(tmp_path, 2_000)   # 40 MB of input
    # What the streams queue may differ between the runs, whatever the input size.
    assert large <= 1.2 * small + QUEUED, (small, large)
    # About one batch of rows, plus the Arrow batch built from it while it is written, plus what
    # the streams may queue.
    assert large <= 4 * BATCH_BYTES + QUEUED, large
