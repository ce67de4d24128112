"""Fixtures: Beam's portable job service with an external SDK worker pool, and the object stores (`_stores`).

This is the path Flink and Dataflow use: the pipeline is translated to the portable
representation, submitted to a job service, and executed by SDK workers in other
processes that share nothing with the test but the file system.
"""

from __future__ import annotations

import glob
import inspect
import os
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from _services import free_port, stop, wait_for_port
from _stores import faulty_s3, gcs_server, s3_server, store  # noqa: F401 (fixtures)

# Test modules import the helpers of tests/ and a few other test modules by their bare names,
# and Beam pickles test functions by reference to their module: tests/ and each folder of test
# modules are import roots, here and in every process started from here (multi_processing and
# portable SDK workers, scripts). A test module's name is its file's, so no two may share one.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_IMPORT_ROOTS = [_TESTS_DIR, *sorted({os.path.dirname(module)
                                      for module in glob.glob(os.path.join(_TESTS_DIR, "*", "test_*.py"))})]
sys.path.extend(root for root in _IMPORT_ROOTS if root not in sys.path)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*_IMPORT_ROOTS, os.environ.get("PYTHONPATH")]))


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


# markers ---------------------------------------------------------------------------
# Every test is marked by what it needs, read from its code (and the helpers and fixtures
# it calls in tests/), so a new test is marked without anyone remembering to:
#   beam        runs a Beam pipeline (apache_beam, the sink or source, or a conversion pipeline)
#   stores      starts a real protocol server (moto's S3, fake-gcs-server)
#   subprocess  starts other processes (a script, multi_processing workers, the portable runner)
#   slow        marked by hand: long fault-injection or large-data tests
# The edit loop skips the last two kinds: pytest -m "not slow and not stores".

_STORE_FIXTURES = {"store", "s3_server", "gcs_server", "faulty_s3"}
_PROCESS_FIXTURES = {"portable_options", "portable_services"}
_BEAM_MODULES = ("apache_beam", "beam_shards.beam", "pipelines")
_PROCESS_MODULES = ("subprocess", "multiprocessing", "torch.multiprocessing", "concurrent.futures.process")
_PROCESS_WORDS = {"multi_processing", "spawn", "forkserver", "fork", "Popen", "ProcessPoolExecutor"}


def _needs(item: pytest.Item) -> set[str]:
    """What a test needs, from the names its code and its helpers' code use."""
    needs: set[str] = set()
    seen: set[int] = set()

    def visit_object(obj) -> None:
        if obj is None or id(obj) in seen:
            return
        seen.add(id(obj))
        name = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None) or ""
        if name.startswith(_BEAM_MODULES):
            needs.add("beam")
        if name.startswith(_PROCESS_MODULES):
            needs.add("subprocess")
        if inspect.isclass(obj) and _in_tests(obj):
            for member in vars(obj).values():
                visit_object(getattr(member, "__func__", member))
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_filename.startswith(_TESTS_DIR):
            visit_code(code, obj.__globals__)
        for wrapped in (getattr(obj, "func", None), getattr(obj, "__wrapped__", None)):  # partials, decorators
            visit_object(wrapped)

    def visit_code(code: types.CodeType, module_globals: dict) -> None:
        if _PROCESS_WORDS.intersection(code.co_names):
            needs.add("subprocess")
        for name in code.co_names:
            visit_object(module_globals.get(name))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit_code(const, module_globals)
            elif isinstance(const, str) and (const in _PROCESS_WORDS or "--direct_running_mode=multi_processing" in const):
                needs.add("subprocess")

    visit_object(getattr(item, "function", None))
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        words = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(w, str) and (w in _PROCESS_WORDS or "multi_processing" in w) for w in words):
            needs.add("subprocess")
    for name in item.fixturenames:
        for definition in item._fixtureinfo.name2fixturedefs.get(name, ()):
            visit_object(definition.func)
    if _STORE_FIXTURES.intersection(item.fixturenames):
        needs.add("stores")
    if _PROCESS_FIXTURES.intersection(item.fixturenames):
        needs.update(("subprocess", "beam"))
    for marker in ("beam", "stores", "subprocess"):
        if item.get_closest_marker(marker):
            needs.add(marker)
    return needs


def _in_tests(obj) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    return (getattr(module, "__file__", None) or "").startswith(_TESTS_DIR)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(_needs(item)):
            item.add_marker(marker)
