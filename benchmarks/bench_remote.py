"""Training reads from an object store (issue 12's benchmark): moto's S3 server next to a local disk.

Starts moto's S3 server on 127.0.0.1 (a free port; stopped at the end), points the
standard AWS environment at it, and writes the standard workload once to
`s3://BUCKET/cache` and once to a local folder (`write_shards`, batches of 1,000 rows).
Then, each run in a fresh subprocess, the configurations taking turns:
  - local:      `ShardedDataset(<local folder>, image_mode="bytes")`, memory-mapped;
  - s3 ranged:  `ShardedDataset("s3://...", image_mode="bytes")`: the footer and the
                record batches needed, with ranged reads, nothing on disk;
  - s3 + disk cache, cold: with `cache_dir=` a fresh empty folder (whole shards are
                downloaded, checked and memory-mapped);
  - s3 + disk cache, warm: with a `cache_dir` that an earlier, unmeasured run filled.
Three measurements each: `--random_rows` random `ds[i]` (the same indices for every
configuration in a round); a full scan (`ds.backend.iter_batches()`, touching every
image byte) in a fresh process, which pays the first touch of every page and batch; and a
rescan, the same scan timed after an untimed one in the same process (steady state). The
dataset is opened before the clock starts (its manifest read is not timed); opening shards,
footers and downloads are timed. `--configs` picks the configurations besides local disk.
Bytes fetched from the store are counted in separate, untimed runs that wrap
`fs.open_random_access` for remote paths with a counting file (so the wrapper never
slows a timed run); the disk cache downloads through that function too, so its
downloads are counted. Peak RSS is the timed child's `ru_maxrss`; memory-mapped pages
read (local disk, disk cache) count in it.

    python benchmarks/bench_remote.py [--num_examples 50000] [--repeats 3] [--random_rows 1000] [--configs cache_warm]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402
from read_counter import counting_opener  # noqa: E402

BUCKET = "beam-shards-bench"
S3_URI = f"s3://{BUCKET}/cache"
CONFIGS = {
    "local": "local disk",
    "s3": "s3, ranged reads",
    "cache_cold": "s3 + disk cache, cold",
    "cache_warm": "s3 + disk cache, warm",
}
MEASUREMENTS = ("random", "scan", "rescan")
COUNTED = ("random", "scan")  # measurements whose bytes fetched are counted
BATCH_ROWS = 1000  # write_shards' default batch_size, used for the workload here
CACHE_MAX_BYTES = 1 << 40
START_SECONDS = 60


# ----- the child: one measured run in a fresh process -----

def count_remote_reads() -> list[int]:
    """Wraps `fs.open_random_access` for remote paths; returns the list the sizes of their reads go to."""
    from beam_shards.storage import fs

    tally: list[int] = []
    fs.open_random_access = counting_opener(fs.open_random_access, tally)
    return tally


def random_indices(num_rows: int, count: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, num_rows, count).tolist()


def touch_images(batch: Any) -> int:
    """Reads every byte of the batch's images (the max of the data buffer); returns their total length."""
    column = batch.column("image")
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(column.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    if data.size:
        data.max()
    return int(offsets[-1] - offsets[0])


def child(config: str, measure: str, uri: str, cache_dir: str | None, seed: int, random_rows: int,
          count: bool) -> dict[str, Any]:
    from beam_shards import ShardedDataset

    tally = count_remote_reads() if count else []
    options = {} if cache_dir is None else {"cache_dir": cache_dir, "cache_max_bytes": CACHE_MAX_BYTES}
    ds = ShardedDataset(uri, image_mode="bytes", **options)
    manifest = ds.backend.manifest
    result: dict[str, Any] = {"rss_open": peak_rss()}
    if measure == "random":
        indices = random_indices(len(ds), random_rows, seed)
        start = time.perf_counter()
        check = sum(len(ds[i]["image"]) for i in indices)
        seconds = time.perf_counter() - start
        rows = len(indices)
        result["batches"] = len(distinct_batches(indices, [shard.num_rows for shard in manifest.shards]))
    else:
        if measure == "rescan":  # steady state: the first scan (untimed) paid the page faults and the checks
            scan(ds)
        start = time.perf_counter()
        check, rows = scan(ds)
        seconds = time.perf_counter() - start
    return {**result, "seconds": seconds, "rows": rows, "check": check, "fetched": sum(tally), "reads": len(tally),
            "disk_bytes": manifest.num_bytes, "num_rows": manifest.num_rows, "shards": manifest.num_shards,
            "rss": peak_rss()}


def scan(ds: Any) -> tuple[int, int]:
    """(image bytes, rows) of a full scan of `ds`, touching every image byte."""
    check, rows = 0, 0
    for batch in ds.backend.iter_batches():
        check += touch_images(batch)
        rows += batch.num_rows
    return check, rows


def peak_rss() -> int:
    """Peak resident bytes of this process since it started its program.

    Linux's `ru_maxrss` carries over the parent's peak through fork and exec (the
    parent here holds Beam and the written caches), so it is read only where
    /proc/self/status has no VmHWM (the high-water mark of this program's own memory).
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def distinct_batches(indices: list[int], shard_rows: list[int]) -> set[tuple[int, int]]:
    """The (shard, batch) pairs that `indices` fall in, for shards of whole batches of BATCH_ROWS rows."""
    starts = np.cumsum([0] + shard_rows)
    shards = np.searchsorted(starts, indices, side="right") - 1
    return {(int(s), int((i - starts[s]) // BATCH_ROWS)) for i, s in zip(indices, shards)}


# ----- the parent: the server, the caches, the runs and the table -----

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def s3_server(log_path: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 with bucket BUCKET, and this process's environment pointing at it."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise SystemExit(f"moto's S3 server exited with code {process.returncode} before listening on "
                                 f"port {port}; see {log_path}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"moto's S3 server did not listen on port {port} within {START_SECONDS}s; "
                                 f"see {log_path}")
            time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                           # Never a real account's files or instance metadata: only what is set here.
                           "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent/aws-config",
                           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials"})
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_PROFILE"):
            os.environ.pop(name, None)
        with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=30):
            pass
        yield endpoint
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


class Runner:
    """Runs children: where each configuration reads, and the disk-cache folders they use."""

    def __init__(self, work: Path, local_uri: str, random_rows: int):
        self.work, self.local_uri, self.random_rows = work, local_uri, random_rows
        self.warm_cache = work / "disk_cache_warm"

    def run(self, config: str, measure: str, seed: int, count: bool = False) -> dict[str, Any]:
        uri = self.local_uri if config == "local" else S3_URI
        cold = None
        if config == "cache_cold":
            cold = tempfile.mkdtemp(prefix="disk_cache_cold_", dir=self.work)
        cache_dir = cold if cold is not None else (str(self.warm_cache) if config == "cache_warm" else None)
        command = [sys.executable, __file__, "--_child", config, "--_measure", measure, "--_uri", uri,
                   "--_seed", str(seed), "--random_rows", str(self.random_rows)]
        if cache_dir is not None:
            command += ["--_cache_dir", cache_dir]
        if count:
            command.append("--_count")
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        finally:
            if cold is not None:
                shutil.rmtree(cold, ignore_errors=True)
        if done.returncode != 0:
            raise SystemExit(f"{config} {measure} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def fill_warm_cache(self) -> None:
        """An unmeasured scan through the warm configuration's folder, which downloads every shard into it."""
        shutil.rmtree(self.warm_cache, ignore_errors=True)
        self.warm_cache.mkdir()
        self.run("cache_warm", "scan", seed=0)


def measure_all(runner: Runner, repeats: int, configs: list[str]) -> tuple[dict[tuple[str, str], dict[str, float]],
                                                                          dict[tuple[str, str], dict[str, Any]]]:
    """({(config, measure): medians of the timed runs}, {(config, measure): the counting run}).

    The configurations take turns in every round, so the machine's noise spreads evenly; in
    round r every configuration reads the same random rows (seed r). The counting runs use seed 0.
    """
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(c, m): [] for c in configs for m in MEASUREMENTS}
    for repeat in range(repeats):
        for config in configs:
            for measure in MEASUREMENTS:
                runs[(config, measure)].append(runner.run(config, measure, seed=repeat))
        for measure in MEASUREMENTS:
            checks = {config: runs[(config, measure)][-1]["check"] for config in configs}
            if len(set(checks.values())) != 1:
                raise SystemExit(f"round {repeat}, {measure}: the configurations read different image bytes: {checks}")
    counted = {(c, m): runner.run(c, m, seed=0, count=True) for c in configs if c != "local" for m in COUNTED}
    medians = {key: {name: statistics.median(run[name] for run in done) for name in ("seconds", "rss", "rss_open", "rows")}
               for key, done in runs.items()}
    return medians, counted


def report(medians: dict[tuple[str, str], dict[str, float]], counted: dict[tuple[str, str], dict[str, Any]],
           repeats: int, random_rows: int, configs: list[str]) -> None:
    info = next(iter(counted.values()))
    num_rows, disk_bytes, shards = info["num_rows"], info["disk_bytes"], info["shards"]
    per_row = disk_bytes / num_rows
    print(f"\nRemote-read benchmark: {num_rows:,} rows in {shards} shard(s), {disk_bytes / 2**20:,.1f} MiB on disk "
          f"({per_row:,.0f} bytes/row; a batch of {BATCH_ROWS:,} rows is about {per_row * BATCH_ROWS / 2**20:.2f} MiB); "
          f"moto's S3 server on 127.0.0.1; median of {repeats} run(s), each in a fresh process")
    print(f"random: {random_rows:,} random ds[i] (image_mode='bytes'); scan: iter_batches over every batch, "
          f"touching every image byte, in a fresh process; rescan: the same after one untimed scan in that process "
          f"(steady state). Bytes/row = bytes fetched from the store / rows read (untimed counting runs).")
    header = (f"{'configuration':<24}{'random rows/s':>14}{'vs local':>9}{'bytes/row':>11}{'RSS MiB':>8}"
              f"{'scan rows/s':>13}{'vs local':>9}{'bytes/row':>11}{'RSS MiB':>8}{'rescan rows/s':>15}{'vs local':>9}")
    print(header)
    for config in configs:
        cells = []
        for measure in MEASUREMENTS:
            result, local = medians[(config, measure)], medians[("local", measure)]
            rate = result["rows"] / result["seconds"]
            cells.append(f"{rate:>{ {'random': 14, 'scan': 13, 'rescan': 15}[measure]},.0f}"
                         f"{rate / (local['rows'] / local['seconds']):>8.2f}x")
            if measure in COUNTED:
                count = counted.get((config, measure))
                fetched = "-" if count is None else f"{count['fetched'] / count['rows']:,.0f}"
                cells.append(f"{fetched:>11}{result['rss'] / 2**20:>8.0f}")
        print(f"{CONFIGS[config]:<24}{''.join(cells)}")
    print("peak RSS MiB once the dataset is open, before the clock (imports; the S3 client that reads the manifest): "
          + ", ".join(f"{CONFIGS[config]} {medians[(config, 'random')]['rss_open'] / 2**20:.0f}" for config in configs))
    if ("s3", "random") in counted:
        ranged = counted[("s3", "random")]
        batch_bytes = per_row * BATCH_ROWS
        print(f"s3 ranged, random: the {random_rows:,} rows fall in {ranged['batches']:,} distinct batch(es); "
              f"{ranged['fetched'] / 2**20:,.1f} MiB fetched in {ranged['reads']:,} read(s) = "
              f"{ranged['fetched'] / ranged['batches'] / 2**20:.2f} MiB per distinct batch "
              f"({ranged['fetched'] / ranged['batches'] / batch_bytes:.2f}x a batch on disk); "
              f"a row read alone costs about one batch, {batch_bytes / 2**20:.2f} MiB")
        scan = counted[("s3", "scan")]
        print(f"s3 ranged, scan: {scan['fetched'] / disk_bytes:.3f}x the cache's bytes fetched in {scan['reads']:,} "
              f"read(s)")
    for config in ("cache_cold", "cache_warm"):
        if (config, "random") in counted:
            print(f"{CONFIGS[config]}: "
                  + ", ".join(f"{counted[(config, m)]['fetched'] / disk_bytes:.3f}x the cache's bytes fetched ({m})"
                              for m in COUNTED))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload.add_arguments(parser, repeats=3)
    parser.add_argument("--random_rows", type=int, default=1000, help="random rows read per random-access run")
    parser.add_argument("--configs", nargs="+", choices=[c for c in CONFIGS if c != "local"], default=None,
                        help="the configurations besides local disk (all by default)")
    parser.add_argument("--_child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--_measure", choices=MEASUREMENTS, help=argparse.SUPPRESS)
    parser.add_argument("--_uri", help=argparse.SUPPRESS)
    parser.add_argument("--_cache_dir", help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--_count", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        print(json.dumps(child(args._child, args._measure, args._uri, args._cache_dir, args._seed, args.random_rows,
                               args._count)))
        return
    with workload.workdir(args.workdir) as work, s3_server(work / "moto_server.log"):
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        local = work / "local_cache"
        shutil.rmtree(local, ignore_errors=True)
        start = time.perf_counter()
        workload.write_cache(local, pool, args.num_examples, args.shard_size)
        print(f"wrote {local} in {time.perf_counter() - start:.1f}s", flush=True)
        start = time.perf_counter()
        workload.write_cache(S3_URI, pool, args.num_examples, args.shard_size)
        print(f"wrote {S3_URI} in {time.perf_counter() - start:.1f}s", flush=True)
        runner = Runner(work, str(local), args.random_rows)
        runner.fill_warm_cache()
        configs = ["local", *(args.configs or [c for c in CONFIGS if c != "local"])]
        medians, counted = measure_all(runner, args.repeats, configs)
        report(medians, counted, args.repeats, args.random_rows, configs)


if __name__ == "__main__":
    main()
