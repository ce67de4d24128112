"""The csv and jsonl pipelines (issue 37) against HF datasets' `load_dataset(...) + save_to_disk` of the
same file, and inference over every row (issue 36) against `--infer_rows 100`.

Two inputs, made once before anything is timed:
  - a CSV of `--num_examples` rows (70,000 by default, as the issue's CSV): an int id, an
    int count with 'NA' now and then, a price, a text name, a float score with 'NA', an
    ISO date and a text code among which `0E0`;
  - a chat JSONL of `--chat_examples` rows (8,000 by default): `messages` (2 to 6 turns of
    {role, content}) and `meta` ({source, lang, score}), as bench_hf.py's rows.

Each configuration runs in a fresh process, wall time from the shell (start-up included),
taking turns; medians over `--repeats` runs are printed, with ratios within this run:
  - ours:       `python -m pipelines.csv|jsonl --input FILE --output OUT` (deterministic, the default;
                a small local input: in the command's process, without Beam);
  - ours, 100:  the same with `--infer_rows 100` (types from the first 100 rows);
  - ours on Beam: the same with `--runner=FnApiRunner` (the same shard bytes);
  - HF:         `datasets.load_dataset("csv"|"json", data_files=FILE)["train"].save_to_disk(OUT)`.

Goals: ours <= 1.0x HF; every-row inference <= 1.3x `--infer_rows 100`.

    python benchmarks/bench_tabular.py [--num_examples 70000] [--chat_examples 8000] [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hf import chat_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HF_SCRIPT = """
import shutil, sys, datasets
datasets.disable_progress_bars()
kind, path, out, cache = sys.argv[1:5]
datasets.load_dataset(kind, data_files=path, cache_dir=cache)["train"].save_to_disk(out)
"""


def write_csv(path: Path, rows: int) -> None:
    rng = random.Random(0)
    start = datetime.date(2000, 1, 1)
    with path.open("w") as handle:
        handle.write("id,count,price,name,score,day,code\n")
        for i in range(rows):
            count = "NA" if rng.random() < 0.02 else str(rng.randint(0, 10_000))
            score = "NA" if rng.random() < 0.05 else f"{rng.random() * 100:.3f}"
            day = start + datetime.timedelta(days=rng.randint(0, 9000))
            code = rng.choice(["ABC", "0E0", "X12", "Q7", "00M"])
            handle.write(f"{i},{count},{rng.random() * 1000:.2f},name {rng.randint(0, 999)},{score},{day},{code}\n")


def write_chat(path: Path, rows: int) -> None:
    columns = chat_rows(0, rows)
    with path.open("w") as handle:
        for k in range(rows):
            handle.write(json.dumps({"messages": columns["messages"][k], "meta": columns["meta"][k]}) + "\n")


def timed(argv: list[str], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def median_times(configs: dict[str, list[str]], repeats: int, out: Path, hf_cache: Path) -> dict[str, float]:
    """The median wall time of each configuration's command over `repeats` fresh processes, taking
    turns (HF's cache removed before each run, so each reads its input anew)."""
    times: dict[str, list[float]] = {config: [] for config in configs}
    for _ in range(repeats):
        for config, argv in configs.items():
            shutil.rmtree(hf_cache, ignore_errors=True)
            times[config].append(timed(argv, out))
    return {config: statistics.median(values) for config, values in times.items()}


def print_against(medians: dict[str, float], baseline: str) -> None:
    """Each configuration's median, and its ratio to the `baseline` configuration's."""
    for config, seconds in medians.items():
        print(f"  {config:36s} {seconds:7.2f} s   {seconds / medians[baseline]:5.2f}x HF")


def parsed(parser: argparse.ArgumentParser, prefix: str) -> tuple[argparse.Namespace, Path]:
    """The flags of a benchmark of fresh processes (`parser`'s own, `--repeats` and `--workdir`), and its
    work folder (a fresh one under /tmp named `prefix...` without `--workdir`)."""
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return args, work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_examples", type=int, default=70_000)
    parser.add_argument("--chat_examples", type=int, default=8_000)
    args, work = parsed(parser, "bench_tabular_")
    cases = {"csv": (work / "table.csv", "csv", "csv"), "chat jsonl": (work / "chat.jsonl", "jsonl", "json")}
    write_csv(cases["csv"][0], args.num_examples)
    write_chat(cases["chat jsonl"][0], args.chat_examples)
    out = work / "out"
    try:
        for name, (path, pipeline, hf_kind) in cases.items():
            configs = {
                "ours": [sys.executable, "-m", f"pipelines.{pipeline}", "--input", str(path), "--output", str(out),
                         "--progress", "0"],
                "ours, --infer_rows 100": [sys.executable, "-m", f"pipelines.{pipeline}", "--input", str(path),
                                           "--output", str(out), "--progress", "0", "--infer_rows", "100"],
                "ours on Beam (--runner=FnApiRunner)": [sys.executable, "-m", f"pipelines.{pipeline}", "--input",
                                                        str(path), "--output", str(out), "--progress", "0",
                                                        "--runner=FnApiRunner"],
                "HF load_dataset + save_to_disk": [sys.executable, "-c", HF_SCRIPT, hf_kind, str(path), str(out),
                                                   str(work / "hf_cache")],
            }
            medians = median_times(configs, args.repeats, out, work / "hf_cache")
            print(f"{name} ({path.stat().st_size / 1e6:.1f} MB), medians of {args.repeats} fresh processes:")
            print_against(medians, "HF load_dataset + save_to_disk")
            print(f"  every-row inference / --infer_rows 100: {medians['ours'] / medians['ours, --infer_rows 100']:.2f}x")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
