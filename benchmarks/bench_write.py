"""Write throughput and peak memory of WriteToArrowShards (issue 3's benchmark).

On the standard workload, with the examples generated inside each pipeline
(`beam.Create(range(k)) | beam.FlatMap(pool.make_chunk, n)`), it times:
  - raw:     a single-process pyarrow IPC writer over the same examples, no Beam;
  - arrow:   WriteToArrowShards on FnApiRunner in-process;
  - parquet: Beam's WriteToParquet on the same pipeline and runner;
  - arrow2:  WriteToArrowShards on FnApiRunner with 2 worker processes;
  - floor:   the sinks' pipeline shape (generate, WindowInto, a DoFn with a side
             input) with a DoFn that drops the examples: what Beam itself costs per
             element in that shape, before any sink does any work.
Every run is a fresh subprocess, so runs do not share memory or warm-up; each
reports its wall time, CPU time and peak RSS (getrusage of itself, plus the largest
child). CPU time is the steadier figure on a shared machine.
Prints medians over `--repeats`, rows/s, MB/s (bytes written to disk per second), the
ratios, and the peak RSS of the WriteToArrowShards runs at N and 4N examples.
Targets: arrow >= 0.6x raw and >= 4x parquet; peak RSS at 4N <= 1.2x that at N.

    python benchmarks/bench_write.py [--num_examples 50000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

CONFIGS = {
    "raw": "raw pyarrow IPC, no Beam",
    "arrow": "WriteToArrowShards, in-process",
    "parquet": "WriteToParquet, in-process",
    "arrow2": "WriteToArrowShards, 2 processes",
    "floor": "Beam floor (examples dropped)",
    "arrow_batched": "WriteToArrowShards, batches in",
    "parquet_batched": "WriteToParquetBatched",
}
RSS_CONFIGS = ("arrow", "arrow2")
BATCH_SIZE = 1000
PARQUET_SCHEMA = pa.schema([
    ("image", pa.binary()),
    ("label", pa.int64()),
    ("embedding", pa.list_(pa.float32(), workload.EMBEDDING_DIM)),
    ("caption", pa.string()),
])


def record_batch(examples: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """The raw baseline's batch building: columns straight from the example dicts."""
    embeddings = np.stack([e["embedding"] for e in examples]).reshape(-1)
    return pa.RecordBatch.from_arrays([
        pa.array([e["image"] for e in examples], pa.large_binary()),
        pa.array([e["label"] for e in examples], pa.int64()),
        pa.FixedSizeListArray.from_arrays(pa.array(embeddings), workload.EMBEDDING_DIM),
        pa.array([e["caption"] for e in examples], pa.large_string()),
    ], schema=schema)


def write_raw(pool: workload.Pool, out: Path, num_examples: int, shard_size: int) -> None:
    """Size-rotated Arrow IPC files, written by plain pyarrow from the example dicts."""
    schema = workload.FEATURES.arrow_schema()
    out.mkdir(parents=True)
    writer, shard, size = None, 0, 0
    for start in range(0, num_examples, BATCH_SIZE):
        batch = record_batch(list(pool.make_examples(start, min(start + BATCH_SIZE, num_examples))), schema)
        batch_size = pa.ipc.get_record_batch_size(batch)
        if writer is not None and size + batch_size > shard_size:
            writer.close()
            writer, shard = None, shard + 1
        if writer is None:
            writer, size = pa.ipc.new_file(str(out / f"shard-{shard:05d}.arrow"), schema), 0
        writer.write_batch(batch)
        size += batch_size
    if writer is not None:
        writer.close()


def run_pipeline(config: str, pool: workload.Pool, out: Path, num_examples: int, shard_size: int) -> None:
    # Beam is imported here, so the raw baseline's process never loads it.
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_shards.sink import WriteToArrowShards

    args = ["--runner=FnApiRunner"]
    if config == "arrow2":
        args += ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        chunks = p | beam.Create(range(pool.num_chunks(num_examples)))
        if config.endswith("_batched"):
            # Batches built as the raw baseline builds them: one Beam element per batch.
            schema = PARQUET_SCHEMA if config == "parquet_batched" else workload.FEATURES.arrow_schema()
            batches = chunks | beam.FlatMap(_chunk_batches, pool, num_examples, schema)
            if config == "parquet_batched":
                _ = (batches | beam.Map(lambda batch: pa.Table.from_batches([batch]))
                     | beam.io.WriteToParquetBatched(str(out / "part"), PARQUET_SCHEMA, file_name_suffix=".parquet"))
            else:
                _ = batches | WriteToArrowShards(str(out), workload.FEATURES, shard_size_bytes=shard_size)
            return
        examples = chunks | beam.FlatMap(pool.make_chunk, num_examples)
        if config == "parquet":
            _ = examples | beam.io.WriteToParquet(str(out / "part"), PARQUET_SCHEMA, file_name_suffix=".parquet")
        elif config == "floor":
            # The sinks' per-element shape (WindowInto, then a DoFn with a side input), doing nothing.
            side = p | "Side" >> beam.Create([None])
            _ = (examples | beam.WindowInto(beam.window.GlobalWindows())
                 | beam.Map(_drop, beam.pvalue.AsSingleton(side)))
        else:
            _ = examples | WriteToArrowShards(str(out), workload.FEATURES, shard_size_bytes=shard_size)


def _chunk_batches(chunk: int, pool: workload.Pool, num_examples: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    examples = list(pool.make_chunk(chunk, num_examples))
    for start in range(0, len(examples), BATCH_SIZE):
        yield record_batch(examples[start:start + BATCH_SIZE], schema)


def _drop(element: Any, side: Any) -> None:
    return None


def child(config: str, pool_dir: str, out: str, num_examples: int, shard_size: int) -> dict[str, Any]:
    """One measured run, in this (fresh) process."""
    pool, out_path = workload.Pool(pool_dir), Path(out)
    if config != "raw":
        import apache_beam.io.parquetio  # noqa: F401  (imports are not part of the timing)
        import beam_shards.sink  # noqa: F401
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    if config == "raw":
        write_raw(pool, out_path, num_examples, shard_size)
    else:
        run_pipeline(config, pool, out_path, num_examples, shard_size)
    seconds = time.perf_counter() - start
    files = [f for f in out_path.rglob("*") if f.is_file()]
    return {
        "seconds": seconds,
        "files": sum(f.suffix in (".arrow", ".parquet") for f in files),
        "cpu": cpu_seconds() - cpu_before,
        "bytes": sum(f.stat().st_size for f in files),
        # ru_maxrss is in KiB on Linux; for children it is the largest waited-for child.
        "rss_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }


def cpu_seconds() -> float:
    """User and system time of this process and of its waited-for children."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def run_in_subprocess(config: str, pool: workload.Pool, work: Path, num_examples: int,
                      shard_size: int) -> dict[str, Any]:
    out = work / f"out_{config}"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, __file__, "--_child", config, "--_pool", str(pool.directory), "--_out", str(out),
               "--num_examples", str(num_examples), "--shard_size", str(shard_size)]
    # Worker processes unpickle the example generator, so they must import `workload` too.
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{config} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_runs(configs: tuple[str, ...], pool: workload.Pool, work: Path, num_examples: int, shard_size: int,
                repeats: int) -> dict[str, dict[str, float]]:
    """{config: medians of its runs}; the configurations take turns, so noise spreads evenly."""
    runs: dict[str, list[dict[str, Any]]] = {config: [] for config in configs}
    for _ in range(repeats):
        for config in configs:
            run = run_in_subprocess(config, pool, work, num_examples, shard_size)
            run["rss"] = run["rss_self"] + run["rss_children"]
            runs[config].append(run)
    return {config: {key: statistics.median(run[key] for run in done) for key in done[0]}
            for config, done in runs.items()}


def report(results: dict[str, dict[str, float]], rss_4n: dict[str, dict[str, float]], num_examples: int,
           repeats: int, shard_size: int) -> None:
    print(f"\nWrite benchmark: {num_examples:,} examples, shards of {shard_size / 2**20:g} MiB, "
          f"median of {repeats} run(s), each in a fresh process; ratios are of wall-time throughput")
    print(f"{'configuration':<32}{'wall s':>8}{'cpu s':>8}{'rows/s':>9}{'MB/s':>7}{'out MB':>8}{'vs raw':>8}"
          f"{'vs parquet':>11}{'peak RSS MB':>12}{'files':>6}")
    raw, parquet = results["raw"]["seconds"], results["parquet"]["seconds"]
    for config, result in results.items():
        seconds = result["seconds"]
        print(f"{CONFIGS[config]:<32}{seconds:>8.2f}{result['cpu']:>8.2f}{num_examples / seconds:>9,.0f}"
              f"{result['bytes'] / seconds / 1e6:>7.1f}{result['bytes'] / 1e6:>8.1f}{raw / seconds:>7.2f}x"
              f"{parquet / seconds:>10.2f}x{result['rss'] / 2**20:>12.0f}{result['files']:>6.0f}")
    arrow = results["arrow"]["seconds"]
    print(f"target: WriteToArrowShards in-process >= 0.6x raw pyarrow: {raw / arrow:.2f}x "
          f"{'met' if raw / arrow >= 0.6 else 'MISSED'}")
    print(f"target: WriteToArrowShards in-process >= 4x WriteToParquet: {parquet / arrow:.2f}x "
          f"{'met' if parquet / arrow >= 4 else 'MISSED'}")
    batched = results["arrow_batched"]["seconds"]
    print(f"with batches in: WriteToArrowShards {raw / batched:.2f}x raw pyarrow, "
          f"{parquet / batched:.2f}x WriteToParquet, "
          f"{results['parquet_batched']['seconds'] / batched:.2f}x WriteToParquetBatched")
    for config, big in rss_4n.items():
        small = results[config]
        ratio = big["rss"] / small["rss"]
        print(f"target: peak RSS at 4N <= 1.2x at N, {CONFIGS[config]}: {small['rss'] / 2**20:.0f} MB at "
              f"{num_examples:,}, {big['rss'] / 2**20:.0f} MB at {4 * num_examples:,} "
              f"(self {big['rss_self'] / 2**20:.0f} + largest child {big['rss_children'] / 2**20:.0f}): "
              f"{ratio:.2f}x {'met' if ratio <= 1.2 else 'MISSED'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=3)
    parser.add_argument("--_child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--_pool", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        print(json.dumps(child(args._child, args._pool, args._out, args.num_examples, args.shard_size)))
        return
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        results = median_runs(tuple(CONFIGS), pool, work, args.num_examples, args.shard_size, args.repeats)
        rss_4n = median_runs(RSS_CONFIGS, pool, work, 4 * args.num_examples, args.shard_size, 1)
        report(results, rss_4n, args.num_examples, args.repeats, args.shard_size)


if __name__ == "__main__":
    main()
