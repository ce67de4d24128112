"""ReadFromArrowShards and ReadAllFromArrowShards: round trips, splitting, and bad caches."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.display import DisplayData
from hypothesis import given, strategies as st

from beam_shards import (Array, CacheNotFoundError, CorruptCacheError, Features, Image, ReadAllFromArrowShards,
                         ReadFromArrowShards, SchemaMismatchError, ShardedDataset, Value, VersionNotFoundError,
                         WriteToArrowShards, read_metadata, write_shards)
from beam_shards.beam.source import BatchRangeProvider, ShardTask, _Manifests, _ReadBatchesFn, _ReadSpec, plan_shard
from beam_shards.format import manifest as manifest_module

from _reliability import edit_manifest
from _support import FEATURES, example, options, run_with_deadline

NUM_EXAMPLES = 240
PARTS = 4
COLUMNS = ["caption", "id", "embedding"]
# Small shards of small batches, and splits of a few batches, so every read splits below shard level.
SINK_ARGS = dict(shard_size_bytes=40_000, batch_size=8)
SPLIT_BYTES = 5_000


def _examples(part: int):
    per_part = NUM_EXAMPLES // PARTS
    return [example(i) for i in range(part * per_part, (part + 1) * per_part)]


def _key(row: dict) -> tuple:
    """A hashable, order-free form of a row, so outputs compare as multisets."""
    def freeze(value):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, (list, tuple)):
            return tuple(freeze(v) for v in value)
        return value
    return tuple(sorted((name, freeze(value)) for name, value in row.items()))


def _written(i: int, columns=None) -> dict:
    """Example i as the source gives it back undecoded (bytes for images), arrays as lists for comparing."""
    row = {name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in example(i).items()}
    return {name: row[name] for name in columns} if columns else row


def _batch_rows(batch: pa.RecordBatch, columns=None) -> list[dict]:
    expected = columns or list(FEATURES)
    if not isinstance(batch, pa.RecordBatch) or batch.schema.names != expected:
        raise AssertionError(f"expected a RecordBatch of columns {expected}; got {batch!r}")
    return batch.to_pylist()


def _sink_then_source(out, pipeline_options, run=lambda p: p.run().wait_until_finish(), write_options=None):
    """One pipeline writes the cache (on `write_options`, by default those of the read); a second reads it four
    ways: rows/batches, all/some columns."""
    with beam.Pipeline(options=write_options or pipeline_options) as p:
        (p | beam.Create(range(PARTS)) | beam.FlatMap(_examples)
         | WriteToArrowShards(str(out), FEATURES, **SINK_ARGS))
    assert read_metadata(str(out)).num_shards > PARTS
    p = beam.Pipeline(options=pipeline_options)
    for columns in (None, COLUMNS):
        expected = [_key(_written(i, columns)) for i in range(NUM_EXAMPLES)]
        name = "all" if columns is None else "some"
        rows = p | f"Rows{name}" >> ReadFromArrowShards(str(out), columns=columns, desired_split_bytes=SPLIT_BYTES)
        assert_that(rows | f"KeyRows{name}" >> beam.Map(_key), equal_to(expected), label=f"CheckRows{name}")
        batches = p | f"Batches{name}" >> ReadFromArrowShards(str(out), columns=columns, as_batches=True,
                                                              desired_split_bytes=SPLIT_BYTES)
        keys = batches | f"Unbatch{name}" >> beam.FlatMap(_batch_rows, columns) | f"KeyBatches{name}" >> beam.Map(_key)
        assert_that(keys, equal_to(expected), label=f"CheckBatches{name}")
    run(p)


def test_sink_then_source_in_process(tmp_path):
    _sink_then_source(tmp_path / "cache", options())


@pytest.mark.slow
def test_sink_then_source_on_two_worker_processes(tmp_path):
    # The sink on worker processes is test_sink's `test_two_worker_processes`; here the write runs in-process.
    _sink_then_source(tmp_path / "cache", options("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
                      write_options=options())


@pytest.mark.slow
def test_sink_then_source_on_the_portable_job_service(tmp_path, portable_options):
    _sink_then_source(tmp_path / "cache", portable_options(), run=run_with_deadline)


def test_cache_written_by_write_shards_raw_and_decoded(tmp_path):
    out = str(tmp_path / "cache")
    write_shards((example(i) for i in range(100)), out, FEATURES, shard_size_bytes=30_000, batch_size=8)
    decoded = ShardedDataset(out, image_mode="numpy")
    with beam.Pipeline(options=options()) as p:
        raw = p | "Raw" >> ReadFromArrowShards(out, features=FEATURES, desired_split_bytes=SPLIT_BYTES)
        assert_that(raw | "KeyRaw" >> beam.Map(_key), equal_to([_key(_written(i)) for i in range(100)]),
                    label="CheckRaw")
        rows = p | "Decoded" >> ReadFromArrowShards(out, image_mode="numpy")
        assert_that(rows | "KeyDecoded" >> beam.Map(_key), equal_to([_key(row) for row in decoded]),
                    label="CheckDecoded")
    first = decoded[0]
    assert isinstance(first["image"], np.ndarray) and first["image"].shape == (16, 16, 3)


def test_read_all_over_a_pcollection_of_caches(tmp_path):
    features = Features({"id": Value("int64"), "cache": Value("string")})
    paths = [str(tmp_path / name) for name in ("a", "b", "empty")]
    write_shards(({"id": i, "cache": "a"} for i in range(50)), paths[0], features, shard_size_bytes=2_000, batch_size=4)
    write_shards(({"id": i, "cache": "b"} for i in range(30)), paths[1], features, batch_size=4)
    write_shards([], paths[2], features)
    expected = [(c, i) for c, n in (("a", 50), ("b", 30)) for i in range(n)]
    with beam.Pipeline(options=options()) as p:
        rows = (p | beam.Create(paths)
                | ReadAllFromArrowShards(features=features, columns=["cache", "id"], desired_split_bytes=100))
        assert_that(rows | beam.Map(lambda row: (row["cache"], row["id"])), equal_to(expected))


def test_empty_cache_yields_nothing(tmp_path):
    out = str(tmp_path / "empty")
    write_shards([], out, FEATURES)
    with beam.Pipeline(options=options()) as p:
        assert_that(p | "Rows" >> ReadFromArrowShards(out), equal_to([]), label="CheckRows")
        assert_that(p | "Batches" >> ReadFromArrowShards(out, as_batches=True), equal_to([]), label="CheckBatches")


@pytest.mark.parametrize("format_version", [4, 5])
def test_metrics_count_rows_and_projection_reads_fewer_bytes_before_format_5(tmp_path, monkeypatch, format_version):
    out = str(tmp_path / "cache")
    monkeypatch.setattr(manifest_module, "FORMAT_VERSION", format_version)
    write_shards((example(i) for i in range(60)), out, FEATURES, batch_size=8)
    read_bytes = {}
    for columns in (None, ["id"]):
        p = beam.Pipeline(options=options())
        _ = p | ReadFromArrowShards(out, columns=columns)
        result = p.run()
        result.wait_until_finish()
        counters = {c.key.metric.name: c.committed for c in result.metrics().query(
            MetricsFilter().with_namespace("beam_shards"))["counters"]}
        assert counters["rows_read"] == 60
        read_bytes[columns is None] = counters["bytes_read"]
    if format_version == 5:  # whole batches are read, to check each one's CRC-32
        assert read_bytes[False] == read_bytes[True] > 0, read_bytes
    else:
        assert 0 < read_bytes[False] * 20 < read_bytes[True], read_bytes


def test_reads_through_filesystems_when_the_path_is_not_local(tmp_path, monkeypatch):
    out = str(tmp_path / "cache")
    write_shards((example(i) for i in range(40)), out, FEATURES, batch_size=8)
    monkeypatch.setattr("beam_shards.storage.fs.is_local", lambda path: False)

    def no_mmap(*args, **kwargs):
        raise AssertionError("a path that is not local must not be memory-mapped")

    monkeypatch.setattr(pa, "memory_map", no_mmap)
    with beam.Pipeline(options=options()) as p:
        ids = p | ReadFromArrowShards(out, columns=["id"], desired_split_bytes=1) | beam.Map(lambda row: row["id"])
        assert_that(ids, equal_to(list(range(40))))


def test_display_data_shows_path_and_columns():
    items = {item.key: item.value for item in DisplayData.create_from(
        ReadFromArrowShards("/data/cache", columns=["id", "label"])).items}
    assert items["path"] == "/data/cache"
    assert items["columns"] == "['id', 'label']"
    assert {item.key: item.value for item in DisplayData.create_from(ReadAllFromArrowShards()).items}["columns"] == "all"


# The restriction provider and the splittable DoFn on their own.

def _cache_and_tasks(tmp_path, num_examples=120):
    out = str(tmp_path / "cache")
    manifest = write_shards((example(i) for i in range(num_examples)), out, FEATURES, shard_size_bytes=60_000,
                            batch_size=4)
    return manifest, [plan_shard(manifest, i, desired_split_bytes=SPLIT_BYTES) for i in range(manifest.num_shards)]


@given(num_batches=st.integers(0, 200), num_bytes=st.integers(0, 10**9), split_batches=st.integers(1, 50))
def test_initial_splits_cover_every_batch_exactly_once(num_batches, num_bytes, split_batches):
    task = ShardTask("/c", "w", 0, num_batches, num_bytes, split_batches)
    provider = BatchRangeProvider()
    pieces = list(provider.split(task, provider.initial_restriction(task)))
    covered = [b for piece in pieces for b in range(piece.start, piece.stop)]
    assert covered == list(range(num_batches))
    assert all(piece.size() > 0 for piece in pieces)
    if num_batches > 2 * split_batches:
        assert len(pieces) > 1
    sizes = [provider.restriction_size(task, piece) for piece in pieces]
    assert all(size >= 0 for size in sizes) and sum(sizes) <= num_bytes


def test_planned_shards_split_below_shard_level(tmp_path):
    manifest, tasks = _cache_and_tasks(tmp_path)
    provider = BatchRangeProvider()
    assert [t.shard_id for t in tasks] == list(range(manifest.num_shards))
    pieces = [list(provider.split(t, provider.initial_restriction(t))) for t in tasks]
    assert all(len(p) > 1 for p in pieces[:-1]), "every full shard must be split between workers"


def _fn(manifest, columns=None) -> _ReadBatchesFn:
    return _ReadBatchesFn(_Manifests([manifest]), _ReadSpec.make(columns, True, None, "bytes", SPLIT_BYTES))


def _read(fn, task, restriction) -> list[int]:
    tracker = BatchRangeProvider().create_tracker(restriction)
    ids = [i for batch in fn.process(task, tracker=tracker) for i in batch.column("id").to_pylist()]
    tracker.check_done()
    return ids


@pytest.mark.parametrize("fraction", [0, 0.1, 0.5, 0.9, 1])
def test_try_split_loses_and_duplicates_nothing(tmp_path, fraction):
    manifest, tasks = _cache_and_tasks(tmp_path, num_examples=48)
    task = tasks[0]
    expected = sorted(_read(_fn(manifest), task, OffsetRange(0, task.num_batches)))
    assert len(expected) == manifest.shards[0].num_rows
    provider = BatchRangeProvider()
    for claimed in sorted({0, 1, task.num_batches // 2, task.num_batches - 1, task.num_batches}):
        tracker = provider.create_tracker(provider.initial_restriction(task))
        outputs = _fn(manifest, columns=["id"]).process(task, tracker=tracker)
        ids = [i for _, batch in zip(range(claimed), outputs) for i in batch.column("id").to_pylist()]
        split = tracker.try_split(fraction)
        ids += [i for batch in outputs for i in batch.column("id").to_pylist()]
        tracker.check_done()
        if split is not None:
            primary, residual = split
            assert primary == tracker.current_restriction() and primary.stop == residual.start
            assert residual.stop == task.num_batches
            ids += _read(_fn(manifest), task, residual)
        assert sorted(ids) == expected, (claimed, fraction, split)


def test_provider_and_dofn_on_an_empty_cache(tmp_path):
    manifest = write_shards([], str(tmp_path / "empty"), FEATURES)
    assert manifest.num_shards == 0
    task = ShardTask(manifest.path, manifest.write_id, 0, num_batches=0, num_bytes=0, split_batches=1)
    provider = BatchRangeProvider()
    assert list(provider.split(task, provider.initial_restriction(task))) == []
    assert provider.restriction_size(task, provider.initial_restriction(task)) == 0
    assert _read(_fn(manifest), task, OffsetRange(0, 0)) == []


# Bad caches and bad options.

@pytest.fixture
def cache(tmp_path) -> str:
    out = str(tmp_path / "cache")
    write_shards((example(i) for i in range(60)), out, FEATURES, shard_size_bytes=30_000, batch_size=8)
    return out


def _apply(path: str, **kwargs) -> None:
    p = beam.Pipeline(options=options())
    _ = p | ReadFromArrowShards(path, **kwargs)


def test_missing_cache_fails_at_construction(tmp_path):
    with pytest.raises(CacheNotFoundError, match=f"no beam_shards cache at {tmp_path / 'nothing'}"):
        _apply(str(tmp_path / "nothing"))


def test_missing_shard_fails_when_read_naming_it(cache):
    shard = read_metadata(cache).shards[1].file
    os.remove(os.path.join(cache, shard))
    _apply(cache)  # construction reads the header alone, at any number of shards
    with pytest.raises(Exception, match=f"shard 1 \\({shard}\\) .* is missing"):
        with beam.Pipeline(options=options()) as p:
            p | ReadFromArrowShards(cache) | beam.Map(lambda row: None)


@pytest.mark.parametrize("field, value, message", [
    ("num_rows", 61, "says num_rows=61 but its shards hold 60 rows"),
    ("schema_fingerprint", "0" * 16, "does not match its features.*the manifest was edited"),
    ("format_version", 99, "format version 99; this beam_shards reads versions 1 to 5"),
])
def test_edited_manifest_fails_at_construction(cache, field, value, message):
    edit_manifest(cache, lambda data: data.__setitem__(field, value))
    with pytest.raises(CorruptCacheError, match=message):
        _apply(cache)


def test_shard_rows_edited_in_the_manifest_fail_when_run(cache):
    def move_a_row(data):
        data["shards"][0]["num_rows"] -= 1
        data["shards"][1]["num_rows"] += 1

    edit_manifest(cache, move_a_row)
    first = read_metadata(cache).shards[0]
    p = beam.Pipeline(options=options())
    _ = p | ReadFromArrowShards(cache)
    with pytest.raises(Exception, match=rf"shard 0 \({first.file}\) of version 1 of the cache at {cache} holds "
                                        rf"{first.num_rows + 1} rows, the manifest says {first.num_rows}"):
        p.run().wait_until_finish()


def test_schema_mismatch_names_both_fingerprints_and_the_path(cache):
    other = Features({"id": Value("int32"), "caption": Value("string")})
    with pytest.raises(SchemaMismatchError) as error:
        _apply(cache, features=other)
    text = str(error.value)
    assert FEATURES.fingerprint() in text and other.fingerprint() in text and cache in text
    assert "only the cache has ['image', 'label', 'embedding', 'tags']" in text
    assert "id is Value('int64') in the cache, Value('int32') in features=" in text


def test_unknown_column_fails_at_construction(cache):
    with pytest.raises(KeyError, match=r"unknown column\(s\) \['colour'\]"):
        _apply(cache, columns=["id", "colour"])


def test_read_all_fails_when_run_for_a_bad_cache(cache, tmp_path):
    other = Features({"id": Value("int32")})
    for paths, kwargs, message in (
            ([cache, str(tmp_path / "nothing")], {}, "no beam_shards cache at"),
            ([cache], {"features": other}, "has schema fingerprint"),
            ([cache], {"columns": ["colour"]}, "unknown column")):
        p = beam.Pipeline(options=options())
        _ = p | beam.Create(paths) | ReadAllFromArrowShards(**kwargs)
        with pytest.raises(Exception, match=message):
            p.run().wait_until_finish()


def test_a_read_pins_its_version_while_the_cache_is_overwritten(cache, tmp_path):
    """The version is fixed when the transform is applied; workers read it whatever is published after."""
    out = str(tmp_path / "ids.txt")
    p = beam.Pipeline(options=options())
    _ = (p | ReadFromArrowShards(cache, columns=["id"]) | beam.Map(lambda row: row["id"])
         | beam.combiners.ToList() | beam.Map(lambda ids: open(out, "w").write(json.dumps(sorted(ids)))))
    write_shards((example(i) for i in range(1000, 1010)), cache, FEATURES)
    p.run().wait_until_finish()
    assert json.loads(open(out).read()) == list(range(60))


def test_read_a_given_version(cache):
    write_shards((example(i) for i in range(1000, 1010)), cache, FEATURES)
    with beam.Pipeline(options=options()) as p:
        ids = p | ReadFromArrowShards(cache, version=1, columns=["id"]) | beam.Map(lambda row: row["id"])
        assert_that(ids, equal_to(list(range(60))))
    with pytest.raises(VersionNotFoundError, match="no version 5"):
        _ = beam.Pipeline(options=options()) | ReadFromArrowShards(cache, version=5)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"columns": []}, ValueError, "at least one column"),
    ({"columns": "id"}, TypeError, "list of column names"),
    ({"columns": ["id", "id"]}, ValueError, "more than once"),
    ({"image_mode": "numpy", "as_batches": True}, ValueError, "cannot be combined"),
    ({"image_mode": "tensor"}, ValueError, "image_mode must be one of"),
    ({"features": {"id": "int64"}}, TypeError, "Features object"),
    ({"desired_split_bytes": 0}, ValueError, "desired_split_bytes"),
])
def test_bad_options_fail_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        ReadFromArrowShards("/nowhere", **kwargs)
    with pytest.raises(error, match=message):
        ReadAllFromArrowShards(**kwargs)


def test_garbled_shard_of_the_right_size_fails_when_run(cache):
    shard = read_metadata(cache).shards[0].file
    where = os.path.join(cache, shard)
    with open(where, "r+b") as f:
        f.write(b"\0" * os.path.getsize(where))
    p = beam.Pipeline(options=options())
    _ = p | ReadFromArrowShards(cache)
    with pytest.raises(Exception, match=rf"shard 0 \({shard}\) of version 1 of the cache at {cache}: record batch 0 "
                                        r"\(bytes \d+ to \d+\) has CRC-32 [0-9a-f]{8} over"):
        p.run().wait_until_finish()


def test_rows_carry_arrays_as_numpy_and_images_as_bytes(tmp_path):
    out = tmp_path / "cache"
    write_shards((example(i) for i in range(6)), str(out), FEATURES)
    seen = tmp_path / "seen.txt"

    def check(row):
        embedding = row["embedding"]
        assert isinstance(embedding, np.ndarray) and embedding.shape == (8,) and embedding.dtype == np.float32
        np.testing.assert_array_equal(embedding, example(row["id"])["embedding"])
        assert row["image"] == example(row["id"])["image"] and isinstance(row["label"], int)
        with open(seen, "a") as handle:
            handle.write(f"{row['id']}\n")

    with beam.Pipeline(options=options()) as p:
        p | ReadFromArrowShards(str(out)) | beam.Map(check)
    assert sorted(map(int, seen.read_text().split())) == list(range(6))


def test_planning_counts_rows_from_the_narrowest_column():
    from beam_shards.shards.shard_file import _width_rank

    features = Features({"image": Image(), "caption": Value("string"), "embedding": Array((4,), "float32")})
    schema = features.arrow_schema()
    assert min(schema, key=lambda f: _width_rank(f.type)).name == "embedding"
    only_bytes = Features({"image": Image(), "caption": Value("string")}).arrow_schema()
    assert min(only_bytes, key=lambda f: _width_rank(f.type)).name == "caption"


def test_transforms_pickle(tmp_path):
    import pickle

    from apache_beam.internal import pickler

    out = str(tmp_path / "cache")
    write_shards((example(i) for i in range(5)), out, FEATURES)
    for transform in (ReadFromArrowShards(out, columns=["id"]), ReadAllFromArrowShards(as_batches=True)):
        for dumps, loads in ((pickle.dumps, pickle.loads), (pickler.dumps, pickler.loads)):
            clone = loads(dumps(transform))
            assert clone.display_data()["columns"].value == transform.display_data()["columns"].value
