"""The pipelines' --dedup [COLUMN ...]: duplicate lines dropped, the first in input order kept, the count in the
summary line; a column the features do not have is a usage error, or when inferred as the pipeline runs, an error."""

from __future__ import annotations

import json

import pytest

from beam_shards import ArrowBackend, read_metadata
from pipelines import csv as csv_pipeline
from pipelines import jsonl as jsonl_pipeline
from pipelines.shell import main

pytestmark = pytest.mark.timeout(120)

FLAGS = ["--progress", "0", "--batch_size", "4"]


def _rows(path: str) -> list[dict]:
    return ArrowBackend.open(path).slice(0, read_metadata(path).num_rows).to_pylist()


def test_csv_whole_rows_keep_the_first_of_duplicate_lines_across_files_and_count_them_in_the_summary(tmp_path,
                                                                                                      capsys):
    (tmp_path / "a.csv").write_text("word,n\nx,1\ny,2\nx,1\nz,3\nx,1\n")
    (tmp_path / "b.csv").write_text("word,n\ny,2\nw,4\nz,3\ny,3\n")
    output = str(tmp_path / "cache")
    status = main(csv_pipeline.run, ["--input", str(tmp_path / "*.csv"), "--output", output, "--dedup", *FLAGS])
    assert status == 0
    # The first of each, in input order (file, then line): x, y, z of a.csv, then b.csv's new w and (y, 3).
    assert _rows(output) == [{"word": "x", "n": 1}, {"word": "y", "n": 2}, {"word": "z", "n": 3},
                             {"word": "w", "n": 4}, {"word": "y", "n": 3}]
    assert read_metadata(output).metadata["dedup"] == {"columns": "rows", "dropped": 4}
    assert "Wrote 5 rows" in capsys.readouterr().out.splitlines()[0]


def test_jsonl_dedup_by_a_column_keeps_each_first_line_of_a_value(tmp_path, capsys):
    lines = [{"n": i, "text": ["a", "b", "a", "c", "b", "a"][i]} for i in range(6)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = str(tmp_path / "cache")
    assert main(jsonl_pipeline.run, ["--input", str(tmp_path / "rows.jsonl"), "--output", output,
                                     "--dedup", "text", *FLAGS]) == 0
    assert [row["n"] for row in _rows(output)] == [0, 1, 3]
    assert read_metadata(output).metadata["dedup"] == {"columns": ["text"], "dropped": 3}
    assert "; dropped 3 duplicate row(s)" in capsys.readouterr().out.splitlines()[0]


def test_a_column_the_features_do_not_have_is_refused(tmp_path, capsys):
    (tmp_path / "a.csv").write_text("word,n\nx,1\n")
    argv = ["--input", str(tmp_path / "a.csv"), "--output", str(tmp_path / "cache"), "--dedup", "word", "nope",
            *FLAGS]
    with pytest.raises(SystemExit) as exit_:  # the features are known before the pipeline runs
        csv_pipeline.run([*argv, "--infer_rows", "10"])
    assert exit_.value.code == 2
    assert "--dedup nope: the features have no column 'nope'; they have word, n" in capsys.readouterr().err
    assert main(csv_pipeline.run, argv) == 1  # inferred as the pipeline runs
    err = capsys.readouterr().err
    assert "error: dedup names the column 'nope', which the features do not have; they have ['word', 'n']" in err
    assert "Traceback" not in err and "while running" not in err, "one line, without Beam's step"
    assert not (tmp_path / "cache" / "_metadata.json").exists()
