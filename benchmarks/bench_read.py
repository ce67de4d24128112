"""Read throughput of ReadFromArrowShards against Beam's ReadFromParquet (issue 4's benchmark).

Writes the standard workload once with WriteToArrowShards and once with Beam's
WriteToParquet (the same rows, the same Arrow schema: images as binary), generating
the examples inside each pipeline. Then, in this process and on the same runner
(FnApiRunner, in-process), times pipelines that read every row and count them:
  - arrow rows:      ReadFromArrowShards (one dict per row);
  - parquet rows:    ReadFromParquet (one dict per row);
  - arrow rows, numpy arrays: ReadFromArrowShards(image_mode="bytes"):
                     images stay bytes, the embedding comes as a numpy view, not
                     128 Python floats (most of the per-row cost of the two above);
  - arrow batches:   ReadFromArrowShards(as_batches=True), rows counted per batch;
  - parquet batches: ReadFromParquetBatched, rows counted per table.
Runs alternate between the readers; prints median rows/s over `--repeats` and the
ratios. Target: arrow rows >= 2x parquet rows. Run by hand:

    python benchmarks/bench_read.py [--num_examples 50000] [--repeats 5]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beam_shards import ReadFromArrowShards, WriteToArrowShards  # noqa: E402

import workload  # noqa: E402

TARGET = 2.0


def _options() -> PipelineOptions:
    return PipelineOptions(["--runner=FnApiRunner"])


def write_both(pool: workload.Pool, work: Path, num_examples: int, shard_size: int) -> tuple[str, str]:
    """The cache folder and the Parquet file pattern, each holding examples 0..num_examples-1."""
    cache, parquet = work / "read_cache", work / "read_parquet"
    shutil.rmtree(parquet, ignore_errors=True)  # a kept --workdir must not add an earlier run's files
    sinks = {
        "Arrow": WriteToArrowShards(str(cache), workload.FEATURES, shard_size_bytes=shard_size),
        "Parquet": beam.io.WriteToParquet(str(parquet / "part"), workload.FEATURES.arrow_schema(),
                                          file_name_suffix=".parquet"),
    }
    for name, sink in sinks.items():
        with beam.Pipeline(options=_options()) as p:
            _ = (p | "Chunks" >> beam.Create(range(pool.num_chunks(num_examples)))
                 | "Examples" >> beam.FlatMap(pool.make_chunk, num_examples)
                 | name >> sink)
    return str(cache), str(parquet / "part*.parquet")


def _rows_of(batch) -> int:
    return batch.num_rows


def readers(cache: str, parquet: str) -> dict[str, Callable[[beam.Pipeline], beam.PCollection]]:
    """Per measurement, a function that applies the reader and yields one count per row or batch."""
    return {
        "arrow rows": lambda p: p | ReadFromArrowShards(cache) | beam.Map(lambda row: 1),
        "parquet rows": lambda p: p | beam.io.ReadFromParquet(parquet) | beam.Map(lambda row: 1),
        "arrow rows, numpy arrays": lambda p: (p | ReadFromArrowShards(cache, image_mode="bytes")
                                               | beam.Map(lambda row: 1)),
        "arrow batches": lambda p: p | ReadFromArrowShards(cache, as_batches=True) | beam.Map(_rows_of),
        "parquet batches": lambda p: p | beam.io.ReadFromParquetBatched(parquet) | beam.Map(_rows_of),
    }


def time_read(apply: Callable[[beam.Pipeline], beam.PCollection], num_examples: int) -> float:
    """Seconds to run a pipeline that reads every row and checks the total."""
    start = time.perf_counter()
    with beam.Pipeline(options=_options()) as p:
        assert_that(apply(p) | beam.CombineGlobally(sum), equal_to([num_examples]))
    return time.perf_counter() - start


def measure(cache: str, parquet: str, num_examples: int, repeats: int) -> dict[str, float]:
    """{measurement: median seconds}; the readers take turns within each repeat."""
    plans = readers(cache, parquet)
    times: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(repeats):
        for name, apply in plans.items():
            times[name].append(time_read(apply, num_examples))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def report(results: dict[str, float], num_examples: int, repeats: int) -> None:
    print(f"\nreading {num_examples:,} rows on FnApiRunner in-process, median of {repeats}")
    print(f"{'reader':<26}{'seconds':>10}{'rows/s':>12}{'arrow/parquet':>15}")
    for name, seconds in results.items():
        kind = name.split()[1].rstrip(",")
        ratio = f"{results['parquet ' + kind] / seconds:>14.2f}x" if name.startswith("arrow") else ""
        print(f"{name:<26}{seconds:>10.2f}{num_examples / seconds:>12,.0f}{ratio}")
    ratio = results["parquet rows"] / results["arrow rows"]
    print(f"target: ReadFromArrowShards >= {TARGET:.0f}x ReadFromParquet (rows): {ratio:.2f}x "
          f"{'met' if ratio >= TARGET else 'MISSED'}")


def main(argv: list[str] | None = None) -> None:
    with workload.session(argv, __doc__.splitlines()[0], repeats=5) as (args, work, pool):
        cache, parquet = write_both(pool, work, args.num_examples, args.shard_size)
        report(measure(cache, parquet, args.num_examples, args.repeats), args.num_examples, args.repeats)


if __name__ == "__main__":
    main()
