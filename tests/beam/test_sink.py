"""WriteToArrowShards on the local runners and the portable path: exactly once, atomic, clean."""

from __future__ import annotations

import collections
import os
import pickle
import uuid

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.pvalue import EmptySideInput
from apache_beam.transforms.display import DisplayData

from beam_shards import (ArrowBackend, ClassLabel, EmptyWriteError, EncodeError, Features, ShardedDataset, Value,
                         WriterOptions, WriteToArrowShards, list_versions, read_metadata, verify, write_shards)
from beam_shards.beam.bundles import WriteBundleWithIdFn
from beam_shards.beam.sink import _FinalizeFn
from beam_shards.format.layout import STAGING_DIR

from _support import FEATURES, example, options, run_with_deadline

NUM_EXAMPLES = 600
PARTS = 6


def _examples(part: int, per_part: int = NUM_EXAMPLES // PARTS):
    for i in range(part * per_part, (part + 1) * per_part):
        yield example(i)


def _write(out, *args, num_parts=PARTS, transform=None, **sink_args):
    sink_args.setdefault("shard_size_bytes", 20_000)
    sink_args.setdefault("batch_size", 16)
    with beam.Pipeline(options=options(*args)) as p:
        examples = p | beam.Create(range(num_parts)) | beam.FlatMap(_examples)
        if transform is not None:
            examples = examples | transform
        examples | WriteToArrowShards(str(out), FEATURES, **sink_args)


def _ids(path) -> list[int]:
    backend = ArrowBackend.open(str(path))
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def _assert_exactly_once_and_clean(path, expected_ids):
    ids = _ids(path)
    counts = collections.Counter(ids)
    duplicated = [i for i, n in counts.items() if n > 1]
    assert not duplicated, f"duplicated ids {duplicated[:10]}"
    assert sorted(ids) == sorted(expected_ids)
    assert verify(str(path)).ok
    assert not os.path.exists(os.path.join(path, STAGING_DIR)), os.listdir(os.path.join(path, STAGING_DIR))
    listed = {s.file for manifest in list_versions(str(path)) for s in manifest.shards}
    on_disk = {name for name in os.listdir(path) if name.endswith(".arrow")}
    assert on_disk == listed, f"files no manifest lists: {sorted(on_disk - listed)}"


def test_round_trip_fnapi_with_several_shards_per_bundle(tmp_path):
    out = tmp_path / "cache"
    _write(out)
    manifest = read_metadata(str(out))
    assert manifest.num_rows == NUM_EXAMPLES
    assert manifest.num_shards > PARTS, "a small shard size must rotate shards inside a bundle"
    assert all(0 < s.num_rows for s in manifest.shards)
    _assert_exactly_once_and_clean(out, range(NUM_EXAMPLES))
    ds = ShardedDataset(str(out), image_mode="bytes")
    by_id = {row["id"]: row for row in ds}
    for i in (0, 17, NUM_EXAMPLES - 1):
        expected = example(i)
        row = by_id[i]
        assert row["image"] == expected["image"]
        assert row["label"] == expected["label"]
        assert row["caption"] == expected["caption"] and row["tags"] == expected["tags"]
        np.testing.assert_array_equal(row["embedding"], expected["embedding"])


def test_output_is_the_published_manifest_and_chains(tmp_path):
    out = tmp_path / "cache"
    seen = tmp_path / "seen.txt"

    def record(manifest):
        seen.write_text(f"{manifest.write_id} {manifest.num_rows}")

    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(2)) | beam.FlatMap(_examples, per_part=10)
         | WriteToArrowShards(str(out), FEATURES) | beam.Map(record))
    manifest = read_metadata(str(out))
    assert seen.read_text() == f"{manifest.write_id} 20"


def test_keyed_input_and_metadata(tmp_path):
    out = tmp_path / "cache"
    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(2)) | beam.FlatMap(_examples, per_part=5)
         | beam.Map(lambda e: (f"key-{e['id']}", e))
         | WriteToArrowShards(str(out), FEATURES, metadata={"source": "test"}, compression="zstd"))
    manifest = read_metadata(str(out))
    assert manifest.metadata == {"source": "test"} and manifest.compression == "zstd"
    assert sorted(_ids(out)) == list(range(10))


def test_empty_input_publishes_a_valid_empty_cache(tmp_path):
    out = tmp_path / "cache"
    with beam.Pipeline(options=options()) as p:
        p | beam.Create([]) | WriteToArrowShards(str(out), FEATURES, allow_empty=True)
    manifest = read_metadata(str(out))
    assert manifest.num_rows == 0 and manifest.num_shards == 0
    assert len(ShardedDataset(str(out))) == 0
    assert verify(str(out)).ok
    assert sorted(os.listdir(out)) == [".lock", "_metadata.json", "_tables", "_versions"]


def test_bundle_repeat_runs_every_bundle_and_finalize_twice_yet_writes_once(tmp_path):
    out = tmp_path / "cache"
    _write(out, "--direct_runner_bundle_repeat=1")
    _assert_exactly_once_and_clean(out, range(NUM_EXAMPLES))


class _FailFirstAttempt(beam.DoFn):
    """Fails the first attempt at each id divisible by 200, after earlier rows were written.

    The runner gives a bundle 4 attempts, so at most 3 failures may hit one bundle.
    """

    def __init__(self, markers: str):
        self._markers = markers

    def process(self, element):
        marker = os.path.join(self._markers, str(element["id"]))
        if element["id"] % 200 == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(f"injected failure at id {element['id']}")
        yield element


def test_retried_bundles_write_exactly_once(tmp_path):
    out = tmp_path / "cache"
    markers = tmp_path / "markers"
    markers.mkdir()
    _write(out, "--runner=BundleBasedDirectRunner", transform=beam.ParDo(_FailFirstAttempt(str(markers))))
    assert len(os.listdir(markers)) == NUM_EXAMPLES // 200, "every injected failure must have fired"
    _assert_exactly_once_and_clean(out, range(NUM_EXAMPLES))


def _tag_pid(element):
    return {**element, "caption": f"pid {os.getpid()}"}


@pytest.mark.slow
def test_two_worker_processes(tmp_path):
    out = tmp_path / "cache"
    _write(out, "--direct_num_workers=2", "--direct_running_mode=multi_processing", num_parts=12,
           transform=beam.Reshuffle() | beam.Map(_tag_pid))
    _assert_exactly_once_and_clean(out, range(12 * (NUM_EXAMPLES // PARTS)))
    backend = ArrowBackend.open(str(out))
    pids_per_shard = [set(backend.slice(int(start), int(end - start)).column("caption").to_pylist())
                      for start, end in zip(backend.shard_offsets[:-1], backend.shard_offsets[1:])]
    assert all(len(pids) == 1 for pids in pids_per_shard), "a shard is written by one bundle in one process"
    assert len(set.union(*pids_per_shard)) >= 2, "shards must come from more than one worker process"
    assert str(os.getpid()) not in str(pids_per_shard)


@pytest.mark.slow
def test_portable_runner_with_external_worker_pool(tmp_path, portable_options):
    out = tmp_path / "cache"
    p = beam.Pipeline(options=portable_options())
    (p | beam.Create(range(PARTS)) | beam.FlatMap(_examples) | beam.Map(_tag_pid)
     | WriteToArrowShards(str(out), FEATURES, shard_size_bytes=20_000, batch_size=16))
    run_with_deadline(p)
    _assert_exactly_once_and_clean(out, range(NUM_EXAMPLES))
    captions = set(ArrowBackend.open(str(out)).slice(0, NUM_EXAMPLES).column("caption").to_pylist())
    assert f"pid {os.getpid()}" not in captions, "rows must be written by the external SDK workers"


def test_overwrite_while_a_reader_holds_the_old_version(tmp_path):
    out = tmp_path / "cache"
    features = Features({"id": Value("int64"), "version": Value("string")})
    write_shards(({"id": i, "version": "old"} for i in range(300)), str(out), features,
                 shard_size_bytes=2_000, batch_size=10)
    old_reader = ArrowBackend.open(str(out))
    old_files = {s.file for s in old_reader.manifest.shards}
    old_reader.slice(0, old_reader.num_rows)  # maps every old shard
    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(200)) | beam.Map(lambda i: {"id": i, "version": "new"})
         | WriteToArrowShards(str(out), features, shard_size_bytes=2_000, batch_size=10))
    assert old_files < set(os.listdir(out)), "the old version stays until retention removes it"
    assert old_reader.take([0, 150, 299]).to_pylist() == [{"id": i, "version": "old"} for i in (0, 150, 299)]
    new_reader = ArrowBackend.open(str(out))
    assert new_reader.num_rows == 200
    assert set(new_reader.slice(0, 200).column("version").to_pylist()) == {"new"}


class _FailAfter(beam.DoFn):
    def __init__(self, limit: int):
        self._limit = limit

    def process(self, element):
        if element["id"] >= self._limit:
            raise RuntimeError(f"injected failure at id {element['id']}")
        yield element


def test_failing_pipeline_publishes_nothing_and_keeps_the_previous_cache(tmp_path):
    out = tmp_path / "cache"
    previous = write_shards((example(i) for i in range(50)), str(out), FEATURES)
    with pytest.raises(Exception, match="injected failure at id"):
        _write(out, transform=beam.ParDo(_FailAfter(80)), num_parts=1,
               shard_size_bytes=5_000)
    assert read_metadata(str(out)).write_id == previous.write_id
    assert sorted(_ids(out)) == list(range(50))
    assert verify(str(out)).ok


def test_failing_pipeline_on_a_fresh_path_publishes_nothing(tmp_path):
    out = tmp_path / "cache"
    with pytest.raises(Exception, match="injected failure"):
        _write(out, transform=beam.ParDo(_FailAfter(30)), num_parts=1)
    assert not os.path.exists(os.path.join(out, "_metadata.json"))


@pytest.mark.parametrize("bad, field, reason", [
    ({"label": "seven"}, "label", "class names are not declared"),
    ({"embedding": [1.0, 2.0]}, "embedding", "wrong shape"),
    ({"caption": 5}, "caption", "expected a str"),
])
def test_bad_example_fails_with_its_field_and_example(tmp_path, bad, field, reason):
    out = tmp_path / "cache"

    def spoil(element):
        return {**element, **bad} if element["id"] == 42 else element

    with pytest.raises(Exception) as raised:
        _write(out, transform=beam.Map(spoil), num_parts=1)
    message = str(raised.value)
    assert f"field '{field}'" in message and reason in message
    assert "'id': 42" in message, "the error must name the example"
    assert not os.path.exists(os.path.join(out, "_metadata.json"))


def test_missing_field_is_named(tmp_path):
    out = tmp_path / "cache"
    with pytest.raises(Exception, match=r"example 'k-3', field 'caption'.*missing field"):
        with beam.Pipeline(options=options()) as p:
            (p | beam.Create(range(5))
             | beam.Map(lambda i: (f"k-{i}", {k: v for k, v in example(i).items() if i != 3 or k != "caption"}))
             | WriteToArrowShards(str(out), FEATURES))


def test_transform_pickles_and_shows_display_data(tmp_path):
    sink = WriteToArrowShards(str(tmp_path), FEATURES, shard_size_bytes=1 << 20, batch_size=64, compression="lz4")
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.display_data()["path"].value == str(tmp_path)
    items = {item.key: item.value for item in DisplayData.create_from(sink).items}
    assert items["shard_size_bytes"] == 1 << 20 and items["batch_size"] == 64 and items["compression"] == "lz4"


@pytest.mark.parametrize("kwargs, message", [
    ({"shard_size_bytes": 0}, "shard_size_bytes"),
    ({"batch_size": -1}, "batch_size"),
    ({"compression": "gzip"}, "compression"),
    ({"metadata": {"x": object()}}, "JSON-serializable"),
])
def test_bad_options_fail_at_construction(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        WriteToArrowShards(str(tmp_path), FEATURES, **kwargs)


def test_metrics_count_rows_bytes_and_shards(tmp_path):
    out = tmp_path / "cache"
    p = beam.Pipeline(options=options())
    (p | beam.Create(range(PARTS)) | beam.FlatMap(_examples)
     | WriteToArrowShards(str(out), FEATURES, shard_size_bytes=20_000, batch_size=16))
    result = p.run()
    result.wait_until_finish()
    counters = {m.key.metric.name: m.committed for m in result.metrics().query()["counters"]}
    manifest = read_metadata(str(out))
    assert counters["rows_written"] == manifest.num_rows
    assert counters["shards_written"] == manifest.num_shards
    assert counters["bytes_written"] == manifest.num_bytes


def test_empty_write_id_side_input_falls_back(tmp_path):
    """Runners that hand an empty singleton side input (Prism) still publish every shard."""
    out = str(tmp_path / "cache")
    features = Features({"id": Value("int64")})
    write = WriteBundleWithIdFn(out, features, WriterOptions(shard_size_bytes=1 << 20))
    write.setup()
    staged = []
    for bundle in range(2):
        write.start_bundle()
        for i in range(bundle * 10, bundle * 10 + 10):
            write.process({"id": i}, EmptySideInput())
        staged.extend(wv.value for wv in write.finish_bundle())
    [manifest] = list(_FinalizeFn(out, features, WriterOptions(), {}, "overwrite", None, True).process(
        None, EmptySideInput(), staged))
    assert manifest.num_rows == 20
    assert sorted(_ids(out)) == list(range(20))
    assert not os.path.exists(os.path.join(out, STAGING_DIR))


def test_encode_error_message_is_not_wrapped_twice(tmp_path):
    with pytest.raises(Exception) as raised:
        _write(tmp_path / "cache", transform=beam.Map(lambda e: {**e, "label": 99}), num_parts=1)
    message = str(raised.value)
    assert "example: example" not in message
    assert message.count("class id out of range") >= 1 and "field 'label'" in message


def test_windowed_input_is_written_whole(tmp_path):
    from apache_beam.transforms import window

    out = tmp_path / "cache"
    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(2)) | beam.FlatMap(_examples, per_part=30)
         | beam.Map(lambda e: window.TimestampedValue(e, e["id"]))
         | beam.WindowInto(window.FixedWindows(10))
         | WriteToArrowShards(str(out), FEATURES))
    _assert_exactly_once_and_clean(out, range(60))


def test_failure_upstream_in_the_same_bundle_leaves_no_staged_files(tmp_path):
    """A step fused before the sink fails after the sink staged shards: teardown drops them."""
    out = tmp_path / "cache"
    with pytest.raises(Exception, match="injected failure"):
        _write(out, transform=beam.ParDo(_FailAfter(80)), num_parts=1, shard_size_bytes=5_000)
    staged = [f for _, _, files in os.walk(out / STAGING_DIR) for f in files] if os.path.exists(out / STAGING_DIR) else []
    assert staged == []


@pytest.mark.slow
def test_given_write_id_lets_the_caller_clean_up_a_failed_run(tmp_path):
    from beam_shards.format.layout import new_write_id
    from beam_shards.versions.commit import abandon

    out = tmp_path / "cache"
    write_id = new_write_id()
    with pytest.raises(Exception, match="injected failure"):
        _write(out, "--direct_num_workers=2", "--direct_running_mode=multi_processing", num_parts=6,
               transform=beam.Reshuffle() | beam.ParDo(_FailAfter(550)), write_id=write_id)
    abandon(str(out), write_id)
    assert not os.path.exists(out / STAGING_DIR)
    assert not os.path.exists(out / "_metadata.json")
    with pytest.raises(ValueError, match="not a beam_shards write id"):
        WriteToArrowShards(str(out), FEATURES, write_id="mine")


def test_unbounded_input_is_refused_at_construction(tmp_path):
    from apache_beam.options.pipeline_options import StandardOptions

    opts = options()
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    source = p | beam.Create([1])
    source.is_bounded = False
    with pytest.raises(ValueError, match="needs a bounded PCollection"):
        source | WriteToArrowShards(str(tmp_path / "c"), FEATURES)


# ---- on_bad="skip": bad examples go to a dead-letter output ----------------------------------

BAD_IDS = (7, 150, 151, 333)


def _mark_bad(element):
    """Examples in BAD_IDS get a class id past the classes."""
    return element if element["id"] not in BAD_IDS else {**element, "label": 99}


class _Collect(beam.DoFn):
    """Writes each dead letter's id and reason to a file of its own, named by the id (so duplicates show)."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(self, letter):
        key = letter["key"]
        name = f"{key}-{uuid.uuid4().hex}"
        with open(os.path.join(self._folder, name), "w") as handle:
            handle.write(f"{letter['reason']}\n{letter['example'] if isinstance(letter['example'], str) else 'dict'}")


def _write_skipping(out, folder, *args, transform=None):
    with beam.Pipeline(options=options(*args)) as p:
        examples = p | beam.Create(range(PARTS)) | beam.FlatMap(_examples) | beam.Map(_mark_bad)
        if transform is not None:
            examples = examples | transform
        result = (examples | beam.Map(lambda e: (e["id"], e))
                  | WriteToArrowShards(str(out), FEATURES, shard_size_bytes=20_000, batch_size=16, on_bad="skip"))
        result.bad | beam.ParDo(_Collect(str(folder)))
    return p


def _letters(folder) -> dict[int, list[str]]:
    letters = collections.defaultdict(list)
    for name in os.listdir(folder):
        letters[int(name.split("-")[0])].append((folder / name).read_text())
    return letters


def test_a_dead_letter_holds_a_repr_of_an_example_that_does_not_pickle():
    # A unit test: an element that does not pickle cannot reliably cross Beam's own
    # stage boundaries either, so a pipeline test of it fails or passes by fusion.
    from beam_shards.beam.staging import dead_letter

    error = EncodeError("example 333, field 'label': not a class id")
    kept = dead_letter({"id": 7, "label": 99}, 7, error)
    assert kept == {"key": 7, "example": {"id": 7, "label": 99}, "reason": str(error)}
    letter = dead_letter({"id": 333, "label": lambda: None}, 333, error)
    assert isinstance(letter["example"], str) and "'id': 333" in letter["example"]
    assert letter["key"] == 333 and letter["reason"] == str(error)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner_args", [
    (), pytest.param(("--direct_num_workers=2", "--direct_running_mode=multi_processing"), marks=pytest.mark.slow)],
    ids=["fnapi", "two processes"])
def test_skip_publishes_the_good_rows_and_dead_letters_the_bad(tmp_path, runner_args):
    out, folder = tmp_path / "cache", tmp_path / "bad"
    folder.mkdir()
    pipeline = _write_skipping(out, folder, *runner_args)
    _assert_exactly_once_and_clean(out, [i for i in range(NUM_EXAMPLES) if i not in BAD_IDS])
    letters = _letters(folder)
    assert sorted(letters) == list(BAD_IDS) and all(len(found) == 1 for found in letters.values()), letters
    for i, [text] in letters.items():
        assert f"example {i}, field 'label' (ClassLabel(num_classes=10)):" in text, text
    assert letters[7][0].endswith("\ndict"), "a dead letter holds the example as given"
    counters = pipeline.result.metrics().query(MetricsFilter().with_name("bad_inputs"))["counters"]
    assert sum(counter.committed for counter in counters) == len(BAD_IDS)


class _FailOnceAfterBad(beam.DoFn):
    """Fails the first attempt of the bundle holding id 160, after the bad ids 150 and 151 passed through it."""

    def __init__(self, markers: str):
        self._markers = markers

    def process(self, element):
        key, example = element
        marker = os.path.join(self._markers, "fired")
        if example["id"] == 160 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure after two dead letters")
        yield element


# FEATURES without its Sequence: every example's values are already in encoded form, so
# the writer checks them with their batch and a dead letter may come only at the bundle's end.
PLAIN_FEATURES = Features({name: feature for name, feature in FEATURES.items() if name != "tags"})


def _without_tags(element):
    return {name: value for name, value in element.items() if name != "tags"}


@pytest.mark.parametrize("plain", [False, True], ids=["encoded rows", "plain rows"])
def test_a_retried_bundle_does_not_duplicate_dead_letters(tmp_path, plain):
    out, folder, markers = tmp_path / "cache", tmp_path / "bad", tmp_path / "markers"
    folder.mkdir()
    markers.mkdir()
    features = PLAIN_FEATURES if plain else FEATURES
    assert (features.plain_values(_without_tags(example(1))) is not None) == plain
    with beam.Pipeline(options=options("--runner=BundleBasedDirectRunner")) as p:
        examples = p | beam.Create(range(PARTS)) | beam.FlatMap(_examples) | beam.Map(_mark_bad)
        if plain:
            examples = examples | beam.Map(_without_tags)
        result = (examples | beam.Map(lambda e: (e["id"], e)) | beam.ParDo(_FailOnceAfterBad(str(markers)))
                  | WriteToArrowShards(str(out), features, shard_size_bytes=20_000, batch_size=16, on_bad="skip"))
        result.bad | beam.ParDo(_Collect(str(folder)))
    assert os.listdir(markers) == ["fired"], "the injected failure must have fired"
    _assert_exactly_once_and_clean(out, [i for i in range(NUM_EXAMPLES) if i not in BAD_IDS])
    letters = _letters(folder)
    assert sorted(letters) == list(BAD_IDS) and all(len(found) == 1 for found in letters.values()), letters


def test_a_plain_example_found_bad_at_the_bundles_end_is_dead_lettered(tmp_path):
    """Plain examples are checked with their batch: one in a bundle's last, unfilled batch
    is found bad only when the bundle finishes, and its dead letter comes from there."""
    out = tmp_path / "cache"
    examples = [_without_tags(example(i)) for i in range(5)]
    examples[4]["label"] = 99
    with beam.Pipeline(options=options()) as p:
        result = (p | beam.Create([(e["id"], e) for e in examples])
                  | WriteToArrowShards(str(out), PLAIN_FEATURES, batch_size=100, on_bad="skip"))
        result.bad | beam.Map(lambda letter: (tmp_path / f"bad-{letter['key']}").write_text(letter["reason"]))
    assert sorted(_ids(out)) == [0, 1, 2, 3]
    assert [path.name for path in tmp_path.glob("bad-*")] == ["bad-4"]
    assert "class id out of range" in (tmp_path / "bad-4").read_text()


def test_skip_writes_the_good_rows_of_a_bad_batch(tmp_path):
    out, folder = tmp_path / "cache", tmp_path / "bad"
    folder.mkdir()
    features = Features({"id": Value("int64"), "label": ClassLabel(num_classes=3)})
    batches = [pa.table({"id": list(range(b * 10, b * 10 + 10)), "label": [i % 3 if i != 14 else 5 for i in
                                                                          range(b * 10, b * 10 + 10)]})
               for b in range(3)]
    with beam.Pipeline(options=options()) as p:
        result = (p | beam.Create([(f"batch {b}", batch) for b, batch in enumerate(batches)])
                  | WriteToArrowShards(str(out), features, on_bad="skip"))
        result.bad | beam.Map(lambda letter: (tmp_path / "bad" / f"{letter['key'][1]}").write_text(letter["reason"]))
    assert sorted(_ids(out)) == [i for i in range(30) if i != 14]
    assert os.listdir(folder) == ["4"]
    assert "row 4" not in (folder / "4").read_text() and "'batch 1', 4" in (folder / "4").read_text()


def test_on_bad_must_be_fail_or_skip(tmp_path):
    with pytest.raises(ValueError, match="on_bad must be one of .*'fail', 'skip'.*got 'ignore'"):
        WriteToArrowShards(str(tmp_path / "cache"), FEATURES, on_bad="ignore")


def test_fail_is_the_default_and_publishes_nothing(tmp_path):
    out = tmp_path / "cache"
    with pytest.raises(Exception, match=r"example 7, field 'label'.*class id out of range"):
        with beam.Pipeline(options=options()) as p:
            (p | beam.Create(range(2)) | beam.FlatMap(_examples, per_part=10) | beam.Map(_mark_bad)
             | beam.Map(lambda e: (e["id"], e)) | WriteToArrowShards(str(out), FEATURES))
    assert not os.path.exists(os.path.join(out, "_metadata.json"))


def test_allow_empty_false_refuses_an_empty_input_and_publishes_nothing(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(({"id": i} for i in range(3)), path, Features({"id": Value("int64")}))
    with pytest.raises(EmptyWriteError, match="holds no rows; nothing was published"):
        with beam.Pipeline(options=options()) as p:
            _ = p | beam.Create([]) | WriteToArrowShards(path, Features({"id": Value("int64")}), allow_empty=False)
    assert read_metadata(path).num_rows == 3 and read_metadata(path).version == 1
