"""A Flink TaskManager killed (SIGKILL) while a job writes, on a cluster of this test's own with a
fixed-delay restart strategy: a new TaskManager takes its place and Flink runs the job again. It
finishes with the FnApiRunner's bytes, every row once, `verify` passing, and gc removing only
staged files, after which it finds nothing.

The strategy is the cluster's (`restart-strategy` in its configuration): Beam's per-job
`--number_of_execution_retries` did not reach this portable job (Flink answered the kill with
"Recovery is suppressed by NoRestartBackoffTimeStrategy").

The kill lands mid-step: the step's files were seen under the cache (for the merge, Flink was
running the step's vertex), nothing was published yet, the job was running, and Flink's
exception history records the failure the kill caused. On a fast machine the merge and
finalize take a fraction of a second: less than Flink's REST API takes to show the merge
running (it serves a job's state up to `web.refresh-interval` old, which the cluster
shortens), and finalize published before a look found its first shard moved. The tests'
Python workers wait DELAY_SECONDS before each merge of small shards and before finalize
commits the moved shards as a version (`DELAYED`, through `_sdk_worker_boot.py`).
"""

from __future__ import annotations

import datetime
import glob
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from beam_shards import ShardedDataset
from beam_shards.cli import main as beam_shards_cli
from beam_shards.versions.gc import Retention, collect_garbage, find_garbage
from pipelines import demo

from _flink_cluster import (ENVIRONMENT_CACHE_MILLIS, SLOTS, FlinkCluster, start_cluster, start_job_server,
                            start_worker_pool)
from _sdk_worker_boot import DELAYS_VARIABLE
from _services import stop
from test_deterministic import shard_digests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 2000
DEMO = ["--num_examples", str(ROWS), "--image_size", "8", "--shard_size", "8KB", "--batch_size", "16",
        "--progress", "0"]
# A lost TaskManager is noticed within seconds, not the default 50; the job is run again up to 3 times;
# the REST API shows a job's state at most 0.5 s old (3 s by default).
FAULT_SETTINGS = {"heartbeat": {"interval": 1000, "timeout": 8000},
                  "restart-strategy": {"type": "fixed-delay", "fixed-delay": {"attempts": 3, "delay": "2 s"}},
                  "web": {"refresh-interval": 500}}
# What shows each step running: a bundle's staged shard (the cache's _staging/<write id>/<attempt>/);
# Flink running the step that merges small shards (its vertex's name holds the step's label);
# a shard moved into place by finalize (before it writes the version and _metadata.json).
STAGED, MERGING, MOVED = "_staging/*/*/*.arrow", "MergeBins", "shard-*.arrow"
STEPS = {"bundles": STAGED, "merge": MERGING, "finalize": MOVED}
# Functions the workers delay (module:function), so that each step runs for seconds on a fast machine too.
DELAYED = ("beam_shards.beam.staging:merge_shards", "beam_shards.versions.commit:_commit")
DELAY_SECONDS = 3.0


@pytest.fixture(scope="module")
def demo_on_fnapi(tmp_path_factory) -> list[str]:
    output = str(tmp_path_factory.mktemp("fnapi") / "demo")
    demo.run([*DEMO, "--output", output, "--runner=FnApiRunner"])
    return shard_digests(output)


@pytest.fixture(scope="module")
def slow_worker_pool(flink_install, tmp_path_factory) -> Iterator[str]:
    """A Beam worker pool whose workers wait DELAY_SECONDS before each call of `DELAYED`; yields its address."""
    delays = ",".join(f"{function}={DELAY_SECONDS}" for function in DELAYED)
    address, process = start_worker_pool(tmp_path_factory.mktemp("slow_worker_pool"), {DELAYS_VARIABLE: delays})
    try:
        yield address
    finally:
        stop(process)


def _run_in_thread(argv: list[str]) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["manifest"] = demo.run(argv)
        except Exception as error:  # reported by the test's assertion
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_for(step: str, output: str, cluster: FlinkCluster, thread: threading.Thread, seconds: float) -> list[str]:
    """What shows `step` running (files it wrote, or Flink's running vertices), once there is any."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and thread.is_alive():
        if STEPS[step] == MERGING:
            found = [name for name in cluster.running_vertices() if MERGING in name]
        else:
            found = glob.glob(os.path.join(output, STEPS[step]))
        if found:
            return found
        time.sleep(0.05)
    return []


@pytest.mark.parametrize("step", STEPS)
def test_a_taskmanager_killed_mid_write_loses_and_duplicates_nothing(step, flink_install, slow_worker_pool,
                                                                     demo_on_fnapi, tmp_path):
    cluster = start_cluster(flink_install.flink_home, tmp_path / "cluster", FAULT_SETTINGS)
    job_server = None
    try:
        endpoint, job_server = start_job_server(flink_install.job_server_jar, cluster.rest, cluster.conf_dir)
        output = str(tmp_path / "demo")
        argv = [*DEMO, "--output", output, *flink_install.runner_options(cluster.rest), f"--job_endpoint={endpoint}",
                f"--parallelism={SLOTS}", "--environment_type=EXTERNAL", f"--environment_config={slow_worker_pool}",
                f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}"]
        thread, outcome = _run_in_thread(argv)
        evidence = _wait_for(step, output, cluster, thread, 600)
        published = os.path.exists(os.path.join(output, "_metadata.json"))
        running = [job for job in cluster.jobs() if job["state"] == "RUNNING"]
        taskmanager = cluster.processes[1]
        os.kill(taskmanager.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert evidence and not published and thread.is_alive() and running, (
            f"the kill did not land during {step}: evidence {evidence[:3]}, published {published}, "
            f"running jobs {cluster.jobs()}, "
            f"outcome {outcome}\n{cluster.logs()}")
        taskmanager.wait(timeout=30)
        cluster.start("taskmanager")
        thread.join(timeout=600)
        assert not thread.is_alive(), f"the job did not end within 600s of the kill\n{cluster.logs()}"
        (job,) = running
        history = cluster.exceptions(job["jid"])
        assert history, f"Flink recorded no failure of job {job['jid']}: the kill missed it\n{cluster.logs()}"
        print(f"{step}: killed {time.monotonic() - killed_at:.0f}s before the job ended; outcome {outcome}; "
              f"first failure: {history[0][:200]}")
    finally:
        if job_server is not None:
            stop(job_server)
        cluster.stop()

    assert "manifest" in outcome, f"the job did not finish after the kill: {outcome}"
    ids = [row["id"] for row in ShardedDataset(output, columns=["id"])]
    assert sorted(ids) == list(range(ROWS)), f"{len(ids)} rows, {len(set(ids))} distinct"
    assert shard_digests(output) == demo_on_fnapi
    assert beam_shards_cli(["verify", output]) == 0
    retention = Retention(keep=1, min_age=datetime.timedelta(0))
    removed = collect_garbage(output, retention)
    assert all(name.startswith("_staging/") for name in removed.files), removed
    assert not find_garbage(output, retention).files
    print(f"{step}: gc removed {len(removed.files)} staged files")
