"""Every conversion pipeline writes the same input as byte-identical shards (names aside) on
every local runner setup: in-process, 2 worker processes, 2 threads each replaying every bundle.
Each writes every row once (the pipelines' tests of several workers are these).

The six conversions run as one Beam job per runner setup (`run_conversions`): a job's start
(worker processes, Beam's fixed stages) costs seconds, and one job per pipeline and setup
cost 18 of them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_shards import ShardedDataset
from pipelines import csv, demo, image_folder, jsonl, parquet, tfrecord
from pipelines.common import run_conversions

from _support import jpeg, png
from test_deterministic import count_chunks, shard_digests
from test_tfrecord import row, write as write_tfrecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Threads and a repeated bundle in one run: each would change the bytes on its own, and a run costs seconds.
# The repeat is counted in this process (`count_chunks`), so it goes with the threads, not the processes.
RUNNERS = {
    "in-process": [],
    "2 processes": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "2 threads, bundle repeat": ["--direct_running_mode=multi_threading", "--direct_num_workers=2",
                                 "--direct_runner_bundle_repeat=1"],
}
# Small shards and batches, so a few hundred rows make several chunks and shards.
SMALL = ["--shard_size", "8KB", "--batch_size", "16", "--progress", "0"]


def _csv_input(root) -> list[str]:
    (root / "img").mkdir()
    for i in range(8):
        (root / "img" / f"{i}.png").write_bytes(png(i, size=8))
    for part in range(2):
        (root / f"part-{part}.csv").write_text("image,label,n\n" + "".join(
            f"img/{i % 8}.png,{'cat' if i % 3 else 'dog'},{i}\n" for i in range(part * 150, part * 150 + 150)))
    return ["--input", str(root / "part-*.csv"), "--label_column", "label"]


def _jsonl_input(root) -> list[str]:
    (root / "img").mkdir()
    for i in range(8):
        (root / "img" / f"{i}.png").write_bytes(png(i, size=8))
    for part in range(2):
        with open(root / f"part-{part}.jsonl", "w") as handle:
            for i in range(part * 150, part * 150 + 150):
                handle.write(json.dumps({"image": f"img/{i % 8}.png", "n": i, "tags": ["a"] * (i % 3)}) + "\n")
    return ["--input", str(root / "part-*.jsonl")]


def _image_folder_input(root) -> list[str]:
    for i in range(240):
        folder = root / "train" / ["ant", "bee", "cow"][i % 3] / ("deeper" if i % 5 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(jpeg(i, size=8))
    return ["--input", str(root / "train")]


def _parquet_input(root) -> list[str]:
    for part in range(2):
        numbers = range(part * 150, part * 150 + 150)
        pq.write_table(pa.table({"image": pa.array([png(i % 8, size=8) for i in numbers], pa.binary()),
                                 "n": pa.array(list(numbers), pa.int64()),
                                 "text": pa.array([f"row {i}" for i in numbers])}),
                       root / f"part-{part}.parquet", row_group_size=40)
    return ["--input", str(root / "part-*.parquet")]


def _tfrecord_input(root) -> list[str]:
    for part in range(2):
        write_tfrecord(root / f"part-{part}.tfrecord", [row(i) for i in range(part * 120, part * 120 + 120)])
    return ["--input", str(root / "part-*.tfrecord")]


def _demo_input(root) -> list[str]:
    return ["--num_examples", "300", "--image_size", "8"]


PIPELINES = {
    "csv": (csv.plan, _csv_input),
    "jsonl": (jsonl.plan, _jsonl_input),
    "image_folder": (image_folder.plan, _image_folder_input),
    "parquet": (parquet.plan, _parquet_input),
    "tfrecord": (tfrecord.plan, _tfrecord_input),
    "demo": (demo.plan, _demo_input),
}


# The rows each input holds, each with a key of its own in ORDER.
ROWS = {"csv": 300, "jsonl": 300, "image_folder": 240, "parquet": 300, "tfrecord": 240, "demo": 300}
ORDER = {
    "csv": lambda r: r["n"], "jsonl": lambda r: r["n"], "parquet": lambda r: r["n"], "demo": lambda r: r["id"],
    "image_folder": lambda r: r["path"], "tfrecord": lambda r: int(r["caption"].split()[1]),
}


def test_every_pipeline_writes_identical_shards_on_every_runner(tmp_path, monkeypatch):
    argvs = {}
    for name, (_, make_input) in PIPELINES.items():
        (tmp_path / name / "in").mkdir(parents=True)
        argvs[name] = make_input(tmp_path / name / "in") + SMALL
    chunks = count_chunks(monkeypatch)
    digests, written = {}, {}
    for runner, flags in RUNNERS.items():
        chunks.clear()
        outputs = {name: str(tmp_path / name / runner.replace(" ", "_").replace(",", "")) for name in PIPELINES}
        manifests = run_conversions([plan([*argvs[name], "--output", outputs[name], *flags])
                                     for name, (plan, _) in PIPELINES.items()])
        written[runner] = len(chunks)
        for name, manifest in zip(PIPELINES, manifests):
            digests[name, runner] = shard_digests(outputs[name])
            assert manifest.num_rows == ROWS[name] and manifest.num_shards >= 3, (name, runner, manifest)
    repeated = written["2 threads, bundle repeat"]
    assert repeated > written["in-process"] > 1, f"the bundle repeat did not fire: {written}"
    for name in PIPELINES:
        assert all(digests[name, runner] == digests[name, "in-process"] for runner in RUNNERS), name
        order = [ORDER[name](r) for r in ShardedDataset(str(tmp_path / name / "in-process"), image_mode="bytes")]
        assert order == sorted(set(order)), f"{name}: rows are in input order (files by name, then position), each once"
