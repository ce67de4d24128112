"""Fixtures of the Beam tests: Beam's portable job service with an external SDK worker pool.

This is the path Flink and Dataflow use: the pipeline is translated to the portable
representation, submitted to a job service, and executed by SDK workers in other
processes that share nothing with the test but the file system.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from _services import free_port, stop, wait_for_port


class PortableServices:
    """A running job service and worker pool; `options()` builds PipelineOptions for them."""

    def __init__(self, job_port: int, pool_port: int):
        self.job_port = job_port
        self.pool_port = pool_port

    def __repr__(self) -> str:
        return f"PortableServices(job_port={self.job_port}, pool_port={self.pool_port})"

    def options(self, *args: str) -> PipelineOptions:
        return PipelineOptions([
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{self.job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{self.pool_port}",
            *args,
        ])


@pytest.fixture(scope="session")
def portable_services(tmp_path_factory) -> Iterator[PortableServices]:
    """Starts Beam's local job service and an external worker pool on free loopback ports."""
    env = dict(os.environ)
    # The pool starts workers with plain `python`: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    logs = tmp_path_factory.mktemp("portable")
    job_port, pool_port = free_port(), free_port()
    commands = {
        "job service": [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                        "--port", str(job_port)],
        "worker pool": [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                        "--service_port", str(pool_port)],
    }
    processes = {}
    try:
        for name, command in commands.items():
            log = open(logs / f"{name.replace(' ', '_')}.log", "wb")
            processes[name] = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)
        wait_for_port(job_port, processes["job service"], "job service")
        wait_for_port(pool_port, processes["worker pool"], "worker pool")
        yield PortableServices(job_port, pool_port)
    finally:
        for process in processes.values():
            stop(process)


@pytest.fixture
def portable_options(portable_services: PortableServices):
    """A function building PipelineOptions for the portable services (extra flags appended)."""
    return portable_services.options
