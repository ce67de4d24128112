"""The Flink fixtures: what `install_flink.py` installed, the runner flags, and a cluster for the session.

- `flink_install`: Java, the job server jar and FLINK_HOME. Where one is missing the test
  skips naming it, or fails when BEAM_SHARDS_REQUIRE_FLINK=1 (`.ci/run` sets it).
- `flink_local_options`: `--runner=FlinkRunner --flink_master=[local]`, with the Python
  workers in the test's process (LOOPBACK): every job starts a job server and an
  embedded Flink of its own.
- `flink_cluster_options`: the session's standalone cluster (`flink_cluster`) with
  `--parallelism=2`, its jobs submitted by the session's job server and its Python
  workers in the session's worker pool (EXTERNAL), each kept for the job's later stages.

- `flink_options`: each of the two in turn (a test that takes it runs on both).

Every test that takes one of them is marked `flink` (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
from collections.abc import Iterator

import pytest

from _flink_cluster import (ENVIRONMENT_CACHE_MILLIS, SLOTS, FlinkCluster, start_cluster, start_job_server,
                            start_worker_pool)
from _services import stop
from install_flink import FLINK_MINOR, FLINK_VERSION, flink_home, job_server_jar

REQUIRE_VARIABLE = "BEAM_SHARDS_REQUIRE_FLINK"
# Every JVM of these tests (the cluster's, the job servers, Beam's [local] Flink) runs small jobs on
# 2 shared cores: the quick JIT alone (C1) and the serial collector spend about a third less CPU
# than the defaults, which suit long-running services.
JAVA_TOOL_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclasses.dataclass(frozen=True)
class FlinkInstall:
    job_server_jar: pathlib.Path
    flink_home: pathlib.Path

    def runner_options(self, master: str) -> list[str]:
        return ["--runner=FlinkRunner", f"--flink_master={master}", f"--flink_version={FLINK_MINOR}",
                f"--flink_job_server_jar={self.job_server_jar}"]


@pytest.fixture(scope="session")
def flink_install() -> Iterator[FlinkInstall]:
    """What the Flink tests run on; skips (fails with BEAM_SHARDS_REQUIRE_FLINK=1) naming whatever is missing.

    Sets JAVA_TOOL_OPTIONS for the JVMs the session starts."""
    missing = []
    if shutil.which("java") is None:
        missing.append("java (Java 11 or later) on PATH")
    if not job_server_jar().is_file():
        fetch = "" if shutil.which("mvn") else ", and mvn to fetch it"
        missing.append(f"the Beam Flink job server {job_server_jar()}{fetch}")
    if not (flink_home() / "lib" / f"flink-dist-{FLINK_VERSION}.jar").is_file():
        missing.append(f"the Flink {FLINK_VERSION} distribution {flink_home()}")
    if missing:
        reason = f"the Flink tests need {'; '.join(missing)} (python tests/flink/install_flink.py installs them)"
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{reason}; {REQUIRE_VARIABLE}=1 says they must run", pytrace=False)
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAVA_TOOL_OPTIONS", JAVA_TOOL_OPTIONS)
        yield FlinkInstall(job_server_jar(), flink_home())


@pytest.fixture(scope="session")
def flink_local_options(flink_install: FlinkInstall) -> list[str]:
    return [*flink_install.runner_options("[local]"), "--environment_type=LOOPBACK"]


@pytest.fixture(scope="session")
def flink_cluster(flink_install: FlinkInstall, tmp_path_factory) -> Iterator[FlinkCluster]:
    """A JobManager and a TaskManager of 2 slots on 127.0.0.1 for the session; its logs in the session's tmp."""
    cluster = start_cluster(flink_install.flink_home, tmp_path_factory.mktemp("flink_cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def beam_worker_pool(flink_install: FlinkInstall, tmp_path_factory) -> Iterator[str]:
    """Beam's Python worker pool for the session (this venv, the tests' PYTHONPATH); yields its address."""
    address, process = start_worker_pool(tmp_path_factory.mktemp("beam_worker_pool"))
    try:
        yield address
    finally:
        stop(process)


@pytest.fixture(scope="session")
def flink_cluster_job_server(flink_install: FlinkInstall, flink_cluster: FlinkCluster) -> Iterator[str]:
    """The Beam job server that submits the session's jobs to `flink_cluster`; yields its address."""
    address, process = start_job_server(flink_install.job_server_jar, flink_cluster.rest, flink_cluster.conf_dir)
    try:
        yield address
    finally:
        stop(process)


@pytest.fixture(scope="session")
def flink_cluster_options(flink_install: FlinkInstall, flink_cluster: FlinkCluster, flink_cluster_job_server: str,
                          beam_worker_pool: str) -> list[str]:
    return [*flink_install.runner_options(flink_cluster.rest), f"--job_endpoint={flink_cluster_job_server}",
            f"--parallelism={SLOTS}", "--environment_type=EXTERNAL", f"--environment_config={beam_worker_pool}",
            f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}"]


@pytest.fixture(scope="session", params=["local", "cluster"])
def flink_options(request, flink_install: FlinkInstall) -> list[str]:
    """The flags of `flink_local_options`, then of `flink_cluster_options`. A session-scoped parameter
    makes pytest run every test on the first before any on the second, so the cluster's tests come
    together: xdist then tends to give them to one worker, which starts the only cluster."""
    return request.getfixturevalue(f"flink_{request.param}_options")
