"""The package's structure: data flows downhill between sub-packages, and no private name crosses a module."""

from __future__ import annotations

import ast
import pathlib

import pytest

import beam_shards

PACKAGE = pathlib.Path(beam_shards.__file__).parent
PIPELINES = PACKAGE.parent / "pipelines"
# Each part of the package may import only parts of a lower floor (or its own).
FLOORS = {
    "_version": 0, "errors": 0, "display": 0, "units": 0,
    "storage": 1, "features": 2, "format": 3, "shards": 4, "progress": 4, "versions": 5,
    "read": 6, "write": 6, "beam": 7, "hf": 7, "cli": 8,
}


def _imports(path: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every `import x` and `from x import names` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
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


def test_the_package_face_exports_what_its_all_names():
    missing = [name for name in beam_shards.__all__ if not hasattr(beam_shards, name)]
    assert not missing
