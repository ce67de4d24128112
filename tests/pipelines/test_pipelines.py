"""The conversion pipelines end to end on small inputs made here, and their flags and errors."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import re
import subprocess
import sys

import apache_beam as beam
import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import FlinkRunnerOptions, GoogleCloudOptions, StandardOptions

from beam_shards import (Array, ClassLabel, Features, Image, Json, Sequence, ShardedDataset, Struct, Value,
                         read_metadata, shard_paths)
from beam_shards.errors import FeatureError
from beam_shards.inference import features_of, summarize_table, summarize_values
from beam_shards.format.layout import BAD_INPUTS_NAME, MANIFEST_NAME
from beam_shards import progress
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import (bad_inputs, common, csv as csv_pipeline, demo, image_folder, jsonl, parquet, rows as rows_module,
                       running, where)

from _paths import REPO
from _support import jpeg, options, png

ODD_NAME = "Ünïcödé name ø 1.jpg"


def rows_by(path: str, key: str) -> dict:
    return {row[key]: row for row in ShardedDataset(path, image_mode="bytes")}


def label_names(path: str, column: str = "label") -> list[str]:
    return read_metadata(path).features[column].names


# --- flags shared by every pipeline ----------------------------------------------------

@pytest.mark.parametrize("argv, nearest", [
    (["--lable_column", "label"], "did you mean --label_column?"),
    (["--runer=DirectRunner"], "did you mean --runner?"),
    (["--direct_num_worker=2"], "did you mean --direct_num_workers?"),
    (["--zzzz"], "not a flag of this pipeline or of Beam"),
])
def test_an_unknown_flag_is_refused_naming_the_nearest_known_one(argv, nearest, capsys):
    parser = common.make_parser("x", "test")
    parser.add_argument("--label_column")
    with pytest.raises(SystemExit) as exit_:
        common.parse_args(parser, ["--output", "out", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"unrecognized argument {argv[0].split('=')[0]}" in err and nearest in err


@pytest.mark.parametrize("runner, message", [
    ("FnApiRuner", "--runner FnApiRuner is not a Beam runner; did you mean FnApiRunner?"),
    ("Flinck", "--runner Flinck is not a Beam runner; did you mean FlinkRunner?"),
    ("zzz", "--runner zzz is not a Beam runner; known runners: BundleBasedDirectRunner, DataflowRunner"),
    ("my_runners.Fast", "--runner my_runners.Fast: cannot import my_runners"),
    ("apache_beam.runners.NoSuchRunner", "--runner apache_beam.runners.NoSuchRunner: apache_beam.runners has no "
                                         "NoSuchRunner"),
])
def test_a_mistyped_runner_is_a_usage_error_naming_the_nearest(runner, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        common.parse_args(common.make_parser("x", "test"), ["--output", "out", f"--runner={runner}"])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("runner", ["direct", "fnapi", "FnApiRunner", "DataflowRunner",
                                    "apache_beam.runners.portability.fn_api_runner.FnApiRunner"])
def test_every_spelling_beam_takes_for_a_runner_is_taken(runner):
    _, beam_options = common.parse_args(common.make_parser("x", "test"), ["--output", "gs://b/out", "--runner", runner])
    assert beam_options.view_as(StandardOptions).runner == runner


def test_beams_flags_go_to_beam_and_the_default_runner_is_fnapi():
    parser = common.make_parser("x", "test")
    args, beam_options = common.parse_args(parser, ["--output", "out", "--shard_size", "1GiB", "--compression", "zstd"])
    assert (args.output, args.shard_size, args.compression) == ("out", 2**30, "zstd")
    assert beam_options.view_as(StandardOptions).runner == "FnApiRunner"

    args, beam_options = common.parse_args(parser, [
        "--output", "gs://bucket/cache", "--runner", "DataflowRunner", "--project", "proj", "--region", "europe-west4",
        "--temp_location", "gs://bucket/tmp", "--setup_file", "./setup.py"])
    assert args.compression is None
    cloud = beam_options.view_as(GoogleCloudOptions)
    assert (beam_options.view_as(StandardOptions).runner, cloud.project, cloud.region) == (
        "DataflowRunner", "proj", "europe-west4")

    _, beam_options = common.parse_args(parser, ["--output", "o", "--runner=FlinkRunner", "--flink_master=host:8081",
                                                 "--environment_type=LOOPBACK"])
    assert beam_options.view_as(FlinkRunnerOptions).flink_master == "host:8081"


@pytest.mark.parametrize("output, runner_flags", [
    ("./demo_cache", ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/tmp"]),
    ("file:///shared/cache", ["--runner=dataflow"]),
    ("/shared/cache", ["--runner=FlinkRunner", "--flink_master=host:8081"]),
    ("/shared/cache", ["--runner=FlinkRunner", "--flink_master=host:8081", "--environment_type=DOCKER"]),
    ("/shared/cache", ["--runner=FlinkRunner", "--environment_type=PROCESS"]),
    ("/shared/cache", ["--runner=PortableRunner", "--job_endpoint=host:8099"]),
    ("/shared/cache", ["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=host:50000"]),
    ("/shared/cache", ["--runner=SparkRunner", "--spark_master_url=spark://host:7077"]),
])
def test_a_local_output_with_remote_workers_is_rejected_up_front(output, runner_flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        common.parse_args(common.make_parser("x", "test"), ["--output", output, *runner_flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--output {output} is a folder on this machine" in err and "gs://" in err
    assert ("--environment_type=LOOPBACK" in err) == ("Dataflow" not in runner_flags[0] and "dataflow" not in runner_flags[0])


@pytest.mark.parametrize("output, runner_flags", [
    ("./demo_cache", []),
    ("./demo_cache", ["--runner=FnApiRunner", "--direct_num_workers=2"]),
    ("./demo_cache", ["--runner=DirectRunner"]),
    ("./demo_cache", ["--runner=BundleBasedDirectRunner"]),
    ("./demo_cache", ["--runner=PrismRunner"]),
    ("./demo_cache", ["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"]),
    ("/shared/cache", ["--runner=FlinkRunner", "--flink_master=host:8081", "--environment_type=LOOPBACK"]),
    ("/shared/cache", ["--runner=FlinkRunner"]),  # an embedded local Flink defaults to LOOPBACK
    ("/shared/cache", ["--runner=SparkRunner"]),  # so does a local[4] Spark
    ("/shared/cache", ["--runner=PortableRunner", "--environment_type=loopback"]),
    ("/shared/cache", ["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=localhost:50000"]),
    ("gs://bucket/cache", ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/tmp"]),
    ("s3://bucket/cache", ["--runner=FlinkRunner", "--flink_master=host:8081", "--environment_type=DOCKER"]),
])
def test_local_runners_and_shared_outputs_are_accepted(output, runner_flags):
    args, _ = common.parse_args(common.make_parser("x", "test"), ["--output", output, *runner_flags])
    assert args.output == output


@pytest.mark.parametrize("flag", [["--shard_size", "lots"], ["--batch_size", "0"], ["--compression", "gzip"]])
def test_bad_flag_values_exit_with_usage(flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.run(["--output", "o"] + flag)
    assert exit_info.value.code == 2
    assert flag[0] in capsys.readouterr().err


@pytest.mark.parametrize("module", [demo, image_folder, jsonl, csv_pipeline, parquet])
def test_every_pipeline_has_help(module, capsys):
    with pytest.raises(SystemExit) as exit_info:
        module.run(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--output", "--shard_size", "--batch_size", "--compression", "--skip_bad", "DataflowRunner",
                 "FlinkRunner"):
        assert flag in text


def test_csv_module_runs_as_a_script_without_hiding_stdlib_csv():
    result = subprocess.run([sys.executable, "-m", "pipelines.csv", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "python -m pipelines.csv" in result.stdout


# --- demo -------------------------------------------------------------------------------

def test_demo_examples_are_real_images_and_deterministic():
    from PIL import Image as PILImage

    formats = set()
    for index in range(12):
        example = demo.make_example(index, image_size=32)
        assert _arrays_equal(example, demo.make_example(index, image_size=32))
        with PILImage.open(io.BytesIO(example["image"])) as image:
            image.load()
            formats.add(image.format)
            assert image.size == (32, 32)
        demo.FEATURES.encode_example(example)
        assert 0 <= example["bbox"].min() and example["bbox"].max() <= 1
    assert formats == {"JPEG", "PNG"}


def _arrays_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k]
                                        for k in a)


def test_demo_writes_a_cache(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert common.main(demo.run, ["--output", out, "--num_examples", "300", "--shard_size", "40KB", "--image_size", "32",
                                  "--progress", "0.05s"]) == 0
    printed = capsys.readouterr()
    assert out in printed.out and "beam-shards info" in printed.out and "ShardedDataset" in printed.out
    assert re.search(r"^Wrote 300 rows in \d+ shard\(s\), .* as version 1 \(overwrite\) in [\d.]+s \([\d,]+ rows/s\)$",
                     printed.out, re.MULTILINE), printed.out
    progress = re.findall(rf"^converting to {re.escape(out)}: ([\d,]+) rows, [\d,]+ rows/s; "
                          rf"staged \d+ shard file\(s\), [\d.]+ [KMG]?B$", printed.err, re.MULTILINE)
    assert progress, printed.err
    manifest = read_metadata(out)
    assert manifest.num_rows == 300 and manifest.num_shards > 1
    assert manifest.metadata["pipeline"] == "demo"
    dataset = ShardedDataset(out)
    rows = list(dataset)
    assert [row["id"] for row in rows] == list(range(300))  # in input order (deterministic by default)
    assert {row["image"].format for row in rows} == {"JPEG", "PNG"}
    assert set(row["label"] for row in rows) == set(range(len(demo.SHAPES)))
    assert all(row["image"].size == (32, 32) for row in rows[:5])


@pytest.mark.parametrize("runner", [
    ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
    pytest.param(["--direct_num_workers=2", "--direct_running_mode=multi_processing"], marks=pytest.mark.slow),
], ids=["2 threads", "2 processes"])
def test_progress_counts_every_row_whichever_worker_reads_it(tmp_path, monkeypatch, runner):
    watches = []

    class Recorded(progress.Watch):
        def __enter__(self):
            watches.append(self)
            return super().__enter__()

    monkeypatch.setattr(running, "Watch", Recorded)
    demo.run(["--output", str(tmp_path / "demo"), "--num_examples", "900", "--image_size", "8", *runner])
    [seen] = watches
    assert seen.rows == 900 and seen.seconds > 0
    assert not os.path.exists(seen.folder), "the tallies are removed after the run"


def test_no_progress_is_counted_when_the_workers_run_elsewhere(monkeypatch):
    monkeypatch.setattr(running, "workers_on_this_machine", lambda options: False)
    seen = []
    monkeypatch.setattr(running, "write_cache", lambda examples, *args: seen.append(args[-1]) or examples)
    local_pipeline = running.beam.Pipeline
    monkeypatch.setattr(running.beam, "Pipeline", lambda options: local_pipeline(runner="FnApiRunner"))
    parser = common.make_parser("x", "test")
    args, options_ = common.parse_args(parser, ["--output", "gs://b/o", "--runner=DataflowRunner"])
    monkeypatch.setattr(running, "find_published", lambda *args: "manifest")
    read = lambda pipeline: pipeline | beam.Create([])  # noqa: E731
    assert common.run_conversion(common.Conversion(options_, args, read, None, {})) == "manifest"
    assert seen == [None]


# --- image_folder -----------------------------------------------------------------------

@pytest.fixture
def image_tree(tmp_path):
    """An ImageNet-style folder: relative path -> file bytes of every image it should hold."""
    root = tmp_path / "images root"
    files = {
        "cat/a.jpg": jpeg(1),
        "cat/nested/deeper/b.PNG": png(2),
        f"dog/{ODD_NAME}": jpeg(3),
        "dog/c.png": png(4, mode="RGBA"),
        "zebra/only.jpeg": jpeg(5, size=24),
    }
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    (root / "README.txt").write_text("not a class")
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / ".cache").mkdir()
    (root / ".cache" / "x.jpg").write_bytes(jpeg(6))
    return root, files


def test_image_folder_end_to_end(image_tree, tmp_path):
    root, files = image_tree
    out = str(tmp_path / "out")
    manifest = image_folder.run(["--input", str(root), "--output", out, "--shard_size", "3KB", "--batch_size", "1"])
    assert manifest.num_rows == len(files) and manifest.num_shards > 1
    assert label_names(out) == ["cat", "dog", "zebra"]
    rows = rows_by(out, "path")
    assert set(rows) == set(files)
    for relative, data in files.items():
        assert rows[relative]["image"] == data
        assert label_names(out)[rows[relative]["label"]] == relative.split("/")[0]


def test_image_folder_bad_image_fails_naming_the_file(image_tree, tmp_path):
    root, _ = image_tree
    (root / "dog" / "broken file.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    out = tmp_path / "out"
    with pytest.raises(common.BadInputError, match="broken file.jpg"):
        image_folder.run(["--input", str(root), "--output", str(out)])
    assert not (out / MANIFEST_NAME).exists()


def test_image_folder_skip_bad_skips_and_lists(image_tree, tmp_path):
    root, files = image_tree
    (root / "cat" / "truncated.png").write_bytes(png(7)[:-20])
    out = str(tmp_path / "out")
    manifest = image_folder.run(["--input", str(root), "--output", out, "--skip_bad", "--max_bad", "1"])
    assert manifest.num_rows == len(files)
    assert set(rows_by(out, "path")) == set(files)
    bad = read_bad_inputs(out)
    assert [os.path.basename(record["input"]) for record in bad] == ["truncated.png"]
    assert "truncated PNG" in bad[0]["error"] and bad[0]["write_id"] == manifest.write_id

    # A later write that skips nothing removes the list, so it never describes another version.
    (root / "cat" / "truncated.png").unlink()
    image_folder.run(["--input", str(root), "--output", out, "--skip_bad", "--max_bad", "1"])
    assert not os.path.exists(os.path.join(out, BAD_INPUTS_NAME))


def test_image_folder_missing_root_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        image_folder.run(["--input", str(tmp_path / "nope"), "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_relative_image_path_rules():
    extensions = frozenset({".jpg", ".png"})
    assert image_folder.relative_image_path("/r/cat/x/y.JPG", "/r/", extensions) == "cat/x/y.JPG"
    assert image_folder.relative_image_path("/r/top.jpg", "/r/", extensions) is None
    assert image_folder.relative_image_path("/r/cat/.x.jpg", "/r/", extensions) is None
    assert image_folder.relative_image_path("/r/cat/x.txt", "/r/", extensions) is None
    assert image_folder.relative_image_path("/other/cat/x.jpg", "/r/", extensions) is None


# --- jsonl and csv ----------------------------------------------------------------------

@pytest.fixture
def manifest_dir(tmp_path):
    """A folder with images in sub-folders, one outside it, and the bytes of each by name."""
    data = tmp_path / "data"
    (data / "imgs" / "sub dir").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    images = {
        "a": ("imgs/a.jpg", jpeg(11)),
        "b": (f"imgs/sub dir/{ODD_NAME}", jpeg(12)),
        "c": ("imgs/c.png", png(13)),
        "d": ("../elsewhere/d.png", png(14, mode="L")),
    }
    for relative, payload in images.values():
        (data / relative).write_bytes(payload)
    absolute = str(tmp_path / "elsewhere" / "e.jpg")
    (tmp_path / "elsewhere" / "e.jpg").write_bytes(jpeg(15))
    images["e"] = (absolute, jpeg(15))
    return data, images


def _jsonl_rows(images):
    labels = {"a": "cat", "b": "dog", "c": "cat", "d": "bird", "e": "dog"}
    return [{"image": path, "label": labels[key], "caption": f"caption {key}, with a comma", "score": i + 0.5,
             "count": i, "tags": [key, "x"] if i % 2 else [], "box": [i, i + 1.5, 2, 3]}
            for i, (key, (path, _)) in enumerate(images.items())]


def test_jsonl_end_to_end_with_inferred_features(manifest_dir, tmp_path):
    data, images = manifest_dir
    rows = _jsonl_rows(images)
    (data / "train.jsonl").write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n\n",
                                      encoding="utf-8")
    out = str(tmp_path / "out")
    manifest = jsonl.run(["--input", str(data / "train.jsonl"), "--output", out, "--label_column", "label"])
    assert manifest.features == Features({
        "image": Image(nullable=False), "label": ClassLabel(names=["bird", "cat", "dog"]),
        "caption": Value("string", nullable=True), "score": Value("float64", nullable=True),
        "count": Value("int64", nullable=True), "tags": Sequence(Value("string", nullable=True), nullable=True),
        "box": Sequence(Value("float64", nullable=True), nullable=True),
    })
    got = rows_by(out, "caption")
    assert len(got) == len(rows)
    for row, key in zip(rows, images):
        stored = got[row["caption"]]
        assert stored["image"] == images[key][1]
        assert label_names(out)[stored["label"]] == row["label"]
        assert (stored["tags"], stored["box"], stored["count"]) == (row["tags"], row["box"], row["count"])


def test_jsonl_with_a_features_file(manifest_dir, tmp_path):
    data, images = manifest_dir
    rows = _jsonl_rows(images)
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    features = Features({
        "image": Image(), "label": ClassLabel(names=["cat", "dog", "bird", "fish"]), "caption": Value("string"),
        "score": Value("float32"), "count": Value("int16"), "tags": Sequence(Value("string")),
        "box": Array((4,), "float32"),
    })
    (tmp_path / "features.json").write_text(json.dumps(features.to_dict()))
    out = str(tmp_path / "out")
    manifest = jsonl.run(["--input", str(data / "*.jsonl"), "--output", out, "--features",
                          str(tmp_path / "features.json")])
    assert manifest.features == features
    got = rows_by(out, "caption")
    for row in rows:
        np.testing.assert_array_equal(got[row["caption"]]["box"], np.array(row["box"], dtype=np.float32))
        assert got[row["caption"]]["label"] == features["label"].str2int(row["label"])


@pytest.mark.parametrize("bad_line, expected", [
    ('{"image": "imgs/a.jpg", "label": "cat", "score": 1.0}', "missing field"),
    ('{"image": "imgs/nope.jpg", "label": "cat", "caption": "x", "score": 1.0}', "nope.jpg"),
    ('{"image": "imgs/a.jpg", "label": "cat", "caption": "x", "score": 1.0', "not valid JSON"),
    ('{"image": "imgs/a.jpg", "label": "horse", "caption": "x", "score": 1.0}', "unknown class name"),
])
def test_jsonl_bad_row_fails_naming_file_and_line(manifest_dir, tmp_path, bad_line, expected):
    data, _ = manifest_dir
    good = json.dumps({"image": "imgs/a.jpg", "label": "cat", "caption": "fine", "score": 2.5})
    (data / "train.jsonl").write_text("\n".join([good, good, bad_line, good]) + "\n")
    features = Features({"image": Image(), "label": ClassLabel(names=["cat", "dog"]), "caption": Value("string"),
                         "score": Value("float64")})
    (tmp_path / "features.json").write_text(json.dumps(features.to_dict()))
    out = tmp_path / "out"
    with pytest.raises(common.BadInputError) as error:
        jsonl.run(["--input", str(data / "train.jsonl"), "--output", str(out), "--features",
                   str(tmp_path / "features.json")])
    assert "train.jsonl, line 3" in str(error.value) and expected in str(error.value)
    assert not (out / MANIFEST_NAME).exists()


def test_pipeline_main_prints_a_short_error_for_bad_input(manifest_dir, tmp_path, capsys):
    data, _ = manifest_dir
    (data / "train.jsonl").write_text(json.dumps({"image": "imgs/missing.jpg", "caption": "x"}) + "\n")
    assert common.main(jsonl.run, ["--input", str(data / "train.jsonl"), "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "missing.jpg" in err and "train.jsonl, line 1" in err and "--skip_bad" in err
    assert "Traceback" not in err


CSV_TEXT = """\ufeffimage,label,caption,score,tags
imgs/a.jpg,cat,"a cat, sitting",1.5,"[""x"", ""y""]"
"imgs/sub dir/{odd}",dog,a dog,2,[]
imgs/c.png,cat,"two
lines",,"[""z""]"
../elsewhere/d.png,bird,a bird,4.25,[]
"""


def test_csv_end_to_end(manifest_dir, tmp_path):
    data, images = manifest_dir
    (data / "train.csv").write_text(CSV_TEXT.format(odd=ODD_NAME), encoding="utf-8")
    out = str(tmp_path / "out")
    manifest = csv_pipeline.run(["--input", str(data / "train.csv"), "--output", out, "--label_column", "label",
                                 "--compression", "zstd"])
    assert manifest.compression == "zstd"
    assert manifest.features == Features({
        "image": Image(nullable=False), "label": ClassLabel(names=["bird", "cat", "dog"]),
        "caption": Value("string", nullable=True), "score": Value("float64", nullable=True),
        "tags": Sequence(Value("string", nullable=True), nullable=True),
    })
    got = rows_by(out, "caption")
    assert set(got) == {"a cat, sitting", "a dog", "two\nlines", "a bird"}
    assert got["a cat, sitting"]["image"] == images["a"][1] and got["a cat, sitting"]["tags"] == ["x", "y"]
    assert got["a dog"]["image"] == images["b"][1] and got["a dog"]["score"] == 2.0
    assert got["two\nlines"]["score"] is None and got["two\nlines"]["image"] == images["c"][1]
    assert got["a bird"]["image"] == images["d"][1]
    assert [label_names(out)[got[c]["label"]] for c in ("a cat, sitting", "a dog", "a bird")] == ["cat", "dog", "bird"]


def test_csv_bad_rows_fail_or_are_skipped(manifest_dir, tmp_path):
    data, images = manifest_dir
    text = ("image,label,caption\n"
            "imgs/a.jpg,cat,good one\n"
            "imgs/c.png,cat\n"                 # line 3: a column missing
            "imgs/none.png,dog,no such file\n"  # line 4
            "imgs/c.png,dog,good two\n")
    (data / "train.csv").write_text(text)
    out = str(tmp_path / "out")
    flags = ["--input", str(data / "train.csv"), "--output", out, "--label_column", "label"]
    with pytest.raises(common.BadInputError, match=r"train\.csv, line (3: has 2 fields|4: .*none\.png)"):
        csv_pipeline.run(flags)

    manifest = csv_pipeline.run(flags + ["--skip_bad", "--max_bad", "2"])
    assert manifest.num_rows == 2
    assert set(rows_by(out, "caption")) == {"good one", "good two"}
    bad = {record["input"].rsplit(", ", 1)[1]: record["error"] for record in read_bad_inputs(out)}
    assert set(bad) == {"line 3", "line 4"}
    assert "has 2 fields, the header has 3" in bad["line 3"] and "none.png" in bad["line 4"]


def test_csv_cell_values():
    assert csv_pipeline.cell_value("7", Value("int16"), "n") == 7
    assert csv_pipeline.cell_value("yes", Value("bool"), "b") is True
    assert csv_pipeline.cell_value("", Value("float32", nullable=True), "x") is None
    assert csv_pipeline.cell_value("[1, 2]", Array((2,), "int64"), "a") == [1, 2]
    assert csv_pipeline.cell_value("3", ClassLabel(names=["a", "b", "c", "d"]), "label") == 3
    assert csv_pipeline.cell_value("3", ClassLabel(names=["1", "3"]), "label") == "3"
    with pytest.raises(ValueError, match="column 'n'.*'seven' as int16"):
        csv_pipeline.cell_value("seven", Value("int16"), "n")
    with pytest.raises(ValueError, match="JSON list"):
        csv_pipeline.cell_value("1,2", Sequence(Value("int64")), "s")


def infer_features(rows, *, image_columns=None, label_column=None, label_values=()) -> Features:
    """The features inference makes of `rows` of JSON values, the label's classes from `label_values`."""
    kinds = summarize_table(rows)
    if label_column in kinds.fields:
        labels = summarize_values(list(label_values), labels=True)
        kinds.fields[label_column] = dataclasses.replace(kinds.fields[label_column], labels=labels.labels)
    return features_of(kinds, image_columns=image_columns, label_column=label_column)[0]


def test_inference_errors_name_the_column():
    # Numbers and text widen to text (as pandas and HF do); a number and a list to any JSON value.
    widened = infer_features([{"image": "a", "x": 1}, {"image": "b", "x": "one"}], image_columns=["image"])
    assert widened["x"] == Value("string", nullable=True)
    assert infer_features([{"m": [{"a": 1}, {"a": [2]}]}])["m"] == Sequence(Struct({"a": Json()},
                                                                                         nullable=True), nullable=True)
    assert infer_features([{"m": {}}])["m"] == Json()  # only empty objects: no Struct holds them
    with pytest.raises(FeatureError, match="'picture' is not in the input"):
        infer_features([{"image": "a"}], image_columns=["picture"])
    features = infer_features([{"image": "a", "label": 2}, {"image": None, "label": 0}],
                                      image_columns=["image"], label_column="label", label_values=[2, 0, 4])
    assert features == Features({"image": Image(nullable=True), "label": ClassLabel(num_classes=5)})


def test_uninferable_manifest_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "m.jsonl").write_text(json.dumps({"image": "a.jpg", "label": 1.5}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        jsonl.run(["--input", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out"), "--label_column", "label"])
    assert exit_info.value.code == 2
    assert "label column 'label' holds floats" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        jsonl.run(["--input", str(tmp_path / "nothing*.jsonl"), "--output", str(tmp_path / "out")])
    assert "no file matches" in capsys.readouterr().err


def test_input_uri_keeps_paths_usable():
    assert common.input_uri("data/a.csv") == os.path.join(os.getcwd(), "data", "a.csv")
    assert common.input_uri("file:///tmp/a b/*.csv") == "/tmp/a b/*.csv"
    assert common.input_uri("gs://bucket/a.csv") == "gs://bucket/a.csv"


def test_file_uri_inputs_are_read(manifest_dir, image_tree, tmp_path):
    data, images = manifest_dir
    rows = _jsonl_rows(images)
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    manifest = jsonl.run(["--input", f"file://{data / 'train.jsonl'}", "--output", str(tmp_path / "out"),
                          "--label_column", "label"])
    assert manifest.num_rows == len(rows)
    assert {row["image"] for row in rows_by(str(tmp_path / "out"), "caption").values()} == {
        payload for _, payload in images.values()}

    root, files = image_tree
    manifest = image_folder.run(["--input", f"file://{root}", "--output", str(tmp_path / "folder")])
    assert set(rows_by(str(tmp_path / "folder"), "path")) == set(files)


# --- parquet ----------------------------------------------------------------------------

def _hf_metadata(names: list[str]) -> dict:
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": names},
                "text": {"dtype": "string", "_type": "Value"}}
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def test_parquet_with_hugging_face_image_structs(tmp_path):
    folder = tmp_path / "export"
    (folder / "files").mkdir(parents=True)
    (folder / "files" / ODD_NAME).write_bytes(jpeg(40))
    count = 9
    payloads = [png(30 + i) if i % 2 else jpeg(30 + i) for i in range(count)]
    payloads[4] = None  # stored by path, relative to the Parquet file
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({
        "image": pa.array([{"bytes": data, "path": f"img{i}.jpg" if data else f"files/{ODD_NAME}"}
                           for i, data in enumerate(payloads)], type=image_type),
        "label": pa.array([i % 3 for i in range(count)], pa.int64()),
        "text": [f"row {i}" for i in range(count)],
        "extra": pa.array([[1.0, 2.0]] * count, pa.list_(pa.float32(), 2)),
    }).replace_schema_metadata(_hf_metadata(["ant", "bee", "cow"]))
    pq.write_table(table, folder / "train-00000.parquet", row_group_size=4)
    pq.write_table(table.slice(0, 2), folder / "train-00001.parquet")
    out = str(tmp_path / "out")
    manifest = parquet.run(["--input", str(folder / "train-*.parquet"), "--output", out])
    assert manifest.num_rows == count + 2
    assert manifest.features["image"] == Image()
    assert manifest.features["label"] == ClassLabel(names=["ant", "bee", "cow"], nullable=True)
    assert manifest.features["extra"] == Array((2,), "float32", nullable=True)
    got = [row for row in ShardedDataset(out, image_mode="bytes")]
    by_text: dict[str, list] = {}
    for row in got:
        by_text.setdefault(row["text"], []).append(row)
    for i in range(count):
        (row, *_) = by_text[f"row {i}"]
        assert row["image"] == (payloads[i] if payloads[i] else jpeg(40))
        assert row["label"] == i % 3
    assert len(by_text["row 0"]) == 2

    columns_only = str(tmp_path / "narrow")
    narrow = parquet.run(["--input", str(folder / "train-00001.parquet"), "--output", columns_only,
                          "--columns", "image", "label"])
    assert list(narrow.features) == ["image", "label"]


def test_parquet_bad_image_names_file_and_row(tmp_path):
    table = pa.table({"image": pa.array([{"bytes": jpeg(1), "path": None}, {"bytes": b"junk", "path": None}]),
                      "n": [1, 2]})
    pq.write_table(table, tmp_path / "part.parquet")
    with pytest.raises(common.BadInputError, match=r"part\.parquet, row 1"):
        parquet.run(["--input", str(tmp_path / "part.parquet"), "--output", str(tmp_path / "out")])
    manifest = parquet.run(["--input", str(tmp_path / "part.parquet"), "--output", str(tmp_path / "out"),
                            "--skip_bad", "--max_bad", "50%"])
    assert manifest.num_rows == 1


def test_parquet_features_from_arrow_types():
    schema = pa.schema([
        pa.field("img", pa.struct([("bytes", pa.large_binary()), ("path", pa.string())])),
        pa.field("id", pa.int32(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("words", pa.list_(pa.string()), nullable=False),
        pa.field("vec", pa.list_(pa.float64(), 3), nullable=False),
        pa.field("flag", pa.bool_()),
        pa.field("cat", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("when", pa.timestamp("ms", tz="UTC")),
        pa.field("days", pa.list_(pa.date32())),
        pa.field("meta", pa.struct([("src", pa.string()), ("n", pa.int8())])),
    ])
    assert parquet.infer_features(schema) == Features({
        "img": Image(), "id": Value("int32"), "score": Value("float32"),
        "words": Sequence(Value("string", nullable=True)), "vec": Array((3,), "float64"),
        "flag": Value("bool", nullable=True), "cat": Value("string"),
        "when": Value("timestamp[ms, tz=UTC]", nullable=True), "days": Sequence(Value("date32", nullable=True),
                                                                                 nullable=True),
        "meta": Struct({"src": Value("string", nullable=True), "n": Value("int8", nullable=True)}, nullable=True),
    })
    with pytest.raises(FeatureError, match="'when'"):
        parquet.infer_features(pa.schema([pa.field("when", pa.month_day_nano_interval())]))


@pytest.mark.parametrize("arrow_type", [pa.null(), pa.list_(pa.map_(pa.string(), pa.int8())),
                                        pa.map_(pa.string(), pa.int8())])
def test_parquet_unsupported_type_says_what_works(tmp_path, capsys, arrow_type):
    table = pa.table({"n": [1, 2], "when": pa.array([None, None], arrow_type)})
    pq.write_table(table, tmp_path / "part.parquet")
    argv = ["--input", str(tmp_path / "part.parquet"), "--output", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_info:
        parquet.run(argv)
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.splitlines()[-1]
    assert f"column 'when' has Arrow type {pq.read_schema(tmp_path / 'part.parquet').field('when').type}" in message
    assert "--columns" in message and "cast it upstream" in message and "--features" not in message

    # What the message says works: leaving the column out.
    manifest = parquet.run(argv + ["--columns", "n"])
    assert manifest.num_rows == 2 and list(manifest.features) == ["n"]


def _labelled_images(count: int) -> pa.Table:
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    return pa.table({
        "image": pa.array([{"bytes": jpeg(i % 5), "path": None} for i in range(count)], type=image_type),
        "label": pa.array([i % 3 for i in range(count)], pa.int64()),
        "text": pa.array([f"row {i}" for i in range(count)]).dictionary_encode(),
    }).replace_schema_metadata(_hf_metadata(["ant", "bee", "cow"]))


def test_parquet_reads_a_row_group_in_bounded_batches(tmp_path):
    pq.write_table(_labelled_images(50), tmp_path / "one group.parquet", row_group_size=50)
    path = str(tmp_path / "one group.parquet")
    features = parquet.infer_features(parquet.read_schema(path))
    elements = list(parquet._ReadRowGroupFn(features, batch_size=8).process((path, 0, 100)))
    assert [type(rows) for _, rows in elements] == [common.Rows] * 7
    assert [rows.table.num_rows for _, rows in elements] == [8] * 6 + [2]
    assert str(elements[1][0]) == f"{path}, rows 108 to 115" and elements[1][0][:2] == (path, 108)
    # The columns already fit the features: the struct is its bytes, the dictionary decoded.
    table = features.encode_batch(elements[1][1].table)
    assert table.column("text").to_pylist() == [f"row {i}" for i in range(8, 16)]
    assert table.column("image").to_pylist() == [jpeg(i % 5) for i in range(8, 16)]
    assert [str(where) for where, _ in elements[1][1].one_by_one()] == [f"{path}, row {i}" for i in range(108, 116)]


def test_parquet_reads_a_large_row_group_a_little_at_a_time(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    table = pa.table({"blob": [rng.bytes(50_000) for _ in range(100)], "n": list(range(100))})
    path = str(tmp_path / "big group.parquet")
    pq.write_table(table, path, row_group_size=100, compression="none", use_dictionary=False, write_batch_size=4)
    reads = []

    class Recording(io.FileIO):
        def read(self, size=-1):
            data = super().read(size)
            reads.append(len(data))
            return data

        def readinto(self, buffer):
            count = super().readinto(buffer)
            reads.append(count)
            return count

    monkeypatch.setattr(parquet.fs, "open_read", lambda name: Recording(name, "rb"))
    features = Features({"blob": Value("binary"), "n": Value("int64")})
    rows = sum(rows.table.num_rows for _, rows in parquet._ReadRowGroupFn(features, batch_size=10).process((path, 0, 0)))
    assert rows == 100
    assert max(reads) <= 2 * 2**20, "a 5 MB column chunk is read in pieces, not whole"


def test_parquet_batch_rows_are_bounded_by_bytes_too(tmp_path):
    rng = np.random.default_rng(0)
    table = pa.table({"blob": [rng.bytes(1000) for _ in range(100)], "n": list(range(100))})
    pq.write_table(table, tmp_path / "p.parquet", compression="none", use_dictionary=False)
    group = pq.ParquetFile(tmp_path / "p.parquet").metadata.row_group(0)
    assert parquet.batch_rows(group, ["n"], batch_size=64, batch_bytes=10_000) == 64
    assert 7 <= parquet.batch_rows(group, ["blob", "n"], batch_size=64, batch_bytes=10_000) <= 10
    assert parquet.batch_rows(group, ["blob"], batch_size=64, batch_bytes=10) == 1


def test_parquet_batches_write_the_cache_and_a_bad_row_is_named_or_skipped(tmp_path):
    table = _labelled_images(40)
    images = table.column("image").to_pylist()
    images[27] = {"bytes": b"not an image", "path": None}
    images[5] = {"bytes": None, "path": "stored by path.png"}  # read row by row
    (tmp_path / "stored by path.png").write_bytes(png(99))
    table = table.set_column(0, "image", pa.array(images, table.schema.field("image").type))
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=16)
    argv = ["--input", str(tmp_path / "part.parquet"), "--output", str(tmp_path / "out"), "--batch_size", "5"]
    with pytest.raises(common.BadInputError, match=r"part\.parquet, row 27\b.*image"):
        parquet.run(argv)

    manifest = parquet.run(argv + ["--skip_bad", "--max_bad", "1"])
    assert manifest.num_rows == 39
    rows = rows_by(str(tmp_path / "out"), "text")
    assert set(rows) == {f"row {i}" for i in range(40)} - {"row 27"}
    assert rows["row 5"]["image"] == png(99) and rows["row 6"]["image"] == jpeg(1)
    assert all(rows[f"row {i}"]["label"] == i % 3 for i in range(40) if i != 27)
    assert [record["input"] for record in read_bad_inputs(str(tmp_path / "out"))] == [
        f"{tmp_path / 'part.parquet'}, row 27"]


# --- the shared write step --------------------------------------------------------------

def test_skipped_inputs_are_counted_in_a_beam_counter(tmp_path):
    features = Features({"image": Image(nullable=False), "n": Value("int64")})
    args = common.make_parser("x", "test").parse_args(["--output", str(tmp_path / "out"), "--skip_bad"])
    args.compression = None
    inputs = [("good 0", {"image": jpeg(0), "n": 0}), ("bad 1", common.Malformed("no comma")),
              ("bad 2", {"image": b"junk", "n": 2}), ("bad 3", {"image": jpeg(1)}), ("good 4", {"image": png(4), "n": 4})]
    pipeline = beam.Pipeline(options=options())
    common.write_cache(pipeline | beam.Create(inputs), args, features, {})
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("bad_inputs"))["counters"]
    assert sum(counter.committed for counter in counters) == 3
    assert read_metadata(args.output).num_rows == 2
    assert [record["input"] for record in read_bad_inputs(args.output)] == ["bad 1", "bad 2", "bad 3"]


def test_each_example_is_encoded_once(tmp_path, monkeypatch):
    """Examples are encoded by the sink alone (plain ones checked with their batch, never
    encoded one by one); Rows by the check step alone, handed on encoded."""
    calls = []
    for name in ("encode_values", "encode_batch", "plain_values"):  # encode_example goes through encode_values
        def counting(self, *args, _original=getattr(Features, name), _name=name, **kwargs):
            result = _original(self, *args, **kwargs)
            if result is not None:  # plain_values is also asked of what is not a plain row, and says None
                calls.append(_name)
            return result
        monkeypatch.setattr(Features, name, counting)
    features = Features({"n": Value("int64")})
    args = common.make_parser("x", "test").parse_args(["--output", str(tmp_path / "out")])
    args.compression = None
    rows = common.Rows(pa.table({"n": [5, 6, 7]}), functools.partial(iter, []))
    with beam.Pipeline(options=options()) as pipeline:
        common.write_cache(pipeline | beam.Create([(f"row {i}", {"n": i}) for i in range(5)] + [("rows", rows)]),
                           args, features, {})
    assert sorted(calls) == ["encode_batch"] + ["plain_values"] * 5
    assert read_metadata(args.output).num_rows == 8


@pytest.mark.slow
def test_a_failed_run_leaves_no_staging_behind(tmp_path, capsys):
    """Other bundles' staged shards are removed when one bundle fails the pipeline, and
    the error from a worker process reads like one raised in this one."""
    (tmp_path / "a.jpg").write_bytes(jpeg(1))
    rows = [{"image": "a.jpg", "n": i} for i in range(300)]
    rows[-1]["image"] = "missing.jpg"
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    assert common.main(jsonl.run, ["--input", str(tmp_path / "train.jsonl"), "--output", str(out), "--batch_size",
                                   "10", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]) == 1
    assert not (out / MANIFEST_NAME).exists()
    assert not (out / "_staging").exists(), sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    err = capsys.readouterr().err.splitlines()
    (message,) = [line for line in err if line.startswith("error: ")]
    assert message.startswith("error: example '") and "train.jsonl, line 300" in message and "missing.jpg" in message
    assert "(add --skip_bad" in err[err.index(message) + 1]


def test_main_leaves_other_errors_alone():
    def run(argv):
        raise RuntimeError("Traceback (most recent call last):\nsomewhere.OtherError: not ours")

    with pytest.raises(RuntimeError, match="not ours"):
        common.main(run, [])


def test_a_pipeline_refuses_to_publish_no_rows_unless_allow_empty(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("int64")}).to_dict()))
    out = str(tmp_path / "out")
    argv = ["--input", str(tmp_path / "empty.jsonl"), "--features", str(tmp_path / "f.json"), "--output", out]
    assert common.main(jsonl.run, argv) == 1
    assert not os.path.exists(os.path.join(out, MANIFEST_NAME))
    assert common.main(jsonl.run, argv + ["--allow_empty"]) == 0
    assert read_metadata(out).num_rows == 0


# messages that name the real cause ------------------------------------------------------

@pytest.mark.parametrize("module, name, content, words", [
    (csv_pipeline, "dup.csv", "a,a,b\n1,2,3\n", ["dup.csv, line 1", "repeated column name"]),
    (csv_pipeline, "rows.jsonl", '{"text": "a"}\n{"text": "b"}\n', ["rows.jsonl, line 1", "looks like JSON lines",
                                                                    "pipelines.jsonl"]),
    (csv_pipeline, "header.csv", "image,label\n", ["header.csv holds no row after its header"]),
    (jsonl, "empty.jsonl", "", ["empty.jsonl is empty"]),
    (jsonl, "README.md", "# a title\n\nsome text\n", ["README.md, line 1", "not valid JSON"]),
])
def test_an_input_that_yields_no_rows_is_named_with_its_real_cause(tmp_path, module, name, content, words, capsys):
    (tmp_path / name).write_text(content)
    with pytest.raises(SystemExit) as exit_:
        module.run(["--input", str(tmp_path / name), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "no rows to infer features from" not in err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("module", [csv_pipeline, jsonl])
def test_a_folder_given_as_an_index_file_is_a_usage_error(tmp_path, module, capsys):
    with pytest.raises(SystemExit) as exit_:
        module.run(["--input", str(tmp_path), "--output", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "is a folder; give a file or a glob of files" in capsys.readouterr().err


def test_a_file_given_to_image_folder_is_named_as_a_file(tmp_path, capsys):
    (tmp_path / "list.txt").write_text("cat/a.jpg\n")
    with pytest.raises(SystemExit):
        image_folder.run(["--input", str(tmp_path / "list.txt"), "--output", str(tmp_path / "out")])
    assert "list.txt is a file; give the folder that holds one folder per class" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("module, text", [
    (jsonl, '{"n": 1, "s": "a"}\n{"n": 2, "s": "b"}\n'),
    (csv_pipeline, "n,s\n1,a\n2,b\n"),
])
def test_compressed_index_files_are_read(tmp_path, module, text, suffix):
    import gzip

    data = text.encode()
    path = tmp_path / f"rows.{module.__name__.rsplit('.', 1)[-1]}{suffix}"
    if suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        stream = pa.CompressedOutputStream(str(path), "zstd")
        stream.write(data)
        stream.close()
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("int64"), "s": Value("string")}).to_dict()))
    manifest = module.run(["--input", str(path), "--features", str(tmp_path / "f.json"),
                           "--output", str(tmp_path / "out")])
    assert manifest.num_rows == 2
    assert sorted(row["n"] for row in ShardedDataset(str(tmp_path / "out"))) == [1, 2]


def test_image_folder_leaves_out_empty_class_folders_and_caches_and_says_so(image_tree, tmp_path, capsys):
    root, files = image_tree
    (root / "empty").mkdir()
    demo.run(["--output", str(root / "old_cache"), "--num_examples", "3"])
    capsys.readouterr()
    out = str(tmp_path / "out")
    manifest = image_folder.run(["--input", str(root), "--output", out])
    err = capsys.readouterr().err
    assert "left out of the classes: empty (holds no" in err and "old_cache (holds a beam_shards cache)" in err
    assert manifest.features["label"].names == ["cat", "dog", "zebra"] and manifest.num_rows == len(files)
    assert manifest.metadata["left_out"]["old_cache"] == "holds a beam_shards cache"
    assert manifest.metadata["left_out"]["empty"].startswith("holds no .bmp, .gif, .jpeg, .jpg")


def test_image_folder_with_no_image_of_the_extensions_is_a_usage_error(image_tree, tmp_path, capsys):
    root, _ = image_tree
    with pytest.raises(SystemExit) as exit_:
        image_folder.run(["--input", str(root), "--output", str(tmp_path / "out"), "--extensions", ".tga"])
    assert exit_.value.code == 2 and "no class folder" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out" / MANIFEST_NAME)


def test_the_report_says_one_row_in_the_singular(tmp_path, capsys):
    (tmp_path / "one.jsonl").write_text('{"n": 1}\n')
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("int64")}).to_dict()))
    argv = ["--input", str(tmp_path / "one.jsonl"), "--features", str(tmp_path / "f.json"),
            "--output", str(tmp_path / "out")]
    assert common.main(jsonl.run, argv) == 0
    assert capsys.readouterr().out.startswith("Wrote 1 row in 1 shard(s)")


def test_docstring_examples_run():
    import doctest

    for module in (progress, where, bad_inputs, rows_module):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_keys_sort_by_input_and_position_and_read_as_the_input():
    keys = [where.Where.at("b.csv", 2, "line"), where.Where.at("a.csv", 10, "line"), where.Where.at("a.csv", 9, "line")]
    assert [str(key) for key in sorted(keys)] == ["a.csv, line 9", "a.csv, line 10", "b.csv, line 2"]
    assert repr(keys[0]) == "'b.csv, line 2'" and str(where.Where("demo", 3)) == "demo, 3"


# --- inference of every dataset (issue 26) -------------------------------------------------

@pytest.mark.parametrize("rows, expected", [
    ([{"text": "a", "n": 1}, {"text": None, "n": 2.5}], {"text": Value("string", nullable=True),
                                                         "n": Value("float64", nullable=True)}),
    ([{"ok": True}, {}], {"ok": Value("bool", nullable=True)}),
    ([{"x": None}], {"x": Value("string", nullable=True)}),  # null in every row looked at
    ([{"grid": [[1, 2], []]}], {"grid": Sequence(Sequence(Value("int64", nullable=True), nullable=True),
                                                 nullable=True)}),
    ([{"m": [{"role": "user", "content": "hi"}]}, {"m": [{"role": "bot", "content": "yo", "lang": "en"}]}],
     {"m": Sequence(Struct({"role": Value("string", nullable=True), "content": Value("string", nullable=True),
                            "lang": Value("string", nullable=True)}, nullable=True), nullable=True)}),
    ([{"meta": {"a": {"b": [1.5]}}}], {"meta": Struct({"a": Struct({"b": Sequence(
        Value("float64", nullable=True), nullable=True)}, nullable=True)}, nullable=True)}),
], ids=["text and numbers", "a key left out", "all null", "lists of lists", "chat", "nested objects"])
def test_inference_types_text_numbers_lists_and_nested_objects(rows, expected):
    assert infer_features(rows) == Features(expected)


@pytest.mark.parametrize("values, image", [
    (["a.jpg", "b/c.PNG", None], True), (["a.jpg", "a cat"], False), ([1, 2], False), ([None], False)])
def test_the_default_image_column_is_an_image_only_when_it_holds_image_paths(values, image):
    features = infer_features([{"image": value} for value in values])
    assert isinstance(features["image"], Image) == image


def test_chat_jsonl_text_jsonl_and_iris_csv_convert_with_no_flags(tmp_path):
    chat = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
             "meta": {"source": "web", "turns": 2}} for i in range(5)]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(row) + "\n" for row in chat))
    (tmp_path / "text.jsonl").write_text("".join(json.dumps({"text": f"doc {i}", "score": i / 2}) + "\n"
                                                 for i in range(5)))
    species = ["setosa", "versicolor", "virginica"]
    (tmp_path / "iris.csv").write_text("sepal_length,sepal_width,petal_length,petal_width,species\n" + "".join(
        f"5.{i},3.{i},1.4,0.2,{species[i % 3]}\n" for i in range(6)))
    for name, run in (("chat.jsonl", jsonl.run), ("text.jsonl", jsonl.run), ("iris.csv", csv_pipeline.run)):
        run(["--input", str(tmp_path / name), "--output", str(tmp_path / name.replace(".", "_"))])
    assert list(ShardedDataset(str(tmp_path / "chat_jsonl"))) == chat
    # Hugging Face's own loader over the shard files sees the features to_hf() gives, and the same rows.
    loaded = datasets.load_dataset("arrow", data_files=shard_paths(str(tmp_path / "chat_jsonl")), split="train",
                                   cache_dir=str(tmp_path / "hf_cache"))
    assert loaded.features == ShardedDataset(str(tmp_path / "chat_jsonl")).to_hf().features
    assert loaded.to_list() == chat
    assert ShardedDataset(str(tmp_path / "text_jsonl"))[3] == {"text": "doc 3", "score": 1.5}
    iris = ShardedDataset(str(tmp_path / "iris_csv"))
    assert iris[4] == {"sepal_length": 5.4, "sepal_width": 3.4, "petal_length": 1.4, "petal_width": 0.2,
                       "species": "versicolor"}


def test_image_column_empty_names_no_image_column(tmp_path):
    (tmp_path / "m.jsonl").write_text(json.dumps({"image": "a.jpg", "n": 1}) + "\n")
    manifest = jsonl.run(["--input", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out"),
                          "--image_column", ""])
    assert manifest.features["image"] == Value("string", nullable=True)
    assert ShardedDataset(str(tmp_path / "out"))[0] == {"image": "a.jpg", "n": 1}


def test_csv_cells_of_json_objects_and_lists_become_structs_and_sequences(tmp_path):
    (tmp_path / "m.csv").write_text('id,meta,tags\n1,"{""a"": 1, ""b"": [""x""]}","[1, 2]"\n2,,[]\n')
    manifest = csv_pipeline.run(["--input", str(tmp_path / "m.csv"), "--output", str(tmp_path / "out")])
    assert isinstance(manifest.features["meta"], Struct)
    assert list(ShardedDataset(str(tmp_path / "out"))) == [
        {"id": 1, "meta": {"a": 1, "b": ["x"]}, "tags": [1, 2]}, {"id": 2, "meta": None, "tags": []}]
