"""Nothing read back from a cache, its staging or an input is unpickled, evaluated or imported.

The package (beam_shards/ and pipelines/) is read as Python syntax for every call that can turn
bytes or names into code: unpickling (pickle, dill, cloudpickle, marshal, shelve, numpy's
allow_pickle, pandas' read_pickle, torch.load, yaml.load), eval/exec/compile, and imports by a computed
name. Each use found must be in ALLOWED, with why it never reads stored data.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import beam_shards

ROOT = pathlib.Path(beam_shards.__file__).parent.parent
PACKAGES = ("beam_shards", "pipelines")
# Modules whose loading functions build objects that may run code.
UNPICKLERS = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "jsonpickle"}
LOADING_NAMES = {"load", "loads", "Unpickler", "open"}
CODE_BUILTINS = {"eval", "exec", "compile", "__import__"}
# Calls by attribute name that load code or pickles whatever the module they come from.
RISKY_ATTRIBUTES = {"import_module", "read_pickle", "unsafe_load", "full_load", "run_path", "run_module",
                    "spec_from_file_location", "literal_eval"}
# (package, the use as written in the source, why it never reads stored data)
ALLOWED = {
    ("beam_shards", "importlib.import_module(modules[name])",
     "the package's faces import their own modules lazily, from fixed tables of names in code"),
    ("beam_shards", "importlib.import_module(_LAZY[name])",
     "the top face imports its modules lazily too, from a fixed table of names in code"),
    ("pipelines", "importlib.import_module(module_name)",
     "`python -m pipelines.NAME` imports the pipeline module named by the code that runs it"),
    ("pipelines", "importlib.import_module(module)",
     "a dotted --runner on the command line names the runner class to import; never read from storage"),
}


def risky_uses(source: str) -> list[tuple[int, str]]:
    """`(line, source text)` of every use in `source` that can turn data into code."""
    tree = ast.parse(source)
    aliases = {}  # local name -> unpickling module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in UNPICKLERS:
                    aliases[alias.asname or alias.name] = alias.name
                    if alias.name.split(".")[0] != "pickle":  # pickle also serves dumps; the others only load
                        found.append(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNPICKLERS:
            if node.module.split(".")[0] != "pickle" or {a.name for a in node.names} & LOADING_NAMES:
                found.append(node)
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases and node.attr in LOADING_NAMES:
                found.append(node)
            elif node.attr in RISKY_ATTRIBUTES:
                found.append(node)
            elif node.attr == "load" and isinstance(base, ast.Name) and base.id in ("torch", "yaml"):
                found.append(node)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in CODE_BUILTINS | {"import_module"}:
                found.append(node)
            if any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                   for k in node.keywords):
                found.append(node)
    uses = []
    for node in found:
        # The whole call when the attribute is called, so the allow list reads as the code does.
        call = next((c for c in ast.walk(tree) if isinstance(c, ast.Call) and c.func is node), node)
        uses.append((node.lineno, ast.get_source_segment(source, call)))
    return sorted(set(uses))


def _modules() -> list[pathlib.Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_unpickles_evaluates_or_imports_what_it_reads(path):
    package = path.relative_to(ROOT).parts[0]
    allowed = {use for where, use, _ in ALLOWED if where == package}
    uses = [(line, use) for line, use in risky_uses(path.read_text()) if use not in allowed]
    assert not uses, (f"{path.relative_to(ROOT)} turns data into code at {uses}: read stored bytes with a plain "
                      "decoder (JSON, Arrow, beam.keys), or add the use to ALLOWED with why it never reads stored data")


def test_every_allowed_use_is_still_there():
    found = {(path.relative_to(ROOT).parts[0], use) for path in _modules() for _, use in risky_uses(path.read_text())}
    stale = {(package, use) for package, use, _ in ALLOWED} - found
    assert not stale, f"remove {stale} from ALLOWED"


@pytest.mark.parametrize("snippet", [
    "import pickle\nvalue = pickle.loads(data)",
    "import pickle as p\nvalue = p.load(stream)",
    "from pickle import loads\n",
    "import dill\n",
    "import cloudpickle\nf = cloudpickle.loads(data)",
    "import marshal\n",
    "value = eval(text)",
    "exec(code)",
    "module = __import__(name)",
    "import importlib\nm = importlib.import_module(stored_name)",
    "import numpy as np\na = np.load(f, allow_pickle=True)",
    "import pandas as pd\nframe = pd.read_pickle(path)",
    "import torch\nstate = torch.load(path)",
    "import yaml\nconfig = yaml.load(text, Loader=yaml.Loader)",
    "import ast\nvalue = ast.literal_eval(text)",
])
def test_the_scan_finds_every_kind_of_use(snippet):
    assert risky_uses(snippet), snippet


def test_the_scan_leaves_serializing_alone():
    assert not risky_uses("import pickle\ndata = pickle.dumps(value, protocol=4)\nimport json\njson.loads(text)")
