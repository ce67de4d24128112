"""Start-up (issue 37): `python -m pipelines.csv --help` and a 10-row csv conversion against HF
datasets' `import datasets` and a 10-row `load_dataset("csv") + save_to_disk`.

Each configuration runs in a fresh process, wall time from the shell, taking turns; medians
over `--repeats` runs are printed, with ratios within this run:
  - ours, --help:   `python -m pipelines.csv --help`;
  - ours, 10 rows:  `python -m pipelines.csv --input FILE --output OUT` (deterministic, the default);
  - HF import:      `python -c "import datasets"`;
  - HF, 10 rows:    `datasets.load_dataset("csv", data_files=FILE)["train"].save_to_disk(OUT)`.

Goal: ours, --help and ours, 10 rows <= 1.5x HF, 10 rows. Run it from a venv holding both
packages (HF datasets never goes into the package's own).

    python benchmarks/bench_startup.py [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tabular import HF_SCRIPT, median_times, parsed, write_csv  # noqa: E402

GOAL = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args, work = parsed(parser, "bench_startup_")
    path, out = work / "ten.csv", work / "out"
    write_csv(path, 10)
    configs = {
        "ours, --help": [sys.executable, "-m", "pipelines.csv", "--help"],
        "ours, 10 rows": [sys.executable, "-m", "pipelines.csv", "--input", str(path), "--output", str(out),
                          "--progress", "0"],
        "HF import datasets": [sys.executable, "-c", "import datasets"],
        "HF, 10 rows": [sys.executable, "-c", HF_SCRIPT, "csv", str(path), str(out), str(work / "hf_cache")],
    }
    try:
        medians = median_times(configs, args.repeats, out, work / "hf_cache")
        hf = medians["HF, 10 rows"]
        print(f"start-up, medians of {args.repeats} fresh processes (goal: ours <= {GOAL}x HF, 10 rows):")
        for config, seconds in medians.items():
            print(f"  {config:20s} {seconds:6.2f} s   {seconds / hf:5.2f}x HF, 10 rows   "
                  f"{seconds / medians['HF import datasets']:5.2f}x HF import")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
