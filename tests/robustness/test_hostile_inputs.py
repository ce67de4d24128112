"""Hostile index files (issue 35, "memory and tracebacks"): a line that inflates past its bound,
nesting past 64 levels, rows of 100,000 keys, control characters in column names.

Each case is named for what the review found. A bad line fails the conversion naming the file
and line, or with --skip_bad is skipped and listed; a bad schema is a usage error of one line.
The fuzzers that feed any mix of these to the readers are in test_hostile_inputs_fuzz.py.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_shards import EncodeError, FeatureError, Features, Sequence, Struct, Value, write_shards
from beam_shards.format.manifest import MAX_DEPTH
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, csv as csv_pipeline, jsonl, lines, parquet

from _hostile import assert_clear, cases, nested
from _paths import REPO

# The line bound the tests of bad lines lower MAX_LINE_BYTES to, so that their inputs stay small.
SMALL_BOUND = 64 << 10
LONG = b"x" * (4 * SMALL_BOUND)

pytestmark = pytest.mark.timeout(120)  # tests that need longer say so


def write_input(path, parts: list[bytes]) -> None:
    """Writes `parts` to `path`, gzip-compressed when its name ends in .gz."""
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wb") as handle:
        for part in parts:
            handle.write(part)


def convert(pipeline, path, out, *flags: str):
    return pipeline.run(["--input", str(path), "--output", str(out), "--runner=FnApiRunner", *flags])


def refused_then_skipped(pipeline, path, out, words: list[str], rows: int, *flags: str) -> None:
    """The conversion fails with one line holding `words`; with --skip_bad it writes `rows` rows
    and lists the one bad input."""
    with pytest.raises(common.BadInputError) as raised:
        convert(pipeline, path, out, *flags)
    assert_clear(raised.value, common.BadInputError, [str(path)] + words)
    assert convert(pipeline, path, out, *flags, "--skip_bad", "--max_bad", "1").num_rows == rows
    [bad] = read_bad_inputs(str(out))
    assert words[0] in bad["input"] and words[1] in bad["error"], bad


# ---- 1. a line or field past the bound -----------------------------------------------------------

# (name, pipeline, input file, its parts, the bad line, rows kept with --skip_bad).
LINE_CASES = [
    ("jsonl.gz line inflating past the bound", jsonl, "m.jsonl.gz",
     [b'{"n": "a"}\n', b'{"n": "' + LONG + b'"}\n', b'{"n": "b"}\n'], "line 2", 2),
    ("jsonl line past the bound, last in the file", jsonl, "m.jsonl", [b'{"n": "a"}\n', LONG], "line 2", 1),
    ("csv.gz line inflating past the bound", csv_pipeline, "m.csv.gz", [b"n\n", b"a\n", LONG + b"\n", b"b\n"],
     "line 3", 2),
    ("csv quoted field of many lines past the bound", csv_pipeline, "m.csv",
     [b"n\n", b"a\n", b'"' + (b"x" * 1000 + b"\n") * 100 + b'"\n', b"b\n"], "line 3", 1),
]


@pytest.mark.parametrize("pipeline, name, parts, line, rows", cases(LINE_CASES))
def test_a_line_past_the_bound_is_a_bad_input_named_by_file_and_line(tmp_path, monkeypatch, pipeline, name, parts,
                                                                      line, rows):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", SMALL_BOUND)
    write_input(tmp_path / name, parts)
    refused_then_skipped(pipeline, tmp_path / name, tmp_path / "out", [f"{name}, {line}", f"{SMALL_BOUND:,} bytes"],
                         rows)


def test_a_csv_field_past_the_csv_modules_own_limit_is_read(tmp_path):
    # The csv module refuses fields over 128 KiB unless told otherwise; the line bound allows 256 MiB.
    field = "y" * (200 << 10)
    write_input(tmp_path / "m.csv", [b"n\n", b"a\n", f'"{field}"\n'.encode(), b"b\n"])
    manifest = convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out")
    assert manifest.num_rows == 3


# `python -m pipelines.jsonl ...` that writes its own peak of memory (VmHWM, kB) to $PEAK_FILE. A child's
# rusage will not do: Linux carries the peak of the process that started it across the exec, so it
# would count the pytest worker's memory (a worker that had run large-value tests made this one fail).
_RUN_AND_REPORT_PEAK = """
import os, runpy
try:
    runpy.run_module("pipelines.jsonl", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_gz_line_inflating_to_1_gib_costs_a_bounded_peak_of_memory(tmp_path):
    """The review's case at its size: a few MB of .jsonl.gz whose line inflates to 1 GiB peaked
    at 2.3 GB (the line held whole, twice). Read up to the real bound, the process peaks under
    the 1 GiB that one copy of the line takes."""
    size = 1 << 30
    path = tmp_path / "big.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(b'{"n": "a"}\n{"n": "')
        piece = b"x" * (1 << 20)
        for _ in range(size // len(piece)):
            handle.write(piece)
        handle.write(b'"}\n{"n": "b"}\n')
    peak_file = tmp_path / "peak"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
               PEAK_FILE=str(peak_file))
    child = subprocess.run([sys.executable, "-c", _RUN_AND_REPORT_PEAK, "--input", str(path), "--output",
                            str(tmp_path / "out"), "--skip_bad", "--max_bad", "100%", "--runner=FnApiRunner"],
                           cwd=REPO, env=env, capture_output=True, timeout=540)
    peak = int(peak_file.read_text()) << 10
    assert child.returncode == 0, child.stderr.decode()[-2000:]
    assert "Skipped 1 bad input(s)" in child.stdout.decode()
    [bad] = read_bad_inputs(str(tmp_path / "out"))
    assert bad["input"].endswith("big.jsonl.gz, line 2") and f"{lines.MAX_LINE_BYTES:,} bytes" in bad["error"]
    # A Beam process takes a few hundred MB of its own, and a line grown to the bound may be held
    # twice while its buffer grows: under one copy of the 1 GiB line, where the old code took 3.4 GB.
    assert peak < size, f"the conversion peaked at {peak:,} bytes"


# ---- 2. nesting past 64 levels ----------------------------------------------------------------------

SEQUENCE = json.dumps(Features({"n": Value("int64"), "v": Sequence(Value("int64"))}).to_dict())


def jsonl_row(depth: int) -> str:
    """A row whose line nests `depth` levels (the row's own object is the first)."""
    return json.dumps({"n": 2})[:-1] + f', "v": {nested(depth - 1)}}}\n'


# (name, pipeline, files, the --input file, more flags, words of the error).
NESTING_CASES = [
    ("jsonl nested 70 deep", jsonl, {"m.jsonl": '{"n": 1, "v": [1]}\n' + jsonl_row(70)}, "m.jsonl", [],
     ["m.jsonl, line 2", "70 levels deep", f"deeper than the {MAX_DEPTH}"]),
    ("jsonl nested 500 deep", jsonl, {"m.jsonl": '{"n": 1, "v": [1]}\n' + jsonl_row(500)}, "m.jsonl", [],
     ["m.jsonl, line 2", "500 levels deep", f"deeper than the {MAX_DEPTH}"]),
    ("jsonl nested 100,000 deep", jsonl, {"m.jsonl": '{"n": 1, "v": [1]}\n' + jsonl_row(100_000)}, "m.jsonl", [],
     ["m.jsonl, line 2", "100000 levels deep", f"deeper than the {MAX_DEPTH}"]),
    ("jsonl nested 70 deep, features given", jsonl,
     {"m.jsonl": '{"n": 1, "v": [1]}\n' + jsonl_row(70), "f.json": SEQUENCE}, "m.jsonl", ["--features", "f.json"],
     ["m.jsonl, line 2", "70 levels deep", f"deeper than the {MAX_DEPTH}"]),
    ("csv cell nested 70 deep", csv_pipeline, {"m.csv": f'n,v\n1,[1]\n2,"{nested(70)}"\n'}, "m.csv", [],
     ["m.csv, line 3", "column 'v'", "70 levels deep", f"deeper than the {MAX_DEPTH}"]),
    ("csv cell nested 500 deep, features given", csv_pipeline,
     {"m.csv": f'n,v\n1,[1]\n2,"{nested(500)}"\n', "f.json": SEQUENCE}, "m.csv", ["--features", "f.json"],
     ["m.csv, line 3", "column 'v'", "500 levels deep", f"deeper than the {MAX_DEPTH}"]),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pipeline, files, input_file, flags, words", cases(NESTING_CASES))
def test_nesting_past_64_levels_is_a_bad_input_named_by_file_and_line(tmp_path, pipeline, files, input_file, flags,
                                                                       words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    flags = [str(tmp_path / flag) if flag in files else flag for flag in flags]
    refused_then_skipped(pipeline, tmp_path / input_file, tmp_path / "out", words, 1, *flags)


def test_jsonl_nested_64_deep_whose_features_a_manifest_cannot_hold_fails_in_one_line(tmp_path, capsys):
    (tmp_path / "m.jsonl").write_text(jsonl_row(64))
    argv = ["--input", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out"), "--runner=FnApiRunner"]
    assert common.main(jsonl.run, argv) == 1
    # A run slower than the progress interval (a loaded machine) prints a progress line first.
    [error] = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("converting to ")]
    assert error.startswith("error: the features and metadata nest") and f"a manifest may nest {MAX_DEPTH}" in error


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-be"])
def test_a_jsonl_line_in_utf16_or_utf32_nested_100000_deep_is_a_malformed_line(encoding):
    # The JSON parser reads bytes as UTF-16 or UTF-32 when their zeros say so, where the brackets
    # are not the bytes counted (U+2200 holds the byte of a quote): lines are parsed as UTF-8 text.
    line = ('{"v": ["\u2200", ' + nested(100_000) + "]}").encode(encoding)
    [(number, row)] = jsonl.read_rows(io.BytesIO(line))
    assert number == 1 and isinstance(row, common.Malformed), row


def test_a_parquet_column_nested_past_64_levels_is_a_usage_error(tmp_path, capsys):
    arrow_type, value = pa.int64(), 1
    for _ in range(70):
        arrow_type, value = pa.list_(arrow_type), [value]
    pq.write_table(pa.table({"n": [1], "v": pa.array([value], arrow_type)}), tmp_path / "m.parquet")
    with pytest.raises(SystemExit) as exit_info:
        convert(parquet, tmp_path / "m.parquet", tmp_path / "out")
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    for word in ("m.parquet", "column 'v'", "70 levels deep", f"deeper than the {MAX_DEPTH}"):
        assert word in error, error


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a": ' + "[" * 100_000],
                         ids=["nested 100,000 deep", "cut inside 100,000 brackets"])
def test_a_features_file_nested_100000_deep_is_a_usage_error_in_one_line(tmp_path, capsys, text):
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "features.json").write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        convert(jsonl, tmp_path / "rows.jsonl", tmp_path / "out", "--features", str(tmp_path / "features.json"))
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert "--features" in error[-1] and "nests too deeply" in error[-1] or "not valid JSON" in error[-1], error
    assert not any("Traceback" in line or "RecursionError" in line for line in error), error


# ---- 3. rows of 100,000 keys -------------------------------------------------------------------------

WIDE = 100_000


def test_a_jsonl_row_of_100000_keys_is_named_with_a_few_of_them(tmp_path):
    """It took 157 s and 1.1 GB and printed every key."""
    wide = json.dumps({"n": 2, **{f"k{i}": i for i in range(WIDE)}})
    (tmp_path / "m.jsonl").write_text('{"n": 1}\n' + wide + "\n")
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("int64")}).to_dict()))
    words = ["m.jsonl, line 2", "unknown fields 'k0', 'k1', 'k2', 'k3', 'k4' and 99,995 more"]
    refused_then_skipped(jsonl, tmp_path / "m.jsonl", tmp_path / "out", words, 1,
                         "--features", str(tmp_path / "f.json"))
    [bad] = read_bad_inputs(str(tmp_path / "out"))
    assert len(bad["error"]) < 500, bad


@pytest.mark.timeout(60)
def test_a_batch_of_100000_columns_one_off_is_refused_in_linear_time_naming_a_few():
    """Each column was looked up in the list of all of them: minutes for 100,000 (10^10 steps)."""
    features = Features({f"k{i}": Value("int64") for i in range(WIDE)})
    columns = [pa.array([i]) for i in range(WIDE)]
    table = pa.Table.from_arrays(columns, names=[f"k{i}" for i in range(1, WIDE)] + ["extra"])
    with pytest.raises(EncodeError) as raised:
        features.encode_batch(table, "b")
    assert_clear(raised.value, EncodeError, ["missing column 'k0'", "'k0', 'k1', 'k2', 'k3', 'k4' and 99,995 more"])
    with pytest.raises(EncodeError) as raised:
        features.encode_batch(table.rename_columns(["k0"] * WIDE), "b")
    assert_clear(raised.value, EncodeError, ["missing column 'k1'"])
    with pytest.raises(EncodeError) as raised:
        features.encode_batch(pa.Table.from_arrays(columns + [columns[0]], names=list(features) + ["k0"]), "b")
    assert_clear(raised.value, EncodeError, ["unexpected column 'k0'"])


def test_a_struct_of_100000_fields_names_a_few_of_them():
    features = Features({"s": Struct({f"f{i}": Value("int64", nullable=True) for i in range(WIDE)})})
    with pytest.raises(EncodeError) as raised:
        features.encode_example({"s": {"x": 1}})
    assert_clear(raised.value, EncodeError, ["'x' is not a field", "'f0', 'f1', 'f2', 'f3', 'f4' and 99,995 more"])
    assert len(str(raised.value)) < 500


def test_wide_features_pickle_as_their_features_alone():
    """Beam pickles the features into each step and unpickles them for each bundle: with the
    encoders and Arrow schema derived from them, a row of 100,000 keys took minutes."""
    features = Features({f"k{i}": Value("int64", nullable=True) for i in range(10_000)})
    features.arrow_schema()
    pickled = pickle.dumps(features)
    assert len(pickled) <= len(pickle.dumps(dict(features))) + 200
    assert pickle.loads(pickled) == features


# ---- 4. control characters in column names --------------------------------------------------------

CONTROL_NAMES = ["a\0b", "a\nb", "a\x1b[2Jb", "a\x7fb", "a\x85b", "\tab"]


@pytest.mark.parametrize("name", CONTROL_NAMES, ids=repr)
def test_a_column_name_holding_a_control_character_is_refused_naming_it(tmp_path, name):
    """A NUL in a column name was written, then to_hf() raised KeyError."""
    for make in (lambda: Features({name: Value("int64")}), lambda: Struct({"ok": Value("int8"), name: Value("int8")})):
        with pytest.raises(FeatureError) as raised:
            make()
        assert_clear(raised.value, FeatureError, [repr(name), "control character"])
    with pytest.raises(FeatureError):
        write_shards([{name: 1}], str(tmp_path / "c"), Features({name: Value("int64")}))
    assert not os.path.exists(tmp_path / "c" / "_metadata.json")


def test_names_of_any_printable_script_are_kept(tmp_path):
    names = ["é", "名\u3000前", "a b", "😀\u200d😀"]
    write_shards([{name: 1 for name in names}], str(tmp_path / "c"), Features({name: Value("int64") for name in names}))


@pytest.mark.parametrize("pipeline, file, text, shown", [
    pytest.param(jsonl, "m.jsonl", '{"a\\u0000b": 1}\n', r"'a\x00b'", id="NUL in a jsonl key"),
    pytest.param(csv_pipeline, "m.csv", "a\x1b[2Jb,c\n1,2\n", r"'a\x1b[2Jb'", id="escape in a csv header"),
])
def test_an_inferred_column_name_holding_a_control_character_is_a_usage_error(tmp_path, capsys, pipeline, file,
                                                                                text, shown):
    (tmp_path / file).write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        convert(pipeline, tmp_path / file, tmp_path / "out")
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and shown in error and "control character" in error, error
