"""Hostile pipeline input: each bad file fails the conversion naming the input, or with --skip_bad is
skipped and listed; run as a command, a failure prints one error line, no traceback (--verbose shows it).

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from beam_shards import Array, ClassLabel, Features, Image, ShardedDataset, Value
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, csv as csv_pipeline, image_folder, jsonl, shell

from _hostile import CAMERA_JPEG, assert_clear, cases, forged_png
from _paths import REPO
from _support import jpeg, png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- pipelines -------------------------------------------------------------------------------

GOOD_JSONL = json.dumps({"image": "a.jpg", "n": 1}) + "\n"
GOOD_CSV = "image,n\na.jpg,1\n"
INT64 = json.dumps(Features({"image": Image(), "n": Value("int64")}).to_dict())
CLASSES = json.dumps(Features({"image": Image(), "n": ClassLabel(num_classes=3)}).to_dict())
# (name, pipeline, files in the input folder, the --input file ("" for the folder), more flags, error words).
# Each fails naming the input, and with --skip_bad is skipped and listed.
PIPELINE_CASES = [
    ("jsonl number of 5000 digits", jsonl, {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "7" * 5000 + "}\n"},
     "m.jsonl", [], ["m.jsonl, line 2", "4300 digits"]),
    ("jsonl number of 5000 digits, features given", jsonl,
     {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "7" * 5000 + "}\n", "f.json": INT64},
     "m.jsonl", ["--features", "f.json"], ["m.jsonl, line 2", "4300 digits"]),
    ("jsonl nested past the recursion limit", jsonl,
     {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "[" * 100_000 + "]" * 100_000 + "}\n"},
     "m.jsonl", [], ["m.jsonl, line 2", "deeper than the 64"]),
    ("csv number of 5000 digits", csv_pipeline, {"m.csv": GOOD_CSV + "a.jpg," + "7" * 5000 + "\n"},
     "m.csv", [], ["m.csv, line 3", "column 'n'", "as float64"]),
    ("csv class id of 5000 digits", csv_pipeline, {"m.csv": GOOD_CSV + "a.jpg," + "7" * 5000 + "\n", "f.json": CLASSES},
     "m.csv", ["--features", "f.json"], ["m.csv, line 3", "column 'n'", "as a class id"]),
    ("image_folder decompression bomb", image_folder, {"cat/a.jpg": jpeg(1), "cat/bomb.png": forged_png(10**5, 10**5)},
     "", [], ["bomb.png", "decompression bomb"]),
    ("image_folder camera jpeg cut after its thumbnail", image_folder,
     {"cat/a.jpg": jpeg(1), "dog/cut.jpg": CAMERA_JPEG[:-200]}, "", [], ["cut.jpg", "truncated JPEG"]),
]


def make_files(root, files: dict) -> None:
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / relative).write_bytes(content)
        else:
            (root / relative).write_text(content)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pipeline, files, input_file, flags, words", cases(PIPELINE_CASES))
def test_pipeline_corpus(tmp_path, pipeline, files, input_file, flags, words):
    root = tmp_path / "input"
    make_files(root, {"a.jpg": jpeg(1), **files})
    argv = ["--input", str(root / input_file), *[str(root / flag) if flag in files else flag for flag in flags]]
    out = str(tmp_path / "out")
    with pytest.raises(common.BadInputError) as raised:
        pipeline.run(argv + ["--output", out])
    assert_clear(raised.value, common.BadInputError, [str(root)] + words)

    manifest = pipeline.run(argv + ["--output", out, "--skip_bad", "--max_bad", "100%"])
    assert manifest.num_rows == 1
    [bad] = read_bad_inputs(out)
    assert words[0] in bad["input"] + bad["error"]


@pytest.mark.timeout(60)
def test_a_class_id_past_int64_is_a_usage_error(tmp_path, capsys):
    make_files(tmp_path, {"a.jpg": jpeg(1), "m.jsonl": GOOD_JSONL.replace('"n": 1', f'"n": {2**64}')})
    with pytest.raises(SystemExit) as exit_info:
        jsonl.run(["--input", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out"), "--label_column", "n"])
    assert exit_info.value.code == 2
    assert f"label column 'n' holds class id {2**64}" in capsys.readouterr().err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("output", ["cache", pytest.param("cat/deeper/cache", marks=pytest.mark.slow)])
def test_image_folder_leaves_an_output_inside_its_input_out(tmp_path, output):
    root = tmp_path / "images"
    make_files(root, {"cat/a.jpg": jpeg(1), "dog/b.png": png(2), "emu/c.jpg": jpeg(3)})
    out = str(root / output)
    runs = [image_folder.run(["--input", str(root), "--output", out]) for _ in range(2)]
    for manifest in runs:
        assert manifest.features["label"].names == ["cat", "dog", "emu"]
        assert sorted(row["path"] for row in ShardedDataset(out, image_mode="bytes")) == [
            "cat/a.jpg", "dog/b.png", "emu/c.jpg"]
    (root / output / "grid.png").write_bytes(png(4))
    assert image_folder.run(["--input", str(root), "--output", out]).num_rows == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("output", [".", "..", "./"])
def test_image_folder_refuses_an_output_that_is_its_input_or_holds_it(tmp_path, output, capsys):
    root = tmp_path / "images"
    make_files(root, {"cat/a.jpg": jpeg(1)})
    with pytest.raises(SystemExit) as exit_info:
        image_folder.run(["--input", str(root), "--output", os.path.join(str(root), output)])
    assert exit_info.value.code == 2
    assert "is the input folder" in capsys.readouterr().err


ARRAY = json.dumps(Features({"image": Image(), "v": Array((2,), "float32")}).to_dict())
# (name, pipeline module, files in the input folder, the --input file, more flags): each fails on a bad input.
FAILING_RUNS = [
    ("a decompression bomb", "image_folder", {"cat/a.jpg": jpeg(1), "cat/bomb.png": forged_png(10**5, 10**5)}, "",
     []),
    ("a 5000-digit JSON number", "jsonl", {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "7" * 5000 + "}\n"},
     "m.jsonl", []),
    ("a null inside a fixed-size list", "jsonl",
     {"m.jsonl": json.dumps({"image": "a.jpg", "v": [1.0, None]}) + "\n", "f.json": ARRAY}, "m.jsonl",
     ["--features", "f.json"]),
]


TWO_PROCESSES = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
# A worker's error reaches the command as text naming its class: each class a worker raises, once (the
# bomb's and the null's are the sink's EncodeError, the number's the reader's BadInputError).
RUNS = [pytest.param(*case.values, [], id=f"{case.id}-in-process") for case in cases(FAILING_RUNS)] + [
    pytest.param(*case.values, TWO_PROCESSES, id=f"{case.id}-two processes") for case in cases(FAILING_RUNS)
    if case.id != "a null inside a fixed-size list"]


def _command(argv: list[str], capfd) -> tuple[int, str, str]:
    """`python -m pipelines.NAME ...` (`argv` from the module on): its exit status, stdout and stderr. Run in
    this process, as its `__main__` runs it, unless its workers are processes of their own: an interpreter
    and Beam's imports cost seconds a run."""
    if "--direct_running_mode=multi_processing" in argv:
        done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO, timeout=240)
        return done.returncode, done.stdout, done.stderr
    capfd.readouterr()
    code = shell.main(importlib.import_module(argv[0]).run, argv[1:])
    return (code, *capfd.readouterr())


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("module, files, input_file, flags, runner", RUNS)
def test_a_failing_pipeline_prints_one_error_line_and_no_traceback(tmp_path, module, files, input_file, flags, runner,
                                                                   capfd):
    root = tmp_path / "input"
    make_files(root, {"a.jpg": jpeg(1), **files})
    argv = [f"pipelines.{module}", "--input", str(root / input_file), "--output", str(tmp_path / "out"),
            *[str(root / flag) if flag in files else flag for flag in flags], *runner]
    code, out, err = _command(argv, capfd)
    # A run slower than the progress interval (two processes on a loaded machine) prints a progress line first.
    lines = [line for line in err.splitlines() if not line.startswith("converting to ")]
    assert code == 1 and out == ""
    assert len(lines) == 2 and lines[0].startswith("error: ") and str(root) in lines[0], err
    assert lines[1].startswith("(add --skip_bad")
    if runner or module != "jsonl" or flags:
        # How an error is printed does not depend on where it is raised or what it is: --verbose is
        # checked once, in-process (a run costs seconds of start-up).
        return
    code, _, verbose = _command(argv + ["--verbose"], capfd)
    assert code == 1 and "Traceback" in verbose
    assert verbose.splitlines()[-2] == lines[0]
