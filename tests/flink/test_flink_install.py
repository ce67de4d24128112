"""Without what install_flink.py installs, the Flink tests skip naming it, and fail when CI requires them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _paths import REPO

pytestmark = pytest.mark.timeout(300)


def _flink_tests(cache: str, require: bool) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "BEAM_SHARDS_REQUIRE_FLINK"}
    env["BEAM_SHARDS_FLINK_CACHE"] = cache
    if require:
        env["BEAM_SHARDS_REQUIRE_FLINK"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rs",
                           "tests/flink/test_flink_install_whole.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)


def test_a_missing_install_skips_naming_what_is_missing_and_fails_when_required(tmp_path):
    cache = str(tmp_path / "empty_cache")
    skipped = _flink_tests(cache, require=False)
    summary = skipped.stdout.splitlines()[-1]
    assert skipped.returncode == 0 and "skipped" in summary and "passed" not in summary, skipped.stdout[-2000:]
    assert f"{cache}/beam-runners-flink-1.19-job-server-2.62.0/job-server.jar" in skipped.stdout
    assert f"{cache}/flink-1.19.3" in skipped.stdout and "install_flink.py" in skipped.stdout
    required = _flink_tests(cache, require=True)
    assert required.returncode != 0 and "BEAM_SHARDS_REQUIRE_FLINK=1 says they must run" in required.stdout, \
        required.stdout[-2000:]
    assert "passed" not in required.stdout.splitlines()[-1] and "skipped" not in required.stdout.splitlines()[-1]
