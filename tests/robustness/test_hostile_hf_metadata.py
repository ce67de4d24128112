"""Hostile Hugging Face feature metadata: whatever a Parquet file's `huggingface` schema
metadata, a `save_to_disk` folder's JSON files or a dict form given to `from_hf_features`
holds, the answer is features or one error line, never a traceback. A Parquet input with
hostile metadata falls back to its Arrow types, with a warning naming the file and what was
wrong; nesting past 64 levels is refused before Python's JSON parser (which recurses) sees it."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import ClassLabel, FeatureError, Features, ShardedDataset, from_hf_features
from beam_shards.format.manifest import json_depth
from pipelines import parquet

from _hostile import SCALE, assert_clear, cases, mutate_bytes, nested, printed_tally

pytestmark = pytest.mark.timeout(120)

SCHEMA = pa.schema([pa.field("n", pa.int64()), pa.field("label", pa.int64()), pa.field("tags", pa.list_(pa.string()))])
ARROW_FEATURES = parquet.infer_features(SCHEMA)
DEEP = 100_000
HANG_SECONDS = 5


def sequence(depth: int) -> dict:
    """A Hugging Face List of strings nested `depth` levels."""
    form: dict = {"dtype": "string", "_type": "Value"}
    for _ in range(depth):
        form = {"feature": form, "_type": "List"}
    return form


def hf_metadata(features: Any) -> dict[bytes, bytes]:
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def deep_document(key: str) -> str:
    """JSON whose `key` holds lists nested `DEEP` levels."""
    return '{"%s": {"n": %s}}' % (key, nested(DEEP))


# (case, a malformed Hugging Face dict form of features, words its one error line holds)
FORM_CASES = [
    ("a Sequence 300 deep", {"tags": sequence(300)}, ["nested 30", "at most 64"]),
    ("a ClassLabel whose names are 5", {"label": {"_type": "ClassLabel", "names": 5}},
     ["column 'label'", "names must be a list of strings"]),
    ("a ClassLabel without names", {"label": {"_type": "ClassLabel"}}, ["column 'label'", "neither names nor"]),
    ("a ClassLabel of 10,000 names, all the same", {"label": {"_type": "ClassLabel", "names": ["x"] * 10_000}},
     ["column 'label'", "unique"]),
    ("a Value without dtype", {"n": {"_type": "Value"}}, ["column 'n'", "without 'dtype'"]),
    ("a List without its feature", {"tags": {"_type": "List"}}, ["column 'tags'", "without its 'feature'"]),
    ("a _type that is a list", {"n": {"_type": ["Value"]}}, ["column 'n'", "has no equal here"]),
    ("a _type holding an escape sequence", {"n": {"_type": "\x1b[2J"}}, ["column 'n'", "\\x1b[2J"]),
    ("an Array2D of three dimensions", {"n": {"_type": "Array2D", "shape": [1, 2, 3], "dtype": "int64"}},
     ["column 'n'", "2 dimensions"]),
    ("an Array3D whose shape is 5", {"n": {"_type": "Array3D", "shape": 5, "dtype": "int64"}},
     ["column 'n'", "3 dimensions"]),
    ("a List whose fixed length is text", {"tags": {"_type": "List", "feature": {"_type": "Value", "dtype": "int8"},
                                                    "length": "x"}}, ["column 'tags'", "Array shape"]),
    ("a legacy list of two features", {"tags": [{"_type": "Value", "dtype": "string"}] * 2},
     ["column 'tags'", "is not a Hugging Face feature"]),
]


def deep_form() -> dict:
    form: Any = {"dtype": "int8", "_type": "Value"}
    for _ in range(DEEP):
        form = {"feature": form, "_type": "List"}
    return {"tags": form}


@pytest.mark.parametrize("form, words", cases([("a dict form 100,000 levels deep", deep_form(),
                                                ["nested 100,00", "at most 64"]), *FORM_CASES]))
def test_a_malformed_hf_feature_form_is_one_feature_error_naming_what_is_wrong(form, words):
    with pytest.raises(Exception) as raised:
        from_hf_features(form)
    assert_clear(raised.value, FeatureError, words)
    assert str(raised.value).isprintable() and len(str(raised.value)) <= 300


def test_a_class_label_of_a_count_alone_maps_to_that_count():
    assert from_hf_features({"label": {"_type": "ClassLabel", "num_classes": 3}}) == Features(
        {"label": ClassLabel(num_classes=3, nullable=True)})


# (case, the `huggingface` entry of a Parquet schema's metadata, words its one warning holds)
PARQUET_CASES = [
    ("JSON nested 100,000 levels", {b"huggingface": deep_document("info").encode()}, ["nests 100,00", "at most 64"]),
    *[(name, hf_metadata(form), words) for name, form, words in FORM_CASES if name != "a Sequence 300 deep"],
    ("a Sequence 300 deep", hf_metadata({"tags": sequence(300)}), ["nests 30", "at most 64"]),
    ("metadata that is not JSON", {b"huggingface": b'{"info": '}, ["not valid JSON"]),
    ("metadata that is not UTF-8", {b"huggingface": b'\xff\xfe{}'}, ["not UTF-8"]),
    ("info that is a list", {b"huggingface": b'{"info": []}'}, ['"info"']),
    ("features that are text", {b"huggingface": b'{"info": {"features": "n"}}'}, ['"features"']),
]


def caught_warnings(action) -> tuple[Any, list[str]]:
    """`(what action() returns, the messages of the warnings it gave)`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = action()
    return result, [str(warning.message) for warning in caught]


@pytest.mark.parametrize("metadata, words", cases(PARQUET_CASES))
def test_hostile_hf_metadata_in_parquet_falls_back_to_arrow_types_with_one_warning(metadata, words):
    features, messages = caught_warnings(lambda: parquet.infer_features(SCHEMA.with_metadata(metadata)))
    assert features == ARROW_FEATURES
    assert len(messages) == 1, messages
    for word in words + ["follow", "Arrow type"]:
        assert word in messages[0], (word, messages[0])
    assert messages[0].isprintable() and len(messages[0]) <= 400, messages[0]


@pytest.mark.timeout(300)
def test_a_parquet_file_with_hf_metadata_100_000_levels_deep_converts_by_its_arrow_types(tmp_path):
    path = tmp_path / "hostile.parquet"
    table = pa.table({"n": [1, 2, 3], "label": [0, 1, 0], "tags": [["a"], [], ["b", "c"]]}, schema=SCHEMA)
    pq.write_table(table.replace_schema_metadata({b"huggingface": deep_document("info").encode()}), path)
    with pytest.warns(UserWarning, match=r"hostile\.parquet: its Hugging Face metadata nests 100,00\d levels"):
        manifest = parquet.run(["--input", str(path), "--output", str(tmp_path / "out"), "--runner=FnApiRunner"])
    assert manifest.features == ARROW_FEATURES
    assert sorted(row["n"] for row in ShardedDataset(str(tmp_path / "out"))) == [1, 2, 3]


# ---- save_to_disk folders -------------------------------------------------------------------

def saved_folder(root) -> Any:
    """A folder as `Dataset.save_to_disk` writes one, of a column `n` of three rows."""
    folder = root / "saved"
    folder.mkdir()
    table = pa.table({"n": pa.array([1, 2, 3], pa.int64())})
    for where in (folder / "data-00000-of-00001.arrow", root / "outside.arrow"):
        with pa.ipc.new_stream(str(where), table.schema) as writer:
            writer.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {"n": {"dtype": "int64", "_type": "Value"}}}))
    return folder


def convert(folder, out) -> Any:
    return parquet.run(["--input", str(folder), "--output", str(out), "--runner=FnApiRunner"])


@pytest.mark.timeout(300)
def test_the_hand_made_save_to_disk_folder_converts(tmp_path):
    assert convert(saved_folder(tmp_path), tmp_path / "out").num_rows == 3


# (case, the file of a save_to_disk folder replaced, its content, words of the one error line)
SAVED_CASES = [
    ("dataset_info.json nested 100,000 levels", "dataset_info.json", deep_document("features"),
     ["dataset_info.json", "nests 100,00"]),
    ("dataset_info.json with a Sequence 300 deep", "dataset_info.json",
     json.dumps({"features": {"n": sequence(300)}}), ["dataset_info.json", "nests 30"]),
    ("dataset_info.json with a ClassLabel whose names are 5", "dataset_info.json",
     json.dumps({"features": {"n": {"_type": "ClassLabel", "names": 5}}}), ["column 'n'", "names must be a list"]),
    ("dataset_info.json with a ClassLabel without names", "dataset_info.json",
     json.dumps({"features": {"n": {"_type": "ClassLabel"}}}), ["column 'n'", "neither names nor num_classes"]),
    ("dataset_info.json that is a list", "dataset_info.json", "[1]", ["dataset_info.json", "names no features"]),
    ("state.json nested 100,000 levels", "state.json", deep_document("_data_files"), ["state.json", "nests 100,00"]),
    ("state.json whose files are 5", "state.json", json.dumps({"_data_files": 5}), ["state.json", "no data files"]),
    ("state.json naming a file outside its folder", "state.json",
     json.dumps({"_data_files": [{"filename": "../outside.arrow"}]}), ["state.json", "outside its folder"]),
    ("dataset_dict.json nested 100,000 levels", "dataset_dict.json", deep_document("splits"),
     ["dataset_dict.json", "nests 100,00"]),
    ("dataset_dict.json whose splits are 5", "dataset_dict.json", json.dumps({"splits": 5}),
     ["a DatasetDict folder", "give one split's folder"]),
]


@pytest.mark.parametrize("name, content, words", cases(SAVED_CASES))
def test_a_hostile_save_to_disk_folder_is_one_usage_error_naming_what_is_wrong(tmp_path, capsys, name, content,
                                                                               words):
    folder = saved_folder(tmp_path)
    (folder / name).write_text(content)
    with pytest.raises(SystemExit) as exit_:
        convert(folder, tmp_path / "out")
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    assert all(word in errors[0] for word in words), errors[0]


# ---- fuzzing ----------------------------------------------------------------------------------

HF_TYPES = ["Value", "ClassLabel", "List", "Sequence", "LargeList", "Array2D", "Array3D", "Array5D", "Image", "Audio",
            "Video", "Translation", "Json", "Pdf", ""]
HF_KEYS = ["_type", "feature", "dtype", "names", "num_classes", "length", "shape", "sampling_rate", "decode", "id",
           "mode", "info", "features"]
HF_WORDS = [*HF_TYPES, "int8", "uint64", "float16", "string", "large_binary", "bool", "null", "date32", "time32[s]",
            "timestamp[ns, tz=UTC]", "timestamp[s, tz=../../etc]", "decimal128(99, 0)", "duration[ms]", "\x1b[2J", "\x00"]
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=6)
           | st.sampled_from(HF_WORDS))
FORMS = st.recursive(SCALARS, lambda items: st.lists(items, max_size=3) | st.dictionaries(
    st.sampled_from(HF_KEYS) | st.text(max_size=4), items, max_size=4), max_leaves=16)
LEAVES = st.sampled_from([{"dtype": "int8", "_type": "Value"}, {"dtype": "timestamp[us, tz=UTC]", "_type": "Value"},
                          {"names": ["a", "b"], "_type": "ClassLabel"}, {"num_classes": 3, "_type": "ClassLabel"},
                          {"_type": "Image", "decode": True}, {"sampling_rate": 16000, "_type": "Audio"},
                          {"shape": [None, 3], "dtype": "float32", "_type": "Array2D"}])
VALID_FORMS = st.recursive(LEAVES, lambda inner: st.builds(lambda item: {"feature": item, "_type": "List"}, inner)
                           | st.builds(lambda item: {"feature": item, "length": 2, "_type": "Sequence"}, inner)
                           | st.builds(lambda item: [item], inner)
                           | st.dictionaries(st.text(min_size=1, max_size=3), inner, min_size=1, max_size=3),
                           max_leaves=6)


@st.composite
def near_valid_forms(draw) -> Any:
    """A valid Hugging Face form, sometimes with one key of one of its dicts set to any value."""
    form = json.loads(json.dumps(draw(VALID_FORMS)))  # a copy the strategy does not share
    if draw(st.booleans()):
        nodes, dicts = [form], []
        while nodes:
            node = nodes.pop()
            dicts += [node] if isinstance(node, dict) else []
            nodes += node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        if dicts:
            draw(st.sampled_from(dicts))[draw(st.sampled_from(HF_KEYS))] = draw(FORMS)
    return form


COLUMNS = st.dictionaries(st.sampled_from(["n", "label", "tags"]) | st.text(max_size=3),
                          st.one_of(near_valid_forms(), near_valid_forms(), FORMS), min_size=1, max_size=3)
VALID_METADATA = hf_metadata({"n": {"dtype": "int8", "_type": "Value"}, "label": {"names": ["a", "b"],
                                                                                   "_type": "ClassLabel"},
                              "tags": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "List"}})


@pytest.fixture(scope="module")
def hf_tally(request) -> Iterator:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ hf metadata: {outcomes['cases']} cases; feature forms {outcomes['accepted']} mapped, "
        f"{outcomes['refused']} refused with one FeatureError line; Parquet schemas {outcomes['mapped']} mapped, "
        f"{outcomes['fell back']} with a warning and columns on their Arrow types; {outcomes['crash']} crashes, "
        f"{outcomes['hang']} hangs (slowest {outcomes['slowest ms']} ms)"))


def timed(tally, action) -> Any:
    tally["cases"] += 1
    start = time.monotonic()
    try:
        result = action()
    except BaseException as error:
        if not isinstance(error, FeatureError):
            tally["crash"] += 1
            raise
        result = error
    elapsed = time.monotonic() - start
    tally["slowest ms"] = max(tally["slowest ms"], round(1000 * elapsed))
    tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS, elapsed
    return result


@pytest.mark.timeout(300)
@settings(max_examples=300 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(form=COLUMNS)
def test_any_hf_feature_form_gives_features_or_one_feature_error(hf_tally, form):
    result = timed(hf_tally, lambda: from_hf_features(form))
    if isinstance(result, FeatureError):
        assert str(result) and "\n" not in str(result) and str(result).isprintable(), result
        hf_tally["refused"] += 1
        return
    hf_tally["accepted"] += 1
    assert isinstance(result, Features)
    assert Features.from_json(result.to_json()) == result
    result.arrow_schema()  # with the HF metadata of the features, when each has an equal there


@st.composite
def metadata_entries(draw) -> bytes:
    """The `huggingface` entry of a schema's metadata: valid mutated, any JSON, or brackets deep and broken."""
    kind = draw(st.sampled_from(["mutated", "json", "forms", "brackets"]))
    if kind == "mutated":
        return mutate_bytes(draw, VALID_METADATA[b"huggingface"])
    if kind == "json":
        return json.dumps(draw(FORMS)).encode()
    if kind == "forms":
        return json.dumps({"info": {"features": draw(COLUMNS)}}).encode()
    depth = draw(st.integers(60, 5000))
    return (draw(st.sampled_from(['{"info": {"features": {"n": ', '"[', "[{", ""])) + "[" * depth
            + draw(st.sampled_from(["", '"\\"]', "]" * depth]))).encode()


@pytest.mark.timeout(300)
@settings(max_examples=300 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(entry=metadata_entries())
def test_any_hf_metadata_in_a_parquet_schema_gives_features_and_clear_warnings(hf_tally, entry):
    schema = SCHEMA.with_metadata({b"huggingface": entry})
    features, messages = timed(hf_tally, lambda: caught_warnings(lambda: parquet.infer_features(schema, None, "f")))
    assert list(features) == ["n", "label", "tags"]
    assert all(message.startswith("f: ") and message.isprintable() for message in messages), messages
    hf_tally["fell back" if messages else "mapped"] += 1


JSON_TEXT = st.text(alphabet='[]{}"\\ab\x00é', max_size=6)
JSON_VALUES = st.recursive(st.none() | st.integers() | JSON_TEXT, lambda items: st.lists(items, max_size=3)
                           | st.dictionaries(JSON_TEXT, items, max_size=3), max_leaves=20)


@settings(max_examples=300 * SCALE, deadline=None, database=None)
@given(value=JSON_VALUES, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_the_depth_counted_on_brackets_is_the_depth_json_parses_to(value, ascii_only, indent):
    from beam_shards.features.json_text import json_text_depth

    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert json_text_depth(text.encode("utf-8", "surrogatepass")) == json_depth(value)
