"""Hostile caches on the command line: crafted caches give one-line errors, huge values stay within
bounded memory, and strings a terminal would act on are printed escaped.

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import collections
import os
import tracemalloc
from collections.abc import Callable

import pytest

from beam_shards import ClassLabel, Features, Image, Value, read_metadata, write_shards
from beam_shards.cli import commands as cli
from beam_shards.cli.class_counts import class_counts
from beam_shards.format.layout import BAD_INPUTS_NAME, STAGING_DIR

from _hostile import (CLI_ROWS, cases, cli_command, cut_first_shard, nested, remove_first_shard, rename_column, run_cli,
                      sparse_file, with_label)
from _reliability import edit_manifest
from _support import png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- the command line on crafted caches ---------------------------------------------------------


def bad_inputs(content: bytes | Callable[[str], None]) -> Callable[[str], None]:
    """Puts `content` (bytes, or what a function makes at the path) where the list of skipped inputs goes."""
    def craft(path: str) -> None:
        where = os.path.join(path, BAD_INPUTS_NAME)
        if callable(content):
            content(where)
        else:
            with open(where, "wb") as handle:
                handle.write(content)
    return craft


# (name, what is done to the cache first, command with {path} for the cache, words it prints): commands
# that succeed, within a bounded memory.
CLI_OUTPUT_CASES = [
    ("a trillion classes", with_label(num_classes=10**12), ["info", "{path}"],
     ["label: count per class", "999,999,999,993 of 1,000,000,000,000 classes have no values"]),
    ("ids past the declared classes", with_label(num_classes=3), ["info", "{path}"],
     ["3 (out of range)", "6 (out of range)"]),
]
# (name, what is done to the cache first, command with {path} for the cache, exit status, words of its
# one-line error).
CLI_ERROR_CASES = [
    ("not a cache", None, ["info", "{path}-missing"], 2, ["no beam_shards cache"]),
    ("a label column the shards do not have", rename_column("label", "class"), ["info", "{path}"], 1,
     ["shard 0", "has schema"]),
    ("a shard missing", remove_first_shard, ["head", "{path}"], 1, ["is missing"]),
    ("a shard cut", cut_first_shard, ["head", "{path}"], 1, ["100 bytes", "truncated"]),
    ("an unknown column", None, ["head", "{path}", "--columns", "nope"], 2, ["nope"]),
    ("show of a column that is not an image", None, ["show", "{path}", "--out", "{path}/x.png", "--image", "label"],
     2, ["no Image column 'label'"]),
    ("show into a folder that does not exist", None, ["show", "{path}", "--out", "{path}/no/such/x.png"], 2,
     ["cannot write"]),
    ("bad inputs list not JSON", bad_inputs(b'{"input": "a.jpg"\n'), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl, line 1 is not valid JSON"]),
    ("bad inputs line not an object", bad_inputs(b'{"input": "a.jpg", "error": "bad"}\n\n5\n'), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl, line 3 is not a JSON object"]),
    ("bad inputs line with NaN", bad_inputs(b'{"input": NaN}\n'), ["info", "{path}"], 1, ["line 1", "NaN"]),
    ("bad inputs list not UTF-8", bad_inputs(b'{"input": "\xff"}\n'), ["info", "{path}"], 1, ["line 1", "utf-8"]),
    ("bad inputs line nested 100000 deep", bad_inputs(nested(100_000).encode()), ["info", "{path}"], 1,
     ["line 1 is nested too deeply"]),
    ("bad inputs list a folder", bad_inputs(os.mkdir), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl", "not a regular file"]),
    ("bad inputs list a fifo", bad_inputs(os.mkfifo), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl", "not a regular file"]),
    ("bad inputs list of a gigabyte without a line break", bad_inputs(sparse_file(1 << 30)), ["info", "{path}"], 1,
     ["line 1 is longer than 1,048,576 bytes"]),
]


@pytest.mark.parametrize("craft, argv, words", cases(CLI_OUTPUT_CASES))
def test_cli_output_corpus(cli_cache, capsys, craft, argv, words):
    craft(cli_cache)
    tracemalloc.start()
    try:
        code, out, err = run_cli(capsys, cli_command(argv, cli_cache))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (code, err) == (0, ""), err
    for word in words:
        assert word in out, out
    assert peak < 50 * 2**20, f"{argv[0]} held {peak:,} bytes at its peak"


@pytest.mark.parametrize("craft, argv, code, words", cases(CLI_ERROR_CASES))
def test_cli_error_corpus(cli_cache, capsys, craft, argv, code, words):
    if craft is not None:
        craft(cli_cache)
    got, out, err = run_cli(capsys, cli_command(argv, cli_cache))
    assert got == code and not out, (got, out)
    assert err.startswith("beam-shards: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_class_counts_count_only_the_ids_that_occur(cli_cache):
    with_label(num_classes=10**12)(cli_cache)
    counts = class_counts(read_metadata(cli_cache))
    assert counts["label"] == collections.Counter(i % 7 for i in range(CLI_ROWS))
    assert counts["tags"] == collections.Counter(t for i in range(CLI_ROWS) for t in [0, 1][: i % 3])


def test_head_and_show_describe_a_bomb_without_decoding_it(bomb_cache, tmp_path, capsys):
    code, out, _ = run_cli(capsys, ["head", bomb_cache])
    assert code == 0 and "unreadable image" in out and "decompression bomb" in out
    code, out, _ = run_cli(capsys, ["show", bomb_cache, "--out", str(tmp_path / "sheet.png")])
    assert code == 0 and "wrote" in out


# Strings a cache can hold that a terminal would act on: clear the screen, set the window
# title, a C1 control sequence introducer, a right-to-left override and a line break.
EVIL = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\n"
EVIL_SHOWN = r"\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\n"


def evil_manifest(data: dict) -> None:
    data.update(write_id=f"w{EVIL}", created=EVIL)
    data["writer"].update(package=f"beam_shards{EVIL}", pyarrow=EVIL)


def evil_shard_name(path: str) -> None:
    edit_manifest(path, lambda data: data["shards"][0].update(file=data["shards"][0]["file"] + EVIL))


@pytest.fixture
def evil_cache(tmp_path) -> str:
    """A cache whose class names, values, metadata, writer and write id hold EVIL (column names
    cannot), with a file of such a name in its staging folder (not in beam_shards' layout, so gc
    leaves it)."""
    path = str(tmp_path / "cache")
    features = Features({"label": ClassLabel(names=[f"cat{EVIL}", "dog"]), "image": Image(), "text": Value("string")})
    rows = ({"label": i % 2, "image": png(i, size=4), "text": f"t{EVIL}"} for i in range(4))
    write_shards(rows, path, features, metadata={f"key{EVIL}": f"value{EVIL}"})
    edit_manifest(path, evil_manifest)
    staging = os.path.join(path, STAGING_DIR, f"write{EVIL}")
    os.makedirs(staging)
    with open(os.path.join(staging, f"junk{EVIL}"), "wb") as handle:
        handle.write(b"x")
    return path


# (name, what is done to the cache first, command with {path} for the cache, exit status, words printed).
EVIL_CASES = [
    ("info", None, ["info", "{path}"], 0, [f"cat{EVIL_SHOWN}",
                                           r'"value\u001b[2J\u001b]0;owned\u0007\x9b31m\u202e\n"',
                                           f"write id     w{EVIL_SHOWN}", f"beam_shards{EVIL_SHOWN}"]),
    ("head", None, ["head", "{path}"], 0, [f"t{EVIL_SHOWN}"]),
    ("info, a column name holding escapes", rename_column("text", f"text{EVIL}"), ["info", "{path}"], 1,
     [f"text{EVIL_SHOWN}", "holds a control character"]),
    ("verify", None, ["verify", "{path}"], 0, ["OK: 1 shard(s)"]),
    ("verify, a shard cut", cut_first_shard, ["verify", "{path}"], 1, ["truncated", "FAILED"]),
    ("info, a shard missing", remove_first_shard, ["info", "{path}"], 1, ["is missing"]),
    ("info, a shard name holding escapes", evil_shard_name, ["info", "{path}"], 1,
     [r".arrow\x1b", "invalid file name"]),
    ("gc listing", None, ["gc", "--dry-run", "--min_age", "0", "{path}"], 0, ["remove"]),
]


@pytest.mark.parametrize("craft, argv, code, words", cases(EVIL_CASES))
def test_cli_escapes_what_the_cache_holds(evil_cache, capsys, craft, argv, code, words):
    if craft is not None:
        craft(evil_cache)
    got, out, err = run_cli(capsys, cli_command(argv, evil_cache))
    assert got == code, (out, err)
    for text in (out, err):
        assert all(c.isprintable() for line in text.splitlines() for c in line), repr(text)
    for word in words:
        assert word in out + err, out + err
    assert err.count("\n") <= 1, err


def test_show_escapes_the_captions(evil_cache, tmp_path, capsys, monkeypatch):
    captions = []
    draw = cli.contact_sheet
    monkeypatch.setattr(cli, "contact_sheet", lambda images, shown, *args: captions.extend(shown) or draw(
        images, shown, *args))
    assert run_cli(capsys, ["show", evil_cache, "--out", str(tmp_path / "sheet.png")])[0] == 0
    assert sorted(captions) == [f"0 cat{EVIL_SHOWN}", "1 dog", f"2 cat{EVIL_SHOWN}", "3 dog"]
