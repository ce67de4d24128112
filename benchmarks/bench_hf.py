"""Hugging Face interop (issue 26): `from_hf` against HF's own `save_to_disk`, and random access to a
nested chat row, `ShardedDataset[i]` against HF's `ds[i]`.

The workload is a chat dataset: row i has an `id`, `messages` (2 to 6 turns of
{role, content}, content of 40 to 400 characters drawn from a fixed vocabulary seeded by
i) and `meta` ({source, lang, score}); about 700 bytes a row. It is built once into an
HF dataset on disk (`load_from_disk`), before anything is timed. Each figure is the
median over `--repeats` runs, each in a fresh process (the configurations take turns):

  - save_to_disk: `load_from_disk(src).save_to_disk(out)`, rows/s;
  - from_hf:      `from_hf(load_from_disk(src), out)`, rows/s;
  - hf[i]:        `ds[i]` for 10,000 random i on `load_from_disk(src)` (opened before timing),
                  then the same i again (warm);
  - ours[i]:      `ShardedDataset(cache)[i]` for the same i, twice. The first pass also
                  validates each record batch it touches and builds its row readers;
  - epoch:        every row once, in a random order (as a shuffled training epoch reads),
                  in a fresh process: HF's `ds[i]` and ours, first touches included. The
                  10,000 reads above touch each batch about 50 times, an epoch 1,000.

Goals: `ShardedDataset[i]` >= 2x HF's `ds[i]` on a nested row, as for flat rows; `from_hf`
is reported against `save_to_disk` (no goal: one copies Arrow files, the other checks
every value and writes shards).

    python benchmarks/bench_hf.py [--num_examples 200000] [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

CONFIGS = {"save_to_disk": "HF save_to_disk", "from_hf": "from_hf", "hf_getitem": "HF ds[i]",
           "ours_getitem": "ShardedDataset[i]", "hf_epoch": "HF ds[i], epoch", "ours_epoch": "ours[i], epoch"}
READS = 10_000
WORDS = ("the", "model", "answer", "question", "data", "shard", "cache", "train", "token", "value", "beam", "arrow")


def chat_rows(start: int, stop: int) -> dict[str, list[Any]]:
    """Rows start..stop of the chat workload, as columns."""
    ids, messages, metas = [], [], []
    for i in range(start, stop):
        rng = random.Random(i)
        turns = [{"role": ("user", "assistant")[t % 2],
                  "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 80)))}
                 for t in range(2 + i % 5)]
        ids.append(i)
        messages.append(turns)
        metas.append({"source": ("web", "books", "code")[i % 3], "lang": "en", "score": rng.random()})
    return {"id": ids, "messages": messages, "meta": metas}


def build_source(folder: Path, num_examples: int) -> None:
    import datasets

    marker = folder / "built.json"
    if marker.exists() and json.loads(marker.read_text()).get("num_examples") == num_examples:
        return
    shutil.rmtree(folder, ignore_errors=True)

    def generate():
        for start in range(0, num_examples, 10_000):
            columns = chat_rows(start, min(start + 10_000, num_examples))
            yield from ({name: columns[name][k] for name in columns} for k in range(len(columns["id"])))

    dataset = datasets.Dataset.from_generator(generate, cache_dir=str(folder / "hf_build"))
    dataset.save_to_disk(str(folder / "src"))
    shutil.rmtree(folder / "hf_build", ignore_errors=True)
    marker.write_text(json.dumps({"num_examples": num_examples}))


def child(config: str, work: Path, out: Path) -> dict[str, float]:
    import datasets

    from beam_shards import ShardedDataset, from_hf

    source = datasets.load_from_disk(str(work / "src"))
    indices = random.Random(0).sample(range(len(source)), min(READS, len(source)))
    start = time.perf_counter()
    if config == "save_to_disk":
        source.save_to_disk(str(out))
    elif config == "from_hf":
        from_hf(source, str(out), retention=None)
    elif config.endswith("_epoch"):
        dataset = source if config == "hf_epoch" else ShardedDataset(str(work / "cache"))
        order = list(range(len(source)))
        random.Random(1).shuffle(order)
        start = time.perf_counter()
        for index in order:
            dataset[index]
        return {"seconds": time.perf_counter() - start, "rows": len(order), "rss": _rss()}
    else:
        dataset = source if config == "hf_getitem" else ShardedDataset(str(work / "cache"))
        start = time.perf_counter()
        for index in indices:
            dataset[index]
        cold = time.perf_counter() - start
        start = time.perf_counter()
        for index in indices:
            dataset[index]
        return {"seconds": cold, "warm": time.perf_counter() - start, "rows": len(indices), "rss": _rss()}
    return {"seconds": time.perf_counter() - start, "rows": len(source), "rss": _rss()}


def _rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_child(config: str, work: Path) -> dict[str, float]:
    return workload.run_fresh([sys.executable, __file__, "--_child", config, "--workdir", str(work)],
                              work / f"out_{config}", config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=5)
    parser.add_argument("--_child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        work = Path(args.workdir)
        print(json.dumps(child(args._child, work, work / f"out_{args._child}")))
        return
    with workload.workdir(args.workdir) as work:
        build_source(work, args.num_examples)
        if not (work / "cache" / "_metadata.json").exists() or json.loads(
                (work / "built.json").read_text()).get("cache") != args.num_examples:
            import datasets

            from beam_shards import from_hf

            shutil.rmtree(work / "cache", ignore_errors=True)
            from_hf(datasets.load_from_disk(str(work / "src")), str(work / "cache"))
            (work / "built.json").write_text(json.dumps({"num_examples": args.num_examples,
                                                         "cache": args.num_examples}))
        runs: dict[str, list[dict[str, float]]] = {config: [] for config in CONFIGS}
        for _ in range(args.repeats):
            for config in CONFIGS:
                runs[config].append(run_child(config, work))
        medians = {config: {key: statistics.median(run[key] for run in done) for key in done[0]}
                   for config, done in runs.items()}
    print(f"\nHugging Face interop: {args.num_examples:,} chat rows, median of {args.repeats} fresh-process runs")
    print(f"{'configuration':<22}{'seconds':>9}{'rows/s':>12}{'peak RSS MB':>13}")
    for config, result in medians.items():
        print(f"{CONFIGS[config]:<22}{result['seconds']:>9.2f}{result['rows'] / result['seconds']:>12,.0f}"
              f"{result['rss'] / 2**20:>13.0f}")
    for config in ("hf_getitem", "ours_getitem"):
        result = medians[config]
        print(f"{CONFIGS[config] + ', warm':<22}{result['warm']:>9.2f}{result['rows'] / result['warm']:>12,.0f}")
    write = medians["save_to_disk"]["seconds"] / medians["from_hf"]["seconds"]
    print(f"from_hf / save_to_disk: {write:.2f}x the rows/s")
    ratios = {"first pass": medians["hf_getitem"]["seconds"] / medians["ours_getitem"]["seconds"],
              "warm": medians["hf_getitem"]["warm"] / medians["ours_getitem"]["warm"],
              "epoch": medians["hf_epoch"]["seconds"] / medians["ours_epoch"]["seconds"]}
    for label, read in ratios.items():
        print(f"goal: ShardedDataset[i] >= 2x HF ds[i] on a nested row, {label}: {read:.2f}x "
              f"{'met' if read >= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
