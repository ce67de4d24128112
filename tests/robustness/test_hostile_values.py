"""Hostile values: each value given both as an example dict and as an Arrow column is stored the same,
or refused by both with an EncodeError naming the field (ENCODE_CASES, and Hypothesis over any value).

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import datetime
import decimal
import os
import re
from collections.abc import Callable

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import (Array, ArrowBackend, ClassLabel, EncodeError, Features, Image, Sequence, Struct, Value,
                         Video, write_shards)

from _hostile import SCALE, cases
from _support import png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- one value, given in an example dict or in an Arrow column ---------------------------------

class Typed:
    """A value whose Arrow column needs `type` (pyarrow cannot infer it, or would infer another)."""

    def __init__(self, value, type: pa.DataType):
        self.value, self.type = value, type


BIG = 2**63 + 1  # an int past int64, not exact as a float64
NAMES = ClassLabel(names=["a", "b"])
TURN = Struct({"role": Value("string"), "content": Value("string")})
# (name, feature, value, accepted): `encode_example` and `encode_batch` must both accept the value,
# storing the same, or both refuse it with an EncodeError naming the field.
ACCEPTED, REFUSED = True, False
ENCODE_CASES = [
    ("float64 past float32's range", Value("float32"), 1e300, REFUSED),
    ("float64 past float32's range, negative", Value("float32"), -1e39, REFUSED),
    ("float past float16's range", Value("float16"), 70000.0, REFUSED),
    ("float16's largest", Value("float16"), 65504.0, ACCEPTED),
    ("float32's largest", Value("float32"), 3.4028235e38, ACCEPTED),
    ("NaN as float32", Value("float32"), float("nan"), ACCEPTED),
    ("NaN as float64", Value("float64"), float("nan"), ACCEPTED),
    ("inf stays inf", Value("float32"), float("inf"), ACCEPTED),
    ("-inf stays -inf", Value("float32"), float("-inf"), ACCEPTED),
    ("int not exact as float32", Value("float32"), 2**24 + 1, REFUSED),
    ("float rounded to float32", Value("float32"), 2.0**24 + 1, ACCEPTED),
    ("large int exact as float32", Value("float32"), 2**30, ACCEPTED),
    ("large int exact as float64", Value("float64"), 2**60, ACCEPTED),
    ("int not exact as float64", Value("float64"), 2**53 + 1, REFUSED),
    ("uint64 not exact as float64", Value("float64"), Typed(BIG, pa.uint64()), REFUSED),
    ("int not exact as float16", Value("float16"), 2049, REFUSED),
    ("int exact as float16", Value("float16"), 3, ACCEPTED),
    ("bool as float", Value("float32"), True, REFUSED),
    ("int8 overflow", Value("int8"), 128, REFUSED),
    ("int8's smallest", Value("int8"), -128, ACCEPTED),
    ("uint64's largest", Value("uint64"), Typed(2**64 - 1, pa.uint64()), ACCEPTED),
    ("negative uint64", Value("uint64"), -1, REFUSED),
    ("uint64 past int64", Value("int64"), Typed(BIG, pa.uint64()), REFUSED),
    ("whole float as int", Value("int64"), 1.0, REFUSED),
    ("bool as int", Value("int64"), True, REFUSED),
    ("int as bool", Value("bool"), 1, REFUSED),
    ("bool", Value("bool"), True, ACCEPTED),
    ("None where required", Value("int64"), None, REFUSED),
    ("None where nullable", Value("int64", nullable=True), None, ACCEPTED),
    ("bytes of invalid UTF-8 as string", Value("string"), b"caf\xe9", REFUSED),
    ("bytes of UTF-8 as string", Value("string"), b"caf\xc3\xa9", ACCEPTED),
    ("empty string", Value("string"), "", ACCEPTED),
    ("int as string", Value("string"), 5, REFUSED),
    ("string as binary", Value("binary"), "text", REFUSED),
    ("empty binary", Value("binary"), b"", ACCEPTED),
    ("class name", NAMES, "b", ACCEPTED),
    ("unknown class name", NAMES, "c", REFUSED),
    ("class id past the classes", NAMES, 2, REFUSED),
    ("negative class id", NAMES, -1, REFUSED),
    ("bool as class id", NAMES, True, REFUSED),
    ("float as class id", NAMES, 1.0, REFUSED),
    ("bytes as class name", NAMES, b"a", REFUSED),
    ("class named by a digit is a name", ClassLabel(names=["1", "0"]), "0", ACCEPTED),
    ("class name without names", ClassLabel(num_classes=3), "1", REFUSED),
    ("last of a trillion classes", ClassLabel(num_classes=10**12), 10**12 - 1, ACCEPTED),
    ("uint64 class id past int64", NAMES, Typed(BIG, pa.uint64()), REFUSED),
    ("None in a fixed array", Array((2,), "float32"), [1.0, None], REFUSED),
    ("None in a variable array", Array((None,), "float32"), [1.0, None], REFUSED),
    ("only None in an array", Array((2,), "float32"), [None, None], REFUSED),
    ("None for a row of an array", Array((None, 2), "float32"), [[1.0, 2.0], None], REFUSED),
    ("float64 past float32 in a fixed array", Array((2,), "float32"), [1e300, 0.0], REFUSED),
    ("float64 past float32 in a variable array", Array((None,), "float32"), [1e300], REFUSED),
    ("float64 past float32 in a 2-D array", Array((None, 2), "float32"), [[1e300, 0.0]], REFUSED),
    ("NaN and inf in an array", Array((2,), "float64"), [float("nan"), float("inf")], ACCEPTED),
    ("int not exact as float32 in an array", Array((2,), "float32"), [2**24 + 1, 0], REFUSED),
    ("large int exact as float32 in an array", Array((2,), "float32"), [2**30, 0], ACCEPTED),
    ("uint64 not exact as float64 in an array", Array((2,), "float64"), Typed([BIG, 1], pa.list_(pa.uint64())),
     REFUSED),
    ("uint64's largest in an array", Array((2,), "uint64"), Typed([2**64 - 1, 0], pa.list_(pa.uint64())), ACCEPTED),
    ("int8 overflow in an array", Array((2,), "int8"), [1, 300], REFUSED),
    ("whole floats as ints in an array", Array((2,), "int8"), [1.0, 2.0], REFUSED),
    ("negative uint8 in an array", Array((2,), "uint8"), [-1, 0], REFUSED),
    ("bools as ints in an array", Array((2,), "int8"), [True, False], ACCEPTED),
    ("ints as bools in an array", Array((2,), "bool"), [1, 0], REFUSED),
    ("strings in an array", Array((2,), "float32"), ["a", "b"], REFUSED),
    ("a string as an array", Array((2,), "float32"), "ab", REFUSED),
    ("empty variable array", Array((None,), "float32"), [], ACCEPTED),
    ("empty variable 2-D array", Array((None, 2), "bool"), [], ACCEPTED),
    ("a row of no numbers in a variable 2-D array", Array((None, 2), "float32"), [[]], REFUSED),
    ("too long for its shape", Array((2,), "float32"), [1.0, 2.0, 3.0], REFUSED),
    ("nested lists of a 2-D shape", Array((2, 2), "float32"), [[1.0, 2.0], [3.0, 4.0]], ACCEPTED),
    ("nested lists of a 3-D shape", Array((None, 2, 3), "int16"), [[[1, 2, 3], [4, 5, 6]]], ACCEPTED),
    ("flat list for a 2-D shape", Array((2, 2), "float32"), [1.0, 2.0, 3.0, 4.0], REFUSED),
    ("ragged rows for a 2-D shape", Array((2, 2), "float32"), [[1.0, 2.0], [3.0]], REFUSED),
    ("ragged rows for a variable 2-D shape", Array((None, 2), "float32"), [[1.0, 2.0], [3.0]], REFUSED),
    ("nested lists for a 1-D shape", Array((4,), "float32"), [[1.0, 2.0], [3.0, 4.0]], REFUSED),
    ("None for a nullable array", Array((2,), "float32", nullable=True), None, ACCEPTED),
    ("None in a sequence", Sequence(Value("int64")), [1, None], REFUSED),
    ("None in a sequence of nullables", Sequence(Value("int64", nullable=True)), [1, None], ACCEPTED),
    ("whole float in a sequence of ints", Sequence(Value("int64")), [1.0], REFUSED),
    ("bool in a sequence of ints", Sequence(Value("int64")), [True], REFUSED),
    ("int in a sequence of bools", Sequence(Value("bool")), [1], REFUSED),
    ("float64 past float32 in a sequence", Sequence(Value("float32")), [1e300], REFUSED),
    ("float past float16 in a sequence", Sequence(Value("float16")), [70000.0], REFUSED),
    ("invalid UTF-8 in a sequence of strings", Sequence(Value("string")), [b"\xff"], REFUSED),
    ("class names in a sequence", Sequence(NAMES), ["a", "b"], ACCEPTED),
    ("unknown class name in a sequence", Sequence(NAMES), ["a", "c"], REFUSED),
    ("class id past the classes in a sequence", Sequence(NAMES), [0, 2], REFUSED),
    ("None in an array in a sequence", Sequence(Array((2,), "float32")), [[1.0, None]], REFUSED),
    ("arrays in a sequence", Sequence(Array((2,), "float32")), [[1.0, 2.0]], ACCEPTED),
    ("None in a sequence of sequences", Sequence(Sequence(Value("int64"))), [[1], None], REFUSED),
    ("None in a sequence of nullable sequences", Sequence(Sequence(Value("int64"), nullable=True)), [[1], None],
     ACCEPTED),
    ("empty video in a sequence", Sequence(Video()), [b""], REFUSED),
    ("a string as a sequence", Sequence(Value("int64")), "ab", REFUSED),
    ("empty sequence", Sequence(Value("int64")), [], ACCEPTED),
    ("empty image bytes", Image(), b"", REFUSED),
    ("empty image path", Image(), "", REFUSED),
    ("bytes that are no image", Image(), b"not an image", REFUSED),
    ("a png", Image(), png(1), ACCEPTED),
    ("a png cut", Image(), png(1)[:-20], REFUSED),
    ("no image", Image(), None, ACCEPTED),
    ("no image where required", Image(nullable=False), None, REFUSED),
    ("empty video", Video(), b"", REFUSED),
    ("video bytes", Video(), b"x", ACCEPTED),
    ("a chat turn", TURN, {"role": "user", "content": "hi"}, ACCEPTED),
    ("a chat", Sequence(TURN), [{"role": "user", "content": "hi"}, {"role": "bot", "content": ""}], ACCEPTED),
    ("an empty chat", Sequence(TURN), [], ACCEPTED),
    ("a turn without its content", TURN, {"role": "user"}, REFUSED),
    ("a turn with a field more", TURN, {"role": "user", "content": "hi", "lang": "en"}, REFUSED),
    ("a turn with content None", TURN, {"role": "user", "content": None}, REFUSED),
    ("a number as a role", TURN, {"role": 1, "content": "hi"}, REFUSED),
    ("a list as a turn", TURN, ["user", "hi"], REFUSED),
    ("a string as a turn", TURN, "user: hi", REFUSED),
    ("a turn where a chat is wanted", Sequence(TURN), {"role": "user", "content": "hi"}, REFUSED),
    ("None for a turn in a chat", Sequence(TURN), [None], REFUSED),
    ("None for a nullable turn in a chat", Sequence(Struct(TURN.fields, nullable=True)), [None], ACCEPTED),
    ("a nullable field left out", Struct({"a": Value("int64"), "b": Value("int64", nullable=True)}), {"a": 1},
     ACCEPTED),
    ("float64 past float32 deep in a struct", Struct({"s": Struct({"v": Sequence(Value("float32"))})}),
     {"s": {"v": [1.0, 1e300]}}, REFUSED),
    ("an unknown class deep in a struct", Struct({"s": Struct({"c": NAMES})}), {"s": {"c": "z"}}, REFUSED),
    ("a class name deep in a struct", Struct({"s": Struct({"c": NAMES})}), {"s": {"c": "b"}}, ACCEPTED),
    ("lists of lists", Sequence(Sequence(Value("int8"))), [[1, 2], [], [3]], ACCEPTED),
    ("an int8 overflow in lists of lists", Sequence(Sequence(Value("int8"))), [[1], [300]], REFUSED),
    ("structs of lists of structs", Struct({"l": Sequence(Struct({"x": Value("string")}))}), {"l": [{"x": "a"}]},
     ACCEPTED),
    ("an array in a struct", Struct({"a": Array((2,), "float32")}), {"a": [1.0, 2.0]}, ACCEPTED),
    ("a short array in a struct", Struct({"a": Array((2,), "float32")}), {"a": [1.0]}, REFUSED),
    ("a date", Value("date32"), datetime.date(2026, 11, 25), ACCEPTED),
    ("a string as a date", Value("date32"), "2026-11-25", REFUSED),
    ("a time zone's timestamp", Value("timestamp[us, tz=UTC]"),
     datetime.datetime(2026, 11, 25, 12, tzinfo=datetime.timezone.utc), ACCEPTED),
    ("an int as a timestamp", Value("timestamp[s]"), 1_700_000_000, REFUSED),
    ("a duration", Value("duration[ms]"), datetime.timedelta(seconds=1.5), ACCEPTED),
    ("a decimal", Value("decimal128(5, 2)"), decimal.Decimal("123.45"), ACCEPTED),
    ("a decimal past its precision", Value("decimal128(5, 2)"), decimal.Decimal("12345.6"), REFUSED),
    ("a float as a decimal", Value("decimal128(5, 2)"), 1.5, REFUSED),
    ("large_string", Value("large_string"), "text", ACCEPTED),
    ("invalid UTF-8 as large_string", Value("large_string"), b"\xff", REFUSED),
]


def outcome(store: Callable[[], pa.Table]) -> tuple[bool, str]:
    """(True, the column `x` that `store()` returns, as text); (False, the field) when it raises EncodeError."""
    try:
        table = store()
    except EncodeError as error:
        return False, re.split(r"[.[]", error.field)[0]
    # repr keeps NaN equal to NaN and tells 1 from 1.0.
    return True, repr(table.column("x").to_pylist())


def written(path: str, features: Features, example) -> tuple[bool, str]:
    """The `outcome` of writing `example` (a dict or a table) at `path` and reading it back."""
    def store() -> pa.Table:
        write_shards([example], path, features)
        return ArrowBackend.open(path).slice(0, 1)

    result = outcome(store)
    assert result[0] or not os.path.exists(os.path.join(path, "_metadata.json")), "a refused write published"
    return result


@pytest.mark.parametrize("feature, value, accepted", cases(ENCODE_CASES))
def test_an_example_and_an_arrow_column_follow_the_same_rules(tmp_path, feature, value, accepted):
    features = Features({"x": feature})
    column_type = value.type if isinstance(value, Typed) else None
    value = value.value if isinstance(value, Typed) else value
    by_dict = written(str(tmp_path / "dict"), features, {"x": value})
    by_column = written(str(tmp_path / "column"), features, pa.table({"x": pa.array([value], type=column_type)}))
    assert by_dict == by_column, f"an example gives {by_dict}, an Arrow column {by_column}"
    assert by_dict[0] == accepted and (accepted or by_dict[1] == "x"), by_dict


# (name, feature, a good chunk, a chunk whose second row is bad): the error names row 3 of the table.
CHUNKED_CASES = [
    ("sequence item", Sequence(Value("float32")), [[1.0], [2.0, 3.0]], [[1.0], [4.0, 1e300]]),
    ("row of a 2-D array", Array((None, 2), "float32"), [[[1.0, 2.0]], []], [[[1.0, 2.0]], [[1.0, 2.0], [3.0, 1e300]]]),
    ("nullable array", Array((2,), "float32", nullable=True), [[1.0, 2.0], None], [None, [1.0, 1e300]]),
    ("nullable float16", Value("float16", nullable=True), [1.0, None], [None, 1e6]),
]


@pytest.mark.parametrize("feature, good, bad", cases(CHUNKED_CASES))
def test_a_bad_value_in_a_later_chunk_or_a_slice_names_its_row(feature, good, bad):
    features = Features({"x": feature})
    table = pa.Table.from_batches([pa.record_batch({"x": pa.array(good)}), pa.record_batch({"x": pa.array(bad)})])
    for view, row in ((table, 3), (table.slice(1), 2), (table.slice(2).combine_chunks(), 1)):
        with pytest.raises(EncodeError, match=f"row {row} of batch 'b', field 'x"):
            features.encode_batch(view, "b")
    twice = pa.Table.from_batches([pa.record_batch({"x": pa.array(good)})] * 2).slice(1)
    assert features.encode_batch(twice).column("x").to_pylist() == (good * 2)[1:]


# A row of a struct column whose record is null: its fields are not checked (they read as null).
def test_a_null_record_leaves_its_required_fields_unchecked():
    features = Features({"x": Struct(TURN.fields, nullable=True)})
    column = pa.array([{"role": "user", "content": "hi"}, None], pa.struct([("role", pa.string()), ("content", pa.string())]))
    assert features.encode_batch(pa.table({"x": column})).column("x").to_pylist() == [
        {"role": "user", "content": "hi"}, None]
    with pytest.raises(EncodeError, match=r"row 1 of batch 'b', field 'x.content'"):
        bad = pa.array([None, {"role": "user", "content": None}], column.type)
        features.encode_batch(pa.table({"x": bad}), "b")


NUMERIC_DTYPES = ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "float32", "float64"]
ANY_SCALAR = (st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats()
              | st.sampled_from([127, 128, 255, 2**24 + 1, 2**53 + 1, 2**63, 2**64 - 1, 1e300, -1e39, 65520.0, 0.5])
              | st.text(max_size=3) | st.binary(max_size=3))
ANY_VALUE = st.recursive(ANY_SCALAR, lambda items: st.lists(items, max_size=3)
                         | st.dictionaries(st.sampled_from(["a", "b"]), items, max_size=2), max_leaves=6)
ANY_LEAF_FEATURE = (
    st.builds(Value, st.sampled_from(NUMERIC_DTYPES + ["string", "binary"]), nullable=st.booleans())
    | st.builds(ClassLabel, names=st.just(["a", "b", "c"]), nullable=st.booleans())
    | st.builds(ClassLabel, num_classes=st.integers(1, 5), nullable=st.booleans())
    | st.builds(Array, st.sampled_from([(2,), (None,), (2, 2), (None, 2), (1, 2, 1)]), st.sampled_from(NUMERIC_DTYPES),
                nullable=st.booleans()))
ANY_FEATURE = st.recursive(ANY_LEAF_FEATURE, lambda items: st.builds(Sequence, items, nullable=st.booleans())
                           | st.builds(Struct, st.fixed_dictionaries({"a": items}), nullable=st.booleans()),
                           max_leaves=3)


@pytest.mark.timeout(600)
@settings(max_examples=300 * SCALE, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(feature=ANY_FEATURE, value=ANY_VALUE)
def test_any_value_is_encoded_alike_from_an_example_and_from_an_arrow_column(feature, value):
    features = Features({"x": feature})
    try:
        column = pa.array([value])
        if repr(column.to_pylist()) != repr([value]):
            return  # pyarrow changed it to make a column, such as [0.5, False] into [0.5, 0.0]
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return  # no Arrow column holds it, such as [1, "a"] (or ["", b"\x80"], invalid UTF-8 in a string column)
    by_dict = outcome(lambda: features.build_batch([features.encode_example({"x": value})]))
    by_column = outcome(lambda: features.encode_batch(pa.table({"x": column})))
    assert by_dict == by_column
    assert by_dict[0] or by_dict[1] == "x"


def test_an_invalid_arrow_column_is_refused_before_it_is_read(tmp_path):
    offsets_going_back = pa.ListArray.from_arrays(pa.array([0, 3, 1], pa.int32()), pa.array([1, 2, 3], pa.int64()))
    features = Features({"x": Sequence(Value("int64"))})
    with pytest.raises(EncodeError, match="field 'x'.*not a valid Arrow array"):
        write_shards([pa.table({"x": offsets_going_back})], str(tmp_path / "c"), features)
