"""Conversion throughput of the tfrecord pipeline against the parquet pipeline, on the same rows.

The standard workload's examples (a 64x64 JPEG, a label, a float32[128] embedding and
a caption) are written once, before anything is timed, into 4 TFRecord files of
tf.train.Example (by the `tfrecord` package, the tests' independent writer) and into
4 Parquet files (row groups of 5,000 rows). Then, each run a fresh process running the
pipeline's `run` on the FnApiRunner in-process (imports excluded from the timing):
  - parquet:          `pipelines.parquet` with the features given (--features);
  - tfrecord:         `pipelines.tfrecord` with the same features given;
  - tfrecord, infer:  `pipelines.tfrecord` inferring the features from the first records.
Prints medians over `--repeats` of wall seconds, CPU seconds (steadier on a shared
machine) and rows/s, and each pipeline's throughput relative to parquet's.

    python benchmarks/bench_tfrecord.py [--num_examples 50000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_write import cpu_seconds  # noqa: E402

import workload  # noqa: E402

CONFIGS = {
    "parquet": "parquet pipeline, --features",
    "tfrecord": "tfrecord pipeline, --features",
    "tfrecord_infer": "tfrecord pipeline, inferred",
}
NUM_FILES = 4
ROW_GROUP_ROWS = 5000


def make_inputs(pool: workload.Pool, folder: Path, num_examples: int) -> None:
    """The workload's examples as TFRecord files, Parquet files and a features file, made once."""
    done = folder / "inputs.json"
    if done.exists() and json.loads(done.read_text()) == {"num_examples": num_examples}:
        return
    import tfrecord

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    schema = pa.schema([("image", pa.binary()), ("label", pa.int64()),
                        ("embedding", pa.list_(pa.float32(), workload.EMBEDDING_DIM)), ("caption", pa.string())])
    per_file = -(-num_examples // NUM_FILES)
    for index in range(NUM_FILES):
        examples = list(pool.make_examples(index * per_file, min((index + 1) * per_file, num_examples)))
        writer = tfrecord.TFRecordWriter(str(folder / f"train-{index:05d}.tfrecord"))
        for example in examples:
            writer.write({"image": (example["image"], "byte"), "label": (example["label"], "int"),
                          "embedding": (example["embedding"].tolist(), "float"),
                          "caption": (example["caption"].encode(), "byte")})
        writer.close()
        columns = {name: [example[name] for example in examples] for name in schema.names}
        columns["embedding"] = [embedding.tolist() for embedding in columns["embedding"]]
        pq.write_table(pa.table(columns, schema=schema), folder / f"train-{index:05d}.parquet",
                       row_group_size=ROW_GROUP_ROWS)
    (folder / "features.json").write_text(json.dumps(workload.FEATURES.to_dict()))
    done.write_text(json.dumps({"num_examples": num_examples}))


def argv_for(config: str, inputs: Path, out: Path, shard_size: int) -> list[str]:
    common = ["--output", str(out), "--shard_size", str(shard_size), "--runner=FnApiRunner"]
    if config == "parquet":
        return ["--input", str(inputs / "train-*.parquet"), "--features", str(inputs / "features.json")] + common
    features = ["--features", str(inputs / "features.json")] if config == "tfrecord" else []
    return ["--input", str(inputs / "train-*.tfrecord")] + features + common


def child(config: str, inputs: str, out: str, shard_size: int) -> dict[str, Any]:
    """One measured run, in this (fresh) process."""
    from pipelines import parquet, tfrecord

    run = parquet.run if config == "parquet" else tfrecord.run
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    manifest = run(argv_for(config, Path(inputs), Path(out), shard_size))
    return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds() - cpu_before, "rows": manifest.num_rows,
            "bytes": manifest.num_bytes}


def run_in_subprocess(config: str, inputs: Path, work: Path, shard_size: int) -> dict[str, Any]:
    out = work / f"out_{config}"
    command = [sys.executable, __file__, "--_child", config, "--_inputs", str(inputs), "--_out", str(out),
               "--shard_size", str(shard_size)]
    return workload.run_fresh(command, out, config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=3)
    parser.add_argument("--_child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--_inputs", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        print(json.dumps(child(args._child, args._inputs, args._out, args.shard_size)))
        return
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        inputs = work / "inputs"
        make_inputs(pool, inputs, args.num_examples)
        sizes = {kind: sum(f.stat().st_size for f in inputs.glob(f"*.{kind}")) for kind in ("tfrecord", "parquet")}
        runs: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
        for _ in range(args.repeats):  # the configurations take turns, so noise spreads evenly
            for config in CONFIGS:
                runs[config].append(run_in_subprocess(config, inputs, work, args.shard_size))
    medians = {config: {key: statistics.median(run[key] for run in done) for key in done[0]}
               for config, done in runs.items()}
    print(f"\ntfrecord benchmark: {args.num_examples:,} rows in {NUM_FILES} files "
          f"(TFRecord {sizes['tfrecord'] / 1e6:.1f} MB, Parquet {sizes['parquet'] / 1e6:.1f} MB), "
          f"median of {args.repeats} run(s), each in a fresh process, FnApiRunner in-process")
    print(f"{'configuration':<32}{'wall s':>8}{'cpu s':>8}{'rows/s':>9}{'vs parquet':>12}")
    parquet = medians["parquet"]["seconds"]
    for config, result in medians.items():
        assert result["rows"] == args.num_examples, (config, result)
        print(f"{CONFIGS[config]:<32}{result['seconds']:>8.2f}{result['cpu']:>8.2f}"
              f"{args.num_examples / result['seconds']:>9,.0f}{parquet / result['seconds']:>11.2f}x")


if __name__ == "__main__":
    main()
