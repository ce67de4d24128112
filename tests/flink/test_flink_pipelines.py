"""Every conversion pipeline on the standalone Flink cluster (parallelism 2, an EXTERNAL worker pool),
its input holding a few bad rows, run with `--skip_bad`: the shards are the FnApiRunner's bytes, the
dead-letter list beside the cache is the FnApiRunner's, and `beam-shards verify` passes.

One cluster job per pipeline on the small inputs `tests/pipelines` builds: the cluster's job
server and worker pool are the session's, so a job costs its own seconds only (the `[local]`
runner, a job server per job, runs the demo in `test_flink_runs`).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_shards import Features, Image, Value
from beam_shards.cli import main as beam_shards_cli
from beam_shards.versions import read_bad_inputs

from _support import png
from test_deterministic import shard_digests
from test_pipelines_deterministic import PIPELINES, ROWS, SMALL
from test_tfrecord import flip_byte, row, write as write_tfrecord

pytestmark = pytest.mark.timeout(600)

SKIP_BAD = ["--skip_bad", "--max_bad", "10"]


def _bad_csv(root) -> list[str]:
    with open(root / "part-0.csv", "a") as handle:
        handle.write("img/1.png,cat\n"              # a field missing: the reader's bad input
                     "img/missing.png,dog,1000\n")  # no such image: the sink's
    return []


def _bad_jsonl(root) -> list[str]:
    with open(root / "part-1.jsonl", "a") as handle:
        handle.write('{"image": "img/2.png", "n": \n'
                     + json.dumps({"image": "img/missing.png", "n": 1000, "tags": []}) + "\n")
    return []


def _bad_image_folder(root) -> list[str]:
    (root / "train" / "bee" / "0500.jpg").write_bytes(b"not an image")
    (root / "train" / "cow" / "deeper" / "0501.jpg").write_bytes(png(3, size=8)[:-20])
    return []


def _bad_parquet(root) -> list[str]:
    pq.write_table(pa.table({"image": pa.array([b"not an image", png(4, size=8)[:-20]], pa.binary()),
                             "n": pa.array([1000, 1001], pa.int64()), "text": pa.array(["bad", "bad too"])}),
                   root / "part-2.parquet")
    # Images by the features, so the sink refuses what does not decode.
    features = Features({"image": Image(), "n": Value("int64"), "text": Value("string")})
    (root / "features.json").write_text(json.dumps(features.to_dict()))
    return ["--features", str(root / "features.json")]


def _bad_tfrecord(root) -> list[str]:
    path = root / "part-2.tfrecord"
    offsets = write_tfrecord(path, [row(1000), row(1001)])
    for offset in offsets:
        flip_byte(path, offset + 12 + 30)  # inside the record: its CRC no longer matches
    return []


# Each adds 2 bad rows to the pipeline's input; returns the flags they need.
BAD_ROWS = {"csv": _bad_csv, "jsonl": _bad_jsonl, "image_folder": _bad_image_folder, "parquet": _bad_parquet,
            "tfrecord": _bad_tfrecord}
BAD = 2


def _bad_inputs(path: str) -> list[dict]:
    """The dead-letter list without its write id, which is each run's own."""
    return [{key: value for key, value in record.items() if key != "write_id"} for record in read_bad_inputs(path)]


@pytest.mark.parametrize("name", BAD_ROWS)
def test_a_pipeline_with_bad_rows_on_the_cluster_writes_the_fnapi_runners_shards_and_list(
        name, flink_cluster_options, tmp_path):
    run, make_input = PIPELINES[name]
    (tmp_path / "in").mkdir()
    argv = make_input(tmp_path / "in") + SMALL + SKIP_BAD
    argv += BAD_ROWS[name](tmp_path / "in")
    expected, output = str(tmp_path / "fnapi"), str(tmp_path / "flink")
    on_fnapi = run([*argv, "--output", expected, "--runner=FnApiRunner"])
    assert on_fnapi.num_rows == ROWS[name] and len(_bad_inputs(expected)) == BAD, (on_fnapi, _bad_inputs(expected))

    manifest = run([*argv, "--output", output, *flink_cluster_options])
    assert manifest.num_rows == ROWS[name] and manifest.num_shards >= 3, manifest
    assert shard_digests(output) == shard_digests(expected)
    assert _bad_inputs(output) == _bad_inputs(expected)
    assert beam_shards_cli(["verify", output]) == 0, f"beam-shards verify {output} failed"
