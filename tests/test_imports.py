"""Importing the package from many threads at once: Beam's SDK workers unpickle several steps in parallel.

Python holds a lock per module while it runs the module, and a thread that imports
`a.b.c` first takes `a.b.c`'s lock and then imports `a` and `a.b`. A package face that
imported its own modules, or two modules importing each other, would let two threads
each hold a lock the other waits for: Python then raises `_DeadlockError` in one, or hands
out a module that is half run ("cannot import name ... from partially initialized module").
That failed a Flink job of this suite. The import graph must therefore have no cycle.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import random
import subprocess
import sys

import pytest

import beam_shards

ROOT = pathlib.Path(beam_shards.__file__).parent.parent
PACKAGES = ("beam_shards", "pipelines")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if p.name != "__main__.py"}


MODULES = _modules()
FACES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def _module_level_imports(path: pathlib.Path) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (not those inside functions)."""
    found = []
    pending = list(ast.parse(path.read_text(), str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return found


def _lazy_names(face: str) -> dict[str, str]:
    return getattr(importlib.import_module(face), "_LAZY", {})


def _waits_on(name: str) -> set[str]:
    """The modules of ours that importing `name` may wait for: its parent, and what it imports."""
    waits = {name.rpartition(".")[0]} & MODULES.keys()
    for node in _module_level_imports(MODULES[name]):
        if isinstance(node, ast.Import):
            waits |= {alias.name for alias in node.names} & MODULES.keys()
            continue
        source = node.module if not node.level else name.rsplit(".", node.level)[0] + f".{node.module}"
        if source not in MODULES:
            continue
        waits.add(source)
        for alias in node.names:
            if f"{source}.{alias.name}" in MODULES:
                waits.add(f"{source}.{alias.name}")
            elif alias.name in _lazy_names(source):
                waits.add(_lazy_names(source)[alias.name])
    return waits - {name}


def test_no_face_imports_a_module_of_its_own_package():
    for face in FACES:
        own = [f"{face}:{node.lineno}" for node in _module_level_imports(MODULES[face])
               if any(m == face or m.startswith(f"{face}.") for m in _imported_modules(node))]
        assert not own, f"{own}: a face that imports its own modules deadlocks threads importing them; use _LAZY"


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


def test_the_import_graph_of_the_package_and_the_pipelines_has_no_cycle():
    graph = {name: _waits_on(name) for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.parametrize("face", FACES)
def test_every_name_a_face_lists_is_there(face):
    module = importlib.import_module(face)
    lazy = _lazy_names(face)
    assert set(lazy) <= set(getattr(module, "__all__", lazy)), f"{face}: _LAZY names what __all__ does not"
    for name in getattr(module, "__all__", []):
        assert getattr(module, name) is not None, f"{face}.{name}"
    for name, source in lazy.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name)


_RACE = """
import importlib, sys, threading
import apache_beam.runners.worker.sdk_worker  # loaded before any step, as in an SDK worker
names = sys.argv[1:]
start = threading.Barrier(len(names))
errors = []
def load(name):
    start.wait()
    try:
        importlib.import_module(name)
    except BaseException as error:
        errors.append(f"{name}: {type(error).__name__}: {error}")
threads = [threading.Thread(target=load, args=(name,)) for name in names]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("\\n".join(errors))
sys.exit(1 if errors else 0)
"""


@pytest.mark.timeout(240)
def test_threads_importing_every_module_at_once_all_succeed():
    names = sorted(MODULES)
    random.Random(0).shuffle(names)  # any order failed before the faces were lazy
    run = subprocess.run([sys.executable, "-c", _RACE, *names], capture_output=True, text=True, timeout=200,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_a_schema_read_alone_knows_every_kind_of_feature():
    spec = ('{"a": {"_type": "Struct", "fields": {"b": {"_type": "Sequence", "feature": {"_type": "Image"}}, '
            '"c": {"_type": "Json"}, "d": {"_type": "Array", "shape": [2], "dtype": "float32"}}}}')
    code = ("import json, sys\nfrom beam_shards.features.schema import Features\n"
            f"print(Features.from_dict(json.loads({spec!r})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Struct" in run.stdout and "Image" in run.stdout and "Array" in run.stdout
