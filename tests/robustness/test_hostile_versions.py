"""Fuzzing version folders: garbage, gaps, strays, another cache's headers and a lagging pointer in
`_versions/` never crash or hang a reader, a writer, `log` or `gc`, and all of them agree on the latest.

Each example copies a cache of three versions, then plants files in `_versions/` (random bytes,
empty, cut or renumbered copies of its own headers, another cache's, links to nothing, folders, at
numbers near the latest or far past it), removes version files and moves `_metadata.json` back to an
older version (a slow pointer update). Then: readers read one of the versions written, with its rows;
`log` and `gc --dry_run` name the same latest; an append or overwrite builds on it; `gc` keeps it.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import (ArrowBackend, CacheError, Features, Retention, ShardedDataset, Value, list_versions,
                         read_metadata, verify, write_shards)
from beam_shards.cli import commands as cli
from beam_shards.format.layout import MANIFEST_NAME, CacheLayout
from beam_shards.format.manifest import Manifest
from beam_shards.versions.gc import collect_garbage, find_garbage

from _hostile import SCALE, mutate_bytes, printed_tally

FEATURES = Features({"id": Value("int64"), "who": Value("string")})
HANG_SECONDS = 20
KINDS = ["bytes", "empty", "json", "cut copy", "copy", "renumbered copy", "other cache", "dangling link", "folder"]


def rows(first: int, count: int) -> list[dict]:
    return [{"id": i, "who": f"row {i}"} for i in range(first, first + count)]


def ids(path: str) -> list[int]:
    backend = ArrowBackend.open(path)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def three_versions(path: str) -> dict[str, list[int]]:
    """Writes version 1 (ids 0-8), 2 (appends 100-106), 3 (appends 200-204); returns the ids by write id."""
    written, total = {}, []
    for first, count in ((0, 9), (100, 7), (200, 5)):
        manifest = write_shards(rows(first, count), path, FEATURES, mode="append", max_rows_per_shard=4,
                                retention=None)
        total = total + list(range(first, first + count))
        written[manifest.write_id] = total
    return written


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> tuple[str, dict[str, list[int]], str]:
    """The cache the examples copy, its ids by write id, and another cache of three versions."""
    root = tmp_path_factory.mktemp("versions_fuzz")
    path, other = str(root / "cache"), str(root / "other")
    written = three_versions(path)
    three_versions(other)
    return path, written, other


@pytest.fixture(scope="module")
def tally(request) -> Iterator[collections.Counter]:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ version folders: {outcomes['cases']} cases, {outcomes['clear error']} clear errors, "
        f"{outcomes['agreed']} agreed on the latest, {outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms)"))


def copy_cache(source: str, target: str) -> None:
    """`source` copied to `target`: shards and tables hard-linked (nothing writes them), headers copied."""
    for root, _, names in os.walk(source):
        folder = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(folder, exist_ok=True)
        for name in names:
            (shutil.copyfile if name.endswith(".json") else os.link)(os.path.join(root, name), os.path.join(folder, name))


def remove(where: str) -> None:
    if os.path.isdir(where) and not os.path.islink(where):
        shutil.rmtree(where)
    elif os.path.lexists(where):
        os.remove(where)


def header(path: str, number: int) -> bytes:
    with open(CacheLayout(path).version(number), "rb") as handle:
        return handle.read()


@st.composite
def version_file(draw, path: str, other: str, number: int) -> bytes | str:
    """What a planted `_versions/<number>.json` holds: bytes, or "link" / "folder"."""
    kind, source = draw(st.sampled_from(KINDS)), draw(st.integers(1, 3))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "empty":
        return b""
    if kind == "json":
        return json.dumps(draw(st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                            lambda inner: st.lists(inner, max_size=3)
                                            | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                                            max_leaves=6))).encode()
    if kind == "cut copy":
        return mutate_bytes(draw, header(path, source))
    if kind == "copy":
        return header(path, source)
    if kind == "renumbered copy":
        data = json.loads(header(path, source))
        data.update(version=number, parent_version=number - 1 if number > 1 else None)
        return json.dumps(data).encode()
    if kind == "other cache":
        return header(other, source)
    return "link" if kind == "dangling link" else "folder"


@st.composite
def damage(draw, path: str, other: str) -> list[tuple[str, int, bytes | str | None]]:
    """One to four changes to a version folder: (what, number, content)."""
    changes = []
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["plant", "plant", "remove", "pointer"]))
        number = draw(st.integers(1, 6) | st.integers(7, 10**6)) if what == "plant" else draw(st.integers(1, 3))
        content = draw(version_file(path, other, number)) if what == "plant" else None
        changes.append((what, number, content))
    return changes


def apply(path: str, changes: list[tuple[str, int, bytes | str | None]], source: str) -> None:
    for what, number, content in changes:
        where = CacheLayout(path).version(number)
        if what == "pointer":  # a slow pointer update lands: `_metadata.json` names an older version
            shutil.copyfile(CacheLayout(source).version(number), os.path.join(path, MANIFEST_NAME))
            continue
        remove(where)
        if content == "link":
            os.symlink(where + ".nowhere", where)
        elif content == "folder":
            os.mkdir(where)
        elif content is not None:
            with open(where, "wb") as handle:
                handle.write(content)


def run_cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    assert code in (0, 1, 2) and err.getvalue().count("\n") <= 1, (argv, code, err.getvalue())
    return code, out.getvalue()


def logged_latest(path: str) -> int:
    code, out = run_cli("log", path)
    assert code == 0, out
    return int(out.splitlines()[1].split()[0])


def check_agreement(path: str, written: dict[str, list[int]]) -> Manifest:
    """Every reader, log and gc name one latest, a version written, whose rows they read; returns it."""
    latest = read_metadata(path)
    assert latest.write_id in written, f"readers took {latest!r}, which no write published"
    assert ids(path) == written[latest.write_id] == [row["id"] for row in ShardedDataset(path)]
    assert list_versions(path)[-1].version == latest.version == logged_latest(path)
    assert max(find_garbage(path).kept_versions) == latest.version
    assert run_cli("gc", path, "--dry_run")[0] == 0 and run_cli("verify", path)[0] in (0, 1)
    verify(path)
    return latest


@pytest.mark.timeout(600 + 60 * SCALE)
@settings(max_examples=40 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_version_folders_stop_no_one_and_everyone_agrees_on_the_latest(caches, tally, tmp_path, data):
    source, written, other = caches
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "cache")
    copy_cache(source, path)
    changes = data.draw(damage(source, other))
    mode = data.draw(st.sampled_from(["append", "overwrite"]))
    apply(path, changes, source)
    tally["cases"] += 1
    start = time.monotonic()
    try:
        before = check_agreement(path, written)
        new = write_shards(rows(1000, 3), path, FEATURES, mode=mode, retention=Retention(keep=1, min_age=0))
        assert new.parent_version == before.version, f"the {mode} built on {new.parent_version}, readers read {before}"
        written[new.write_id] = (written[before.write_id] if mode == "append" else []) + [1000, 1001, 1002]
        assert check_agreement(path, written).version == new.version
        collect_garbage(path, Retention(keep=1, min_age=0))
        assert check_agreement(path, written).version == new.version
        tally["agreed"] += 1
    except CacheError as error:  # a clear error: one line, naming what is wrong
        assert str(error) and "\n" not in str(error).strip(), repr(error)
        tally["clear error"] += 1
    except BaseException:
        tally["crash"] += 1
        raise
    elapsed = time.monotonic() - start
    tally["slowest ms"] = max(tally["slowest ms"], round(1000 * elapsed))
    tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS, f"took {elapsed:.0f} s after {changes}"
    shutil.rmtree(os.path.dirname(path))
