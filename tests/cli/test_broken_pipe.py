"""Output piped to a reader that stops early ends quietly: no BrokenPipeError traceback, the shell's status.

Each command runs as a process writing to a real pipe: through a shell to `head -1`, and to a pipe
whose reading end is closed before the command starts (so the broken pipe is certain, whatever
the timing and the pipe's buffer).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import pytest

from beam_shards import Features, Value, write_shards
from beam_shards.terminal import BROKEN_PIPE_STATUS

from _paths import REPO

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(300)]
ROWS = 3000  # `head` of them all prints far more than a pipe's buffer holds
CLI = [sys.executable, "-m", "beam_shards.cli"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("piped") / "cache")
    write_shards(({"id": i, "text": f"row {i} " * 8} for i in range(ROWS)), path,
                 Features({"id": Value("int64"), "text": Value("string")}))
    return path


def _to_head(command: list[str], folder) -> tuple[str, str, int]:
    """`command | head -1` in bash: head's output, the command's stderr and its exit status."""
    err, status = folder / "stderr", folder / "status"
    script = (f"{shlex.join(command)} 2>{shlex.quote(str(err))} | head -1; "
              f"echo ${{PIPESTATUS[0]}} >{shlex.quote(str(status))}")
    result = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    return result.stdout, err.read_text(), int(status.read_text())


def _to_closed_pipe(command: list[str]) -> subprocess.CompletedProcess:
    """`command` writing to a pipe whose reading end was closed before it started."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(command, cwd=REPO, stdout=write, stderr=subprocess.PIPE, text=True, timeout=240)
    finally:
        os.close(write)


def test_the_shells_status_for_a_broken_pipe_is_128_plus_sigpipe():
    assert BROKEN_PIPE_STATUS == 128 + signal.SIGPIPE == 141


def test_info_piped_to_head_ends_quietly(cache, tmp_path):
    out, err, status = _to_head([*CLI, "info", cache], tmp_path)
    assert out == f"cache        {cache}\n"
    assert err == "" and status in (0, BROKEN_PIPE_STATUS)  # info may fit in the pipe before head exits


def test_head_piped_to_head_ends_quietly_with_the_broken_pipe_status(cache, tmp_path):
    out, err, status = _to_head([*CLI, "head", cache, "-n", str(ROWS)], tmp_path)
    assert out == "row 0\n"
    assert err == "" and status == BROKEN_PIPE_STATUS


@pytest.mark.parametrize("command", [["info"], ["head", "-n", str(ROWS)], ["log"], ["verify"], ["gc", "--dry_run"]])
def test_every_command_to_a_closed_pipe_ends_quietly(cache, command):
    result = _to_closed_pipe([*CLI, command[0], cache, *command[1:]])
    assert result.stderr == "" and result.returncode == BROKEN_PIPE_STATUS, result.stderr


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_to_a_closed_pipe_end_quietly(flag):
    result = _to_closed_pipe([*CLI, flag])
    assert result.stderr == "" and result.returncode in (0, BROKEN_PIPE_STATUS), result.stderr  # argparse's own


def test_a_pipelines_report_to_a_closed_pipe_ends_quietly(tmp_path):
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(5)))
    output = tmp_path / "cache"
    result = _to_closed_pipe([sys.executable, "-m", "pipelines.jsonl", "--input", str(tmp_path / "rows.jsonl"),
                              "--output", str(output), "--runner=FnApiRunner"])
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == BROKEN_PIPE_STATUS
    assert (output / "_metadata.json").exists(), "the cache was written before the report"
