"""A standalone Flink cluster and a Beam worker pool on 127.0.0.1, started and stopped by the Flink fixtures.

The cluster is what `start-cluster.sh` starts, one JobManager and one TaskManager with
2 slots, but each in the foreground as a child of the tests (`jobmanager.sh
start-foreground`), so the fixture that started it stops it whatever happens. Its ports
are free ones, its configuration a copy of the distribution's written into a folder of
its own (FLINK_CONF_DIR), and its logs stay in that folder for failure messages. The
worker pool runs the Python SDK workers the cluster's tasks ask for
(`--environment_type=EXTERNAL`), in this venv with the tests' PYTHONPATH. One Beam job
server, the JVM that turns a pipeline into a Flink job, serves every job of the session
(`--job_endpoint`) rather than one started for each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

import yaml

from _services import free_port, stop, wait_for_port

SLOTS = 2
# A Python worker outlives the stage that started it by this long, so the next stage reuses it.
ENVIRONMENT_CACHE_MILLIS = 30_000
# A JobManager and a TaskManager start in about 10s on an idle 2-core machine, and several times that on a busy one.
CLUSTER_START_SECONDS = 180


@dataclasses.dataclass
class FlinkCluster:
    """A running cluster: its REST address (what `--flink_master` takes) and where its logs are."""

    rest: str
    flink_home: pathlib.Path
    conf_dir: pathlib.Path
    processes: list[subprocess.Popen]

    def overview(self) -> dict:
        with urllib.request.urlopen(f"http://{self.rest}/overview", timeout=5) as response:
            return json.load(response)

    def logs(self, lines: int = 40) -> str:
        """The last `lines` lines of each process's log, for a failure message."""
        tails = []
        for log in sorted(self.conf_dir.glob("*.out")):
            tails.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails)

    def jobs(self) -> list[dict]:
        """Each job's id, name and state, as the REST API's /jobs/overview gives them."""
        with urllib.request.urlopen(f"http://{self.rest}/jobs/overview", timeout=5) as response:
            return json.load(response)["jobs"]

    def running_vertices(self) -> list[str]:
        """The names of the RUNNING vertices (fused steps) of every running job."""
        names = []
        for job in self.jobs():
            if job["state"] == "RUNNING":
                with urllib.request.urlopen(f"http://{self.rest}/jobs/{job['jid']}", timeout=5) as response:
                    names += [vertex["name"] for vertex in json.load(response)["vertices"]
                              if vertex["status"] == "RUNNING"]
        return names

    def exceptions(self, job_id: str) -> list[str]:
        """The failures Flink recorded for a job (its exception history), each as the exception's text."""
        with urllib.request.urlopen(f"http://{self.rest}/jobs/{job_id}/exceptions", timeout=5) as response:
            return [entry["exceptionName"] + ": " + entry.get("stacktrace", "")
                    for entry in json.load(response)["exceptionHistory"]["entries"]]

    def start(self, role: str) -> subprocess.Popen:
        """Starts a `jobmanager` or a `taskmanager` in the foreground, its output appended to `<role>.out`."""
        env = {**os.environ, "FLINK_CONF_DIR": str(self.conf_dir), "FLINK_LOG_DIR": str(self.conf_dir)}
        with open(self.conf_dir / f"{role}.out", "ab") as log:
            process = subprocess.Popen([str(self.flink_home / "bin" / f"{role}.sh"), "start-foreground"],
                                       stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop(process)


def write_conf(flink_home: pathlib.Path, conf_dir: pathlib.Path, settings: dict | None = None) -> str:
    """Writes the distribution's configuration, on free loopback ports with 2 slots, and `settings`
    (top-level keys) into `conf_dir`; returns the REST address."""
    conf = yaml.safe_load((flink_home / "conf" / "config.yaml").read_text())
    rest_port = free_port()
    conf.update({
        "jobmanager": {"bind-host": "127.0.0.1", "rpc": {"address": "127.0.0.1", "port": free_port()},
                       "memory": {"process": {"size": "1024m"}}},
        # A batch job's blocking result partition takes sort-shuffle's minimum of network buffers
        # (512 by default), and a job holding every conversion pipeline, --skip_bad and all, has
        # more partitions at once than Flink's default 10% of the memory holds ("Insufficient
        # number of network buffers"): 384 MB of network memory, and 64 buffers a partition.
        "taskmanager": {"bind-host": "127.0.0.1", "host": "127.0.0.1", "numberOfTaskSlots": SLOTS,
                        "memory": {"process": {"size": "2048m"}, "network": {"min": "384m", "max": "384m"}},
                        "network": {"sort-shuffle": {"min-buffers": 64}}},
        "rest": {"address": "127.0.0.1", "bind-address": "127.0.0.1", "port": rest_port},
        "parallelism": {"default": SLOTS},
        "io": {"tmp": {"dirs": str(conf_dir / "tmp")}},
        **(settings or {}),
    })
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf))
    for name in ("log4j-console.properties", "log4j.properties"):
        (conf_dir / name).write_bytes((flink_home / "conf" / name).read_bytes())
    return f"127.0.0.1:{rest_port}"


def start_cluster(flink_home: pathlib.Path, conf_dir: pathlib.Path, settings: dict | None = None) -> FlinkCluster:
    """Starts a JobManager and a TaskManager (`write_conf` takes `settings`); returns once the
    TaskManager's slots are registered."""
    rest = write_conf(flink_home, conf_dir, settings)
    cluster = FlinkCluster(rest, flink_home, conf_dir, [])
    try:
        cluster.start("jobmanager")
        cluster.start("taskmanager")
        wait_for_slots(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_for_slots(cluster: FlinkCluster) -> None:
    """Returns once the cluster's TaskManager has registered its slots (raises if any process exited)."""
    deadline = time.monotonic() + CLUSTER_START_SECONDS
    seen = None
    while time.monotonic() < deadline:
        exited = [process.args[0] for process in cluster.processes if process.poll() not in (None, -9)]
        if exited:
            raise RuntimeError(f"{', '.join(exited)} exited while the Flink cluster started:\n{cluster.logs()}")
        try:
            seen = cluster.overview()
            if seen.get("slots-total") == SLOTS:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the Flink cluster at {cluster.rest} had not registered {SLOTS} slots within "
                       f"{CLUSTER_START_SECONDS}s (last overview: {seen}):\n{cluster.logs()}")


def start_worker_pool(log_dir: pathlib.Path, env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen]:
    """Starts Beam's Python worker pool on a free loopback port, `env` added to its environment;
    returns its address and process.

    Each worker runs `_sdk_worker_boot.py` in this venv, so it has the job's pipeline options."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    boot = log_dir / "sdk_worker_boot"
    boot.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{pathlib.Path(__file__).with_name("_sdk_worker_boot.py")}" "$@"\n')
    boot.chmod(0o755)
    with open(log_dir / "worker_pool.out", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                                    f"--service_port={port}", f"--container_executable={boot}"],
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                   start_new_session=True)
    return f"localhost:{_listening(process, port, 'the Beam worker pool')}", process


def start_job_server(jar: pathlib.Path, flink_master: str, log_dir: pathlib.Path) -> tuple[str, subprocess.Popen]:
    """Starts the Beam Flink job server for `flink_master` on a free loopback port; returns its address and process."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "job_server.out", "wb") as log:
        process = subprocess.Popen(["java", "-Dorg.slf4j.simpleLogger.showDateTime=true", "-jar", str(jar), "--flink-master", flink_master, "--job-host", "127.0.0.1",
                                    "--job-port", str(port), "--artifact-port", "0", "--expansion-port", "-1",
                                    "--artifacts-dir", str(log_dir / "artifacts")],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return f"127.0.0.1:{_listening(process, port, 'the Beam Flink job server')}", process


def _listening(process: subprocess.Popen, port: int, what: str) -> int:
    """`port`, once `process` listens on it; the process stopped if it never does."""
    try:
        wait_for_port(port, process, what)
    except BaseException:
        stop(process)
        raise
    return port
