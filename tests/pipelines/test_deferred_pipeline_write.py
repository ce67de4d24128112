"""The pipelines' write step (`write_cache`, `run_conversion`) with features made when the pipeline runs."""

from __future__ import annotations

import functools
import os

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_shards import Features, SchemaMismatchError, Value, list_versions, read_metadata, write_shards
from beam_shards.format.layout import STAGING_DIR
from beam_shards.read.backend import ArrowBackend
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, running
from pipelines.where import Where

from _support import options

pytestmark = pytest.mark.timeout(300)

FEATURES = Features({"n": Value("int64"), "text": Value("string")})


def _one_by_one(rows: list[tuple[Where, dict]]):
    return iter(rows)


def _inputs() -> list[tuple[Where, object]]:
    """Plain examples, batches of rows (one holding a bad row), an input that could not be parsed."""
    pairs = [(Where.at("a.csv", i, "line"), {"n": i, "text": f"row {i}"}) for i in range(20)]
    good = pa.table({"n": list(range(20, 30)), "text": [f"row {i}" for i in range(20, 30)]})
    pairs.append((Where.at("b.csv", 0, "batch"), common.Rows(good, functools.partial(_one_by_one, []))))
    bad_rows = [(Where.at("c.csv", i, "line"), {"n": i, "text": f"row {i}"}) for i in range(30, 33)]
    bad_rows.append((Where.at("c.csv", 33, "line"), {"n": "thirty-three", "text": "row 33"}))
    bad = pa.table({"n": [str(n) for n in range(30, 33)] + ["thirty-three"], "text": ["x"] * 4})
    pairs.append((Where.at("c.csv", 0, "batch"), common.Rows(bad, functools.partial(_one_by_one, bad_rows))))
    pairs.append((Where.at("d.csv", 1, "line"), common.Malformed("no closing quote")))
    return pairs


def _args(out, *flags: str):
    args, pipeline_options = common.parse_args(common.make_parser("x", "test"),
                                               ["--output", str(out), "--runner=FnApiRunner", *flags])
    return args, pipeline_options


def _texts(path) -> list[str]:
    backend = ArrowBackend.open(str(path))
    return backend.slice(0, backend.num_rows).column("text").to_pylist()


@pytest.mark.parametrize("deterministic", [[], ["--no_deterministic"]], ids=["deterministic", "bundles"])
def test_write_cache_checks_rows_against_features_made_when_the_pipeline_runs(tmp_path, deterministic):
    written = {}
    for kind in ("given", "made"):
        args, _ = _args(tmp_path / kind, "--skip_bad", "--max_bad", "2", *deterministic)
        with beam.Pipeline(options=options()) as p:
            features = FEATURES if kind == "given" else p | "Infer" >> beam.Create([FEATURES])
            common.write_cache(p | "Inputs" >> beam.Create(_inputs()), args, features, {"pipeline": "test"})
        written[kind] = (_texts(args.output), [record["input"] for record in read_bad_inputs(args.output)])
    texts, bad = written["made"]
    assert sorted(texts) == sorted(f"row {i}" for i in range(33))
    assert sorted(bad) == ["c.csv, line 33", "d.csv, line 1"]
    if deterministic:
        assert written["made"] == written["given"]
    else:
        assert sorted(written["given"][0]) == sorted(texts)


def test_run_conversion_takes_features_from_read(tmp_path):
    args, pipeline_options = _args(tmp_path / "out")

    def read(pipeline):
        pairs = pipeline | "Inputs" >> beam.Create(_inputs()[:21])
        return pairs, pairs | "Infer" >> beam.CombineGlobally(lambda seen: FEATURES)

    manifest = running.run_conversion(running.Conversion(pipeline_options, args, read, None, {"pipeline": "test"}))
    assert manifest.num_rows == 30 and manifest.features == FEATURES
    assert _texts(args.output) == [f"row {i}" for i in range(30)]

    with pytest.raises(ValueError, match="not both"):
        running.run_conversion(running.Conversion(pipeline_options, args, read, FEATURES, {}))


def test_run_conversion_refuses_an_append_of_other_features_made_when_it_runs_and_cleans_up(tmp_path):
    out = str(tmp_path / "out")
    write_shards([{"n": 1}], out, Features({"n": Value("int32")}))
    args, pipeline_options = _args(out, "--mode", "append")

    def read(pipeline):
        pairs = pipeline | "Inputs" >> beam.Create(_inputs()[:20])
        return pairs, pipeline | "Infer" >> beam.Create([FEATURES])

    with pytest.raises(SchemaMismatchError, match="cannot append to the cache"):
        running.run_conversion(running.Conversion(pipeline_options, args, read, None, {}))
    assert [m.version for m in list_versions(out)] == [1]
    staging = os.path.join(out, STAGING_DIR)
    assert not os.path.exists(staging) or not os.listdir(staging)
    assert read_metadata(out).num_rows == 1
