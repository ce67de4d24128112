"""`python -m pipelines.csv` / `jsonl` read their flags before importing Beam: `--help` and a usage
error come without it (Beam's import alone took ~4 s of a start-up), and a good command line still runs:
a small local one without Beam at all (`tabular_local`), one with a Beam flag on Beam."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from beam_shards import read_metadata

from _paths import REPO

pytestmark = pytest.mark.timeout(300)


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)


def _imported(stderr: str) -> set[str]:
    """The top-level packages `-X importtime` saw imported."""
    return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("name", ["csv", "jsonl"])
def test_help_and_a_usage_error_import_no_beam(name):
    shown = _run("-m", f"pipelines.{name}", "--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"python -m pipelines.{name}" in shown.stdout and "--input PATTERN" in shown.stdout
    assert "FlinkRunner" in shown.stdout
    refused = _run("-m", f"pipelines.{name}", "--output", "out")
    assert refused.returncode == 2 and "--input" in refused.stderr
    for result in (shown, refused):
        imported = _imported(result.stderr)
        assert "pipelines" in imported, "importtime saw the pipeline"
        assert not imported & {"apache_beam", "PIL", "torch", "datasets", "grpc"}, sorted(imported)


@pytest.mark.parametrize("flags, beam", [([], False), (["--runner=FnApiRunner"], True)],
                         ids=["small and local: in this process", "a Beam flag: on Beam"])
def test_a_command_line_the_flags_take_runs_the_conversion(tmp_path, flags, beam):
    (tmp_path / "rows.csv").write_text("n,name\n" + "".join(f"{i},row {i}\n" for i in range(10)))
    output = str(tmp_path / "out")
    result = _run("-m", "pipelines.csv", "--input", str(tmp_path / "rows.csv"), "--output", output, "--progress", "0",
                  *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Wrote 10 rows" in result.stdout
    assert read_metadata(output).num_rows == 10
    assert ("apache_beam" in _imported(result.stderr)) == beam
