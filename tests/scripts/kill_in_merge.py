"""Runs the sink on FnApiRunner and SIGKILLs itself inside the merge step, after N copied batches.

    python kill_in_merge.py PATH N

Bundles stage 5 KB shards (as many small bundles would) with a 50 KB target, so the
merge step has bins to merge. Used by tests/shards/test_merge.py.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [TESTS_DIR, os.path.join(TESTS_DIR, "shards")]  # the helpers, and test_merge

from beam_shards.beam import staging  # noqa: E402
from beam_shards.shards.writer import ShardWriter  # noqa: E402

import test_merge  # noqa: E402


def main(path: str, kill_after: int) -> None:
    real = staging.ShardWriter
    staging.ShardWriter = lambda features, open_shard, options, *rest: real(
        features, open_shard, dataclasses.replace(options, shard_size_bytes=5_000), *rest)
    original = ShardWriter.write_batch
    copied = []

    def write_batch(self, batch):
        original(self, batch)
        copied.append(1)
        if len(copied) == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    ShardWriter.write_batch = write_batch
    test_merge._write(path, 6_000, parts=30, shard_size_bytes=50_000)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
