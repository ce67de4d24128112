"""One grammar for sizes, durations and counts: the parsers, and the API, CLI and pipelines that share them."""

import datetime

import pytest

from beam_shards import Features, Retention, Value, WriterOptions, write_shards
from beam_shards.cli.commands import main as cli
from beam_shards.units import MAX_SIZE, parse_count, parse_duration, parse_size
from pipelines import common


@pytest.mark.parametrize("text, expected", [
    ("64MB", 64_000_000), ("64MiB", 64 * 2**20), ("1GiB", 2**30), ("512kib", 512 * 1024), ("1.5GB", 1_500_000_000),
    ("1000", 1000), (" 2 MiB ", 2 * 2**20), ("10B", 10), ("1TB", 10**12), ("1TiB", 2**40), (4096, 4096),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "64 XB", "-1MB", "0", "1e3", "0.1B", "9" * 40, "2PiB", 0, -5, True, 1.5,
                                  None])
def test_parse_size_refuses_what_is_not_a_size_in_range(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize("text, expected", [
    ("0", datetime.timedelta(0)), ("45s", datetime.timedelta(seconds=45)), ("30m", datetime.timedelta(minutes=30)),
    ("12h", datetime.timedelta(hours=12)), ("7d", datetime.timedelta(days=7)), ("2w", datetime.timedelta(weeks=2)),
    ("1.5h", datetime.timedelta(minutes=90)), (90, datetime.timedelta(seconds=90)),
    (datetime.timedelta(days=1), datetime.timedelta(days=1)),
])
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "d", "7y", "-1d", "99999999999d", "1e9d", float("nan"), float("inf"),
                                  datetime.timedelta(days=-1), None, True])
def test_parse_duration_refuses_what_is_not_a_duration_in_range(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text, minimum, expected", [("1", 1, 1), (" 8 ", 1, 8), (0, 0, 0), ("2147483647", 1, 2**31 - 1)])
def test_parse_count(text, minimum, expected):
    assert parse_count(text, minimum=minimum) == expected


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "x", "", "2147483648", "9" * 5000, 1.0, None, True])
def test_parse_count_refuses_what_is_not_a_count_in_range(text):
    with pytest.raises(ValueError, match="whole number"):
        parse_count(text)


def test_the_api_takes_the_same_sizes_and_durations_as_the_command_line():
    assert WriterOptions(shard_size_bytes="64MB", batch_bytes="1MiB") == WriterOptions(64_000_000, batch_bytes=2**20)
    assert Retention(min_age="7d") == Retention(min_age=datetime.timedelta(days=7))
    with pytest.raises(ValueError, match="shard_size_bytes: .*out of range"):
        WriterOptions(shard_size_bytes=MAX_SIZE + 1)
    with pytest.raises(ValueError, match="min_age: .*duration"):
        Retention(min_age="forever")


def test_write_shards_takes_a_size_as_text(tmp_path):
    manifest = write_shards(({"x": i} for i in range(10)), str(tmp_path / "c"), Features({"x": Value("int64")}),
                            shard_size_bytes="1MB", retention=None)
    assert manifest.num_rows == 10


@pytest.mark.parametrize("argv", [["compact", "PATH", "--shard_size", "9" * 40], ["gc", "PATH", "--min_age", "99999999999d"],
                                  ["head", "PATH", "-n", "0"], ["gc", "PATH", "--keep", "9" * 30]])
def test_the_cli_refuses_an_absurd_value_as_a_usage_error(tmp_path, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli([str(tmp_path) if a == "PATH" else a for a in argv])
    assert exit_.value.code == 2
    assert "out of range" in capsys.readouterr().err


def test_a_pipeline_size_flag_means_what_the_cli_flag_means():
    args, _ = common.parse_args(common.make_parser("x", "test"), ["--output", "o", "--shard_size", "128MB"])
    assert args.shard_size == 128_000_000
    args, _ = common.parse_args(common.make_parser("x", "test"), ["--output", "o", "--shard_size", "1TB"])
    assert args.shard_size == 10**12


@pytest.mark.parametrize("argv", [["--shard_size", "9" * 40], ["--batch_size", "9" * 40], ["--shard_size", "0"]])
def test_a_pipeline_refuses_an_absurd_value_as_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        common.parse_args(common.make_parser("demo", "test"), ["--output", "o", *argv])
    assert exit_.value.code == 2
    assert "out of range" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["9" * 400, "9" * 400 + "MB", "1" + "0" * 320 + "KiB"])
def test_a_size_of_hundreds_of_digits_is_out_of_range_not_an_overflow(text):
    with pytest.raises(ValueError, match="out of range"):
        parse_size(text)
