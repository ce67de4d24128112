"""WriteToArrowShards with features made when the pipeline runs: a PCollection of one Features."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest

from apache_beam.pipeline import PipelineVisitor
from apache_beam.testing.util import assert_that, equal_to

from beam_shards import (CacheExistsError, EncodeError, Features, SchemaMismatchError, Sequence, Value,
                         WriteToArrowShards, list_versions, new_write_id, read_metadata, write_shards)
from beam_shards.format.layout import STAGING_DIR
from beam_shards.format.manifest import MAX_DEPTH
from beam_shards.read.backend import ArrowBackend

from _support import options
from test_deterministic import shard_digests

pytestmark = pytest.mark.timeout(300)

FEATURES = Features({"id": Value("int64"), "text": Value("string")})
ROWS = 500


def _pairs(rows: int = ROWS) -> list[tuple[int, dict]]:
    return [(i, {"id": i, "text": "x" * (i % 53)}) for i in range(rows)]


class _ColumnsToFeatures(beam.CombineFn):
    """Features inferred from every row, as a pipeline's inference is: the names of the columns seen."""

    def create_accumulator(self) -> frozenset:
        return frozenset()

    def add_input(self, names: frozenset, pair: tuple[int, dict]) -> frozenset:
        return names | set(pair[1])

    def merge_accumulators(self, accumulators) -> frozenset:
        return frozenset().union(*accumulators)

    def extract_output(self, names: frozenset) -> Features:
        kinds = {"id": Value("int64"), "text": Value("string")}
        return Features({name: kinds[name] for name in sorted(names)})


def _write(path, features, pairs=None, *args: str, combine: bool = False, sink=None, **sink_args):
    """Writes `pairs` with `features` given, or made when the pipeline runs from a list of Features
    (`beam.Create`) or from the rows (`combine`)."""
    sink_args.setdefault("shard_size_bytes", 4_000)
    sink_args.setdefault("batch_size", 32)
    with beam.Pipeline(options=options(*args)) as p:
        examples = p | "Rows" >> beam.Create(_pairs() if pairs is None else pairs, reshuffle=False)
        if combine:
            features = examples | "Infer" >> beam.CombineGlobally(_ColumnsToFeatures())
        elif isinstance(features, list):
            features = p | "Features" >> beam.Create(features, reshuffle=False)
        result = examples | WriteToArrowShards(str(path), features, **sink_args)
        if sink is not None:
            sink(result)


def _ids(path) -> list[int]:
    backend = ArrowBackend.open(str(path))
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def _nothing_staged(path) -> bool:
    staging = os.path.join(path, STAGING_DIR)
    return not os.path.exists(staging) or not os.listdir(staging)


@pytest.mark.parametrize("deterministic", [False, True], ids=["bundles", "deterministic"])
def test_features_made_when_the_pipeline_runs_write_what_given_features_write(tmp_path, deterministic):
    given, made = tmp_path / "given", tmp_path / "made"
    _write(given, FEATURES, deterministic=deterministic)
    _write(made, None, combine=True, deterministic=deterministic)
    assert read_metadata(str(made)).features == FEATURES
    assert read_metadata(str(made)).num_shards > 3, "the test should span several shards"
    if deterministic:
        assert _ids(made) == list(range(ROWS))
        assert shard_digests(str(made)) == shard_digests(str(given))
    else:
        assert sorted(_ids(made)) == sorted(_ids(given)) == list(range(ROWS))
        assert not os.path.exists(os.path.join(made, STAGING_DIR))


@pytest.mark.parametrize("deterministic", [False, True], ids=["bundles", "deterministic"])
def test_append_checks_features_made_when_the_pipeline_runs(tmp_path, deterministic):
    path = str(tmp_path / "cache")
    write_shards([{"id": -1, "text": "first"}], path, FEATURES)
    _write(path, [FEATURES], _pairs(50), mode="append", deterministic=deterministic)
    assert read_metadata(path).num_rows == 51 and sorted(_ids(path)) == list(range(-1, 50))

    other = Features({"id": Value("int32"), "text": Value("string")})
    with pytest.raises(SchemaMismatchError, match="cannot append to the cache at .*int32"):
        _write(path, [other], [(i, {"id": i, "text": ""}) for i in range(50)], mode="append",
               deterministic=deterministic)
    assert [m.version for m in list_versions(path)] == [1, 2], "nothing was published"
    assert _nothing_staged(path), "the check runs before any shard is staged"


def test_mode_error_is_checked_at_construction_and_again_when_the_pipeline_runs(tmp_path):
    path = str(tmp_path / "cache")
    with pytest.raises(CacheExistsError):
        with beam.Pipeline(options=options()) as p:
            features = p | beam.Create([FEATURES])
            _ = p | "Rows" >> beam.Create(_pairs(10)) | WriteToArrowShards(path, features, mode="error")
            write_shards([{"id": -1, "text": "there first"}], path, FEATURES)  # after construction
    assert read_metadata(path).num_rows == 1 and _nothing_staged(path)
    with pytest.raises(CacheExistsError, match="mode='error'"):
        with beam.Pipeline(options=options()) as p:
            WriteToArrowShards(path, p | beam.Create([FEATURES]), mode="error")


@pytest.mark.parametrize("found", [[], [FEATURES, FEATURES]], ids=["none", "two"])
def test_a_pcollection_of_no_features_or_several_fails_naming_it(tmp_path, found):
    path = str(tmp_path / "cache")
    with pytest.raises(Exception, match=rf"exactly one Features; the PCollection made by step 'Features.*' holds "
                                        rf"{len(found)} elements"):
        _write(path, found)
    assert not os.path.exists(os.path.join(path, "_metadata.json")) and _nothing_staged(path)


def test_a_pcollection_of_something_else_fails_naming_the_type(tmp_path):
    with pytest.raises(Exception, match="features must be a Features object; the PCollection .* holds a dict"):
        _write(tmp_path / "cache", [{"id": "int64"}])


def test_features_nested_deeper_than_a_manifest_takes_fail_when_the_pipeline_runs(tmp_path):
    path = str(tmp_path / "cache")
    deep = Value("int64")
    for _ in range(MAX_DEPTH):
        deep = Sequence(deep)
    with pytest.raises(Exception, match=f"lists and objects in the manifest; a manifest may nest {MAX_DEPTH}"):
        _write(path, [Features({"id": deep})], _pairs(3))
    assert not os.path.exists(os.path.join(path, "_metadata.json")) and _nothing_staged(path)


@pytest.mark.parametrize("deterministic", [False, True], ids=["bundles", "deterministic"])
def test_a_bad_example_fails_or_is_skipped_with_features_made_when_the_pipeline_runs(tmp_path, deterministic):
    pairs = _pairs(40) + [(40, {"id": "forty", "text": "bad"})]
    with pytest.raises(Exception, match=r"example 40, field 'id'") as raised:
        _write(tmp_path / "fail", [FEATURES], pairs, deterministic=deterministic)
    assert isinstance(raised.value, EncodeError) or "EncodeError" in str(raised.value)
    assert not os.path.exists(tmp_path / "fail" / "_metadata.json")

    def check_letters(result):
        letters = result.bad | beam.Map(lambda letter: (letter["key"], "field 'id'" in letter["reason"]))
        assert_that(letters, equal_to([(40, True)]))

    _write(tmp_path / "skip", [FEATURES], pairs, on_bad="skip", deterministic=deterministic, sink=check_letters)
    assert sorted(_ids(tmp_path / "skip")) == list(range(40))


@pytest.mark.parametrize("write_id", [None, "given"], ids=["made id", "given id"])
def test_a_repeated_bundle_writes_once_with_features_made_when_the_pipeline_runs(tmp_path, write_id):
    path = tmp_path / "cache"
    _write(path, [FEATURES], None, "--runner=BundleBasedDirectRunner", "--direct_runner_bundle_repeat=1",
           write_id=write_id and new_write_id())
    ids = _ids(path)
    assert sorted(ids) == list(range(ROWS)), "every row exactly once"
    assert _nothing_staged(path)


def _side_inputs(features) -> dict[str, int]:
    """The side inputs of each step of a write, by step name (the pipeline is built, not run)."""
    found = {}

    class Steps(PipelineVisitor):
        def visit_transform(self, node):
            found[node.full_label] = len(node.side_inputs)

    p = beam.Pipeline(options=options())
    if features is None:
        features = p | "Features" >> beam.Create([FEATURES])
    _ = p | beam.Create(_pairs(3)) | WriteToArrowShards("/nonexistent/cache", features, write_id=new_write_id())
    p.visit(Steps())
    return found


def test_given_features_add_no_side_input_and_made_ones_reach_every_step_that_needs_them():
    given = _side_inputs(FEATURES)
    assert given["WriteToArrowShards/WriteBundles/ParDo(WriteBundleFn)"] == 0, "Beam's faster invoker"
    assert not any("CheckFeatures" in step for step in given)
    made = _side_inputs(None)
    assert made["WriteToArrowShards/WriteBundles/ParDo(WriteBundleWithIdFn)"] == 2, "the write id and the features"
    for step in ("MergeBins", "PlanMerge", "Finalize"):
        assert made[f"WriteToArrowShards/{step}"] == given[f"WriteToArrowShards/{step}"] + 1, step
