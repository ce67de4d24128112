"""What merging small shards costs per GB, next to writing the same rows.

Stages `--mb` MB of rows (about 1 KB each: an int, a string, a 200-float embedding) the
way small bundles would, as `--staged_kb` KB shards, timing the `ShardWriter` (encode
and write); then plans bins for a `--target_mb` MB target (`merge.plan_bins`) and
times `merge.merge_shards` over every bin (record batches copied, nothing decoded).
Both on local disk, one process; medians of `--repeats`. Nothing is asserted.

    python benchmarks/bench_merge.py [--mb 256] [--staged_kb 512] [--target_mb 64] [--compression zstd]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time

import numpy as np

from beam_shards import Array, Features, Value
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.merge import file_overhead, merge_shards, plan_bins
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter
from beam_shards.versions.staging import staged_shards

FEATURES = Features({"id": Value("int64"), "text": Value("string"), "embedding": Array((200,), "float32")})


def _once(mb: int, staged_kb: int, target_mb: int, compression: str | None) -> dict:
    path = tempfile.mkdtemp(prefix="bench_merge_")
    layout, write_id = CacheLayout(path), new_write_id()
    embedding = np.random.default_rng(0).random(200, dtype=np.float32)
    rows = mb * 1024 * 1024 // 1000
    started = time.perf_counter()
    writer = ShardWriter(FEATURES, staged_shards(layout.new_attempt(write_id)),
                         WriterOptions(shard_size_bytes=staged_kb << 10, compression=compression))
    for i in range(rows):
        writer.add({"id": i, "text": f"row {i} " * 20, "embedding": embedding}, i)
    staged = writer.close()
    write_seconds = time.perf_counter() - started
    target = target_mb << 20
    bins = plan_bins([s.num_bytes for s in staged], target, overhead=file_overhead(FEATURES))
    started = time.perf_counter()
    merged = []
    for index, shards in enumerate(bins):
        open_shard = staged_shards(layout.new_attempt(write_id))
        merged.append(merge_shards([staged[i] for i in shards], FEATURES, open_shard, compression, "hf"))
    merge_seconds = time.perf_counter() - started
    gb = sum(s.num_bytes for s in staged) / 2**30
    shutil.rmtree(path)
    return {"gb": gb, "staged_shards": len(staged), "merged_shards": len(merged),
            "write_s_per_gb": write_seconds / gb, "merge_s_per_gb": merge_seconds / gb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--staged_kb", type=int, default=512)
    parser.add_argument("--target_mb", type=int, default=64)
    parser.add_argument("--compression", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [_once(args.mb, args.staged_kb, args.target_mb, args.compression) for _ in range(args.repeats)]
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    result["merge_vs_write"] = result["merge_s_per_gb"] / result["write_s_per_gb"]
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
