"""Training reads: ShardedDataset and ArrowBackend against raw pyarrow and their peers (issue 14's benchmark).

Writes the standard workload once with `write_shards`, and the same rows (images as
undecoded bytes, the same target shard size) into each peer's format: HF datasets
(`Dataset.from_generator` + `save_to_disk`), MosaicML streaming (`MDSWriter`) and
Lance (`lance.write_dataset`); the peers' copies are kept in a given `--workdir` and
reused. Then it times, every measurement in a fresh process (`--_child`, internal;
imports excluded from the timing), the readers taking turns:
  - open + row 0: open the dataset and fetch row 0;
  - cold open + row 0: the same with the reader's files evicted from the page cache
    first (fsync, then `posix_fadvise(DONTNEED)` on each; no root needed), as in a
    fresh job on a node that never read them; then, for ArrowBackend and MosaicML, one
    more untimed child traces it read by read (`cold_trace.py`: each step's time and the
    file, offset and bytes it read from disk);
  - one row: 10,000 random single-row fetches, the median per fetch;
  - take(256): 100 random fetches of 256 indices, fetches per second;
  - full scan: open the reader and read every row, every image byte (a sum over
    them), rows per second, opening included;
and end to end, torch `DataLoader(num_workers=2, batch_size=256, shuffle=True)`
decoding the JPEGs to numpy: `ShardedDataset(image_mode="numpy")` against HF datasets
with a PIL decode in `set_transform`, images per second after the first batch.
Prints medians over `--repeats` and the ratios against issues 14's and 38's goals,
which are set at 200,000 rows. A peer that is not installed prints "n/a". Run by hand:

    python benchmarks/bench_training.py --num_examples 200000 [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_backend import RawShards  # noqa: E402
from bench_write import record_batch  # noqa: E402
from cold_trace import TRACED, traced_cold_open  # noqa: E402

from beam_shards import ArrowBackend, ShardedDataset, ShardedSampler  # noqa: E402

import workload  # noqa: E402

NUM_ROWS = 10_000
NUM_TAKES = 100
TAKE_SIZE = 256
SCAN_GROUP = 256  # rows whose image bytes a row-wise reader's scan sums at once
LOADER_IMAGES = 20_000
LOADER = {"num_workers": 2, "batch_size": 256, "shuffle": True}
REQUIRES = {"hf": ("datasets",), "hf_arrow": ("datasets",), "mosaic": ("streaming",), "lance": ("lance",),
            "sharded_numpy": ("torch",), "hf_pil": ("torch", "datasets"), "sharded_plain": ("torch",),
            "sharded_loader": ("torch",)}


class Reader(NamedTuple):
    """A reader under test; `scan()` yields image columns (Arrow) or lists of image bytes."""

    row: Callable[[int], Any]
    take: Callable[[list[int]], Any]
    scan: Callable[[], Iterator[Any]]


def open_raw(work: Path) -> Reader:
    shards = RawShards(work / "cache")
    return Reader(shards.get_row, shards.take, lambda: (batch.column("image") for batch in shards.iter_batches()))


def open_hf(work: Path) -> Reader:
    import datasets
    ds = datasets.load_from_disk(str(work / "hf"))
    return Reader(ds.__getitem__, ds.__getitem__, lambda: in_groups(row["image"] for row in ds))


def open_hf_arrow(work: Path) -> Reader:
    import datasets
    ds = datasets.load_from_disk(str(work / "hf")).with_format("arrow")
    return Reader(ds.__getitem__, ds.__getitem__, lambda: (table.column("image") for table in ds.iter(batch_size=1000)))


def open_mosaic(work: Path) -> Reader:
    ds = streaming_base().LocalDataset(str(work / "mosaic"))
    return Reader(ds.__getitem__, lambda indices: [ds[i] for i in indices],
                  lambda: in_groups(ds[i]["image"] for i in range(len(ds))))


def open_lance(work: Path) -> Reader:
    import lance
    ds = lance.dataset(str(work / "lance"))
    return Reader(lambda i: ds.take([i]), ds.take, lambda: (batch.column("image") for batch in ds.to_batches()))


def open_backend(work: Path) -> Reader:
    backend = ArrowBackend.open(str(work / "cache"))
    return Reader(backend.get_row, backend.take, lambda: (batch.column("image") for batch in backend.iter_batches()))


def open_sharded(work: Path) -> Reader:
    ds = ShardedDataset(str(work / "cache"), image_mode="bytes")
    return Reader(ds.__getitem__, ds.__getitems__, lambda: in_groups(row["image"] for row in ds))


def streaming_base() -> Any:
    """MosaicML streaming's `streaming.base`, which holds its readers and writers.

    The package's `__init__` also imports its torchvision datasets, and torchvision's
    wheel on the package index wants a CUDA torch: next to a CPU-only torch that import
    fails, so then `streaming.base` is loaded without the package's `__init__`.
    """
    try:
        importlib.import_module("streaming")
    except (ImportError, RuntimeError):
        sys.modules["streaming"] = importlib.util.module_from_spec(importlib.util.find_spec("streaming"))
    return importlib.import_module("streaming.base")


READERS: dict[str, tuple[str, Callable[[Path], Reader]]] = {  # name: (label, opener)
    "raw": ("raw pyarrow (mmap, bisect, Table.take)", open_raw),
    "hf": ("HF datasets ds[i] / ds[list]", open_hf),
    "hf_arrow": ('HF datasets with_format("arrow")', open_hf_arrow),
    "mosaic": ("MosaicML streaming LocalDataset", open_mosaic),
    "lance": ("Lance take([i]) / take(list)", open_lance),
    "backend": ("ArrowBackend get_row / take", open_backend),
    "sharded": ('ShardedDataset("bytes") ds[i] / __getitems__', open_sharded),
}
LOADERS = {"sharded_numpy": 'ShardedDataset(image_mode="numpy")', "hf_pil": "HF datasets, PIL in set_transform",
           "sharded_plain": "ShardedDataset, DataLoader over a ShardedSampler",
           "sharded_loader": "ShardedDataset, ShardedDataLoader over a ShardedSampler"}


def in_groups(images: Iterator[bytes]) -> Iterator[list[bytes]]:
    """A row-wise reader's image bytes, SCAN_GROUP rows at a time."""
    group: list[bytes] = []
    for image in images:
        group.append(image)
        if len(group) == SCAN_GROUP:
            yield group
            group = []
    if group:
        yield group


def touch(images: pa.Array | pa.ChunkedArray | list[bytes]) -> tuple[int, int, int]:
    """(rows, image bytes, a sum reading every image byte) of an image column or a list of images."""
    if isinstance(images, list):
        data = b"".join(images)
        return len(images), len(data), word_sum(data)
    rows = size = total = 0
    for array in images.chunks if isinstance(images, pa.ChunkedArray) else [images]:
        _, offsets, data = array.buffers()
        dtype = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        ends = np.frombuffer(offsets, dtype)[array.offset:array.offset + len(array) + 1]
        start, stop = int(ends[0]), int(ends[-1])
        rows, size, total = rows + len(array), size + stop - start, total + word_sum(memoryview(data)[start:stop])
    return rows, size, total


def word_sum(data: bytes | memoryview) -> int:
    """The sum of `data` read as 64-bit words (and its last few bytes): reads every byte, fast."""
    values = np.frombuffer(data, np.uint8)
    whole = len(values) // 8 * 8
    return int(values[:whole].view(np.uint64).sum()) + int(values[whole:].sum())


def image_of(row: Any) -> bytes:
    """The image bytes of a fetched row: a dict, or a one-row Arrow table."""
    return row["image"] if isinstance(row, dict) else row.column("image")[0].as_py()


def time_open(reader: str, work: Path, num_rows: int, rng: np.random.Generator) -> dict[str, float]:
    """Seconds to open the dataset and fetch row 0 (checked against the workload's example 0)."""
    start = time.perf_counter()
    first = READERS[reader][1](work).row(0)
    seconds = time.perf_counter() - start
    if image_of(first) != workload.Pool(work / "pool").image(0):
        raise SystemExit(f"{reader}: row 0 does not hold example 0's image")
    return {"value": seconds}


# The folder each reader reads from its work folder.
FOLDERS = {"raw": "cache", "hf": "hf", "hf_arrow": "hf", "mosaic": "mosaic", "lance": "lance", "backend": "cache",
           "sharded": "cache"}


def evict(folder: Path) -> None:
    """Drops every file under `folder` from the page cache (synced first: dirty pages stay cached)."""
    for root, _, names in os.walk(folder):
        for name in names:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def time_cold_open(reader: str, work: Path, num_rows: int, rng: np.random.Generator) -> dict[str, float]:
    """`time_open` with the reader's files out of the page cache."""
    evict(work / FOLDERS[reader])
    return time_open(reader, work, num_rows, rng)


def trace_cold_open(reader: str, work: Path) -> dict[str, Any]:
    """`time_cold_open`'s open + row 0, read by read (see `cold_trace.py`)."""
    opener = READERS[reader][1]
    return traced_cold_open(reader, work / FOLDERS[reader], evict, lambda: opener(work).row(0))


def time_row(reader: str, work: Path, num_rows: int, rng: np.random.Generator) -> dict[str, float]:
    """The median seconds of one random single-row fetch, on an open reader that served row 0."""
    opened = READERS[reader][1](work)
    opened.row(0)
    times = []
    for i in rng.integers(0, num_rows, NUM_ROWS).tolist():
        start = time.perf_counter()
        opened.row(i)
        times.append(time.perf_counter() - start)
    return {"value": statistics.median(times)}


def take_rate(reader: str, work: Path, num_rows: int, rng: np.random.Generator) -> dict[str, float]:
    """Random fetches of TAKE_SIZE indices per second, on an open reader that served row 0."""
    opened = READERS[reader][1](work)
    opened.row(0)
    takes = rng.integers(0, num_rows, (NUM_TAKES, TAKE_SIZE)).tolist()
    start = time.perf_counter()
    for indices in takes:
        opened.take(indices)
    return {"value": NUM_TAKES / (time.perf_counter() - start)}


def scan_rate(reader: str, work: Path, num_rows: int, rng: np.random.Generator) -> dict[str, float]:
    """Rows per second of a full scan reading every image byte, opening the reader included."""
    rows = size = 0
    start = time.perf_counter()
    for images in READERS[reader][1](work).scan():
        counted, nbytes, _ = touch(images)
        rows, size = rows + counted, size + nbytes
    return {"value": rows / (time.perf_counter() - start), "rows": rows, "bytes": size}


MEASURES = {"open": time_open, "cold": time_cold_open, "row": time_row, "take": take_rate, "scan": scan_rate}


def hf_pil_decode(batch: dict[str, list]) -> dict[str, list]:
    """The HF side's transform: the same decode as `images.decode` to numpy, by PIL."""
    from PIL import Image as PILImage
    return {"image": [np.asarray(PILImage.open(io.BytesIO(data))) for data in batch["image"]],
            "label": batch["label"],
            "embedding": [np.asarray(values, np.float32) for values in batch["embedding"]],
            "caption": batch["caption"]}


def loader_rate(config: str, work: Path, num_rows: int, repeat: int) -> dict[str, float]:
    """Images per second through a torch DataLoader, from its first batch on."""
    import torch
    from torch.utils.data import DataLoader

    if config.startswith("sharded"):
        ds = ShardedDataset(str(work / "cache"), image_mode="numpy")
    else:
        import datasets
        ds = datasets.load_from_disk(str(work / "hf"))
        ds.set_transform(hf_pil_decode)
    if config == "sharded_loader":
        from beam_shards import ShardedDataLoader
        options = {key: value for key, value in LOADER.items() if key != "shuffle"}
        loader = ShardedDataLoader(ds, sampler=ShardedSampler(ds, seed=repeat), **options)
    elif config == "sharded_plain":
        options = {key: value for key, value in LOADER.items() if key != "shuffle"}
        loader = DataLoader(ds, sampler=ShardedSampler(ds, seed=repeat), **options)
    else:
        loader = DataLoader(ds, generator=torch.Generator().manual_seed(repeat), **LOADER)
    batches = iter(loader)
    next(batches)  # workers started and the first batch decoded: not timed
    target = min(LOADER_IMAGES, num_rows - LOADER["batch_size"])
    images = 0
    start = time.perf_counter()
    for batch in batches:
        images += len(batch["label"])
        if images >= target:
            break
    return {"value": images / (time.perf_counter() - start), "images": images}


def build_peers(work: Path, pool: workload.Pool, num_rows: int, shard_size: int) -> None:
    """Writes the workload into each installed peer's format, unless a copy of these rows is there."""
    builders = {"hf": build_hf, "mosaic": build_mds, "lance": build_lance}
    for name, build in builders.items():
        done = work / f"{name}.built.json"
        key = {"num_examples": num_rows, "shard_size": shard_size}
        if not installed(name) or (done.exists() and json.loads(done.read_text()) == key):
            continue
        done.unlink(missing_ok=True)
        shutil.rmtree(work / name, ignore_errors=True)
        build(work / name, pool, num_rows, shard_size)
        done.write_text(json.dumps(key))


def build_hf(out: Path, pool: workload.Pool, num_rows: int, shard_size: int) -> None:
    import datasets
    datasets.disable_progress_bars()
    features = datasets.Features({
        "image": datasets.Value("binary"), "label": datasets.Value("int64"),
        "embedding": datasets.Sequence(datasets.Value("float32"), length=workload.EMBEDDING_DIM),
        "caption": datasets.Value("string")})
    scratch = out.parent / "hf_build"
    ds = datasets.Dataset.from_generator(pool.make_examples, gen_kwargs={"start": 0, "stop": num_rows},
                                         features=features, cache_dir=str(scratch))
    ds.save_to_disk(str(out), max_shard_size=shard_size)
    shutil.rmtree(scratch, ignore_errors=True)


def build_mds(out: Path, pool: workload.Pool, num_rows: int, shard_size: int) -> None:
    MDSWriter = streaming_base().MDSWriter
    columns = {"image": "bytes", "label": "int", "embedding": f"ndarray:float32:{workload.EMBEDDING_DIM}",
               "caption": "str"}
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_size) as writer:
        for example in pool.make_examples(0, num_rows):
            writer.write(example)


def build_lance(out: Path, pool: workload.Pool, num_rows: int, shard_size: int) -> None:
    import lance
    schema = workload.FEATURES.arrow_schema()
    batches = (record_batch(list(pool.make_examples(start, min(start + 1000, num_rows))), schema)
               for start in range(0, num_rows, 1000))
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches), str(out), max_bytes_per_file=shard_size)


def installed(config: str) -> bool:
    """Whether the modules a reader, loader or peer build needs are importable."""
    return all(importlib.util.find_spec(module) is not None for module in REQUIRES.get(config, ()))


def run_child(config: str, what: str, work: Path, num_rows: int, repeat: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--_child", config, "--_measure", what, "--_repeat", str(repeat),
               "--num_examples", str(num_rows), "--workdir", str(work)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{config} {what} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_all(work: Path, num_rows: int, repeats: int, only: list[str] | None = None,
            readers: list[str] | None = None) -> dict[tuple[str, str], dict[str, float]]:
    """{(config, measure): medians of its runs}; the configurations take turns, so noise spreads evenly."""
    plan = [(reader, what) for what in MEASURES for reader in READERS]
    plan += [(config, "loader") for config in LOADERS]
    plan = [(config, what) for config, what in plan if installed(config) and (not only or what in only)
            and (not readers or config in readers or what == "loader")]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {step: [] for step in plan}
    for repeat in range(repeats):
        for config, what in plan:
            runs[config, what].append(run_child(config, what, work, num_rows, repeat))
    return {step: {key: statistics.median(run[key] for run in done) for key in done[0]} for step, done in runs.items()}


GOALS = [  # issues 14's and 38's: (text, ours, theirs, "<=" for times or ">=" for rates, the ratio ours/theirs)
    ("ShardedDataset[i] vs HF ds[i], time", ("sharded", "row"), ("hf", "row"), "<=", 0.2),
    ("ArrowBackend.get_row vs raw row, time", ("backend", "row"), ("raw", "row"), "<=", 1.5),
    ("ArrowBackend.take(256) vs HF arrow take, rate", ("backend", "take"), ("hf_arrow", "take"), ">=", 2.0),
    ("ShardedDataset.__getitems__(256) vs HF ds[list], rate", ("sharded", "take"), ("hf", "take"), ">=", 2.0),
    ("ShardedDataset open + row 0 vs MosaicML's, time", ("sharded", "open"), ("mosaic", "open"), "<=", 1.5),
    ("ArrowBackend open + row 0 vs MosaicML's, time", ("backend", "open"), ("mosaic", "open"), "<=", 1.5),
    ("ArrowBackend cold open + row 0 vs MosaicML's, time", ("backend", "cold"), ("mosaic", "cold"), "<=", 1.0),
    ("ArrowBackend full scan vs raw, rate", ("backend", "scan"), ("raw", "scan"), ">=", 0.9),
    ("DataLoader ShardedDataset numpy vs HF PIL, rate", ("sharded_numpy", "loader"), ("hf_pil", "loader"), ">=", 2.5),
    ("ShardedDataLoader vs DataLoader, same sampler, rate", ("sharded_loader", "loader"), ("sharded_plain", "loader"),
     ">=", 0.97),
    ("ShardedDataLoader vs HF PIL, rate", ("sharded_loader", "loader"), ("hf_pil", "loader"), ">=", 2.5),
]


def report(results: dict[tuple[str, str], dict[str, float]], num_rows: int, num_shards: int, repeats: int) -> None:
    scans = {reader: (results[reader, "scan"]["rows"], results[reader, "scan"]["bytes"])
             for reader in READERS if (reader, "scan") in results}
    if len(set(scans.values())) > 1:
        raise SystemExit(f"the readers' scans saw different (rows, image bytes): {scans}")
    print(f"\nTraining reads: {num_rows:,} rows ({num_shards} shards of ours), page cache warm, "
          f"median of {repeats} fresh process(es) per figure")
    columns = {"open": ("open + row 0", "{:.1f} ms", 1e3), "cold": ("cold open", "{:.1f} ms", 1e3),
               "row": ("one row", "{:.1f} us", 1e6),
               "take": (f"take({TAKE_SIZE})", "{:,.0f} /s", 1), "scan": ("full scan", "{:,.0f}k rows/s", 1e-3)}
    print(f"{'reader':<46}" + "".join(f"{title:>16}" for title, _, _ in columns.values()))
    for reader, (label, _) in READERS.items():
        cells = [fmt.format(results[reader, what]["value"] * scale) if (reader, what) in results else "n/a"
                 for what, (_, fmt, scale) in columns.items()]
        print(f"{label:<46}" + "".join(f"{cell:>16}" for cell in cells))
    value = {step: result["value"] for step, result in results.items()}
    loader = "; ".join(f"{label} {value[config, 'loader'] / 1e3:.1f}k images/s" if (config, "loader") in value
                       else f"{label} n/a" for config, label in LOADERS.items())
    counted = max((results[config, "loader"]["images"] for config in LOADERS if (config, "loader") in results), default=0)
    print(f"End to end, DataLoader(num_workers=2, batch_size=256, shuffle=True), JPEGs decoded to numpy, "
          f"{counted:,.0f} images after the first batch: {loader}")
    for text, ours, theirs, sign, goal in GOALS:
        if ours not in value or theirs not in value:
            print(f"goal: {text} {sign} {goal}x: n/a")
            continue
        ratio = value[ours] / value[theirs]
        met = ratio <= goal if sign == "<=" else ratio >= goal
        print(f"goal: {text} {sign} {goal}x: {ratio:.2f}x {'met' if met else 'MISSED'}")


def report_traces(work: Path, num_rows: int, results: dict[tuple[str, str], dict[str, float]],
                  readers: list[str] | None) -> None:
    """The cold open + row 0 of each traced reader, read by read, next to its timed median."""
    for reader in TRACED:
        if not installed(reader) or (readers and reader not in readers):
            continue
        traced = run_child(reader, "trace", work, num_rows, 0)
        timed = results.get((reader, "cold"), {}).get("value")
        print(f"\nCold open + row 0, read by read: {READERS[reader][0]} (one traced run, "
              f"{traced['resident_before']:,} B of its files in the page cache before it"
              + (f"; timed median {timed * 1e3:.2f} ms)" if timed is not None else ")"))
        print("\n".join(traced["lines"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=3)
    parser.add_argument("--only", choices=[*MEASURES, "loader"], nargs="+", metavar="MEASURE",
                        help="run only these measures (open, cold, row, take, scan, loader); all by default")
    parser.add_argument("--readers", choices=list(READERS), nargs="+", metavar="READER",
                        help="run only these readers (raw, hf, hf_arrow, mosaic, lance, backend, sharded); all by "
                             "default")
    parser.add_argument("--_child", choices=sorted([*READERS, *LOADERS]), help=argparse.SUPPRESS)
    parser.add_argument("--_measure", choices=[*MEASURES, "loader", "trace"], help=argparse.SUPPRESS)
    parser.add_argument("--_repeat", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        for module in REQUIRES.get(args._child, ()):  # imports are not part of any timing
            if module == "streaming":
                streaming_base()
            else:
                importlib.import_module(module)
        work = Path(args.workdir)
        if args._measure == "loader":
            result = loader_rate(args._child, work, args.num_examples, args._repeat)
        elif args._measure == "trace":
            result = trace_cold_open(args._child, work)
        else:
            rng = np.random.default_rng(args._repeat)
            result = MEASURES[args._measure](args._child, work, args.num_examples, rng)
        print(json.dumps(result))
        return
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        shutil.rmtree(work / "cache", ignore_errors=True)
        manifest = workload.write_cache(work / "cache", pool, args.num_examples, args.shard_size)
        build_peers(work, pool, args.num_examples, args.shard_size)
        results = run_all(work, args.num_examples, args.repeats, args.only, args.readers)
        report(results, manifest.num_rows, manifest.num_shards, args.repeats)
        if not args.only or "cold" in args.only:
            report_traces(work, args.num_examples, results, args.readers)


if __name__ == "__main__":
    main()
