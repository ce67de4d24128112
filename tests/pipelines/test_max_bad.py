"""--skip_bad is not silent: --max_bad N|P% fails a run that skips more (publishing nothing), and the
summary always says how many were skipped."""

from __future__ import annotations

import argparse
import json
import os

import apache_beam as beam
import pytest

from beam_shards import Features, TooManyBadError, Value, WriteToArrowShards, read_metadata
from beam_shards.beam.bad_limit import Skipped, check_skipped
from beam_shards.beam.count_skipped import CountSkippedFn
from beam_shards.format.layout import MANIFEST_NAME, STAGING_DIR
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, image_folder, jsonl
from pipelines.flags import max_bad_flag

from _support import png

RUNNER = "--runner=FnApiRunner"


@pytest.mark.parametrize("text, limit", [("0", 0), ("5", 5), ("1%", 0.01), ("0.5%", 0.005), ("100%", 1.0)])
def test_max_bad_is_a_count_or_a_percentage(text, limit):
    assert max_bad_flag(text) == limit and type(max_bad_flag(text)) is type(limit)


@pytest.mark.parametrize("text", ["-1", "101%", "x", "1.5", "%"])
def test_max_bad_refuses_what_is_neither(text):
    with pytest.raises(argparse.ArgumentTypeError, match="neither a count"):
        max_bad_flag(text)


def test_max_bad_alone_turns_skip_bad_on_and_skip_bad_alone_takes_one_percent(tmp_path):
    parser = common.make_parser("x", "test")
    args, _ = common.parse_args(parser, ["--output", str(tmp_path / "out"), "--max_bad", "7"])
    assert args.skip_bad and args.max_bad == 7
    args, _ = common.parse_args(parser, ["--output", str(tmp_path / "out"), "--skip_bad"])
    assert args.skip_bad and args.max_bad == 0.01


def lines_file(path, good: int, bad: int) -> str:
    """A JSONL file of `good` rows, then `bad` lines that are not JSON."""
    rows = [json.dumps({"n": i}) for i in range(good)] + [f"not json {i}" for i in range(bad)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def main(run, argv, capsys) -> tuple[int, str, str]:
    status = common.main(run, argv + [RUNNER])
    out, err = capsys.readouterr()
    return status, out, err


def assert_nothing_published(out: str) -> None:
    assert not os.path.exists(os.path.join(out, MANIFEST_NAME))
    assert not os.listdir(os.path.join(out, STAGING_DIR)) if os.path.isdir(os.path.join(out, STAGING_DIR)) else True


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flags, published", [
    (["--skip_bad"], False),                   # 1%: 3 of 20 read is more
    (["--skip_bad", "--max_bad", "2"], False),
    (["--max_bad", "3"], True),                # --max_bad alone skips
    (["--skip_bad", "--max_bad", "15%"], True),  # 3 of 20 is 15%
    (["--skip_bad", "--max_bad", "14%"], False),
])
def test_unparsable_lines_over_the_limit_fail_the_run(tmp_path, capsys, flags, published):
    out = str(tmp_path / "out")
    status, stdout, err = main(jsonl.run, ["--input", lines_file(tmp_path / "in.jsonl", 17, 3), "--output", out,
                                           *flags], capsys)
    if published:
        assert status == 0 and read_metadata(out).num_rows == 17
        limit = flags[-1]
        assert f"Skipped 3 bad input(s) of 20 read (--max_bad {limit}), listed in" in stdout
        assert len(read_bad_inputs(out)) == 3
        assert read_metadata(out).metadata["bad_inputs"] == {"skipped": 3, "read": 20, "max_bad": limit}
    else:
        assert status == 1 and "error: 3 bad input(s) of 20 read (15.0%), more than max_bad=" in err
        assert "nothing was published" in err and "in.jsonl, line 18" in err and "in.jsonl, line 20" in err
        assert "not valid JSON" in err and "(add --skip_bad" not in err
        assert_nothing_published(out)


@pytest.mark.timeout(300)
def test_bad_images_the_sink_refuses_count_toward_the_limit(tmp_path, capsys):
    root = tmp_path / "images"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(2):
            (root / name / f"{i}.png").write_bytes(png(i))
    (root / "dog" / "cut.png").write_bytes(png(9)[:-20])
    out = str(tmp_path / "out")
    status, _, err = main(image_folder.run, ["--input", str(root), "--output", out, "--skip_bad"], capsys)
    assert status == 1 and "1 bad input(s) of 5 read (20.0%), more than max_bad=1% allows" in err and "cut.png" in err
    assert_nothing_published(out)

    status, stdout, _ = main(image_folder.run, ["--input", str(root), "--output", out, "--max_bad", "20%"], capsys)
    assert status == 0 and "Skipped 1 bad input(s) of 5 read (--max_bad 20%), listed in" in stdout
    assert read_metadata(out).num_rows == 4


@pytest.mark.timeout(300)
def test_the_summary_says_when_nothing_was_skipped(tmp_path, capsys):
    out = str(tmp_path / "out")
    status, stdout, _ = main(jsonl.run, ["--input", lines_file(tmp_path / "in.jsonl", 5, 0), "--output", out,
                                         "--skip_bad"], capsys)
    assert status == 0 and "Skipped 0 bad input(s) of 5 read (--max_bad 1%)\n" in stdout
    status, stdout, _ = main(jsonl.run, ["--input", str(tmp_path / "in.jsonl"), "--output", out], capsys)
    assert status == 0 and "Skipped" not in stdout


def test_the_first_reasons_are_the_first_in_key_order():
    fn = CountSkippedFn()
    parts = []
    for keys in ((9, 5), (3, 1)):  # as two workers may see them
        part = fn.create_accumulator()
        for key in keys:
            part = fn.add_input(part, {"key": key, "reason": f"bad {chr(96 + key)}"})
        parts.append(part)
    skipped = fn.extract_output(fn.merge_accumulators(parts))
    assert skipped == Skipped(4, [(1, "bad a"), (3, "bad c"), (5, "bad e")])
    with pytest.raises(TooManyBadError) as raised:
        check_skipped(skipped, 96, 3, "cache")
    assert str(raised.value) == ("4 bad input(s) of 100 read (4.0%), more than max_bad=3 allows; nothing was published "
                                 "to cache. The first: 1: bad a; 3: bad c; 5: bad e")
    assert check_skipped(skipped, 96, 0.04, "cache") == {"skipped": 4, "read": 100, "max_bad": "4%"}


@pytest.mark.parametrize("kwargs, words", [
    ({"max_bad": 3}, "max_bad limits what on_bad=\"skip\" skips"),
    ({"on_bad": "skip", "max_bad": -1}, "a count >= 0"),
    ({"on_bad": "skip", "max_bad": 1.5}, "a fraction from 0.0 to 1.0"),
    ({"on_bad": "skip", "max_bad": "1%"}, "max_bad must be a count"),
])
def test_the_sink_refuses_a_max_bad_it_cannot_apply(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        WriteToArrowShards(str(tmp_path / "out"), Features({"n": Value("int64")}), **kwargs)


@pytest.mark.timeout(300)
def test_the_sink_alone_fails_past_max_bad_and_publishes_nothing(tmp_path):
    out = str(tmp_path / "out")
    examples = [{"n": i} for i in range(8)] + [{"n": "x"}, {"n": "y"}]
    with pytest.raises(Exception, match=r"2 bad input\(s\) of 10 read \(20.0%\), more than max_bad=1 allows"):
        with beam.Pipeline(runner="FnApiRunner") as pipeline:
            _ = pipeline | beam.Create(examples) | WriteToArrowShards(
                out, Features({"n": Value("int64")}), on_bad="skip", max_bad=1)
    assert not os.path.exists(os.path.join(out, MANIFEST_NAME))
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        _ = pipeline | beam.Create(examples) | WriteToArrowShards(
            out, Features({"n": Value("int64")}), on_bad="skip", max_bad=0.2)
    assert read_metadata(out).num_rows == 8
