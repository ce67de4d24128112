"""Every conversion pipeline, and the sink and source in steps of the tests' own, on Flink: on `[local]`
and on the standalone cluster (parallelism 2, an EXTERNAL worker pool).

Each pipeline's shards are the FnApiRunner's bytes, the dead-letter list beside its cache is
the FnApiRunner's, and `beam-shards verify` passes. A cache read with `ReadFromArrowShards`,
shuffled and written again with `WriteToArrowShards` (not deterministically) keeps every row
once, in shards of the contract's sizes whatever Flink's bundles, and verifies.

The inputs are the small ones `tests/pipelines` builds; five of them hold two bad rows each
and run with `--skip_bad`. On the cluster the demo writes to `s3://` (moto's server), its
workers reaching the store through Beam's S3 pipeline options alone, as workers on a real
cluster would. Each pipeline's conversion is planned from its flags (`plan(argv)`), the copy's
is the demo's with steps of the test's own, and all of them run as one Flink job per runner
(`run_conversions`): a job costs tens of seconds of JVM time whatever it holds, and the
steps of one conversion are the same in a job of their own. The FnApiRunner's outputs come from each pipeline's `run(argv)`, one job each.
One test per runner checks every pipeline, so that no job runs twice when pytest-xdist
gives a module's tests to several workers.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from beam_shards import Features, Image, ReadFromArrowShards, Value, read_metadata, write_shards
from beam_shards.cli import main as beam_shards_cli
from beam_shards.read.backend import ArrowBackend
from beam_shards.shards.merge import is_small
from beam_shards.versions import read_bad_inputs
from pipelines.common import Conversion, run_conversion, run_conversions

from _stores import BUCKET, STORE_VARIABLES
from _support import png
from test_deterministic import shard_digests
from test_pipelines_deterministic import PIPELINES, ROWS, SMALL
from test_tfrecord import flip_byte, row, write as write_tfrecord

pytestmark = pytest.mark.timeout(900)

SKIP_BAD = ["--skip_bad", "--max_bad", "10"]


def _bad_csv(root) -> list[str]:
    with open(root / "part-0.csv", "a") as handle:
        handle.write("img/1.png,cat\n"              # a field missing: the reader's bad input
                     "img/missing.png,dog,1000\n")  # no such image: the sink's
    return SKIP_BAD


def _bad_jsonl(root) -> list[str]:
    with open(root / "part-1.jsonl", "a") as handle:
        handle.write('{"image": "img/2.png", "n": \n'
                     + json.dumps({"image": "img/missing.png", "n": 1000, "tags": []}) + "\n")
    return SKIP_BAD


def _bad_image_folder(root) -> list[str]:
    (root / "train" / "bee" / "0500.jpg").write_bytes(b"not an image")
    (root / "train" / "cow" / "deeper" / "0501.jpg").write_bytes(png(3, size=8)[:-20])
    return SKIP_BAD


def _bad_parquet(root) -> list[str]:
    pq.write_table(pa.table({"image": pa.array([b"not an image", png(4, size=8)[:-20]], pa.binary()),
                             "n": pa.array([1000, 1001], pa.int64()), "text": pa.array(["bad", "bad too"])}),
                   root / "part-2.parquet")
    # Images by the features, so the sink refuses what does not decode.
    features = Features({"image": Image(), "n": Value("int64"), "text": Value("string")})
    (root / "features.json").write_text(json.dumps(features.to_dict()))
    return [*SKIP_BAD, "--features", str(root / "features.json")]


def _bad_tfrecord(root) -> list[str]:
    path = root / "part-2.tfrecord"
    offsets = write_tfrecord(path, [row(1000), row(1001)])
    for offset in offsets:
        flip_byte(path, offset + 12 + 30)  # inside the record: its CRC no longer matches
    return SKIP_BAD


# Each adds its bad rows to the pipeline's input; returns the flags they need.
BAD_ROWS = {"csv": _bad_csv, "jsonl": _bad_jsonl, "image_folder": _bad_image_folder, "parquet": _bad_parquet,
            "tfrecord": _bad_tfrecord, "demo": lambda root: []}
BAD = {"csv": 2, "jsonl": 2, "image_folder": 2, "parquet": 2, "tfrecord": 2, "demo": 0}
PLANS = {name: plan for name, (plan, _) in PIPELINES.items()}

COPY_FEATURES = Features({"id": Value("int64"), "text": Value("string"), "data": Value("binary")})
COPY_ROWS = 3000
COPY_SHARD_BYTES = 16 << 10


def _bad_inputs(path: str) -> list[dict]:
    """The dead-letter list without its write id, which is each run's own."""
    return [{key: value for key, value in record.items() if key != "write_id"} for record in read_bad_inputs(path)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, list[str]]:
    """Each pipeline's flags but its output, its input holding its bad rows."""
    flags = {}
    for name in PLANS:
        root = tmp_path_factory.mktemp(f"in_{name}")
        flags[name] = PIPELINES[name][1](root) + SMALL + BAD_ROWS[name](root)
    return flags


@pytest.fixture(scope="module")
def on_fnapi(inputs, tmp_path_factory) -> dict[str, tuple[list[str], list[dict]]]:
    """Each pipeline's shard digests and dead-letter list from its own run on the FnApiRunner."""
    written = {}
    for name, flags in inputs.items():
        output = str(tmp_path_factory.mktemp("fnapi") / name)
        manifest = run_conversion(PLANS[name]([*flags, "--output", output, "--runner=FnApiRunner"]))
        assert manifest.num_rows == ROWS[name] and len(_bad_inputs(output)) == BAD[name], (manifest, output)
        written[name] = (shard_digests(output), _bad_inputs(output))
    return written


@pytest.fixture(scope="module")
def copy_source(tmp_path_factory) -> str:
    """A cache of several shards, for the copy to read in parallel."""
    source = str(tmp_path_factory.mktemp("copy") / "source")
    write_shards(({"id": i, "text": f"row {i}", "data": bytes([i % 251]) * (i % 40)} for i in range(COPY_ROWS)),
                 source, COPY_FEATURES, shard_size_bytes=COPY_SHARD_BYTES)
    assert read_metadata(source).num_shards >= 4, "the source should span several shards, read in parallel"
    return source


def _copy(source: str, target: str, options: list[str]) -> Conversion:
    """`source` read, shuffled and written again to `target` in 64-row batches, not deterministically."""
    planned = PLANS["demo"](["--output", target, "--shard_size", str(COPY_SHARD_BYTES), "--batch_size", "64",
                             "--no_deterministic", *options])

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "ReadFromArrowShards" >> ReadFromArrowShards(source, desired_split_bytes=4 << 10)
                | beam.Reshuffle()
                | "Where" >> beam.Map(lambda row: (f"row {row['id']}", row)))

    return dataclasses.replace(planned, read=read, features=COPY_FEATURES, metadata={"pipeline": "copy"})


def _copied(source: str, target: str) -> list[str]:
    """What is wrong with the copy of `source` at `target`: rows lost or twice, shard sizes, verify."""
    def rows(path: str) -> list[tuple]:
        table = ArrowBackend.open(path).slice(0, read_metadata(path).num_rows)
        return list(zip(*(table.column(name).to_pylist() for name in COPY_FEATURES)))

    written, wrong = rows(target), []
    if not len(written) == len(set(written)) == COPY_ROWS or sorted(written) != rows(source):
        wrong.append(f"{len(written)} rows, {len(set(written))} distinct, of {COPY_ROWS}")
    sizes = [shard.num_bytes for shard in read_metadata(target).shards]
    if max(sizes) > COPY_SHARD_BYTES or sum(is_small(size, COPY_SHARD_BYTES) for size in sizes) > 1:
        wrong.append(f"shard sizes {sizes}")
    if beam_shards_cli(["verify", target]) != 0:
        wrong.append("beam-shards verify failed")
    return wrong


def test_every_pipeline_on_flink_writes_the_fnapi_runners_shards_and_dead_letters(
        flink_options, on_fnapi, inputs, copy_source, request, tmp_path, monkeypatch):
    """One Flink job holding every pipeline's conversion and the copy, on `[local]`, then on the cluster (the
    demo's to `s3://`)."""
    outputs = {name: str(tmp_path / name) for name in PLANS}
    options = flink_options
    if request.node.callspec.params["flink_options"] == "cluster":
        server = request.getfixturevalue("s3_server")
        options = [*flink_options, *server.s3_flags()]
        outputs["demo"] = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/demo"
    for variable in STORE_VARIABLES:  # the store is reached through the options alone
        monkeypatch.delenv(variable, raising=False)
    copy = str(tmp_path / "copy")
    manifests = run_conversions([*(PLANS[name]([*flags, "--output", outputs[name], *options])
                                   for name, flags in inputs.items()), _copy(copy_source, copy, options)])

    if outputs["demo"].startswith("s3://"):
        for variable, value in request.getfixturevalue("s3_server").env().items():
            monkeypatch.setenv(variable, value)
        monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    written = {name: (manifest.num_rows, manifest.num_shards >= 3, shard_digests(outputs[name]),
                      _bad_inputs(outputs[name]), beam_shards_cli(["verify", outputs[name]]))
               for name, manifest in zip(inputs, manifests)}
    expected = {name: (ROWS[name], True, *on_fnapi[name], 0) for name in PLANS}
    wrong = [name for name in PLANS if written[name] != expected[name]]
    assert not wrong, {name: (written[name], expected[name]) for name in wrong}
    faults = _copied(copy_source, copy)
    assert not faults, faults
