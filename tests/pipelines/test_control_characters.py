"""Control characters of an input (a CSV header, a JSONL key, a file name) reach no terminal raw (issue 35).

Every error the pipelines and `beam-shards` print, their usage errors, the pipelines'
report and their notes go through `beam_shards.terminal`, which shows a control character
escaped (`\\x1b`) and printable text, other scripts included, as it is.
"""

from __future__ import annotations

import doctest
import io
import json

import pytest

from beam_shards import Features, Value, new_write_id, terminal
from beam_shards.progress import Progress, Watch
from beam_shards.cli import main as cli_main
from pipelines import common, csv as csv_pipeline, image_folder, jsonl

from _support import jpeg

ESCAPE = "\x1b[2J\x1b]0;pwned\x07"  # clears the screen, then retitles the terminal
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07"
RUNNER = "--runner=FnApiRunner"


def assert_escaped(text: str, shown: str = SHOWN) -> None:
    assert shown in text, text
    assert all(c.isprintable() for line in text.splitlines() for c in line), repr(text)


@pytest.mark.timeout(300)
def test_a_csv_header_holding_control_characters_is_refused_escaped(tmp_path, capsys):
    (tmp_path / "data.csv").write_text(f"a,b{ESCAPE},c\n1,2,3\n4,5\n")
    argv = ["--input", str(tmp_path / "data.csv"), "--output", str(tmp_path / "out"), RUNNER]
    with pytest.raises(SystemExit) as exit_:
        common.main(csv_pipeline.run, argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "holds a control character" in err
    assert_escaped(err)


def test_a_jsonl_key_in_a_usage_error_is_escaped(tmp_path, capsys):
    (tmp_path / "data.jsonl").write_text(json.dumps({f"key{ESCAPE}": 1}) + "\n")
    argv = ["--input", str(tmp_path / "data.jsonl"), "--output", str(tmp_path / "out"), "--image_column", "picture"]
    with pytest.raises(SystemExit) as exit_:
        common.main(jsonl.run, argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "column 'picture' is not in the input (its columns: 'key" in err
    assert_escaped(err)


def test_a_file_name_in_an_error_is_escaped_and_printable_names_are_kept(tmp_path, capsys):
    name = "Ünïcödé ø \x1bc\x07.jsonl"  # no [ ]: --input is a glob
    (tmp_path / name).write_text("{not json\n")
    argv = ["--input", str(tmp_path / name), "--output", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        common.main(jsonl.run, argv)
    err = capsys.readouterr().err
    assert "cannot infer the features of" in err
    assert_escaped(err, "Ünïcödé ø \\x1bc\\x07.jsonl")


def test_an_unknown_flag_in_a_usage_error_is_escaped(capsys):
    with pytest.raises(SystemExit):
        common.parse_args(common.make_parser("x", "test"), ["--output", "out", f"--bad{ESCAPE}"])
    assert_escaped(capsys.readouterr().err)


@pytest.mark.timeout(300)
def test_the_report_of_a_cache_whose_path_holds_control_characters_is_escaped(tmp_path, capsys):
    (tmp_path / "data.jsonl").write_text('{"n": 1}\n')
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("int64")}).to_dict()))
    argv = ["--input", str(tmp_path / "data.jsonl"), "--features", str(tmp_path / "f.json"),
            "--output", str(tmp_path / f"out{ESCAPE}"), RUNNER]
    assert common.main(jsonl.run, argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("Wrote 1 row") and f"out{SHOWN}" in out
    assert_escaped(out)


@pytest.mark.timeout(300)
def test_the_class_folders_left_out_are_named_escaped(tmp_path, capsys):
    for name in ("cat", f"dog{ESCAPE}"):
        (tmp_path / "images" / name).mkdir(parents=True)
    (tmp_path / "images" / "cat" / "0.jpg").write_bytes(jpeg(0))
    argv = ["--input", str(tmp_path / "images"), "--output", str(tmp_path / "out"), RUNNER]
    assert common.main(image_folder.run, argv) == 0
    err = capsys.readouterr().err
    assert f"left out of the classes: dog{SHOWN} (" in err
    assert_escaped(err)


def test_progress_lines_are_escaped(tmp_path):
    stream = io.StringIO()
    meter = Progress(f"job{ESCAPE}", enabled=True, interval=0.0, stream=stream)
    meter.update(1, extra=f"then{ESCAPE}")
    assert_escaped(stream.getvalue(), f"job{SHOWN}: 1 rows")
    assert f"then{SHOWN}" in stream.getvalue()
    with Watch(str(tmp_path / f"out{ESCAPE}"), new_write_id(), interval=0) as watch:
        assert_escaped(watch.line(), f"out{SHOWN}: 0 rows")


def test_the_cli_escapes_its_errors_and_its_usage_errors(tmp_path, capsys):
    assert cli_main(["info", str(tmp_path / f"none{ESCAPE}")]) == 2
    assert_escaped(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["info", str(tmp_path), f"--bad{ESCAPE}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unrecognized arguments" in err
    assert_escaped(err)


def test_the_terminal_modules_example_runs():
    result = doctest.testmod(terminal)
    assert result.failed == 0 and result.attempted > 0
