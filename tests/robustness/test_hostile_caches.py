"""Crafted manifests and shards: every reader and command answers with a clear error or the rows the
cache held (MANIFEST_CASES, SHARD_CASES), and Hypothesis mutations of manifests (values replaced by
any JSON, keys deleted or added, list items repeated, NaN or 1e999 written raw, then bytes cut,
flipped or inserted) never crash or hang a reader.

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import io
import json
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import (ArrowBackend, CacheNotFoundError, ClassLabel, CorruptCacheError, Features, Image,
                         ReadFromArrowShards, Sequence, ShardedDataset, Value, list_versions, read_metadata, verify,
                         write_shards)
from beam_shards.cli import commands as cli
from beam_shards.cli.commands import printable
from beam_shards.errors import NewerFormatError
from beam_shards.format.layout import CacheLayout
from beam_shards.format.manifest import MAX_MANIFEST_BYTES
from beam_shards.format.version_files import find_pointer
from beam_shards.versions.gc import find_garbage

from _hostile import (CLI_FEATURES, SCALE, assert_clear, cases, cli_command, cli_rows, craft_manifest, crafted,
                      cut_first_shard, mutate_bytes, nested, printed_tally, remove_first_shard, rename_column, run_cli,
                      sparse_file, with_label)
from _support import png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- crafted manifests and shards ------------------------------------------------------------------

def write_version(path: str, **options) -> None:
    """Publishes the rows of `cli_cache` again at `path`: its next version."""
    write_shards(cli_rows(), path, CLI_FEATURES, max_rows_per_shard=5, **options)


def manifest_file(path: str, version: int | None = None) -> str:
    layout = CacheLayout(path)
    return layout.manifest if version is None else layout.version(version)


def raw_manifest(change: Callable[[str], str | bytes], version: int | None = None) -> Callable[[str], int | None]:
    """Rewrites the text of `_metadata.json` (or, after a second version is published, of
    `_versions/<version>.json`) with `change`; the craft reads that version."""
    def craft(path: str) -> int | None:
        if version is not None:
            write_version(path, mode="append")
        where = manifest_file(path, version)
        with open(where, encoding="utf-8") as handle:
            text = change(handle.read())
        with open(where, "wb") as handle:
            handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        return version
    return craft


def literal(text: str, *keys) -> Callable[[str], None]:
    """Puts the raw JSON `text` (NaN, deep nesting, huge numbers) at `keys` of the manifest."""
    placeholder = "@@literal@@"

    def put(data: dict) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = placeholder

    def craft(path: str) -> None:
        craft_manifest(path, put)
        raw_manifest(lambda manifest: manifest.replace(json.dumps(placeholder), text))(path)
    return craft


def value_at(value, *keys) -> Callable[[str], None]:
    """Sets the manifest's field at `keys` to `value` (the fingerprint follows the features)."""
    return literal(json.dumps(value), *keys)


def sequence_of_sequences(depth: int) -> dict:
    feature = {"_type": "Value", "dtype": "int64", "nullable": False}
    for _ in range(depth):
        feature = {"_type": "Sequence", "feature": feature, "nullable": False}
    return feature


def replace_manifest(make: Callable[[str], None], version: int | None = None) -> Callable[[str], int | None]:
    """Removes `_metadata.json` (or `_versions/<version>.json`) and lets `make(where)` put something there."""
    def craft(path: str) -> int | None:
        if version is not None:
            write_version(path, mode="append")
        where = manifest_file(path, version)
        os.remove(where)
        make(where)
        return version
    return craft


def on_first_shard(change: Callable[[str], None]) -> Callable[[str], None]:
    """Applies `change` to the path of the first shard."""
    return lambda path: change(read_metadata(path, check_files=False).shard_path(0))


def replaced_by(make: Callable[[str], None]) -> Callable[[str], None]:
    """The first shard removed and `make(where)` putting something else there."""
    def change(where: str) -> None:
        os.remove(where)
        make(where)
    return on_first_shard(change)


def garbage_of_same_size(where: str) -> None:
    size = os.path.getsize(where)
    with open(where, "wb") as handle:
        handle.write(np.random.default_rng(0).bytes(size))


def shard_of_another_cache(path: str) -> None:
    """The first shard replaced by a shard of another cache (other columns), its size and checksum in the manifest."""
    other = write_shards([{"text": "another cache"}], path + "-other", Features({"text": Value("string")}))
    source, target = other.shard_path(0), read_metadata(path, check_files=False).shard_path(0)
    shutil.copyfile(source, target)

    def edit(data: dict) -> None:
        data["shards"][0].update(num_bytes=other.shards[0].num_bytes, checksum=other.shards[0].checksum)
        data["num_bytes"] = sum(shard["num_bytes"] for shard in data["shards"])

    craft_manifest(path, edit)


def first_shard_name(text: str) -> Callable[[dict], None]:
    return lambda data: data["shards"][0].update(file=data["shards"][0]["file"].replace(".arrow", text + ".arrow"))


HUGE_MANIFEST = sparse_file(MAX_MANIFEST_BYTES + 1, b'{"format": "beam_shards", ')
ALL, ROWS = "all", "rows"
# Which readers see a crafted cache's damage: ALL (every reader, command and listing reads the
# manifest) or ROWS (those that read rows: ArrowBackend, ShardedDataset, verify, head, show; a
# shard's size and kind are checked when it is first read, never at open). The others must read
# the cache as if nothing were wrong.
#
# (name, craft: what is done to a sound cache, returning the version to read (None: the latest),
# who sees it, the error class, words each error holds)
MANIFEST_CASES = [
    ("json nested 100000 deep", raw_manifest(lambda _: nested(100_000)), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("features nested 100000 deep", literal(nested(100_000), "features", "label", "names"), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("a sequence of sequences 400 deep", value_at(sequence_of_sequences(400), "features", "label"), ALL,
     CorruptCacheError, ["_metadata.json", "nested too deeply"]),
    ("metadata nested 900 deep", literal(nested(900), "metadata", "deep"), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("num_rows of 10**30", value_at(10**30, "num_rows"), ALL, CorruptCacheError, ["num_rows=10000000000000000"]),
    ("a shard of 10**30 rows", value_at(10**30, "shards", 0, "num_rows"), ALL, CorruptCacheError,
     ["shard 0", "invalid rows"]),
    ("a shard of 2**70 bytes", value_at(2**70, "shards", 0, "num_bytes"), ALL, CorruptCacheError,
     ["shard 0", "invalid rows, bytes"]),
    ("num_bytes of 2**70", value_at(2**70, "num_bytes"), ALL, CorruptCacheError,
     ["num_bytes", "1180591620717411303424"]),
    ("rows past int64 in all", lambda path: craft_manifest(path, lambda data: (
        [shard.update(num_rows=2**62 - 1) for shard in data["shards"]], data.update(num_rows=3 * (2**62 - 1)))),
     ALL, CorruptCacheError, ["rows"]),
    ("a shard claiming 10**15 rows", lambda path: craft_manifest(path, lambda data: (
        data["shards"][0].update(num_rows=10**15), data.update(num_rows=10**15 + 7))), ROWS, CorruptCacheError,
     ["shard 0", "the manifest says 1000000000000000"]),
    ("num_rows true", value_at(True, "num_rows"), ALL, CorruptCacheError, ["num_rows=True"]),
    ("a shard's num_rows true", value_at(True, "shards", 0, "num_rows"), ALL, CorruptCacheError, ["shard 0"]),
    ("format_version true", value_at(True, "format_version"), ALL, CorruptCacheError, ["format version True"]),
    ("version true", value_at(True, "version"), ALL, CorruptCacheError, ["invalid version True"]),
    ("num_rows NaN", literal("NaN", "num_rows"), ALL, CorruptCacheError, ["not valid JSON", "NaN"]),
    ("num_bytes Infinity", literal("Infinity", "shards", 0, "num_bytes"), ALL, CorruptCacheError, ["Infinity"]),
    ("metadata -Infinity", literal("-Infinity", "metadata", "x"), ALL, CorruptCacheError, ["-Infinity"]),
    ("NUL in a shard name", crafted(first_shard_name("\0")), ALL, CorruptCacheError, ["invalid file name", r"\x00"]),
    ("escape in a shard name", crafted(first_shard_name("\x1b[2J")), ALL, CorruptCacheError, ["invalid file name"]),
    ("a shard name that leaves the folder", crafted(lambda data: data["shards"][0].update(file="../x.arrow")), ALL,
     CorruptCacheError, ["invalid file name", "../x.arrow"]),
    ("NUL in a feature name", rename_column("label", "la\0bel"), ALL, CorruptCacheError,
     ["has invalid features", r"'la\x00bel' holds a control character"]),
    ("control characters in a feature name", rename_column("label", "la\x07\x1b[2Jbel"), ALL, CorruptCacheError,
     ["has invalid features", r"'la\x07\x1b[2Jbel' holds a control character"]),
    ("a label column the shards do not have", rename_column("label", "class"), ROWS, CorruptCacheError,
     ["shard 0", "has schema"]),
    ("a folder as _metadata.json", replace_manifest(os.mkdir), ALL, CorruptCacheError,
     ["_metadata.json", "not a regular file"]),
    ("a fifo as _metadata.json", replace_manifest(os.mkfifo), ALL, CorruptCacheError,
     ["_metadata.json", "not a regular file"]),
    ("_metadata.json a link to itself", replace_manifest(lambda where: os.symlink(where, where)), ALL,
     CorruptCacheError, ["_metadata.json"]),
    ("_metadata.json a link to /dev/zero", replace_manifest(lambda where: os.symlink("/dev/zero", where)), ALL,
     CorruptCacheError, ["_metadata.json", "not a regular file"]),
    ("an empty _metadata.json", raw_manifest(lambda _: ""), ALL, CorruptCacheError, ["not valid JSON"]),
    ("_metadata.json not UTF-8", raw_manifest(lambda text: b"\xff\xfe" + text.encode("utf-16-le")), ALL,
     CorruptCacheError, ["not valid JSON"]),
    ("a huge _metadata.json", replace_manifest(HUGE_MANIFEST), ALL, CorruptCacheError,
     ["_metadata.json", "more than a manifest may"]),
    ("version 1 says it is version 2", raw_manifest(lambda text: text.replace('"version": 1', '"version": 2', 1), 1),
     ALL, CorruptCacheError, ["00000000000000000001.json holds version 2, not 1"]),
    ("version 1 not JSON", raw_manifest(lambda text: text[:-40], 1), ALL, CorruptCacheError,
     ["00000000000000000001.json is not valid JSON"]),
    ("version 1 a folder", replace_manifest(os.mkdir, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "not a regular file"]),
    ("version 1 a fifo", replace_manifest(os.mkfifo, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "not a regular file"]),
    ("version 1 huge", replace_manifest(HUGE_MANIFEST, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "more than a manifest may"]),
    ("a feature of unknown _type", crafted(lambda data: data["features"]["label"].update(_type="Tensor")), ALL,
     CorruptCacheError, ["invalid features", "Tensor"]),
    ("features a list", value_at([1, 2], "features"), ALL, CorruptCacheError, ["invalid features"]),
    ("no features", value_at({}, "features"), ALL, CorruptCacheError, ["invalid features"]),
    ("nullable a string", crafted(lambda data: data["features"]["id"].update(nullable="no")), ALL, CorruptCacheError,
     ["invalid features", "nullable"]),
    ("num_classes true", with_label(num_classes=True), ALL, CorruptCacheError, ["invalid features", "num_classes"]),
    ("num_classes 2.5", with_label(num_classes=2.5), ALL, CorruptCacheError, ["invalid features", "num_classes"]),
    ("class names a string", with_label(names="abcdefg"), ALL, CorruptCacheError, ["invalid features", "names"]),
    ("an array shape of true", crafted(lambda data: data["features"].update(
        id={"_type": "Array", "shape": [True], "dtype": "int64", "nullable": False})), ALL, CorruptCacheError,
     ["invalid features", "shape"]),
    ("an array shape of 2**40", crafted(lambda data: data["features"].update(
        id={"_type": "Array", "shape": [2**40], "dtype": "int64", "nullable": False})), ALL, CorruptCacheError,
     ["invalid features", "1,099,511,627,776 values a row"]),
    ("an array shape whose product passes int32", crafted(lambda data: data["features"].update(
        id={"_type": "Array", "shape": [None, 65536, 65536], "dtype": "int8", "nullable": False})), ALL,
     CorruptCacheError, ["invalid features", "4,294,967,296 values a row"]),
    ("a trillion classes", with_label(num_classes=10**12), ALL, None, []),
    ("10**30 classes", with_label(num_classes=10**30), ALL, None, []),
    ("a shard listed twice", crafted(lambda data: data.update(shards=data["shards"] + data["shards"][:1],
                                                               num_rows=data["num_rows"] + 5)), ALL,
     CorruptCacheError, ["more than once"]),
    ("shards an object", value_at({}, "shards"), ALL, CorruptCacheError, ["\"shards\" must be a list"]),
    ("a writer version that is a number", value_at(3, "writer", "pyarrow"), ALL, CorruptCacheError, ["writer"]),
    ("a write id that is a number", value_at(3, "write_id"), ALL, CorruptCacheError, ["write id"]),
    ("_metadata.json names a version _versions lacks", crafted(lambda data: data.update(version=7, parent_version=6)),
     ALL, None, []),
]
SHARD_CASES = [
    ("a shard cut", cut_first_shard, ROWS, CorruptCacheError, ["100 bytes", "truncated"]),
    ("a shard missing", remove_first_shard, ROWS, CorruptCacheError, ["is missing"]),
    ("a folder where a shard should be", replaced_by(os.mkdir), ROWS, CorruptCacheError, ["not a regular file"]),
    ("a fifo where a shard should be", replaced_by(os.mkfifo), ROWS, CorruptCacheError, ["not a regular file"]),
    ("a shard a link to /dev/zero", replaced_by(lambda where: os.symlink("/dev/zero", where)), ROWS,
     CorruptCacheError, ["not a regular file"]),
    ("a shard a link to itself", replaced_by(lambda where: os.symlink(where, where)), ROWS, CorruptCacheError,
     ["shard"]),
    ("a shard of another cache's schema", shard_of_another_cache, ROWS, CorruptCacheError, ["shard", "schema"]),
    ("garbage of a shard's size", on_first_shard(garbage_of_same_size), ROWS, CorruptCacheError, ["shard"]),
]


def read_rows(path: str, version: int | None) -> None:
    backend = ArrowBackend.open(path, version=version)
    backend.slice(0, backend.num_rows)
    list(backend.iter_batches())


def exhaust(rows) -> None:
    """Reads every row; unlike list(), which sets len() slots aside first, trusting a manifest's count."""
    for _ in rows:
        pass


def apply_read_transform(path: str, version: int | None) -> None:
    """Applies ReadFromArrowShards to a pipeline without running it: construction reads the manifest."""
    _ = beam.Pipeline(runner="FnApiRunner") | ReadFromArrowShards(path, version=version)


# (reader, who it is among ALL and ROWS, what it does with the path and the version to read)
READERS = [
    ("ArrowBackend", ROWS, read_rows),
    ("ShardedDataset", ROWS, lambda path, version: exhaust(ShardedDataset(path, version=version, image_mode="bytes"))),
    ("read_metadata", ALL, lambda path, version: read_metadata(path, version=version)),
    ("ReadFromArrowShards", ALL, apply_read_transform),
    ("list_versions", ALL, lambda path, version: list_versions(path)),
]
# (command, who it is, its arguments; --version N is added to those that take one)
COMMANDS = [
    ("info", ALL, ["info", "{path}"]),
    ("head", ROWS, ["head", "{path}"]),
    ("show", ROWS, ["show", "{path}", "--out", "{path}-sheet.png"]),
    ("verify", ROWS, ["verify", "{path}"]),
    ("log", ALL, ["log", "{path}"]),
    ("gc", ALL, ["gc", "--min_age", "0", "{path}"]),
]
_REACH = {ALL: 0, ROWS: 1}


def sees(reader: str, damage: str) -> bool:
    """Whether a reader of kind `reader` sees damage that readers of kind `damage` and further see."""
    return _REACH[reader] >= _REACH[damage]


def has_statistics(path: str, version: int | None) -> bool:
    try:
        return read_metadata(path, version=version).statistics is not None
    except CorruptCacheError:
        return False


def files_in(path: str) -> set[str]:
    return {os.path.join(root, name) for root, dirs, names in os.walk(path) for name in names + dirs}


def pointer_damaged(path: str) -> bool:
    """Whether `_metadata.json` is damaged (not of a newer format) while `_versions/` holds its copy:
    then gc writes it again, as its error says."""
    try:
        find_pointer(path)
    except NewerFormatError:
        return False
    except CorruptCacheError:
        return not os.path.isdir(CacheLayout(path).manifest)
    return False


def expected_of(name: str, kind: str, seen: str, expected: type | None, version: int | None, path: str) -> type | None:
    """What a reader or command named `name`, of kind `kind`, raises on the crafted cache: a
    damaged older version file is no version, which log and gc ignore (`format.latest`), and
    gc writes a damaged pointer again from its copy."""
    if name in ("list_versions", "log", "gc") and version is not None and version < 2:
        return None
    if name == "gc" and version is None and pointer_damaged(path):
        return None
    return expected if sees(kind, seen) else None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("craft, seen, expected, words", cases(MANIFEST_CASES + SHARD_CASES))
def test_crafted_cache_corpus(cli_cache, capsys, craft, seen, expected, words):
    version = craft(cli_cache)
    before = files_in(cli_cache)
    tracemalloc.start()
    try:
        for name, kind, read in READERS:
            check_reader(name, lambda: read(cli_cache, version),
                         expected_of(name, kind, seen, expected, version, cli_cache), words)
        check_verify(cli_cache, version, expected if sees(ROWS, seen) else None, words)
        for name, kind, argv in COMMANDS:
            argv = cli_command(argv, cli_cache) + (["--version", str(version)] if version and name not in ("log", "gc")
                                                else [])
            if name == "info" and not has_statistics(cli_cache, version):
                kind = ROWS  # a version without statistics (format 2, as crafted) has its label column read
            checkcli_command(capsys, argv, expected_of(name, kind, seen, expected, version, cli_cache), words)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"the readers held {peak:,} bytes at their peak"
    if expected is not None and seen == ALL:
        assert files_in(cli_cache) == before, "gc removed files from a cache whose manifest it cannot read"


def check_reader(name: str, read: Callable[[], object], expected: type | None, words: list[str]) -> None:
    """`read()` raises `expected` with `words` (or, when `expected` is None, returns)."""
    try:
        read()
    except Exception as error:  # noqa: BLE001 - whatever it is, the assertion names it
        if expected is None:
            raise AssertionError(f"{name} failed on a cache it should read: {type(error).__name__}: {error}") from None
        try:
            assert_clear(error, expected, words)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None
    else:
        assert expected is None, f"{name} read the crafted cache without an error"


def check_verify(path: str, version: int | None, expected: type | None, words: list[str]) -> None:
    """`verify` reports the damage (or raises CacheNotFoundError, as its contract says)."""
    try:
        report = verify(path, version=version)
    except CacheNotFoundError as error:
        assert expected is not None and issubclass(expected, CacheNotFoundError), f"verify raised {error}"
        assert_clear(error, expected, words)
        return
    problems = " ".join(report.problems)
    assert report.ok == (expected is None), f"verify: {report.problems}"
    for word in words:
        assert word in problems, f"verify: {word!r} not in {problems!r}"


def checkcli_command(capsys, argv: list[str], expected: type | None, words: list[str]) -> None:
    """The command exits 0, or (the cache damaged) 1 or 2 with one line on stderr and no traceback."""
    code, out, err = run_cli(capsys, argv)
    for text in (out, err):
        assert all(c.isprintable() for line in text.splitlines() for c in line), f"{argv[0]} printed {text!r}"
    if expected is None:
        assert (code, err) == (0, ""), f"{argv[0]}: exit {code}, {err!r}"
        return
    assert code == (2 if issubclass(expected, CacheNotFoundError) else 1), f"{argv[0]}: exit {code}, {out!r} {err!r}"
    assert "Traceback" not in out + err and err.count("\n") <= 1, f"{argv[0]}: {err!r}"
    assert err.startswith("beam-shards: ") or (argv[0] == "verify" and "FAILED" in out), f"{argv[0]}: {out!r}{err!r}"
    for word in words:
        assert printable(word) in out + err, f"{argv[0]}: {printable(word)!r} not in {out + err!r}"


# ---- fuzzing manifests -------------------------------------------------------------------------

FUZZ_FEATURES = Features({"id": Value("int64"), "text": Value("string", nullable=True), "image": Image(),
                          "label": ClassLabel(names=["cat", "dog"]), "tags": Sequence(Value("int32"))})


def fuzz_rows(first: int, count: int) -> list[dict]:
    return [{"id": i, "text": None if i % 4 == 0 else f"row {i}", "image": png(i % 3, size=4), "label": i % 2,
             "tags": list(range(i % 3))} for i in range(first, first + count)]


@pytest.fixture(scope="module")
def fuzz_cache(tmp_path_factory) -> tuple[str, dict]:
    """A cache of two versions, and the rows each holds: (path, {version: rows})."""
    path = str(tmp_path_factory.mktemp("fuzz") / "cache")
    rows = {1: fuzz_rows(0, 9), 2: fuzz_rows(100, 7)}
    for version in (1, 2):
        write_shards(rows[version], path, FUZZ_FEATURES, max_rows_per_shard=3)
    return path, rows


# Tokens a mutation may put in a manifest, so that some mutations pass the first checks.
FUZZ_WORDS = ["beam_shards", "Value", "Sequence", "ClassLabel", "Image", "Array", "int64", "string", "zstd",
              "append", "overwrite", "crc32:00000000", "", "\0", "../x.arrow",
              "shard-20261123T000000Z-00000000-00000-of-00001.arrow"]
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
                | st.sampled_from([0, 1, -1, 2, 3, 2**31, 2**62, 2**63, 2**64, 10**30])
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12) | st.sampled_from(FUZZ_WORDS))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | st.sampled_from(FUZZ_WORDS), children, max_size=4),
                           max_leaves=8) | st.integers(1, 80).map(lambda depth: json.loads(nested(depth)))
# Number literals Python's json writes only when asked, or not at all.
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-0", "7" * 5000, "1.0", "0x10"]


def json_paths(node, prefix: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indices) of every value in parsed JSON, the root first."""
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from json_paths(child, prefix + (key,))


@st.composite
def mutated_json(draw, data) -> str:
    """`data` (parsed JSON) with one to three values replaced, keys deleted or added, list items
    duplicated or numbers written as raw literals (NaN, 1e999...), as JSON text. Changes `data`."""
    raw = {}
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(json_paths(data))))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        node = parent[path[-1]] if path else data
        kind = draw(st.sampled_from(["replace", "delete", "add", "duplicate", "raw"]))
        if kind == "add" and isinstance(node, dict):
            node[draw(st.text(max_size=8) | st.sampled_from(FUZZ_WORDS))] = draw(JSON_VALUES)
        elif kind == "duplicate" and isinstance(node, list) and node:
            node.insert(draw(st.integers(0, len(node))), copy.deepcopy(draw(st.sampled_from(node))))
        elif kind == "delete" and path:
            del parent[path[-1]]
        elif kind == "raw" and path:
            placeholder = f"@@raw{len(raw)}@@"
            raw[json.dumps(placeholder)] = draw(st.sampled_from(RAW_NUMBERS))
            parent[path[-1]] = placeholder
        elif path:
            parent[path[-1]] = draw(JSON_VALUES)
    text = json.dumps(data, ensure_ascii=draw(st.booleans()))
    for placeholder, literal_text in raw.items():
        text = text.replace(placeholder, literal_text)
    return text


# The manifest a case mutates, and reads: `_metadata.json` (None: the latest) or `_versions/<N>.json`.
FUZZ_TARGETS = [None, 1, 2]
CLEAR_ERRORS = (CorruptCacheError, CacheNotFoundError)  # VersionNotFoundError is a CacheNotFoundError


def fuzz_readers(path: str, version: int | None) -> dict[str, Callable[[], object]]:
    """Every reader the fuzz runs, by name: those named in ROW_READERS return the rows they read."""
    def commands() -> None:
        for argv in (["info", path], ["log", path], ["verify", path]):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(argv + (["--version", str(version)] if version and argv[0] != "log" else []))
            assert code in (0, 1, 2) and err.getvalue().count("\n") <= 1, (argv, code, err.getvalue())

    return {
        "ArrowBackend": lambda: ArrowBackend.open(path, version=version).slice(0, 10**6).to_pylist(),
        "ShardedDataset": lambda: [row for row in ShardedDataset(path, version=version, image_mode="bytes")],
        "read_metadata": lambda: read_metadata(path, version=version),
        "list_versions": lambda: list_versions(path),
        "verify": lambda: verify(path, version=version),
        "find_garbage": lambda: find_garbage(path),
        "commands": commands,
    }


ROW_READERS = ("ArrowBackend", "ShardedDataset")
HANG_SECONDS = 20


def fuzz_copy(source: str, target: str) -> None:
    """`source` copied to `target`: shards hard-linked (readers never write them), manifests copied."""
    for root, _, names in os.walk(source):
        folder = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(folder, exist_ok=True)
        for name in names:
            copy_or_link = shutil.copyfile if name.endswith(".json") else os.link
            copy_or_link(os.path.join(root, name), os.path.join(folder, name))


@pytest.fixture(scope="module")
def manifest_tally(request) -> Iterator[collections.Counter]:
    """Outcomes of the fuzzed manifests."""
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ manifests: {outcomes['cases']} cases, {outcomes['clear error']} clear errors, "
        f"{outcomes['right rows']} right rows, {outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms)"))


@pytest.mark.timeout(600 + 60 * SCALE)
@settings(max_examples=60 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(version=st.sampled_from(FUZZ_TARGETS), data=st.data())
def test_mutated_manifests_give_a_clear_error_or_the_right_rows(fuzz_cache, manifest_tally, tmp_path, version, data):
    source, rows = fuzz_cache
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "cache")
    fuzz_copy(source, path)
    where = manifest_file(path, version)
    with open(where, "rb") as handle:
        text = data.draw(mutated_json(json.loads(handle.read()))).encode("utf-8")
    if data.draw(st.booleans()):
        text = mutate_bytes(data.draw, text)
    with open(where, "wb") as handle:
        handle.write(text)
    manifest_tally["cases"] += 1
    outcome, start = "right rows", time.monotonic()
    for name, read in fuzz_readers(path, version).items():
        try:
            got = read()
        except CLEAR_ERRORS as error:
            assert str(error) and "\n" not in str(error).strip(), f"{name}: {error!r}"
            outcome = "clear error"
            continue
        except BaseException:
            manifest_tally["crash"] += 1
            raise
        assert name not in ROW_READERS or got == rows[version or 2], f"{name} read other rows from {text[:2000]!r}"
    elapsed = time.monotonic() - start
    manifest_tally["slowest ms"] = max(manifest_tally["slowest ms"], round(1000 * elapsed))
    manifest_tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS, f"the readers took {elapsed:.0f} s"
    manifest_tally[outcome] += 1
    shutil.rmtree(path)
