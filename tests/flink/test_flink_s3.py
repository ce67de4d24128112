"""The demo on the standalone Flink cluster writes to `s3://` (moto's server): the cluster's Python
workers reach the store through Beam's S3 pipeline options (`--s3_endpoint_url`,
`--s3_access_key_id`, ...), as workers on a real cluster would, not through an environment the
session's worker pool was started with. Read back here, the shards are the FnApiRunner's bytes
and `beam-shards verify` passes.
"""

from __future__ import annotations

import uuid

import pytest
from apache_beam.io.filesystems import FileSystems

from beam_shards.cli import main as beam_shards_cli
from pipelines import demo

from _stores import BUCKET, STORE_VARIABLES
from test_deterministic import shard_digests
from test_flink_runs import DEMO, demo_on_fnapi  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(600)


def test_the_clusters_workers_write_the_demo_to_s3_given_beams_s3_options(
        flink_cluster_options, s3_server, demo_on_fnapi, monkeypatch):
    for name in STORE_VARIABLES:  # the store is reached through the options alone
        monkeypatch.delenv(name, raising=False)
    output = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/demo"
    manifest = demo.run([*DEMO, "--output", output, *flink_cluster_options, *s3_server.s3_flags()])
    assert manifest.num_rows == 300 and manifest.num_shards >= 3, manifest

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    assert shard_digests(output) == demo_on_fnapi
    assert beam_shards_cli(["verify", output]) == 0, f"beam-shards verify {output} failed"
