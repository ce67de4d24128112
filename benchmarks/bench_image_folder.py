"""The image_folder pipeline (issue 37) against HF datasets' `load_dataset("imagefolder") + save_to_disk`
of the same folder.

The input, made once before anything is timed: `--num_images` JPEGs (2,000 by default, as the
issue's) of `--image_size` pixels square (gradients with a few shapes, quality 90), spread
over 4 class folders as ImageNet lays them out.

Each configuration runs in a fresh process, wall time from the shell, taking turns; medians
over `--repeats` runs are printed, with ratios within this run:
  - ours:         `python -m pipelines.image_folder --input ROOT --output OUT` (deterministic, the
                  default; a local input and output: in the command's process, without Beam);
  - ours on Beam: the same with `--runner=FnApiRunner` (the same shard bytes);
  - HF:           `datasets.load_dataset("imagefolder", data_dir=ROOT)["train"].save_to_disk(OUT)`.

Goal: ours <= 0.8x HF. Run it from a venv holding both packages.

    python benchmarks/bench_image_folder.py [--num_images 2000] [--image_size 256] [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tabular import median_times, parsed, print_against  # noqa: E402

GOAL = 0.8
CLASSES = ("ant", "bee", "cow", "dog")
HF_SCRIPT = """
import sys, datasets
datasets.disable_progress_bars()
root, out, cache = sys.argv[1:4]
datasets.load_dataset("imagefolder", data_dir=root, cache_dir=cache)["train"].save_to_disk(out)
"""


def write_images(root: Path, count: int, size: int) -> None:
    from PIL import Image, ImageDraw

    rng = random.Random(0)
    for i in range(count):
        folder = root / CLASSES[i % len(CLASSES)]
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.linear_gradient("L").resize((size, size)).convert("RGB")
        draw = ImageDraw.Draw(image)
        for _ in range(4):
            x, y = rng.randrange(size), rng.randrange(size)
            draw.ellipse([x, y, x + size // 4, y + size // 4],
                         fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        image.save(folder / f"{i:05d}.jpg", quality=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_images", type=int, default=2_000)
    parser.add_argument("--image_size", type=int, default=256)
    args, work = parsed(parser, "bench_image_folder_")
    root, out = work / "images", work / "out"
    try:
        write_images(root, args.num_images, args.image_size)
        megabytes = sum(path.stat().st_size for path in root.rglob("*.jpg")) / 1e6
        ours = [sys.executable, "-m", "pipelines.image_folder", "--input", str(root), "--output", str(out),
                "--progress", "0"]
        configs = {"ours": ours, "ours on Beam (--runner=FnApiRunner)": [*ours, "--runner=FnApiRunner"],
                   "HF imagefolder + save_to_disk": [sys.executable, "-c", HF_SCRIPT, str(root), str(out),
                                                     str(work / "hf_cache")]}
        medians = median_times(configs, args.repeats, out, work / "hf_cache")
        print(f"{args.num_images:,} JPEGs of {args.image_size}x{args.image_size} ({megabytes:.1f} MB), medians of "
              f"{args.repeats} fresh processes (goal: ours <= {GOAL}x HF):")
        print_against(medians, "HF imagefolder + save_to_disk")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
