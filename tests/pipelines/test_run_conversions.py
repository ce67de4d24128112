"""Several conversions in one Beam job (`run_conversions`): each publishes what it publishes in a job
of its own; when one fails, the job's error is raised, it publishes nothing, and no conversion of
the job leaves staged files (one that published first keeps its version whole); conversions that
cannot share a job are refused naming why."""

from __future__ import annotations

import os

import pytest

from beam_shards import ShardedDataset, list_versions, read_metadata
from beam_shards.cli import main as beam_shards_cli
from beam_shards.format import STAGING_DIR
from pipelines import csv, demo
from pipelines.common import BadInputError, run_conversions

from test_deterministic import shard_digests
from test_pipelines_deterministic import PIPELINES, SMALL

pytestmark = pytest.mark.timeout(300)

RUNNER = ["--runner=FnApiRunner"]


def _inputs(tmp_path) -> dict[str, list[str]]:
    (tmp_path / "csv_in").mkdir()
    return {"csv": PIPELINES["csv"][1](tmp_path / "csv_in") + SMALL, "demo": PIPELINES["demo"][1](tmp_path) + SMALL}


def test_conversions_in_one_job_publish_the_shards_each_publishes_alone(tmp_path):
    flags = _inputs(tmp_path)
    alone = {"csv": csv.run([*flags["csv"], "--output", str(tmp_path / "csv"), *RUNNER]),
             "demo": demo.run([*flags["demo"], "--output", str(tmp_path / "demo"), *RUNNER])}
    together = run_conversions([csv.plan([*flags["csv"], "--output", str(tmp_path / "csv2"), *RUNNER]),
                                demo.plan([*flags["demo"], "--output", str(tmp_path / "demo2"), *RUNNER]),
                                demo.plan([*flags["demo"], "--output", str(tmp_path / "demo3"), *RUNNER])])
    assert [manifest.num_rows for manifest in together] == [300, 300, 300]
    assert [manifest.features for manifest in together] == [alone["csv"].features] + [alone["demo"].features] * 2
    assert shard_digests(str(tmp_path / "csv2")) == shard_digests(str(tmp_path / "csv"))
    assert shard_digests(str(tmp_path / "demo2")) == shard_digests(str(tmp_path / "demo3")) == \
        shard_digests(str(tmp_path / "demo"))


def test_a_failing_conversion_publishes_nothing_and_no_conversion_of_its_job_keeps_staged_files(tmp_path):
    flags = _inputs(tmp_path)
    with open(tmp_path / "csv_in" / "part-1.csv", "a") as handle:
        handle.write("img/1.png,cat\n")  # a field missing, without --skip_bad
    existing = str(tmp_path / "demo")
    demo.run([*flags["demo"], "--output", existing, *RUNNER])
    before = read_metadata(existing)
    with pytest.raises(BadInputError, match=r"part-1\.csv, line 152"):
        run_conversions([demo.plan([*flags["demo"], "--output", existing, "--num_examples", "200", *RUNNER]),
                         csv.plan([*flags["csv"], "--output", str(tmp_path / "csv"), *RUNNER])])
    versions = [version.version for version in list_versions(existing)]
    assert versions in ([1], [1, 2]), versions
    assert read_metadata(existing, version=1) == before and beam_shards_cli(["verify", existing, "--version", "1"]) == 0
    if versions == [1, 2]:  # the demo published before the csv failed: its version is whole
        assert len(ShardedDataset(existing)) == 200 and beam_shards_cli(["verify", existing]) == 0
    assert not os.path.exists(tmp_path / "csv" / "_metadata.json")
    for output in (tmp_path / "demo", tmp_path / "csv"):
        staging = output / STAGING_DIR
        assert not staging.exists() or not os.listdir(staging), f"{output} keeps staged files: {os.listdir(staging)}"


def test_conversions_that_cannot_share_a_job_are_refused_naming_why(tmp_path):
    flags = _inputs(tmp_path)["demo"]
    with pytest.raises(ValueError, match="at least one conversion"):
        run_conversions([])
    same = str(tmp_path / "out")
    with pytest.raises(ValueError, match=f"{same} is written twice"):
        run_conversions([demo.plan([*flags, "--output", same, *RUNNER]), demo.plan([*flags, "--output", same, *RUNNER])])
    with pytest.raises(ValueError, match="differ from .* in direct_num_workers"):
        run_conversions([demo.plan([*flags, "--output", str(tmp_path / "a"), *RUNNER]),
                         demo.plan([*flags, "--output", str(tmp_path / "b"), *RUNNER, "--direct_num_workers=2"])])
    assert not os.path.exists(same) and not os.path.exists(tmp_path / "a")
