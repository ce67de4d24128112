"""A corpus of bad examples: each fails with an error naming example, field and problem.

Every case goes through `write_shards` twice: on a fresh path (keyed by position) and
over a published cache (keyed by `(key, dict)` pairs). A representative subset also
goes through the Beam sink, whose errors arrive wrapped: there the message text is
checked. Whatever the case, nothing is published, a previous cache stays intact and
no staging file remains. Good examples precede the bad one and the shards are small,
so some shards are always staged before the error.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import apache_beam as beam
import numpy as np
import pytest

from beam_shards import (Array, ArrowBackend, ClassLabel, EncodeError, FeatureError, Features, Image, Sequence, Value,
                         Video, WriteToArrowShards, read_metadata, verify, write_shards)

from _reliability import assert_clean_cache, ids_of, staged_files
from _support import clean_up, jpeg, options, png

FEATURES = Features({
    "id": Value("int64"),
    "score": Value("float32"),
    "flag": Value("bool"),
    "count": Value("uint8"),
    "name": Value("string"),
    "blob": Value("binary"),
    "label": ClassLabel(names=["cat", "dog", "bird"]),
    "image": Image(),
    "embedding": Array((2, 3), "int16"),
    "frames": Sequence(Sequence(Value("int32"))),
    "video": Video(),
})
BAD_AT = 30
NUM_EXAMPLES = 40
SHARD_SIZE = 8_000
MISSING_PATH = "/nonexistent/beam_shards/no_such_file.jpg"
PREVIOUS = range(1000, 1010)


def good(i: int) -> dict[str, Any]:
    return {
        "id": i, "score": i / 4, "flag": i % 2 == 0, "count": i % 256, "name": f"name {i} é",
        "blob": bytes([i % 256]) * 50, "label": ["cat", "dog", "bird"][i % 3], "image": png(i % 3),
        "embedding": np.arange(6, dtype=np.int16).reshape(2, 3) + i, "frames": [[i, i + 1], []],
        "video": b"\x00\x00\x00\x18ftypmp42" + bytes(20),
    }


@dataclasses.dataclass(frozen=True)
class Case:
    """A bad example: `change` turns a good example into it; the error must name `field` and `reason`."""

    name: str
    change: Any
    field: str | None
    reason: str

    def bad_example(self, i: int, files: dict[str, str]) -> Any:
        example = good(i)
        if callable(self.change):
            return self.change(example, files)
        return {**example, **self.change}


def _without(name):
    return lambda example, files: {k: v for k, v in example.items() if k != name}


CASES = [
    Case("str for int", {"id": "seven"}, "id", "expected an int for int64"),
    Case("float for int", {"id": 3.0}, "id", "expected an int for int64"),
    Case("bool for int", {"id": True}, "id", "not a bool"),
    Case("NaN for int", {"id": float("nan")}, "id", "nan is not an int"),
    Case("inf for int", {"id": float("inf")}, "id", "inf is not an int"),
    Case("int beyond int64", {"id": 2 ** 63}, "id", "does not fit int64"),
    Case("int beyond uint8", {"count": 300}, "count", "does not fit uint8"),
    Case("negative for uint8", {"count": -1}, "count", "does not fit uint8"),
    Case("str for float", {"score": "1.5"}, "score", "expected a number for float32"),
    Case("int for bool", {"flag": 1}, "flag", "expected a bool"),
    Case("int for string", {"name": 12}, "name", "expected a str"),
    Case("invalid UTF-8 bytes for string", {"name": b"ok \xff\xfe"}, "name", "not valid UTF-8"),
    Case("lone surrogate string", {"name": "a\ud800b"}, "name", "cannot be stored as UTF-8"),
    Case("str for binary", {"blob": "text"}, "blob", "expected bytes"),
    Case("ClassLabel id too large", {"label": 3}, "label", "class id out of range 0..2"),
    Case("ClassLabel id negative", {"label": -1}, "label", "class id out of range 0..2"),
    Case("unknown label name", {"label": "fish"}, "label", "unknown class name"),
    Case("float for ClassLabel", {"label": 1.0}, "label", "expected a class id"),
    Case("Array of wrong shape", {"embedding": [[1, 2], [3, 4]]}, "embedding", "wrong shape (2, 2), expected (2, 3)"),
    Case("Array of floats into int16", {"embedding": np.full((2, 3), 0.5)}, "embedding",
         "cannot cast float64 to int16"),
    Case("Array values beyond int16", {"embedding": np.full((2, 3), 100_000)}, "embedding", "do not fit int16"),
    Case("ragged Array", {"embedding": [[1, 2, 3], [4, 5]]}, "embedding", "ragged"),
    Case("truncated JPEG", {"image": jpeg(1)[:-200]}, "image", "truncated JPEG"),
    Case("text file given as image", lambda e, files: {**e, "image": files["text"]}, "image", "not an image"),
    Case("image path that does not exist", {"image": MISSING_PATH}, "image", "No such file"),
    Case("int for image", {"image": 12345}, "image", "expected image bytes"),
    Case("image dict without bytes or path", {"image": {"bytes": None, "path": None}}, "image",
         "neither bytes nor path"),
    Case("video path that does not exist", {"video": MISSING_PATH}, "video", "No such file"),
    Case("empty video", {"video": b""}, "video", "empty video"),
    Case("None where a value is required", {"id": None}, "id", "None where a value is required"),
    Case("None inside a sequence", {"frames": [[1, None]]}, "frames[0][1]", "None where a value is required"),
    Case("sequence too shallow", {"frames": [1, 2]}, "frames[0]", "expected a list"),
    Case("sequence too deep", {"frames": [[[1]]]}, "frames[0][0]", "expected an int for int32"),
    Case("string for a sequence", {"frames": "abc"}, "frames", "expected a list"),
    Case("missing field", _without("name"), "name", "missing field"),
    Case("extra field", {"extra": 1}, "extra", "unknown field 'extra'"),
    Case("empty dict", lambda e, files: {}, "id", "missing field"),
    Case("list instead of a dict", lambda e, files: [1, 2], None, "an example must be a dict"),
    Case("None instead of a dict", lambda e, files: None, None, "an example must be a dict"),
]
BEAM_CASES = ["str for int", "NaN for int", "unknown label name", "truncated JPEG", "sequence too shallow",
              "missing field", "list instead of a dict"]


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    text = tmp_path / "notes.txt"
    text.write_text("not an image at all\n" * 10)
    return {"text": str(text)}


def _examples(case: Case, files: dict[str, str], keyed: bool):
    for i in range(NUM_EXAMPLES):
        example = case.bad_example(i, files) if i == BAD_AT else good(i)
        yield (f"key-{i}", example) if keyed else example


def _assert_names_everything(error: EncodeError, case: Case, key: Any) -> None:
    message = str(error)
    assert error.example == key and f"example {key!r}" in message, message
    assert error.field == case.field, message
    assert case.reason in message, message
    if case.field is not None:
        assert f"field {case.field!r}" in message, message
    if case.field is not None and case.field != "extra":
        assert error.feature, f"the error must name the feature: {message}"
        assert error.feature in message


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)
    assert set(BEAM_CASES) <= {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_write_shards_on_a_fresh_path_publishes_nothing(tmp_path, files, case):
    out = tmp_path / "cache"
    with pytest.raises(EncodeError) as raised:
        write_shards(_examples(case, files, keyed=False), str(out), FEATURES,
                     shard_size_bytes=SHARD_SIZE, batch_size=4)
    _assert_names_everything(raised.value, case, BAD_AT)
    assert not out.exists(), f"a failed write on a fresh path must leave nothing: {os.listdir(out)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_write_shards_over_a_cache_keeps_it(tally, tmp_path, files, case):
    out = tmp_path / "cache"
    previous = write_shards((good(i) for i in PREVIOUS), str(out), FEATURES)
    with pytest.raises(EncodeError) as raised:
        write_shards(_examples(case, files, keyed=True), str(out), FEATURES,
                     shard_size_bytes=SHARD_SIZE, batch_size=4)
    _assert_names_everything(raised.value, case, f"key-{BAD_AT}")
    assert read_metadata(str(out)).write_id == previous.write_id
    tally.record("bad example over a cache (write_shards)", PREVIOUS, ids_of(str(out)))
    assert sorted(ids_of(str(out))) == list(PREVIOUS)
    assert verify(str(out)).ok
    assert_clean_cache(str(out))


def test_staging_happened_before_the_bad_example(tmp_path, files, monkeypatch):
    """Guards the corpus: shards were staged (and then removed) before each error."""
    from beam_shards.storage import fs

    created = []
    real_create = fs.create
    monkeypatch.setattr(fs, "create", lambda path: created.append(path) or real_create(path))
    with pytest.raises(EncodeError):
        write_shards(_examples(CASES[0], files, keyed=False), str(tmp_path / "cache"), FEATURES,
                     shard_size_bytes=SHARD_SIZE, batch_size=4)
    assert len(created) >= 2
    assert not any(os.path.exists(path) for path in created)


def test_an_example_larger_than_the_shard_size_gets_a_shard_of_its_own(tmp_path):
    out = tmp_path / "cache"
    examples = [good(i) for i in range(20)]
    examples[7]["blob"] = os.urandom(SHARD_SIZE * 5)
    manifest = write_shards(examples, str(out), FEATURES, shard_size_bytes=SHARD_SIZE, batch_size=4)
    big = [s for s in manifest.shards if s.num_bytes > SHARD_SIZE]
    assert len(big) == 1 and big[0].num_rows == 1, manifest.shards
    assert all(s.num_rows > 0 for s in manifest.shards)
    backend = ArrowBackend.open(str(out))
    assert backend.get_row(7)["blob"] == examples[7]["blob"]
    assert sorted(ids_of(str(out))) == list(range(20))
    assert verify(str(out)).ok
    assert_clean_cache(str(out))


def _spoil_one(case_name: str, files: dict[str, str]):
    case = next(c for c in CASES if c.name == case_name)

    def make(i: int):
        return (f"key-{i}", case.bad_example(i, files) if i == BAD_AT else good(i))

    return make


@pytest.mark.parametrize("case_name", BEAM_CASES)
def test_beam_sink_fails_naming_example_and_field(tally, tmp_path, files, case_name):
    case = next(c for c in CASES if c.name == case_name)
    out = tmp_path / "cache"
    previous = write_shards((good(i) for i in PREVIOUS), str(out), FEATURES)
    with pytest.raises(Exception) as raised:
        with beam.Pipeline(options=options()) as p:
            (p | beam.Create(range(NUM_EXAMPLES)) | beam.Map(_spoil_one(case_name, files))
             | WriteToArrowShards(str(out), FEATURES, shard_size_bytes=SHARD_SIZE, batch_size=4))
    message = str(raised.value)
    assert f"example 'key-{BAD_AT}'" in message, message
    if case.field is not None:
        assert f"field {case.field!r}" in message, message
    assert case.reason in message, message
    assert read_metadata(str(out)).write_id == previous.write_id
    tally.record("bad example over a cache (Beam sink)", PREVIOUS, ids_of(str(out)))
    assert sorted(ids_of(str(out))) == list(PREVIOUS)
    assert not staged_files(str(out)), "a failed bundle must remove what it staged"
    clean_up(str(out))  # what is left: the attempt's emptied staging folders
    assert_clean_cache(str(out))


def test_features_without_columns_are_refused():
    """A batch without columns has no rows: such a cache would silently drop every example."""
    with pytest.raises(FeatureError, match="at least one feature"):
        Features({})
