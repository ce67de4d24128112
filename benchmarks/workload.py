"""The standard benchmark workload (issues 2 and 3), shared by every benchmark here.

Example i has a 64x64 RGB JPEG (quality 90) made from a pattern and noise seeded by
i, `label` = i % 1000, a float32[128] embedding seeded by i and an ASCII caption of
about 80 characters. The JPEGs and embeddings are made once into a pool on disk,
before anything is timed; `Pool.make_example(i)` then reads example i's bytes from a
file, so generating examples is cheap, and a `Pool` pickles as its folder name,
so a Beam pipeline can generate examples inside itself:

    pool = jpeg_pool(workdir / "pool", NUM_EXAMPLES)
    p | beam.Create(range(pool.num_chunks(n))) | beam.FlatMap(pool.make_chunk, n)

Examples past the pool's size reuse its images and embeddings (index i % size), so a
bigger run (for peak memory at 4N) needs no bigger pool.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from beam_shards import Array, ClassLabel, Features, Image, Manifest, Value, write_shards

NUM_EXAMPLES = 50_000
SHARD_SIZE_BYTES = 64 << 20
NUM_CLASSES = 1000
IMAGE_SIZE = 64
EMBEDDING_DIM = 128
CHUNK_SIZE = 1000
_EMBEDDING_BYTES = EMBEDDING_DIM * 4

FEATURES = Features({
    "image": Image(),
    "label": ClassLabel(num_classes=NUM_CLASSES),
    "embedding": Array((EMBEDDING_DIM,), "float32"),
    "caption": Value("string"),
})

_POOL_VERSION = 2
_WORDS = ("red", "small", "bright", "quiet", "wooden", "river", "cat", "garden", "under", "stone", "over",
          "bridge", "morning", "light", "old", "window", "green", "field", "near", "city")


def caption(i: int) -> str:
    """An ASCII caption of about 80 characters, deterministic in `i`."""
    words = " ".join(_WORDS[(i * (k + 7) + k * k) % len(_WORDS)] for k in range(9))
    return f"example {i:07d}: a photo of {words}"[:88]


def make_jpeg(i: int, rng: np.random.Generator) -> bytes:
    """A 64x64 RGB JPEG at quality 90: stripes whose angle and colour depend on i, plus noise."""
    y, x = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32)
    angle = (i % 17) / 17 * np.pi
    wave = np.sin((x * np.cos(angle) + y * np.sin(angle)) / (2 + i % 5))
    colour = np.array([(i * 37) % 256, (i * 91) % 256, (i * 53) % 256], dtype=np.float32)
    pixels = 127 + 60 * wave[..., None] + (colour - 128) / 4 + rng.normal(0, 12, (IMAGE_SIZE, IMAGE_SIZE, 3))
    buffer = io.BytesIO()
    PILImage.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


class Pool:
    """The JPEG bytes and embeddings of examples 0..size-1, read from files in a folder.

    Reads use `os.pread` rather than a memory map, so the pool's pages do not count in
    the reading process's resident memory (benchmarks measure peak RSS).

    Example:
        >>> pool = jpeg_pool("/tmp/bench_pool", 10)
        >>> pool.make_example(3)["label"]
        3

    Args:
      directory: a folder made by `jpeg_pool`.

    Raises:
      FileNotFoundError: the folder holds no finished pool.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        info = json.loads((self.directory / "pool.json").read_text())
        self.size = int(info["size"])
        self._files: tuple[list[int], int, int] | None = None

    def __repr__(self) -> str:
        return f"Pool({str(self.directory)!r}, size={self.size})"

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "size": self.size, "_files": None}

    def _open(self) -> tuple[list[int], int, int]:
        if self._files is None or self._pid != os.getpid():
            offsets = np.load(self.directory / "offsets.npy").tolist()
            jpegs = os.open(self.directory / "jpegs.bin", os.O_RDONLY)
            embeddings = os.open(self.directory / "embeddings.bin", os.O_RDONLY)
            self._files, self._pid = (offsets, jpegs, embeddings), os.getpid()
        return self._files

    def image(self, i: int) -> bytes:
        """The JPEG bytes of example `i`."""
        offsets, jpegs, _ = self._open()
        j = i % self.size
        return os.pread(jpegs, offsets[j + 1] - offsets[j], offsets[j])

    def make_example(self, i: int) -> dict[str, Any]:
        """Example `i` of the standard workload, as a dict matching `FEATURES`."""
        offsets, jpegs, embeddings = self._open()
        j = i % self.size
        return {
            "image": os.pread(jpegs, offsets[j + 1] - offsets[j], offsets[j]),
            "label": i % NUM_CLASSES,
            "embedding": np.frombuffer(os.pread(embeddings, _EMBEDDING_BYTES, j * _EMBEDDING_BYTES), np.float32),
            "caption": caption(i),
        }

    def make_examples(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        return (self.make_example(i) for i in range(start, stop))

    @staticmethod
    def num_chunks(num_examples: int, chunk_size: int = CHUNK_SIZE) -> int:
        return -(-num_examples // chunk_size)

    def make_chunk(self, chunk: int, num_examples: int, chunk_size: int = CHUNK_SIZE) -> Iterator[dict[str, Any]]:
        """The examples of chunk `chunk` out of `num_examples` (for `beam.FlatMap`)."""
        start = chunk * chunk_size
        return self.make_examples(start, min(start + chunk_size, num_examples))


def jpeg_pool(directory: str | os.PathLike, size: int) -> Pool:
    """The pool of `size` examples in `directory`, made there first unless already there."""
    directory = Path(directory)
    info = directory / "pool.json"
    if info.exists() and json.loads(info.read_text()) == {"version": _POOL_VERSION, "size": size}:
        return Pool(directory)
    directory.mkdir(parents=True, exist_ok=True)
    info.unlink(missing_ok=True)
    offsets = np.zeros(size + 1, dtype=np.int64)
    with open(directory / "jpegs.bin", "wb") as jpegs, open(directory / "embeddings.bin", "wb") as embeddings:
        for i in range(size):
            rng = np.random.default_rng(i)
            embeddings.write(rng.standard_normal(EMBEDDING_DIM, dtype=np.float32).tobytes())
            data = make_jpeg(i, rng)
            jpegs.write(data)
            offsets[i + 1] = offsets[i] + len(data)
    np.save(directory / "offsets.npy", offsets)
    info.write_text(json.dumps({"version": _POOL_VERSION, "size": size}))
    return Pool(directory)


def write_cache(path: str | os.PathLike, pool: Pool, num_examples: int,
                shard_size_bytes: int = SHARD_SIZE_BYTES) -> Manifest:
    """Writes examples 0..num_examples-1 into a cache at `path` with `write_shards`."""
    return write_shards(pool.make_examples(0, num_examples), str(path), FEATURES,
                        shard_size_bytes=shard_size_bytes, progress=False)


def add_arguments(parser: argparse.ArgumentParser, repeats: int) -> None:
    """The flags every benchmark takes."""
    parser.add_argument("--num_examples", type=int, default=NUM_EXAMPLES)
    parser.add_argument("--repeats", type=int, default=repeats, help="runs per measurement; medians are reported")
    parser.add_argument("--shard_size", type=int, default=SHARD_SIZE_BYTES, help="target shard size in bytes")
    parser.add_argument("--workdir", default=None,
                        help="where the pool and caches go (kept, so the pool is reused); default a temp dir, removed")


def parse_or_run_child(parser: argparse.ArgumentParser, configs: Sequence[str], child: Callable[..., Any],
                       argv: list[str] | None) -> argparse.Namespace | None:
    """The flags of a benchmark that measures each configuration in a fresh process of itself: with the
    hidden `--_child CONFIG --_pool DIR --_out DIR`, this is such a process: it prints the JSON of
    `child(config, pool, out, num_examples, shard_size)` and returns None; else it returns the flags."""
    parser.add_argument("--_child", choices=sorted(configs), help=argparse.SUPPRESS)
    parser.add_argument("--_pool", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args._child:
        return args
    print(json.dumps(child(args._child, args._pool, args._out, args.num_examples, args.shard_size)))
    return None


def common_flags_or_run_child(description: str, configs: Sequence[str], child: Callable[..., Any],
                              argv: list[str] | None, repeats: int) -> argparse.Namespace | None:
    """`parse_or_run_child` for a benchmark that takes only the common flags (`add_arguments`)."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser, repeats=repeats)
    return parse_or_run_child(parser, configs, child, argv)


@contextlib.contextmanager
def workdir(path: str | None) -> Iterator[Path]:
    """`path` (created, kept), or a temporary folder removed afterwards."""
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
        return
    temp = tempfile.mkdtemp(prefix="beam_shards_bench_")
    try:
        yield Path(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def session(argv: list[str] | None, description: str, repeats: int) -> Iterator[tuple[argparse.Namespace, Path, Pool]]:
    """Parses the common flags and yields (args, work folder, the workload's pool)."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser, repeats=repeats)
    args = parser.parse_args(argv)
    with workdir(args.workdir) as work:
        yield args, work, jpeg_pool(work / "pool", args.num_examples)


def alternating_medians(runs: dict[str, Callable[[int], Any]], repeats: int) -> dict[str, float]:
    """{name: median wall seconds of `run(repeat)`}; the runs take turns, so noise spreads evenly."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run(repeat)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def run_fresh(command: list[str], out: Path, label: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs one measurement in a fresh process (`command`, which prints its figures as JSON on
    its last line), with `out` removed before and after; exits naming `label` if it fails."""
    shutil.rmtree(out, ignore_errors=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{label} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
