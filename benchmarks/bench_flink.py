"""WriteToArrowShards on a standalone Flink cluster against the FnApiRunner (issue 39).

The standard workload generated inside the pipeline into the sink, as bench_write.py's
`arrow` configuration (its pipeline, imported), on each of:
  - fnapi:    `--runner=FnApiRunner`, in the run's own process;
  - flink_p1: a standalone Flink cluster (one JobManager, one TaskManager of 2 slots on
              127.0.0.1) at `--parallelism=1`, its Python workers in an EXTERNAL Beam
              worker pool, its jobs submitted through one Beam Flink job server;
  - flink_p2: the same cluster at `--parallelism=2`;
  - flink_p2_w2: the same with `--sdk_worker_parallelism=2`, a Python worker per slot.
One cluster, job server and worker pool serve the whole benchmark: started once before
the first run and stopped at its end, also on an error or Ctrl-C. An untimed job of 1,000
rows runs first, so no timed run pays for the cluster's first job. Every run submits its
pipeline from a fresh process of this script; the configurations take turns, and the
figures are medians over `--repeats`. Each run's manifest must hold `--num_examples`
rows, and each Flink job must have FINISHED, else the benchmark stops naming what it
found. For Flink runs `job s` is the job's duration as the cluster reports it; the rest
of the wall time is submitting it (staging, translating, scheduling). Beam starts one
Python worker per TaskManager for a job (`--sdk_worker_parallelism` defaults to 1), so
at parallelism 2 both slots share one worker: the `workers` column counts them.

Peak memory: for fnapi the run's own peak RSS (its pipeline runs in it). For Flink the
TaskManager JVM's VmHWM (its peak since the cluster started, so it only grows from run
to run), its peak VmRSS sampled every 0.2 s during the run, and the peak of the summed
RSS of the worker pool's Python workers the run started (workers left from an earlier
run are not counted). The submitting process is not counted for Flink.

The JVMs run with the JVM's default JIT and collector, the fair choice for throughput at
200,000 rows: the Flink tests' quick-JIT settings (JAVA_TOOL_OPTIONS in
tests/flink/conftest.py) are not set here; a JAVA_TOOL_OPTIONS already in the
environment is passed on, and printed. The cluster, job server and worker pool are the
Flink tests' own helpers (tests/flink/_flink_cluster.py, install_flink.py and
tests/_services.py): this script puts tests/flink and tests/ on sys.path to import them.
Flink and the job server must be installed first (`python tests/flink/install_flink.py`).

    python benchmarks/bench_flink.py [--num_examples 200000] [--repeats 3]
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path[:0] = [str(HERE), str(TESTS / "flink"), str(TESTS)]
import bench_write  # noqa: E402
import workload  # noqa: E402
from _flink_cluster import FlinkCluster, start_cluster, start_job_server, start_worker_pool  # noqa: E402
from _services import stop  # noqa: E402
from install_flink import FLINK_MINOR, flink_home, job_server_jar  # noqa: E402

CONFIGS = {
    "fnapi": "FnApiRunner, in process",
    "flink_p1": "Flink cluster, parallelism 1",
    "flink_p2": "Flink cluster, parallelism 2",
    "flink_p2_w2": "Flink, parallelism 2, 2 workers",
}
FLAGS = {"flink_p1": ["--parallelism=1"], "flink_p2": ["--parallelism=2"],
         "flink_p2_w2": ["--parallelism=2", "--sdk_worker_parallelism=2"]}
# (what, against): ratios of rows/s.
COMPARISONS = [("flink_p1", "fnapi"), ("flink_p2", "fnapi"), ("flink_p2_w2", "fnapi"), ("flink_p2", "flink_p1"),
               ("flink_p2_w2", "flink_p1")]
# How a run's process learns the Flink runner's flags (a JSON list); fnapi runs have none.
OPTIONS_VARIABLE = "BENCH_FLINK_RUNNER_OPTIONS"
ENVIRONMENT_CACHE_MILLIS = 30_000
SAMPLE_SECONDS = 0.2
WARMUP_EXAMPLES = workload.CHUNK_SIZE
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def child(config: str, pool_dir: str, out: str, num_examples: int, shard_size: int) -> dict[str, Any]:
    """One measured run, in this (fresh) process: its wall seconds and peak RSS; checks the manifest's rows."""
    import beam_shards.beam.sink  # noqa: F401  (imports are not part of the timing)
    from beam_shards import read_metadata

    options = ["--runner=FnApiRunner"] if config == "fnapi" else json.loads(os.environ[OPTIONS_VARIABLE])
    os.sync()
    start = time.perf_counter()
    bench_write.run_pipeline("arrow", workload.Pool(pool_dir), Path(out), num_examples, shard_size, options)
    seconds = time.perf_counter() - start
    rows = read_metadata(out).num_rows
    if rows != num_examples:
        raise SystemExit(f"{config}: the manifest of {out} holds {rows:,} rows, --num_examples is {num_examples:,}")
    # ru_maxrss is in KiB on Linux.
    return {"seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def rss_bytes(pid: int) -> int:
    """The resident memory of process `pid` now; 0 once it has exited."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def high_water_bytes(pid: int) -> int:
    """VmHWM of process `pid`: its peak resident memory since it started."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def descendants(pid: int) -> set[int]:
    """The processes below `pid` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name (field 2) is in parentheses and may hold spaces; the parent pid follows it.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child_pid in children.get(todo.pop(), []):
            if child_pid not in found:
                found.add(child_pid)
                todo.append(child_pid)
    return found


class Sampler:
    """Samples, every SAMPLE_SECONDS while in its `with`, the TaskManager's RSS and the summed RSS
    of the worker pool's processes that were not there when it started."""

    def __init__(self, taskmanager: int, pool: int):
        self.taskmanager, self.pool = taskmanager, pool
        self.taskmanager_peak = self.workers_peak = self.workers_count = 0
        self._done = threading.Event()

    def __enter__(self) -> Sampler:
        self._before = descendants(self.pool)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            self.taskmanager_peak = max(self.taskmanager_peak, rss_bytes(self.taskmanager))
            workers = descendants(self.pool) - self._before
            self.workers_peak = max(self.workers_peak, sum(rss_bytes(pid) for pid in workers))
            self.workers_count = max(self.workers_count, len(workers))
            if self._done.wait(SAMPLE_SECONDS):
                return


# At 200,000 rows of this workload the tests' TaskManager (a 2 GB process, a 0.45 GB heap) ran out of heap
# in a gRPC thread, and the job then hung rather than failed; with 6 GB it ran out of direct memory (the
# gRPC data plane's buffers). A TaskManager of 6 GB with 1 GB of task off-heap memory runs it, and a JVM
# that exits on an exception no thread caught makes such a run fail.
CLUSTER_SETTINGS = {
    "taskmanager": {"bind-host": "127.0.0.1", "host": "127.0.0.1", "numberOfTaskSlots": 2,
                    "memory": {"process": {"size": "6144m"}, "network": {"min": "384m", "max": "384m"},
                               "task": {"off-heap": {"size": "1024m"}}}},
    "cluster": {"uncaught-exception-handling": "FAIL"},
}


@contextlib.contextmanager
def flink_services(work: Path) -> Iterator[tuple[FlinkCluster, list[str], int]]:
    """The cluster, its job server and a worker pool, stopped on leaving; yields the cluster, the
    runner flags less `--parallelism`, and the worker pool's pid."""
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(flink_home(), work / "flink_cluster", CLUSTER_SETTINGS)
        stack.callback(cluster.stop)
        job_server, job_server_process = start_job_server(job_server_jar(), cluster.rest, cluster.conf_dir)
        stack.callback(stop, job_server_process)
        pool, pool_process = start_worker_pool(work / "worker_pool")
        stack.callback(stop, pool_process)
        options = ["--runner=FlinkRunner", f"--flink_master={cluster.rest}", f"--flink_version={FLINK_MINOR}",
                   f"--flink_job_server_jar={job_server_jar()}", f"--job_endpoint={job_server}",
                   "--environment_type=EXTERNAL", f"--environment_config={pool}",
                   f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}"]
        yield cluster, options, pool_process.pid


def measure(config: str, pool: workload.Pool, work: Path, num_examples: int, shard_size: int,
            flink: tuple[FlinkCluster, list[str], int]) -> dict[str, Any]:
    """One run of `config` in a fresh process; for Flink, with the cluster's memory sampled around it
    and the Flink job's own duration."""
    out = work / f"out_{config}"
    command = [sys.executable, __file__, "--_child", config, "--_pool", str(pool.directory), "--_out", str(out),
               "--num_examples", str(num_examples), "--shard_size", str(shard_size)]
    if config == "fnapi":
        return workload.run_fresh(command, out, config, dict(os.environ))
    cluster, options, pool_pid = flink
    env = dict(os.environ, **{OPTIONS_VARIABLE: json.dumps([*options, *FLAGS[config]])})
    taskmanager = cluster.processes[1].pid
    try:
        with Sampler(taskmanager, pool_pid) as sampler:
            run = workload.run_fresh(command, out, config, env)
    except SystemExit as failed:
        raise SystemExit(f"{failed}\nThe cluster's logs:\n{cluster.logs()}") from None
    job = max(cluster.jobs(), key=lambda job: job["start-time"])
    if job["state"] != "FINISHED":
        raise SystemExit(f"{config}: the cluster's latest job {job['jid']} is {job['state']}, not FINISHED")
    return {**run, "job_seconds": job["duration"] / 1000, "rss": high_water_bytes(taskmanager),
            "taskmanager_run": sampler.taskmanager_peak, "workers": sampler.workers_peak,
            "workers_count": sampler.workers_count}


def report(results: dict[str, dict[str, float]], num_examples: int, repeats: int) -> None:
    print(f"\nWriteToArrowShards on Flink vs the FnApiRunner: {num_examples:,} examples, median of {repeats} "
          f"run(s), each submitted from a fresh process")
    print("job s: the Flink job's duration as the cluster reports it (the rest of wall s is submitting it). "
          "peak MB: fnapi the run's own peak RSS; Flink the TaskManager's VmHWM since the cluster started. "
          "TM in run: its peak RSS sampled during the run; workers: how many Python workers the run started "
          "and their summed peak RSS")
    print(f"{'configuration':<30}{'wall s':>8}{'job s':>7}{'rows/s':>9}{'vs fnapi':>9}{'peak MB':>9}"
          f"{'TM in run MB':>13}{'workers':>8}{'workers MB':>11}")
    for config, result in results.items():
        seconds = result["seconds"]
        job = f"{result['job_seconds']:.2f}" if "job_seconds" in result else "-"
        flink = [f"{result[key] / 2**20:.0f}" if key in result else "-" for key in ("taskmanager_run", "workers")]
        count = f"{result['workers_count']:.0f}" if "workers_count" in result else "-"
        print(f"{CONFIGS[config]:<30}{seconds:>8.2f}{job:>7}{num_examples / seconds:>9,.0f}"
              f"{results['fnapi']['seconds'] / seconds:>8.2f}x{result['rss'] / 2**20:>9.0f}{flink[0]:>13}"
              f"{count:>8}{flink[1]:>11}")
    for config, against in COMPARISONS:
        ratio = results[against]["seconds"] / results[config]["seconds"]
        print(f"{CONFIGS[config]} / {CONFIGS[against]}: {ratio:.2f}x the rows/s")


def main(argv: list[str] | None = None) -> None:
    args = workload.common_flags_or_run_child(__doc__.splitlines()[0], CONFIGS, child, argv, repeats=3)
    if args is None:
        return
    if os.environ.get("JAVA_TOOL_OPTIONS"):
        print(f"the JVMs run with JAVA_TOOL_OPTIONS={os.environ['JAVA_TOOL_OPTIONS']} from the environment")
    # The worker pool's Python workers unpickle the example generator, so they must import `workload`:
    # they inherit this process's environment.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    with workload.workdir(args.workdir) as work:
        pool = workload.jpeg_pool(work / "pool", args.num_examples)
        runs: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
        with flink_services(work) as flink:
            # An untimed job first, so the first timed Flink run does not pay for the cluster's
            # and the job server's first job (class loading, a cold JIT).
            measure("flink_p2", pool, work, WARMUP_EXAMPLES, args.shard_size, flink)
            for _ in range(args.repeats):
                for config in CONFIGS:
                    runs[config].append(measure(config, pool, work, args.num_examples, args.shard_size, flink))
        results = {config: {key: statistics.median(run[key] for run in done) for key in done[0]}
                   for config, done in runs.items()}
        report(results, args.num_examples, args.repeats)


if __name__ == "__main__":
    main()
