"""Caches at scale (issue 24): what opening, appending, gc, `log` and `info` cost at 10 to 100,000
shards and 1 to 1,000 kept versions.

For each shard count, a cache is written once by real writes (`write_shards` with one
tiny row per shard), then versions are added by real one-row appends until 100 and
1,000 versions are kept (no retention meanwhile). At each (shards, versions) point,
each figure is the median of `--repeats` fresh processes, measured after the imports:

- open + first row: `ArrowBackend.open(path).get_row(0)`: ms, and MB of peak RSS over import;
- pickled reader: bytes of `pickle.dumps(ShardedDataset(path))`;
- spawned worker: a spawned process given the dataset, until its first batch of 32 rows,
  less a spawned process that only imports beam_shards;
- append: 1,000 rows appended with retention keeping the versions there are (so one
  version goes), ms and MB of peak RSS over import; and manifest bytes (header and shard
  tables) it wrote;
- gc: `beam-shards gc PATH` (default retention: every version here is young, so this is
  the full pass that finds nothing to remove): ms and MB;
- `log --limit 20` and `info`: ms.

    python benchmarks/bench_scale.py [--shards 10 1000 10000 100000] [--versions 1 100 1000]
                                     [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import workdir  # noqa: E402

_PRELUDE = r"""
import json, os, sys, time, pickle
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
import beam_shards
from beam_shards import ArrowBackend, ShardedDataset, Features, Value, write_shards
from beam_shards.cli import main as cli
from beam_shards.versions.gc import Retention
path, what = sys.argv[1], sys.argv[2]
FEATURES = Features({"id": Value("int64"), "text": Value("string")})
base = hwm()
start = time.perf_counter()
"""

_MEASURES = {
    "open": "ArrowBackend.open(path).get_row(0)",
    "pickle": "size = len(pickle.dumps(ShardedDataset(path)))",
    "append": ("write_shards(({'id': i, 'text': 'x'} for i in range(1000)), path, FEATURES, mode='append', "
               "retention=Retention(keep=int(sys.argv[3]), min_age=0))"),
    "gc": "cli(['gc', path])",
    "log": "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()): cli(['log', path, '--limit', '20'])",
    "info": "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()): cli(['info', path])",
}

_SPAWN = r"""
import json, multiprocessing, sys, time
def first_batch(dataset, queue):
    queue.put(len(dataset.__getitems__(list(range(32)))))
def nothing(queue):
    import beam_shards
    queue.put(0)
if __name__ == "__main__":
    from beam_shards import ShardedDataset
    context = multiprocessing.get_context("spawn")
    times = {}
    for name, target, args in (("import", nothing, ()), ("batch", first_batch, (ShardedDataset(sys.argv[1]),))):
        queue = context.Queue()
        start = time.perf_counter()
        worker = context.Process(target=target, args=args + (queue,))
        worker.start()
        queue.get(timeout=600)
        times[name] = time.perf_counter() - start
        worker.join()
    print(json.dumps({"seconds": times["batch"] - times["import"]}))
"""


def measure(path: Path, what: str, keep: int) -> dict:
    code = _PRELUDE + _MEASURES[what] + (
        "\nprint(json.dumps({'seconds': time.perf_counter() - start, 'mb': hwm() - base"
        + (", 'bytes': size" if what == "pickle" else "") + "}))")
    done = subprocess.run([sys.executable, "-c", code, str(path), what, str(keep)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} at {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spawned_batch(path: Path) -> float:
    script = path.parent / "spawned_batch.py"  # a file: spawned children import their target from `__main__`
    script.write_text(_SPAWN)
    done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"spawned worker at {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def metadata_bytes(path: Path) -> int:
    """Bytes of every header and shard table (`_metadata.json`, rewritten whole, is not counted)."""
    return sum(entry.stat().st_size for folder in ("_versions", "_tables") if (path / folder).is_dir()
               for entry in os.scandir(path / folder))


def build(path: Path, shards: int) -> float:
    """Writes `shards` one-row shards; returns the seconds it took."""
    from beam_shards import Features, Value, write_shards

    start = time.perf_counter()
    write_shards(({"id": i, "text": "x"} for i in range(shards)), str(path),
                 Features({"id": Value("int64"), "text": Value("string")}), max_rows_per_shard=1, retention=None,
                 progress=False)
    return time.perf_counter() - start


def append_until(path: Path, versions: int) -> list[int]:
    """One-row appends (no retention) until `versions` are kept; the manifest bytes each wrote."""
    from beam_shards import Features, Value, list_versions, write_shards

    features = Features({"id": Value("int64"), "text": Value("string")})
    have, written = len(list_versions(str(path))), []
    for n in range(have, versions):
        before = metadata_bytes(path)
        write_shards([{"id": -n, "text": "y"}], str(path), features, mode="append", retention=None, progress=False)
        written.append(metadata_bytes(path) - before)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[10, 1000, 10_000, 100_000])
    parser.add_argument("--versions", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    median = statistics.median
    print("| shards | versions | open + row 0 | open MB | pickled reader | spawned worker | append 1,000 rows "
          "| append MB | bytes per append | gc | gc MB | log --limit 20 | info |", flush=True)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with workdir(args.workdir) as work:
        for shards in args.shards:
            path = work / f"cache_{shards}"
            seconds = build(path, shards)
            print(f"<!-- wrote {shards:,} shards in {seconds:.1f} s -->", flush=True)
            for versions in args.versions:
                written = append_until(path, versions)
                runs = {what: [measure(path, what, versions) for _ in range(args.repeats)]
                        for what in ("open", "pickle", "append", "gc", "log", "info")}
                spawn = median(spawned_batch(path) for _ in range(args.repeats))
                ms = {what: median(r["seconds"] for r in runs[what]) * 1000 for what in runs}
                mb = {what: median(r["mb"] for r in runs[what]) for what in runs}
                per_append = f"{median(written[-100:]):,.0f}" if written else "-"
                print(f"| {shards:,} | {versions:,} | {ms['open']:.1f} ms | {mb['open']:.1f} | "
                      f"{runs['pickle'][0]['bytes']:,} B | {spawn * 1000:.0f} ms | {ms['append']:.0f} ms | "
                      f"{mb['append']:.1f} | {per_append} | {ms['gc']:.0f} ms | {mb['gc']:.1f} | "
                      f"{ms['log']:.1f} ms | {ms['info']:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
