"""Each rule of inference over every row: what CSV cells, Arrow columns and JSON values count as,
how their kinds widen to features (as pandas and Hugging Face datasets read the same files), null
tokens, labels, images, depth, and the errors."""

from __future__ import annotations

import doctest
import importlib
import io
import json
import pkgutil

import pandas as pd
import pyarrow as pa
import pyarrow.json as pajson
import pytest

import beam_shards.inference
from beam_shards import ClassLabel, FeatureError, Features, Image, Json, Sequence, Struct, Value
from beam_shards.inference import (NA_VALUES, Kinds, NullTokens, features_of, merge, merge_all, summarize_arrow,
                                   summarize_table, summarize_text, summarize_values)

S = Value("string", nullable=True)


def csv_features(columns: dict[str, list], batch: int = 100, **options):
    """The features and widenings of CSV cells (None a null), summarized `batch` rows at a time."""
    rows = len(next(iter(columns.values())))
    summaries = [summarize_table(pa.table({name: pa.array(cells[start:start + batch], pa.string())
                                           for name, cells in columns.items()}), cells=True,
                                 label_columns=[options["label_column"]] if "label_column" in options else (),
                                 origin=(start,))
                 for start in range(0, rows, batch)]
    return features_of(merge_all(summaries), **options)


def jsonl_features(lines: list[dict], batch: int = 100, **options):
    """The features of JSON lines read by pyarrow's JSON reader, `batch` lines at a time."""
    summaries = []
    for start in range(0, len(lines), batch):
        text = "".join(json.dumps(line) + "\n" for line in lines[start:start + batch]).encode()
        summaries.append(summarize_table(pajson.read_json(io.BytesIO(text)), origin=(start,)))
    return features_of(merge_all(summaries), **options)


def test_the_default_null_tokens_are_pandas():
    from pandas._libs.parsers import STR_NA_VALUES

    assert set(NA_VALUES) == STR_NA_VALUES and len(NA_VALUES) == len(STR_NA_VALUES)


def test_na_values_replace_the_defaults_and_per_column_tokens_replace_them_for_that_column():
    assert NullTokens.parse(None).tokens_for("x") == list(NA_VALUES)
    assert NullTokens.parse([]).tokens_for("x") == list(NA_VALUES)
    tokens = NullTokens.parse(["-", "?", "price=", "price=n/a", "note=a=b"])
    assert tokens.tokens_for("x") == ["-", "?"]
    assert tokens.tokens_for("price") == ["", "n/a"]
    assert tokens.tokens_for("note") == ["a=b"]
    only_columns = NullTokens.parse(["price=-"])
    assert only_columns.tokens_for("other") == list(NA_VALUES) and only_columns.tokens_for("price") == ["-"]
    with pytest.raises(ValueError, match=r"--na_values '=x': no column name"):
        NullTokens.parse(["=x"])


def test_na_cells_are_null_and_a_penguins_column_is_a_nullable_number():
    """penguins.csv (R) writes 'NA' for missing values: pandas and HF read them as null."""
    tokens = NullTokens.parse(None)
    cells = pa.array(["39.1", "NA", "40.3", "", "36.7"])
    nulled = tokens.apply("bill_length_mm", cells)
    assert nulled.to_pylist() == ["39.1", None, "40.3", None, "36.7"]
    features, widened = features_of(summarize_table(pa.table({"bill_length_mm": nulled}), cells=True))
    assert features == Features({"bill_length_mm": Value("float64", nullable=True)}) and widened == []
    assert NullTokens.parse(["x=NA"]).apply("y", pa.array(["NA"])).to_pylist() == [None]
    assert NullTokens.parse(["x=-"]).apply("x", pa.array(["NA", "-"])).to_pylist() == ["NA", None]


def test_a_late_float_widens_an_int_column_to_float64():
    """cars.jsonl's integer column turns float at line 195 (HF: float64)."""
    cells = [str(n) for n in range(194)] + ["16.5"] + [str(n) for n in range(10)]
    features, widened = csv_features({"mpg": cells})
    assert features["mpg"] == Value("float64", nullable=True)
    assert widened == ["mpg: ints and floats -> float64"]
    features, widened = jsonl_features([{"mpg": n} for n in range(194)] + [{"mpg": 16.5}])
    assert features["mpg"] == Value("float64", nullable=True) and widened == ["mpg: ints and floats -> float64"]


def test_codes_like_0E0_among_text_stay_text():
    """airports.csv's code `0E0` is a float only to a reader that looks at it alone (HF: string)."""
    features, widened = csv_features({"code": ["ABC", "0E0", "XYZ"]}, batch=1)
    assert features["code"] == S and widened == ["code: floats and text -> string"]
    assert csv_features({"code": ["0E0", "1e5"]})[0]["code"] == Value("float64", nullable=True)


@pytest.mark.parametrize("cells, dtype, widened", [
    (["2014-01-01", "2014-01-02"], "date32", []),
    (["2014-01-01 10:00", "2014-01-02T11:30:15.25"], "timestamp[us]", []),
    (["2014-01-01", "2014-01-02T11:30:00"], "timestamp[us]", ["t: dates and datetimes -> timestamp[us]"]),
    (["2014-01-01T10:00:00Z", "2014-01-02T11:30:00+02:00", "2014-01-03 00:00-0130"], "timestamp[us, tz=UTC]", []),
    (["2014-01-01T10:00:00Z", "2014-01-02T11:30:00"], "string", ["t: datetimes -> string"]),
    (["2014-01-01", "2014-02-30"], "string", ["t: dates and text -> string"]),
    (["2014-01-01", "soon"], "string", ["t: dates and text -> string"]),
], ids=["dates", "datetimes", "dates and datetimes", "zoned", "zoned and naive", "no such day", "dates and text"])
def test_iso_dates_and_datetimes(cells, dtype, widened):
    features, found = csv_features({"t": cells})
    assert features["t"] == Value(dtype, nullable=True)
    assert found == widened or dtype == "string" and found[0].endswith("-> string")


def test_a_date_counts_only_if_arrow_can_store_it():
    kinds = summarize_text(pa.array(["2020-02-29", "2021-02-29", "2020-13-01", "2020-01-01T24:00", "2020-01-01"]))
    assert (kinds.dates, kinds.datetimes, kinds.strings) == (2, 0, 3)


def test_pandas_reads_the_same_csv_columns_as_the_same_kinds():
    columns = {
        "ints": ["1", " 2", "+3", "007", "-4 "], "floats": ["1", "2.5", ".5", "5.", "1e5"],
        "infinities": ["inf", "-Infinity", "INF", "1", "2"], "bools": ["True", "false", "TRUE", "tRuE", "False"],
        "bools_and_ints": ["True", "1", "0", "false", "2"], "codes": ["0E0", "ABC", "1", "2", "3"],
        "text": ["a", "b", "c", "d", "e"], "hex": ["0x10", "1", "2", "3", "4"], "nan": ["nan", "1", "2", "3", "4"],
        "uint64": ["18446744073709551615", "1", "2", "3", "4"],
    }
    text = "\n".join(",".join(row) for row in [list(columns), *zip(*columns.values())])
    pandas = pd.read_csv(io.StringIO(text), keep_default_na=False)
    ours, _ = csv_features(columns)
    as_pandas = {"int64": "int64", "uint64": "uint64", "float64": "float64", "bool": "bool", "string": "str"}
    for name in columns:
        assert as_pandas[ours[name].dtype] == str(pandas[name].dtype).replace("object", "str"), name


@pytest.mark.parametrize("cells, dtype, widened", [
    (["1", "9223372036854775807", "-9223372036854775808"], "int64", []),
    (["1", "9223372036854775808", "18446744073709551615"], "uint64", ["n: ints past int64 -> uint64"]),
    (["-1", "9223372036854775808"], "float64", ["n: ints beyond 64 bits -> float64"]),
    (["1", "18446744073709551616"], "float64", ["n: ints beyond 64 bits -> float64"]),
    (["-0", "9223372036854775808"], "uint64", ["n: ints past int64 -> uint64"]),
])
def test_ints_beyond_int64(cells, dtype, widened):
    assert csv_features({"n": cells}) == (Features({"n": Value(dtype, nullable=True)}), widened)
    values = [int(cell) for cell in cells]
    assert features_of(summarize_table([{"n": value} for value in values])) == csv_features({"n": cells})


def test_bools_and_numbers_are_text_as_pandas_reads_them_and_json_scalars_widen_alike():
    assert csv_features({"b": ["true", "1"]}) == (Features({"b": S}), ["b: bools and ints -> string"])
    features, widened = features_of(summarize_table([{"b": True}, {"b": 2}, {"b": "x"}]))
    assert features["b"] == S and widened == ["b: bools and ints and strings -> string"]


def test_a_key_missing_from_some_rows_is_nullable_and_counted_absent():
    rows = [{"a": 1, "m": {"x": 1}}, {"a": 2, "m": {"y": "s"}}, {"m": {"x": 3}}]
    summary = summarize_table(rows)
    assert summary.fields["a"].absent == 1 and summary.fields["m"].fields["y"].absent == 2
    features, widened = features_of(summary)
    assert features == Features({"a": Value("int64", nullable=True),
                                 "m": Struct({"x": Value("int64", nullable=True), "y": S}, nullable=True)})
    late = merge(summarize_table(rows[:1], origin=(0,)), summarize_table([{"a": 3, "late": True}], origin=(1,)))
    assert late.fields["late"].absent == 1 and list(features_of(late)[0]) == ["a", "m", "late"]


@pytest.mark.parametrize("rows, widened", [
    ([{"meta": {"a": 1}}, {"meta": [1]}], "meta: lists and objects -> Json"),
    ([{"meta": [1]}, {"meta": 2}], "meta: ints and lists -> Json"),
    ([{"meta": {}}, {"meta": {}}], "meta: only empty objects -> Json"),
])
def test_values_of_different_shapes_are_json(rows, widened):
    assert features_of(summarize_table(rows)) == (Features({"meta": Json()}), [widened])


def test_json_cells_in_csv_are_lists_and_objects_and_other_shapes_there_are_text():
    features, widened = csv_features({"boxes": ["[1, 2]", "[3.5]", None], "meta": ['{"a": 1}', "[1]", "x"],
                                      "broken": ["[1, 2", "[3]", "[4]"]})
    assert features["boxes"] == Sequence(Value("float64", nullable=True), nullable=True)
    assert features["meta"] == S and features["broken"] == S
    assert widened == ["boxes[]: ints and floats -> float64", "meta: text and lists and objects -> string",
                       "broken: text and lists -> string"]


def test_arrow_columns_from_the_json_reader():
    table = pajson.read_json(io.BytesIO(b'{"a": 1, "s": "x.png", "l": [[1]], "o": {"k": true}, "n": null}\n'
                                        b'{"a": 2, "s": "y.PNG", "l": [], "o": null, "n": null}\n'))
    features, widened = features_of(summarize_table(table))
    assert features == Features({"a": Value("int64", nullable=True), "s": S,
                                 "l": Sequence(Sequence(Value("int64", nullable=True), nullable=True), nullable=True),
                                 "o": Struct({"k": Value("bool", nullable=True)}, nullable=True), "n": S})
    assert features_of(summarize_table(table), image_columns=["s"])[0]["s"] == Image(nullable=False)
    stamps = summarize_arrow(pa.array([0, None], pa.timestamp("s", tz="UTC")))
    assert (stamps.zoned, stamps.nulls) == (1, 1)
    with pytest.raises(FeatureError, match=r"'d' holds Arrow type duration\[s\]"):
        summarize_arrow(pa.array([1], pa.duration("s")), path="d")


def test_summaries_of_arrow_and_of_python_values_agree():
    values = [{"a": 1, "b": [1.5, None], "c": "2020-01-01"}, None, {"a": None, "b": [], "c": "x"}]
    assert summarize_arrow(pa.array(values)) == merge(summarize_values(values), Kinds())


def test_the_image_column_is_an_image_only_when_it_holds_image_paths():
    assert features_of(summarize_table([{"image": "a.jpg"}, {"image": "b/c.PNG"}, {}]))[0]["image"] == Image(
        nullable=True)
    assert features_of(summarize_table([{"image": "a.jpg"}, {"image": "a cat"}]))[0]["image"] == S
    with pytest.raises(FeatureError, match=r"column 'picture' is not in the input \(its columns: 'image'\)"):
        features_of(summarize_table([{"image": "a.jpg"}]), image_columns=["picture"])


def test_a_label_column_makes_a_class_label():
    assert csv_features({"y": ["cat", "dog", "cat"]}, batch=1, label_column="y")[0]["y"] == ClassLabel(
        names=["cat", "dog"])
    assert csv_features({"y": ["2", "0", None]}, batch=2, label_column="y")[0]["y"] == ClassLabel(
        num_classes=3, nullable=True)
    assert csv_features({"y": ["3", "cat"]}, label_column="y")[0]["y"] == ClassLabel(names=["3", "cat"])
    given = csv_features({"y": ["cat", "1"]}, label_column="y", classes=["bird", "cat", "dog"])[0]["y"]
    assert given == ClassLabel(names=["bird", "cat", "dog"])
    with pytest.raises(FeatureError, match=r"label column 'y' holds 'cow', which is not one of its 3 classes "
                                           r"\('bird', 'cat', 'dog'\)"):
        csv_features({"y": ["cat", "cow"]}, label_column="y", classes=["bird", "cat", "dog"])
    assert csv_features({"y": ["cow"]}, label_column="y", classes=["cat"], skip_bad=True)[0]["y"] == ClassLabel(
        names=["cat"])
    with pytest.raises(FeatureError, match=r"label column 'y' holds 3, which is not one of its 3 classes"):
        features_of(summarize_table([{"y": 3}], label_columns=["y"]), label_column="y", classes=["a", "b", "c"])
    with pytest.raises(FeatureError, match=r"label column 'y' holds floats: it must hold class names"):
        features_of(summarize_table([{"y": 1.5}], label_columns=["y"]), label_column="y")
    with pytest.raises(FeatureError, match=r"label column 'y' holds a negative class id -1"):
        features_of(summarize_table([{"y": -1}], label_columns=["y"]), label_column="y")


def test_nesting_deeper_than_64_levels_is_refused_with_one_line_and_deep_csv_cells_are_text():
    deep = 1
    for _ in range(65):
        deep = [deep]
    with pytest.raises(FeatureError, match=r"^'v(\[\]){64}' nests lists and objects deeper than the 64 levels"):
        summarize_values([deep], path="v")
    with pytest.raises(FeatureError, match=r"deeper than the 64 levels"):
        summarize_arrow(pa.array([deep]), path="v")
    assert summarize_values([deep[0]]).lists == 1
    kinds = summarize_text(pa.array(["[" * 65 + "]" * 65, "[[1]]"]))
    assert (kinds.strings, kinds.lists) == (1, 1)


def test_a_column_null_everywhere_is_nullable_text_and_no_rows_is_an_error():
    assert csv_features({"x": [None, None]}) == (Features({"x": S}), [])
    with pytest.raises(FeatureError, match="no rows"):
        features_of(Kinds())
    with pytest.raises(FeatureError, match="the input's 2 rows hold no columns"):
        features_of(summarize_table([{}, {}]))
    with pytest.raises(TypeError, match=r"'v' holds a set value"):
        summarize_values([{1}], path="v")


def test_the_examples_in_the_package_docstrings_hold():
    package = beam_shards.inference
    for module in [package, *(importlib.import_module(f"{package.__name__}.{info.name}")
                              for info in pkgutil.iter_modules(package.__path__))]:
        failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert failed == 0, module.__name__
