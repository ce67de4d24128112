"""Write throughput of write_shards and WriteToArrowShards next to their peers (issues 3, 15 and 37).

On the standard workload it times, each in a fresh process after a `sync` of the disk
(else what the disk still has to write back from the run before swings fsync's cost 2x):
  - raw:        a single-process pyarrow IPC writer over the same examples, no Beam;
  - raw_fsync:  the same writer, fsyncing each shard before it opens the next (durable
                as write_shards, which fsyncs every shard);
  - lance:      Lance's `write_dataset` over the same record batches (when importable);
  - ws_dicts:   `write_shards` with example dicts;
  - ws_batches: `write_shards` with record batches of 1,000 rows (built as raw builds them);
  - floor:      Beam on FnApiRunner in-process generating the examples inside the
                pipeline (`beam.Create(range(k)) | beam.FlatMap(pool.make_chunk, n)`)
                into a DoFn that drops them: what Beam itself costs, no sink;
  - raw_dofn:   the same pipeline into a DoFn writing the dicts with the raw writer, fsyncing
                each shard (batches of 1,000 rows built as raw builds them, a bundle's shards
                files of its own): what a user's own durable writer costs in the same pipeline;
  - raw_dofn_batches: the same DoFn given the record batches arrow_batched gets;
  - arrow:      the same pipeline into WriteToArrowShards (dicts);
  - arrow_deterministic: the same, keyed `(source, position)` into
                WriteToArrowShards(deterministic=True), as the conversion pipelines write;
  - arrow_batched: the same examples as record batches of 1,000 rows into WriteToArrowShards;
  - parquet:    the same pipeline into Beam's WriteToParquet (uncompressed).
Every run reports its wall time, CPU time and peak RSS (getrusage of itself, plus the
largest child); CPU time is the steadier figure on a shared machine. Prints medians
over `--repeats`, rows/s, MB/s, and each goal of issue 37 (design "Conversion speed
(v4)") with its ratio: write_shards dicts >= 0.5x raw and >= 0.9x raw_fsync, batches
>= 0.85x raw; WriteToArrowShards dicts >= 0.9x raw_dofn and >= 2x WriteToParquet,
batches >= 1.0x raw_dofn_batches (all throughput); deterministic=True <= 1.3x the time
of the default. `--memory_check` adds one run of WriteToArrowShards at 4N examples:
peak RSS at 4N <= 1.2x that at N. `--only` runs some of the configurations (a goal is
printed when both its sides ran).

    python benchmarks/bench_write.py [--num_examples 200000] [--repeats 3] [--memory_check]
    python benchmarks/bench_write.py --only raw raw_fsync ws_dicts ws_batches
    python benchmarks/bench_write.py --only raw_dofn raw_dofn_batches arrow arrow_batched arrow_deterministic parquet
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

CONFIGS = {
    "raw": "raw pyarrow IPC writer",
    "raw_fsync": "raw writer, fsync per shard",
    "lance": "Lance write_dataset",
    "ws_dicts": "write_shards, dicts in",
    "ws_batches": "write_shards, batches in",
    "floor": "Beam floor (no sink)",
    "raw_dofn": "raw fsync DoFn, dicts in",
    "raw_dofn_batches": "raw fsync DoFn, batches in",
    "arrow": "WriteToArrowShards, dicts in",
    "arrow_deterministic": "WriteToArrowShards, keyed, in order",
    "arrow_batched": "WriteToArrowShards, batches in",
    "parquet": "WriteToParquet",
}
RSS_CONFIGS = ("arrow",)
PIPELINE_CONFIGS = ("floor", "raw_dofn", "raw_dofn_batches", "arrow", "arrow_deterministic", "arrow_batched",
                    "parquet")
# (what, of, against, at least): the goals of issue 37 (v4), as ratios of wall-time throughput.
GOALS = [("ws_dicts", "raw", 0.5), ("ws_dicts", "raw_fsync", 0.9), ("ws_batches", "raw", 0.85),
         ("arrow", "raw_dofn", 0.9), ("arrow_batched", "raw_dofn_batches", 1.0), ("arrow", "parquet", 2.0)]
# (what, of, against, at most): goals on the ratio of wall times.
TIME_GOALS = [("arrow_deterministic", "arrow", 1.3)]
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


class RawShards:
    """Size-rotated Arrow IPC files `<prefix>-<n>.arrow` in `out`, written by plain pyarrow (no
    validation, no manifest); with `fsync`, each file is synced to disk as it is closed."""

    def __init__(self, out: Path, prefix: str, schema: pa.Schema, shard_size: int, fsync: bool):
        self._out, self._prefix, self._schema = out, prefix, schema
        self._shard_size, self._fsync = shard_size, fsync
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._file: Any = None
        self._shard, self._size = 0, 0

    def write(self, batch: pa.RecordBatch) -> None:
        batch_size = pa.ipc.get_record_batch_size(batch)
        if self._writer is not None and self._size + batch_size > self._shard_size:
            self.close()
        if self._writer is None:
            self._file = open(self._out / f"{self._prefix}-{self._shard:05d}.arrow", "wb")  # noqa: SIM115
            self._writer, self._size, self._shard = pa.ipc.new_file(self._file, self._schema), 0, self._shard + 1
        self._writer.write_batch(batch)
        self._size += batch_size

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._file.close()
        self._writer = None


def write_raw(pool: workload.Pool, out: Path, num_examples: int, shard_size: int, fsync: bool = False) -> None:
    """The raw writer over the example dicts, in batches of BATCH_SIZE rows."""
    schema = workload.FEATURES.arrow_schema()
    out.mkdir(parents=True)
    shards = RawShards(out, "shard", schema, shard_size, fsync)
    for batch in batches(pool, num_examples, schema):
        shards.write(batch)
    shards.close()


def batches(pool: workload.Pool, num_examples: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The workload as record batches of BATCH_SIZE rows, built as the raw baseline builds them."""
    for start in range(0, num_examples, BATCH_SIZE):
        yield record_batch(list(pool.make_examples(start, min(start + BATCH_SIZE, num_examples))), schema)


def write_lance(pool: workload.Pool, out: Path, num_examples: int) -> None:
    import lance

    schema = workload.FEATURES.arrow_schema().remove_metadata()
    reader = pa.RecordBatchReader.from_batches(schema, batches(pool, num_examples, schema))
    lance.write_dataset(reader, str(out))


def write_local(config: str, pool: workload.Pool, out: Path, num_examples: int, shard_size: int) -> None:
    from beam_shards import write_shards

    if config == "ws_dicts":
        examples = pool.make_examples(0, num_examples)
    else:
        examples = batches(pool, num_examples, workload.FEATURES.arrow_schema())
    write_shards(examples, str(out), workload.FEATURES, shard_size_bytes=shard_size, progress=False)


def run_pipeline(config: str, pool: workload.Pool, out: Path, num_examples: int, shard_size: int,
                 options: Sequence[str] = ("--runner=FnApiRunner",)) -> None:
    """Runs configuration `config`'s pipeline with the pipeline `options` (bench_flink.py passes a Flink runner's)."""
    # Beam is imported here, so the raw baseline's process never loads it.
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_shards.beam.sink import WriteToArrowShards

    with beam.Pipeline(options=PipelineOptions(list(options))) as p:
        chunks = p | beam.Create(range(pool.num_chunks(num_examples)))
        # Batches built as the raw baseline builds them: one Beam element per batch, typed so Beam
        # takes the batches' registered coder, not its pickling fallback.
        batches_of = beam.FlatMap(_chunk_batches, pool, num_examples, workload.FEATURES.arrow_schema()
                                  ).with_output_types(pa.RecordBatch)
        if config == "arrow_batched":
            _ = chunks | batches_of | WriteToArrowShards(str(out), workload.FEATURES, shard_size_bytes=shard_size)
            return
        if config == "arrow_deterministic":
            _ = (chunks | beam.FlatMap(_keyed_chunk, pool, num_examples)
                 | WriteToArrowShards(str(out), workload.FEATURES, shard_size_bytes=shard_size, deterministic=True))
            return
        if config == "raw_dofn_batches":
            _ = chunks | batches_of | beam.ParDo(raw_write_fn(out, shard_size))
            return
        examples = chunks | beam.FlatMap(pool.make_chunk, num_examples)
        if config == "raw_dofn":
            _ = examples | beam.ParDo(raw_write_fn(out, shard_size))
            return
        if config == "parquet":
            _ = examples | beam.io.WriteToParquet(str(out / "part"), PARQUET_SCHEMA, file_name_suffix=".parquet")
        elif config == "floor":
            _ = examples | beam.Map(_drop)  # the same generation, then nothing
        else:
            _ = examples | WriteToArrowShards(str(out), workload.FEATURES, shard_size_bytes=shard_size)


def raw_write_fn(out: Path, shard_size: int) -> Any:
    """A DoFn writing what it gets with the fsyncing raw writer: record batches as they come, example
    dicts in batches of BATCH_SIZE built as the raw writer builds them; each bundle's shards are files of
    their own. The baseline of the sink's goals: a user's own durable writer in the same pipeline."""
    import uuid

    import apache_beam as beam

    class RawWriteFn(beam.DoFn):
        def setup(self) -> None:
            self._schema = workload.FEATURES.arrow_schema()
            out.mkdir(parents=True, exist_ok=True)

        def start_bundle(self) -> None:
            self._shards = RawShards(out, uuid.uuid4().hex, self._schema, shard_size, fsync=True)
            self._examples: list[dict[str, Any]] = []

        def process(self, element: Any) -> None:
            if isinstance(element, pa.RecordBatch):
                self._shards.write(element)
                return
            self._examples.append(element)
            if len(self._examples) == BATCH_SIZE:
                self._shards.write(record_batch(self._examples, self._schema))
                self._examples = []

        def finish_bundle(self) -> None:
            if self._examples:
                self._shards.write(record_batch(self._examples, self._schema))
            self._shards.close()

    return RawWriteFn()


def _chunk_batches(chunk: int, pool: workload.Pool, num_examples: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    examples = list(pool.make_chunk(chunk, num_examples))
    for start in range(0, len(examples), BATCH_SIZE):
        yield record_batch(examples[start:start + BATCH_SIZE], schema)


def _keyed_chunk(chunk: int, pool: workload.Pool, num_examples: int) -> Iterator[tuple[tuple[str, int], Any]]:
    """The chunk's examples keyed as a pipeline keys its input: (source, position)."""
    first = chunk * workload.CHUNK_SIZE
    for offset, example in enumerate(pool.make_chunk(chunk, num_examples)):
        yield ("workload", first + offset), example


def _drop(element: Any) -> None:
    return None


def child(config: str, pool_dir: str, out: str, num_examples: int, shard_size: int) -> dict[str, Any]:
    """One measured run, in this (fresh) process."""
    pool, out_path = workload.Pool(pool_dir), Path(out)
    if config in PIPELINE_CONFIGS:
        import apache_beam.io.parquetio  # noqa: F401  (imports are not part of the timing)

        import beam_shards.beam.sink  # noqa: F401
    os.sync()  # what the run before left to write back is not this run's to wait for
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    if config in ("raw", "raw_fsync"):
        write_raw(pool, out_path, num_examples, shard_size, fsync=config == "raw_fsync")
    elif config == "lance":
        write_lance(pool, out_path, num_examples)
    elif config.startswith("ws_"):
        write_local(config, pool, out_path, num_examples, shard_size)
    else:
        run_pipeline(config, pool, out_path, num_examples, shard_size)
    seconds = time.perf_counter() - start
    files = [f for f in out_path.rglob("*") if f.is_file()]
    return {
        "seconds": seconds,
        "files": sum(f.suffix in (".arrow", ".parquet", ".lance") for f in files),
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
    command = [sys.executable, __file__, "--_child", config, "--_pool", str(pool.directory), "--_out", str(out),
               "--num_examples", str(num_examples), "--shard_size", str(shard_size)]
    # Worker processes unpickle the example generator, so they must import `workload` too.
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    return workload.run_fresh(command, out, config, env)


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
          f"{'vs floor':>9}{'peak RSS MB':>12}{'files':>6}")
    for config, result in results.items():
        seconds = result["seconds"]
        print(f"{CONFIGS[config]:<32}{seconds:>8.2f}{result['cpu']:>8.2f}{num_examples / seconds:>9,.0f}"
              f"{result['bytes'] / seconds / 1e6:>7.1f}{result['bytes'] / 1e6:>8.1f}"
              f"{_ratio(results, 'raw', seconds):>8}{_ratio(results, 'floor', seconds):>9}"
              f"{result['rss'] / 2**20:>12.0f}{result['files']:>6.0f}")
    for config, against, goal in GOALS:
        if config in results and against in results:
            ratio = results[against]["seconds"] / results[config]["seconds"]
            print(f"goal: {CONFIGS[config]} >= {goal}x the throughput of {CONFIGS[against]}: {ratio:.2f}x "
                  f"{'met' if ratio >= goal else 'MISSED'}")
    for config, against, goal in TIME_GOALS:
        if config in results and against in results:
            ratio = results[config]["seconds"] / results[against]["seconds"]
            print(f"goal: {CONFIGS[config]} <= {goal}x the time of {CONFIGS[against]}: {ratio:.2f}x "
                  f"{'met' if ratio <= goal else 'MISSED'} (CPU time {results[config]['cpu'] / results[against]['cpu']:.2f}x, "
                  f"peak RSS {results[config]['rss'] / results[against]['rss']:.2f}x)")
    for config, big in rss_4n.items():
        small = results[config]
        ratio = big["rss"] / small["rss"]
        print(f"goal: peak RSS at 4N <= 1.2x at N, {CONFIGS[config]}: {small['rss'] / 2**20:.0f} MB at "
              f"{num_examples:,}, {big['rss'] / 2**20:.0f} MB at {4 * num_examples:,} "
              f"(self {big['rss_self'] / 2**20:.0f} + largest child {big['rss_children'] / 2**20:.0f}): "
              f"{ratio:.2f}x {'met' if ratio <= 1.2 else 'MISSED'}")


def _ratio(results: dict[str, dict[str, float]], against: str, seconds: float) -> str:
    """The throughput of a run of `seconds` against that of `against`, or "-" when it did not run."""
    return f"{results[against]['seconds'] / seconds:.2f}x" if against in results else "-"


def lance_importable() -> bool:
    try:
        import lance  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=3)
    parser.add_argument("--memory_check", action="store_true",
                        help="also run WriteToArrowShards at 4N examples and compare peak RSS")
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="run only these configurations")
    args = workload.parse_or_run_child(parser, CONFIGS, child, argv)
    if args is None:
        return
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        configs = tuple(config for config in args.only or CONFIGS if config != "lance" or lance_importable())
        if "lance" not in configs:
            print("Lance is not importable here: its row is left out")
        results = median_runs(configs, pool, work, args.num_examples, args.shard_size, args.repeats)
        rss_4n = {}
        if args.memory_check:
            rss_4n = median_runs(RSS_CONFIGS, pool, work, 4 * args.num_examples, args.shard_size, 1)
        report(results, rss_4n, args.num_examples, args.repeats, args.shard_size)


if __name__ == "__main__":
    main()
