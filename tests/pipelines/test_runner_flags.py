"""Flags of a runner named by its dotted `--runner` path are taken (issue 35); unknown flags are still refused.

The runner's module is imported before the flags are checked, so the options it defines
(Beam's DaskRunner and its `--dask_client_address`, or `_tiny_runner.TinyRunner` and its
`--tiny_marker` here) are known.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from beam_shards import ShardedDataset
from pipelines import common

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TINY_RUNNER = "_tiny_runner.TinyRunner"
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.mark.timeout(300)
def test_a_dotted_runners_own_flag_reaches_it_in_a_fresh_process(tmp_path):
    """The case of the issue: the runner's module is imported by nothing but `--runner`."""
    (tmp_path / "rows.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    marker, output = tmp_path / "ran", tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.jsonl", "--input", str(tmp_path / "rows.jsonl"), "--output", str(output),
         "--runner", TINY_RUNNER, f"--tiny_marker={marker}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "ran", "the runner ran the pipeline, with its flag"
    assert [row["n"] for row in ShardedDataset(str(output))] == [1, 2]


@pytest.mark.parametrize("flag, message", [
    ("--tiny_markr=x", "unrecognized argument --tiny_markr; did you mean --tiny_marker?"),
    ("--zzzz", "unrecognized argument --zzzz (not a flag of this pipeline or of Beam)"),
])
def test_a_flag_neither_beam_nor_the_runner_takes_is_still_refused(flag, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        common.parse_args(common.make_parser("x", "test"), ["--output", "out", "--runner", TINY_RUNNER, flag])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_dotted_runners_flag_is_parsed_into_its_options():
    _, options = common.parse_args(common.make_parser("x", "test"),
                                   ["--output", "out", f"--runner={TINY_RUNNER}", "--tiny_marker", "m"])
    runner_options = sys.modules["_tiny_runner"].TinyOptions
    assert options.view_as(runner_options).tiny_marker == "m"


def test_a_runner_that_cannot_be_imported_is_named_before_its_flags(capsys):
    with pytest.raises(SystemExit) as exit_:
        common.parse_args(common.make_parser("x", "test"),
                          ["--output", "out", "--runner", "nowhere_at_all.Runner", "--its_own_flag=1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--runner nowhere_at_all.Runner: cannot import nowhere_at_all" in err
    assert "unrecognized argument" not in err


def test_dasks_client_address_is_not_refused_as_an_unknown_flag(capsys):
    """Beam's DaskRunner, named by its path: with dask installed its flag is taken; without, the
    error is that the runner cannot be imported, not that `--dask_client_address` is unknown."""
    argv = ["--output", "out", "--runner", DASK_RUNNER, "--dask_client_address=localhost:8786"]
    if importlib.util.find_spec("dask") is None:
        with pytest.raises(SystemExit):
            common.parse_args(common.make_parser("x", "test"), argv)
        err = capsys.readouterr().err
        assert f"--runner {DASK_RUNNER}: cannot import apache_beam.runners.dask.dask_runner" in err, err
        assert "unrecognized argument" not in err
    else:
        from apache_beam.runners.dask.dask_runner import DaskOptions

        _, options = common.parse_args(common.make_parser("x", "test"), argv)
        assert options.view_as(DaskOptions).dask_client_address == "localhost:8786"
