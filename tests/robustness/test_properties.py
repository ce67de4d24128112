"""Property-based round trips: random features and examples come back as they went in.

Hypothesis draws a Features of every kind (Value of each dtype, ClassLabel by name or
count, Image, Video, Array of fixed or variable first dimension, Sequences and Structs
nested in each other up to three deep, nullable or not) and examples for it (NaN and infinities, empty
strings and lists, nulls where allowed, UTF-8 bytes for strings, Python lists for
arrays). They are written by `write_shards` (with small, random shard and batch
sizes) and by `WriteToArrowShards`, and read back by `ArrowBackend` (Arrow values),
`ShardedDataset` and `ReadFromArrowShards` (decoded values): each must equal what
the examples say, row for row.

The profile keeps the suite fast: about 40 examples for the local writer and 3 for
the Beam round trip (each runs two pipelines). Set BEAM_SHARDS_HYPOTHESIS_SCALE=10
for a longer search.
"""

from __future__ import annotations

import datetime
import math
import os
import tempfile
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from beam_shards import (Array, ArrowBackend, Audio, ClassLabel, Features, Image, ReadFromArrowShards, Sequence,
                         ShardedDataset, Struct, Value, Video, WriteToArrowShards, read_metadata, verify, write_shards)
from beam_shards.features import VALUE_DTYPES

from _support import jpeg, options, png

ROW = "row id"  # the names drawn below never hold a space
SCALE = int(os.environ.get("BEAM_SHARDS_HYPOTHESIS_SCALE", "1"))
settings.register_profile("beam_shards_round_trip", max_examples=40 * SCALE, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROUND_TRIP = settings.get_profile("beam_shards_round_trip")
NUMERIC = [d for d in VALUE_DTYPES if d not in ("string", "binary")]
IMAGES = [png(0), jpeg(1), png(2, mode="RGBA"), png(3, size=3, mode="L")]
NAMES = st.text("abcdefghijklmnopqrstuvwxyzé_0123456789", min_size=1, max_size=6)


def _class_label(names: list[str] | None, num_classes: int, nullable: bool) -> ClassLabel:
    return ClassLabel(names=names, nullable=nullable) if names else ClassLabel(num_classes=num_classes, nullable=nullable)


def _shapes() -> st.SearchStrategy[tuple]:
    first = st.one_of(st.none(), st.integers(1, 3))
    return st.tuples(first, st.lists(st.integers(1, 3), max_size=2)).map(lambda t: (t[0], *t[1]))


# Dates, times and decimals, each with the values it takes (what Python gives back for them).
TEMPORAL = {
    "date32": st.dates(),
    "timestamp[us]": st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
    "duration[us]": st.timedeltas(min_value=datetime.timedelta(days=-10**6), max_value=datetime.timedelta(days=10**6)),
    "decimal128(12, 3)": st.decimals(min_value=-10**8, max_value=10**8, places=3, allow_nan=False),
}


def leaf_features() -> st.SearchStrategy:
    nullable = st.booleans()
    return st.one_of(
        st.builds(Value, st.sampled_from(VALUE_DTYPES + tuple(TEMPORAL)), nullable=nullable),
        st.builds(_class_label, st.one_of(st.none(), st.lists(NAMES, min_size=1, max_size=4, unique=True)),
                  st.integers(1, 5), nullable),
        st.builds(Image, nullable=nullable),
        st.builds(Video, nullable=nullable),
        st.builds(Audio, st.sampled_from([None, 16000]), nullable=nullable),
        st.builds(Array, _shapes(), st.sampled_from(NUMERIC), nullable=nullable),
    )


def feature_trees(depth: int = 3) -> st.SearchStrategy:
    if depth == 0:
        return leaf_features()
    inner = st.deferred(lambda: feature_trees(depth - 1))
    return st.one_of(leaf_features(), st.builds(Sequence, inner, nullable=st.booleans()),
                     st.builds(Struct, st.dictionaries(NAMES, inner, min_size=1, max_size=3), nullable=st.booleans()))


def features_strategy() -> st.SearchStrategy[Features]:
    fields = st.dictionaries(NAMES, feature_trees(), min_size=1, max_size=4)
    return fields.map(lambda f: Features({ROW: Value("int64"), **f}))


def _elements(dtype: str, below: int | None = None) -> st.SearchStrategy:
    if dtype == "bool":
        return st.booleans()
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return st.integers(int(info.min), min(int(info.max), below - 1) if below else int(info.max))
    return st.floats(width=np.dtype(dtype).itemsize * 8)


def values(feature) -> st.SearchStrategy:
    """Input values for `feature`: what a user may give, None included when it is nullable."""
    if isinstance(feature, Value):
        if feature.dtype == "string":
            base = st.one_of(st.text(max_size=12), st.text(max_size=12).map(str.encode))
        elif feature.dtype == "binary":
            base = st.binary(max_size=24)
        elif feature.dtype in TEMPORAL:
            base = TEMPORAL[feature.dtype]
        else:
            base = _elements(feature.dtype)
    elif isinstance(feature, ClassLabel):
        ids = st.integers(0, feature.num_classes - 1)
        base = st.one_of(ids, st.sampled_from(feature.names)) if feature.names else ids
    elif isinstance(feature, Image):
        base = st.sampled_from(IMAGES)
    elif isinstance(feature, (Video, Audio)):
        base = st.binary(min_size=1, max_size=24)
    elif isinstance(feature, Array):
        shape = st.integers(0, 3).map(lambda n: (n, *feature.shape[1:])) if feature.variable else st.just(feature.shape)
        arrays = hnp.arrays(np.dtype(feature.dtype), shape, elements=_elements(feature.dtype))
        # numpy makes float64 of a list mixing ints below and above 2**63: uint64 lists stay below.
        listed = hnp.arrays(np.dtype(feature.dtype), shape, elements=_elements(feature.dtype, below=2 ** 63))
        base = st.one_of(arrays, listed.map(lambda a: a.tolist()))
    elif isinstance(feature, Struct):
        base = st.fixed_dictionaries({name: values(field) for name, field in feature.fields.items()})
    else:
        base = st.lists(values(feature.feature), max_size=3)
    return st.one_of(st.none(), base) if feature.nullable else base


def examples_strategy(features: Features, max_size: int) -> st.SearchStrategy[list[dict]]:
    fields = {name: values(feature) for name, feature in features.items() if name != ROW}
    rows = st.lists(st.fixed_dictionaries(fields), max_size=max_size)
    return rows.map(lambda examples: [{ROW: i, **example} for i, example in enumerate(examples)])


def stored(feature, value: Any) -> Any:
    """`value` as Arrow holds it (what `to_pylist` gives back)."""
    if value is None:
        return None
    if isinstance(feature, Value) and feature.dtype == "string" and isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(feature, ClassLabel):
        return feature.names.index(value) if isinstance(value, str) else value
    if isinstance(feature, Array):
        array = np.asarray(value, dtype=feature.dtype).reshape((-1, *feature.shape[1:]))
        if not feature.variable:
            return array.reshape(-1).tolist()
        return array.reshape(len(array), math.prod(feature.shape[1:])).tolist() if len(feature.shape) > 1 else array.tolist()
    if isinstance(feature, Sequence):
        return [stored(feature.feature, item) for item in value]
    if isinstance(feature, Struct):
        return {name: stored(field, value[name]) for name, field in feature.fields.items()}
    return value


def decoded(feature, value: Any) -> Any:
    """`value` as `ShardedDataset` (image_mode="bytes") and `ReadFromArrowShards` give it back."""
    if value is None:
        return None
    if isinstance(feature, Array):
        return np.asarray(value, dtype=feature.dtype).reshape((-1, *feature.shape[1:]))
    if isinstance(feature, Sequence):
        return [decoded(feature.feature, item) for item in value]
    if isinstance(feature, Struct):
        return {name: decoded(field, value[name]) for name, field in feature.fields.items()}
    return stored(feature, value)


def same(expected: Any, got: Any) -> bool:
    """Equality that takes NaN as equal to NaN, checks numpy dtypes and shapes, and keeps bool apart from int."""
    if isinstance(expected, np.ndarray):
        return (isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
                and np.array_equal(got, expected, equal_nan=expected.dtype.kind == "f"))
    if isinstance(expected, float):
        return isinstance(got, (float, np.floating)) and (got == expected or math.isnan(expected) and math.isnan(got))
    if isinstance(expected, (list, tuple)):
        return isinstance(got, list) and len(got) == len(expected) and all(map(same, expected, got))
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(same(v, got[k]) for k, v in expected.items())
    if isinstance(expected, bool) or isinstance(got, (bool, np.bool_)):
        return isinstance(got, (bool, np.bool_)) and isinstance(expected, bool) and bool(got) == expected
    return type(got) is type(expected) and got == expected


def _expected(features: Features, examples: list[dict], convert) -> list[dict]:
    return [{name: convert(feature, example[name]) for name, feature in features.items()} for example in examples]


def _assert_rows(expected: list[dict], got: list[dict], reader: str) -> None:
    assert len(got) == len(expected), f"{reader}: {len(got)} rows, expected {len(expected)}"
    for want, have in zip(expected, got):
        assert same(want, have), f"{reader}, row {want[ROW]}:\n expected {want!r}\n got      {have!r}"


def _check_local_readers(path: str, features: Features, examples: list[dict], permutation: list[int]) -> None:
    """ArrowBackend and ShardedDataset over the cache at `path`, whose rows are `examples` in order."""
    as_stored = _expected(features, examples, stored)
    as_decoded = _expected(features, examples, decoded)
    backend = ArrowBackend.open(path)
    assert backend.num_rows == len(examples)
    _assert_rows(as_stored, backend.slice(0, backend.num_rows).to_pylist(), "ArrowBackend.slice")
    _assert_rows([as_stored[i] for i in permutation], backend.take(permutation).to_pylist(), "ArrowBackend.take")
    if examples:
        # get_row gives what ShardedDataset(image_mode="bytes") gives: Array features as numpy.
        _assert_rows(as_decoded[-1:], [backend.get_row(-1)], "ArrowBackend.get_row")
    dataset = ShardedDataset(path, image_mode="bytes")
    _assert_rows(as_decoded, list(dataset), "ShardedDataset iteration")
    _assert_rows([as_decoded[i] for i in permutation], dataset[permutation], "ShardedDataset[list]")
    report = verify(path)
    assert report.ok, report.problems


def _row_ids(path: str) -> list[int]:
    backend = ArrowBackend.open(path)
    return backend.slice(0, backend.num_rows).column(ROW).to_pylist()


@settings(ROUND_TRIP)
@given(data=st.data(), features=features_strategy(), shard_size=st.integers(150, 6000), batch_size=st.integers(1, 5))
def test_write_shards_round_trip(tally, data, features, shard_size, batch_size):
    examples = data.draw(examples_strategy(features, max_size=12), label="examples")
    permutation = data.draw(st.permutations(range(len(examples))), label="permutation")
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "cache")
        manifest = write_shards(examples, path, features, shard_size_bytes=shard_size, batch_size=batch_size)
        assert manifest.num_rows == len(examples) and all(s.num_rows > 0 for s in manifest.shards)
        assert read_metadata(path).features == features
        tally.record("property round trip (write_shards)", range(len(examples)), _row_ids(path))
        _check_local_readers(path, features, examples, permutation)


def _matches(expected: list[dict]):
    def check(rows: list[dict]) -> None:
        _assert_rows(expected, sorted(rows, key=lambda row: row[ROW]), "ReadFromArrowShards")

    return check


@settings(ROUND_TRIP, max_examples=3 * SCALE)
@given(data=st.data(), features=features_strategy())
def test_sink_and_source_round_trip(tally, data, features):
    examples = data.draw(examples_strategy(features, max_size=8), label="examples")
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "cache")
        with beam.Pipeline(options=options()) as p:
            (p | beam.Create(examples, reshuffle=False)
             | WriteToArrowShards(path, features, shard_size_bytes=400, batch_size=2, allow_empty=True))
        row_ids = _row_ids(path)
        tally.record("property round trip (WriteToArrowShards)", range(len(examples)), row_ids)
        assert sorted(row_ids) == list(range(len(examples))), "every example exactly once"
        _check_local_readers(path, features, [examples[r] for r in row_ids], list(range(len(examples)))[::-1])
        with beam.Pipeline(options=options()) as p:
            assert_that(p | ReadFromArrowShards(path), _matches(_expected(features, examples, decoded)))
