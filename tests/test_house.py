"""The package's structure: data flows downhill between sub-packages, and no private name crosses a module.

`pipelines/` stands above the whole package: nothing in `beam_shards` imports it, its
modules have floors of their own, and it takes names from the package's faces, reaching
below them only into the few modules listed in PIPELINES_REACH.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import beam_shards

PACKAGE = pathlib.Path(beam_shards.__file__).parent
PIPELINES = PACKAGE.parent / "pipelines"
# Each part of the package may import only parts of a lower floor (or its own).
FLOORS = {
    "_version": 0, "errors": 0, "display": 0, "units": 0, "lazy": 0,
    "storage": 1, "terminal": 1, "features": 2, "format": 3, "inference": 3, "shards": 4, "progress": 4, "versions": 5,
    "write": 6, "hf": 7, "beam": 7, "read": 8, "cli": 9,
}
# The floors of pipelines/ among themselves: the modules each job of the pipelines lives in,
# `common` (their face), then what reads each input format.
PIPELINE_FLOORS = {
    "where": 0, "runners": 0, "report": 0, "tf_example": 0, "lines": 0, "nesting": 0, "classes": 0, "opening": 0,
    "bad_inputs": 1, "flags": 1, "tfds": 1, "chunks": 1,
    "rows": 2, "inference": 2, "raw_batches": 2, "shell": 2,
    "write": 3, "cast_batches": 3, "summaries": 3, "command": 3,
    "running": 4, "tabular": 4,
    "common": 5, "tabular_beam": 5, "local_write": 5,
    "tabular_local": 6, "tfrecord_io": 6, "image_folder": 6, "demo": 6, "parquet": 6,
    "csv": 7, "jsonl": 7, "tfrecord": 7,
    "infer": 8,
}
# The modules below the package's faces that pipelines/ reaches into, for names no face exports.
PIPELINES_REACH = {
    "beam_shards.beam.counters", "beam_shards.features.image_check", "beam_shards.storage.folders",
    "beam_shards.storage.fs",
}


def _imports(path: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every `import x` and `from x import names` in a file, and of every
    module a lazy face names (its `_LAZY` dict: name -> module), as if imported."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
              and any(isinstance(target, ast.Name) and target.id == "_LAZY" for target in node.targets)):
            found.extend((value.lineno, value.value, []) for value in node.value.values
                         if isinstance(value, ast.Constant) and isinstance(value.value, str))
    return found


def _part(module: str) -> str | None:
    """The part of beam_shards a module belongs to (`beam_shards.read.backend` -> "read")."""
    pieces = module.split(".")
    return pieces[1] if pieces[0] == "beam_shards" and len(pieces) > 1 else None


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_part_of_the_package_has_a_floor():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()} - {"__init__"}
    assert parts <= FLOORS.keys(), f"give {parts - FLOORS.keys()} a floor in FLOORS"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_from_lower_floors_of_the_package(path):
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    for line, module, names in _imports(path):
        targets = [_part(module)] if _part(module) else [name for name in names if module == "beam_shards"]
        for target in targets:
            if target in FLOORS and target != own:
                assert FLOORS[target] < FLOORS[own], f"{path.name}:{line} ({own}) imports {target}, a floor up"


@pytest.mark.parametrize("path", _modules() + sorted(PIPELINES.glob("*.py")), ids=lambda p: p.name)
def test_no_private_name_is_imported_from_another_module(path):
    for line, module, names in _imports(path):
        if module.startswith(("beam_shards", "pipelines")):
            private = [name for name in names if name.startswith("_") and name != "__version__"]
            assert not private, f"{path.name}:{line} imports private {private} from {module}"


def _pipeline_modules() -> list[pathlib.Path]:
    return sorted(p for p in PIPELINES.glob("*.py") if p.name != "__init__.py")


def test_every_pipelines_module_has_a_floor():
    names = {path.stem for path in _pipeline_modules()}
    assert names == PIPELINE_FLOORS.keys(), f"floors to add: {names - PIPELINE_FLOORS.keys()}, " \
                                            f"to remove: {PIPELINE_FLOORS.keys() - names}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_never_imports_the_pipelines(path):
    for line, module, _ in _imports(path):
        assert module.split(".")[0] != "pipelines", f"{path.name}:{line} imports {module}, which stands above the package"


@pytest.mark.parametrize("path", _pipeline_modules(), ids=lambda p: p.name)
def test_a_pipelines_module_imports_only_from_its_lower_floors(path):
    for line, module, names in _imports(path):
        targets = names if module == "pipelines" else [module.split(".")[1]] if module.startswith("pipelines.") else []
        for target in targets:
            assert PIPELINE_FLOORS[target] < PIPELINE_FLOORS[path.stem], (
                f"{path.name}:{line} imports pipelines.{target}, not on a lower floor")


def _is_module(name: str) -> bool:
    """Whether a dotted name is a module or sub-package of beam_shards (`beam_shards.storage.fs`)."""
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or path.is_dir()


def _faces() -> dict[str, set[str]]:
    """Each face of the package and the names it exports: `beam_shards` and every sub-package with an `__all__`."""
    faces = {"beam_shards": set(beam_shards.__all__)}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        package = importlib.import_module(f"beam_shards.{init.parent.name}")
        if hasattr(package, "__all__"):
            faces[package.__name__] = set(package.__all__)
    return faces


@pytest.mark.parametrize("path", sorted(PIPELINES.glob("*.py")), ids=lambda p: p.name)
def test_pipelines_take_the_packages_names_from_its_faces(path):
    faces = _faces()
    exported = set().union(*faces.values())
    for line, module, names in _imports(path):
        if _part(module) is None and module != "beam_shards":
            continue
        for name in names:
            if module in faces and name in faces[module]:
                continue  # a name a face exports, from that face
            target = f"{module}.{name}"
            if not _is_module(target):
                assert name not in exported, f"{path.name}:{line} imports {name} from {module}; take it from a face"
                target = module
            if target.count(".") == 1 and not (PACKAGE / _part(target)).is_dir():
                continue  # a module beside the face, such as beam_shards.display or beam_shards.units
            assert target in PIPELINES_REACH, (
                f"{path.name}:{line} reaches into {target}: take what it needs from a face, or add it to PIPELINES_REACH")


def _sub_packages() -> list[str]:
    return sorted(init.parent.name for init in PACKAGE.glob("*/__init__.py"))


def _names_taken_across(path: pathlib.Path) -> list[tuple[int, str, str]]:
    """(line, sub-package, name) of every name a file takes from a sub-package other than its own.

    A name comes by `from beam_shards.part.module import name`, `from beam_shards.part import name`,
    or as `module.name` after `from beam_shards.part import module`.
    """
    rel = path.relative_to(PACKAGE.parent).parts
    own = rel[1].removesuffix(".py") if rel[0] == "beam_shards" and len(rel) > 1 else None
    tree = ast.parse(path.read_text(), str(path))
    taken, modules = [], {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module and _part(node.module)):
            continue
        part = _part(node.module)
        if part == own or not (PACKAGE / part).is_dir():
            continue
        for alias in node.names:
            if node.module.count(".") == 1 and _is_module(f"{node.module}.{alias.name}"):
                modules[alias.asname or alias.name] = part
            else:
                taken.append((node.lineno, part, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            taken.append((node.lineno, modules[node.value.id], node.attr))
    return taken


@pytest.mark.parametrize("part", _sub_packages())
def test_every_sub_package_names_what_others_may_use_and_has_it(part):
    package = importlib.import_module(f"beam_shards.{part}")
    assert hasattr(package, "__all__"), f"beam_shards/{part}/__init__.py has no __all__"
    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert not missing, f"beam_shards.{part}.__all__ names {missing}, which it does not have"


@pytest.mark.parametrize("path", [PACKAGE / "__init__.py"] + _modules() + sorted(PIPELINES.glob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_name_taken_from_another_sub_package_is_in_its_all(path):
    for line, part, name in _names_taken_across(path):
        listed = importlib.import_module(f"beam_shards.{part}").__all__
        assert name in listed, f"{path.name}:{line} takes {name} from beam_shards.{part}, whose __all__ does not list it"


def test_the_package_face_exports_what_its_all_names():
    missing = [name for name in beam_shards.__all__ if not hasattr(beam_shards, name)]
    assert not missing
