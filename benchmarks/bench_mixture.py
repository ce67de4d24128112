"""A `Mixture`'s reads against a single cache's (issue goal: within 1.1x): `__getitems__` of 256 random
indices, and `ds[i]`.

Two caches of the standard workload (`workload.py`), written once before anything is
timed: `a` with the first 3/5 of `--num_examples` rows, `b` with the rest. The mixture is
`Mixture({a: 0.6, b: 0.4}, epoch_size=10**8)` (both sources repeated thousands of times
an epoch, as a mixture's small sources are); its indices are random in its epoch 3, the
single cache's random in `a`. Each configuration runs in a fresh process, taking turns,
with and without the image column (images decoded to numpy arrays); a process reads a few
batches untimed, then times `--batches` batches of 256 and 5,000 `ds[i]`. Figures are
medians over `--repeats` processes, with the mixture's time over the single cache's in
the same run.

    python benchmarks/bench_mixture.py [--num_examples 50000] [--repeats 5] [--batches 200] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

BATCH = 256
SINGLE_READS = 5_000
EPOCH_SIZE = 10**8
COLUMNS = {"no_images": ["label", "embedding", "caption"], "images": list(workload.FEATURES)}
READERS = ("single", "mixture")


def build(work: Path, pool: workload.Pool, num_examples: int, shard_size: int) -> dict[str, str]:
    """The two caches (written unless a run with this size left them), by name."""
    from beam_shards import write_shards

    split = num_examples * 3 // 5
    paths = {"a": work / "a", "b": work / "b"}
    built = work / "built.json"
    if built.exists() and json.loads(built.read_text()) == {"num_examples": num_examples}:
        return {name: str(path) for name, path in paths.items()}
    for (name, path), (start, stop) in zip(paths.items(), [(0, split), (split, num_examples)]):
        write_shards(pool.make_examples(start, stop), str(path), workload.FEATURES, shard_size_bytes=shard_size,
                     progress=False)
    built.write_text(json.dumps({"num_examples": num_examples}))
    return {name: str(path) for name, path in paths.items()}


def child(reader: str, columns: str, paths: dict[str, str], batches: int) -> dict[str, float]:
    """Seconds per batch of 256 and per `ds[i]`, after an untimed warm-up, in this process."""
    from beam_shards import Mixture, ShardedDataset

    opened = {name: ShardedDataset(path, columns=COLUMNS[columns], image_mode="numpy") for name, path in paths.items()}
    if reader == "mixture":
        dataset = Mixture({opened["a"]: 0.6, opened["b"]: 0.4}, epoch_size=EPOCH_SIZE, seed=0)
        low, high = 3 * EPOCH_SIZE, 4 * EPOCH_SIZE
    else:
        dataset, low, high = opened["a"], 0, len(opened["a"])
    rng = np.random.default_rng(0)
    warm, timed = rng.integers(low, high, (10, BATCH)), rng.integers(low, high, (batches, BATCH))
    singles = rng.integers(low, high, SINGLE_READS).tolist()
    for indices in warm:
        dataset.__getitems__(indices)
    start = time.perf_counter()
    for indices in timed:
        dataset.__getitems__(indices)
    batch = (time.perf_counter() - start) / batches
    start = time.perf_counter()
    for index in singles:
        dataset[index]
    return {"batch": batch, "single": (time.perf_counter() - start) / len(singles)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=5)
    parser.add_argument("--batches", type=int, default=200, help="timed batches of 256 per process")
    parser.add_argument("--_child", nargs=2, metavar=("READER", "COLUMNS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        work = Path(args.workdir)
        paths = {name: str(work / name) for name in ("a", "b")}
        print(json.dumps(child(args._child[0], args._child[1], paths, args.batches)))
        return
    with workload.workdir(args.workdir) as work:
        build(work, workload.jpeg_pool(work / "pool", args.num_examples), args.num_examples, args.shard_size)
        runs: dict[tuple[str, str], list[dict[str, float]]] = {(r, c): [] for c in COLUMNS for r in READERS}
        for _ in range(args.repeats):
            for reader, columns in runs:
                command = [sys.executable, __file__, "--_child", reader, columns, "--workdir", str(work),
                           "--batches", str(args.batches)]
                runs[reader, columns].append(workload.run_fresh(command, work / "out", f"{reader} {columns}"))
    medians = {config: {key: statistics.median(run[key] for run in done) for key in done[0]}
               for config, done in runs.items()}
    print(f"\nMixture reads: {args.num_examples:,} rows in two caches, epoch_size {EPOCH_SIZE:,}, "
          f"median of {args.repeats} fresh-process runs")
    print(f"{'columns':<11}{'reader':<9}{'batch of 256':>14}{'ds[i]':>10}")
    for (reader, columns), result in medians.items():
        print(f"{columns:<11}{reader:<9}{result['batch'] * 1e3:>11.3f} ms{result['single'] * 1e6:>7.1f} us")
    for columns in COLUMNS:
        mixture, single = medians["mixture", columns], medians["single", columns]
        for key, label in (("batch", "__getitems__(256)"), ("single", "ds[i]")):
            ratio = mixture[key] / single[key]
            print(f"goal: mixture {label} <= 1.1x a single cache's, {columns}: {ratio:.2f}x "
                  f"{'met' if ratio <= 1.1 else 'MISSED'}")


if __name__ == "__main__":
    main()
