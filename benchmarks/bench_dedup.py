"""What `WriteToArrowShards(..., dedup="rows")` costs (issue 40): the same write with and without it.

On the standard workload with 10% duplicates (example i, for i % 10 == 9, is a copy of
example i - 9: the same image, label, embedding and caption), it times, each in a fresh
process on FnApiRunner in-process, the examples generated inside the pipeline as
`bench_write.py` generates them:
  - plain:        WriteToArrowShards, dicts in;
  - dedup:        the same with dedup="rows";
  - ordered:      keyed `(source, position)` into WriteToArrowShards(deterministic=True),
                  as the conversion pipelines write;
  - ordered_dedup: the same with dedup="rows" (the first of each duplicate kept).
Prints medians over `--repeats` (the configurations take turns) and the ratios of wall
time with dedup to without: the goal is <= 1.5x.

    python benchmarks/bench_dedup.py [--num_examples 200000] [--repeats 3]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

CONFIGS = {
    "plain": "WriteToArrowShards",
    "dedup": "WriteToArrowShards, dedup",
    "ordered": "deterministic WriteToArrowShards",
    "ordered_dedup": "deterministic WriteToArrowShards, dedup",
}
# (with dedup, without): the goal is a wall-time ratio of at most GOAL.
PAIRS = [("dedup", "plain"), ("ordered_dedup", "ordered")]
GOAL = 1.5
# One example in this many is a copy of the one this many before it.
EVERY = 10


def example(pool: workload.Pool, i: int) -> dict[str, Any]:
    """Example i of the workload, or for i % EVERY == EVERY - 1 a copy of example i - (EVERY - 1)."""
    return pool.make_example(i - (EVERY - 1) if i % EVERY == EVERY - 1 else i)


def _chunk(chunk: int, pool: workload.Pool, num_examples: int) -> Iterator[dict[str, Any]]:
    first = chunk * workload.CHUNK_SIZE
    return (example(pool, i) for i in range(first, min(first + workload.CHUNK_SIZE, num_examples)))


def _keyed_chunk(chunk: int, pool: workload.Pool, num_examples: int) -> Iterator[tuple[tuple[str, int], Any]]:
    first = chunk * workload.CHUNK_SIZE
    for offset, item in enumerate(_chunk(chunk, pool, num_examples)):
        yield ("workload", first + offset), item


def child(config: str, pool_dir: str, out: str, num_examples: int, shard_size: int) -> dict[str, Any]:
    """One measured run, in this (fresh) process."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_shards import read_metadata
    from beam_shards.beam.sink import WriteToArrowShards

    pool = workload.Pool(pool_dir)
    ordered, dedup = config.startswith("ordered"), config.endswith("dedup")
    os.sync()
    start = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        chunks = p | beam.Create(range(pool.num_chunks(num_examples)))
        examples = chunks | beam.FlatMap(_keyed_chunk if ordered else _chunk, pool, num_examples)
        _ = examples | WriteToArrowShards(out, workload.FEATURES, shard_size_bytes=shard_size, deterministic=ordered,
                                          dedup="rows" if dedup else None)
    seconds = time.perf_counter() - start
    manifest = read_metadata(out)
    return {"seconds": seconds, "rows": manifest.num_rows,
            "dropped": manifest.metadata.get("dedup", {}).get("dropped", 0)}


def main(argv: list[str] | None = None) -> None:
    args = workload.common_flags_or_run_child(__doc__.splitlines()[0], CONFIGS, child, argv, repeats=3)
    if args is None:
        return
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        here = str(Path(__file__).resolve().parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
        runs: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
        for _ in range(args.repeats):
            for config in CONFIGS:
                out = work / f"out_{config}"
                command = [sys.executable, __file__, "--_child", config, "--_pool", str(pool.directory),
                           "--_out", str(out), "--num_examples", str(args.num_examples),
                           "--shard_size", str(args.shard_size)]
                runs[config].append(workload.run_fresh(command, out, config, env))
    print(f"\nDedup benchmark: {args.num_examples:,} examples ({100 // EVERY}% duplicates), FnApiRunner, "
          f"median of {args.repeats} run(s), each in a fresh process")
    print(f"{'configuration':<42}{'wall s':>8}{'rows/s':>9}{'rows':>9}{'dropped':>9}")
    medians = {config: statistics.median(run["seconds"] for run in done) for config, done in runs.items()}
    for config, done in runs.items():
        print(f"{CONFIGS[config]:<42}{medians[config]:>8.2f}{args.num_examples / medians[config]:>9,.0f}"
              f"{done[0]['rows']:>9,}{done[0]['dropped']:>9,}")
    for with_dedup, without in PAIRS:
        ratio = medians[with_dedup] / medians[without]
        print(f"goal: {CONFIGS[with_dedup]} <= {GOAL}x the time of {CONFIGS[without]}: {ratio:.2f}x "
              f"{'met' if ratio <= GOAL else 'MISSED'}")


if __name__ == "__main__":
    main()
