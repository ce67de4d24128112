"""What a versioned publish costs: finalize time at 1, 100 and 5,000 staged shards.

Each measurement stages N one-row shards in a fresh process, then times
`commit.publish` alone (moving the shards to their final names, the create-if-absent
commit of `_versions/<N>.json`, bringing `_metadata.json` up) and the retention pass a
write runs after it (`gc.collect_garbage`, which lists the folder and reads the kept
manifests). It publishes over a cache that already holds `--history` versions, since
a retried finalize looks through them for its own write. Medians of `--repeats`
fresh-process runs; nothing is asserted.

    python benchmarks/bench_publish.py [--shards 1 100 5000] [--repeats 5] [--history 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, sys, time
from beam_shards import Features, Value, write_shards
from beam_shards.versions import commit
from beam_shards.versions.gc import Retention, collect_garbage
from beam_shards.versions.staging import staged_shards
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.writer import ShardWriter
from beam_shards.shards.options import WriterOptions

path, shards, history = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
features = Features({"id": Value("int64"), "text": Value("string")})
for n in range(history):
    write_shards(({"id": i, "text": "x" * 40} for i in range(10)), path, features, retention=None)
write_id = new_write_id()
options = WriterOptions(max_rows_per_shard=1)
writer = ShardWriter(features, staged_shards(CacheLayout(path).new_attempt(write_id)), options)
for i in range(shards):
    writer.add({"id": i, "text": "x" * 40}, i)
staged = writer.close()
start = time.perf_counter()
manifest = commit.publish(path, write_id=write_id, features=features, staged=staged, options=options,
                          metadata={}, mode="overwrite")
published = time.perf_counter()
collect_garbage(path, Retention())
done = time.perf_counter()
assert manifest.num_shards == shards
print(json.dumps({"publish": published - start, "retention": done - published}))
"""


def run_once(shards: int, history: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run([sys.executable, "-c", _CHILD, f"{folder}/cache", str(shards), str(history)],
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 100, 5000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--history", type=int, default=3, help="versions already published at the path")
    args = parser.parse_args()
    print(f"{'shards':>7}  {'publish (median)':>17}  {'per shard':>10}  {'retention pass':>15}")
    for shards in args.shards:
        runs = [run_once(shards, args.history) for _ in range(args.repeats)]
        publish = statistics.median(r["publish"] for r in runs)
        retention = statistics.median(r["retention"] for r in runs)
        print(f"{shards:>7,}  {publish * 1e3:>14.1f} ms  {publish / shards * 1e6:>7.0f} us  {retention * 1e3:>12.1f} ms")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")
