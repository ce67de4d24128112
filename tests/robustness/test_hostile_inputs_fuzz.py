"""Fuzzing the index-file readers with what issue 35 found: nesting past 64 levels, rows of many
keys, lines that inflate past their bound, odd column names, each mixed with the others, cut and
flipped, plain or gzip-compressed.

Whatever the file, reading it, inferring its features and encoding its rows (what the jsonl and
csv pipelines do, without Beam) gives rows, Malformed lines, a FeatureError or an EncodeError of
one line, in bounded memory and time: 0 crashes, 0 hangs. Each test prints its tally.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import pathlib
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import EncodeError, FeatureError, Features, Struct, Value
from beam_shards.features.json_text import json_text_depth
from beam_shards.format.manifest import MAX_DEPTH, json_depth
from pipelines import common, csv as csv_pipeline, jsonl, lines, tabular
from pipelines.cast_batches import examples
from pipelines.summaries import Summary, merge

from _hostile import SCALE, mutate_bytes, printed_tally

# The line bound while fuzzing, lowered so that lines past it stay small.
SMALL_BOUND = 16 << 10
MEMORY_BOUND = 64 << 20
HANG_SECONDS = 10
# The longest message an error may print: names of many are cut to a few, and long ones cut short.
MESSAGE_CHARS = 4000

ODD_NAMES = st.sampled_from(["\0", "a\0b", "\x1b[2J", "a\nb", "\r", "\x7f", "\x85", "\u202e", "\u2028", "é", "名前",
                             " ", "", "n", "k0", "image", "[", "{", '"', "\\", ",", "k" * 40]) | st.text(max_size=6)
SCALARS = st.sampled_from(['1', '-0', '1e400', '"x"', '"[\\"]{"', '"\\\\"', 'null', 'true', '"a.jpg"', '7' * 30])


# What stands beside a nested value in a list or an object: strings holding brackets, quotes and escapes.
BESIDE_IN_LISTS = st.sampled_from(["", '"]]",', r'"\\",', r'"{\"[",', "1,"])
BESIDE_IN_OBJECTS = st.sampled_from(["", '"]]": 1, ', r'"\\\"{": 2, '])


@st.composite
def deep_json(draw) -> str:
    """JSON text of lists and objects nested 0 to 200 levels."""
    depth = draw(st.integers(0, 200))
    text = draw(SCALARS)
    for is_list in reversed(draw(st.lists(st.booleans(), min_size=depth, max_size=depth))):
        if is_list:
            text = "[" + draw(BESIDE_IN_LISTS) + text + "]"
        else:
            text = "{" + draw(BESIDE_IN_OBJECTS) + '"k": ' + text + "}"
    return text


@st.composite
def wide_object(draw) -> dict[str, Any]:
    """An object of up to 3,000 keys, some of them odd."""
    width = draw(st.integers(0, 3000))
    odd = draw(st.lists(ODD_NAMES, max_size=4))
    return {**{f"k{i}": i for i in range(width)}, **{name: 1 for name in odd}}


@st.composite
def jsonl_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["row", "deep", "wide", "long", "odd key", "not an object"]))
    if kind == "row":
        line = json.dumps({"n": draw(st.integers(-5, 5)), "v": draw(st.sampled_from([[1], [1, 2], [], None]))})
    elif kind == "deep":
        line = '{"n": 1, "v": ' + draw(deep_json()) + "}"
    elif kind == "wide":
        line = json.dumps(draw(wide_object()))
    elif kind == "long":
        line = json.dumps({"n": 1, "v": "x" * draw(st.integers(SMALL_BOUND - 64, 3 * SMALL_BOUND))})
    elif kind == "odd key":
        line = json.dumps({draw(ODD_NAMES): 1, "n": 2})
    else:
        line = draw(deep_json())
    return line.encode() + draw(st.sampled_from([b"\n", b"\r\n"]))


@st.composite
def csv_lines(draw) -> bytes:
    width = draw(st.sampled_from([1, 2, 3, 2000]))
    header = [f"c{i}" for i in range(width)]
    if draw(st.booleans()):
        header[draw(st.integers(0, width - 1))] = draw(ODD_NAMES)
    cells = st.sampled_from(["1", "", "x", "[1]", '{"a": 1}', "a.jpg", "1.5"]) | deep_json() | st.builds(
        lambda n: "y" * n, st.integers(SMALL_BOUND - 64, 3 * SMALL_BOUND)) | st.text(max_size=5).map(lambda t: t + "\n")
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width) if width < 10 else st.just(["1"] * width),
                         max_size=4))
    text = io.StringIO()
    csv.writer(text, lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"]))).writerows([header] + rows)
    return text.getvalue().encode()


@st.composite
def index_files(draw, lines_of: Callable) -> tuple[str, bytes]:
    """`(file name, bytes)`: a few lines, perhaps cut and flipped, perhaps gzip-compressed."""
    data = b"".join(draw(st.lists(lines_of(), min_size=1, max_size=4)))
    if draw(st.booleans()):
        data = mutate_bytes(draw, data)
    return (".gz", gzip.compress(data, compresslevel=1)) if draw(st.booleans()) else ("", data)


@pytest.fixture(scope="module")
def small_bound() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lines, "MAX_LINE_BYTES", SMALL_BOUND)
        yield


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("fuzz")


def tally_of(request, what: str) -> Iterator:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ {what}: {outcomes['cases']} files, {outcomes['rows']} rows written, {outcomes['malformed']} lines "
        f"malformed ({outcomes['too long']} too long, {outcomes['too deep']} too deep), {outcomes['refused']} "
        f"refused by their features, {outcomes['feature error']} with features no inference finds, "
        f"{outcomes['crash']} crashes, {outcomes['hang']} hangs (slowest {outcomes['slowest ms']} ms, "
        f"peak {outcomes['peak KiB']:,} KiB)"))


@pytest.fixture(scope="module")
def jsonl_tally(request) -> Iterator:
    yield from tally_of(request, "jsonl inputs")


@pytest.fixture(scope="module")
def csv_tally(request) -> Iterator:
    yield from tally_of(request, "csv inputs")


def check_message(message: str) -> None:
    assert message and "\n" not in message and len(message) <= MESSAGE_CHARS, message[:MESSAGE_CHARS]


def convert_without_beam(tabular_format: tabular.TabularFormat, path: str, tally) -> None:
    """What the pipeline does with `path`, without Beam: its raw batches, their features
    inferred from every row, and each batch cast (its rows one by one where it does not
    convert) and encoded, counted in `tally`; raises on anything else."""
    summarize = tabular.summarizer_of(tabular_format, argparse.Namespace(
        na_values=None, image_column=[""], label_column=None, skip_bad=True))
    batches = list(tabular_format.read_file(path))
    summary = Summary()
    for batch in batches:
        summary = merge(summary, summarize(batch))
    try:
        features, _ = tabular.features_of_summary(summary, tabular_format, [path], summarize)
    except FeatureError as error:
        check_message(str(error))
        tally["feature error"] += bool(summary.rows)
        return
    for batch in batches:
        for _, example in examples(batch, features, tabular_format.read_rows, tabular_format.to_example,
                                   summarize.null_tokens, tabular_format.text):
            encode(features, example, tally)


def encode(features: Features, example: Any, tally) -> None:
    """Counts a cast example in `tally`: rows encoded, or the one-line reason it is malformed or refused."""
    if isinstance(example, common.Malformed):
        check_message(example.reason)
        tally["malformed"] += 1
        tally["too long"] += "bytes (decompressed)" in example.reason
        tally["too deep"] += f"deeper than the {MAX_DEPTH}" in example.reason
        return
    if isinstance(example, common.Rows):
        table, rows = features.encode_batch_or_rows(example.table, None, example.one_by_one)
        tally["rows"] += table.num_rows if table is not None else 0
        for _, row in rows:
            encode(features, row, tally)
        return
    assert json_depth(example) <= MAX_DEPTH + 1, "a row nested past the bound was read"
    try:
        features.encode_example(example)
    except (ValueError, EncodeError) as error:
        check_message(str(error))
        tally["refused"] += 1
        return
    tally["rows"] += 1


def fuzz(tabular_format: tabular.TabularFormat, fuzz_dir: pathlib.Path, tally, suffix: str, data: bytes) -> None:
    path = fuzz_dir / f"case.{tabular_format.name}{suffix}"
    path.write_bytes(data)
    tally["cases"] += 1
    start = time.monotonic()
    tracemalloc.start()
    try:
        convert_without_beam(tabular_format, str(path), tally)
        peak = tracemalloc.get_traced_memory()[1]
    except BaseException:
        tally["crash"] += 1
        raise
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - start
    tally["slowest ms"] = max(tally["slowest ms"], round(1000 * elapsed))
    tally["peak KiB"] = max(tally["peak KiB"], peak >> 10)
    tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS and peak < MEMORY_BOUND, (elapsed, peak)


FUZZ_SETTINGS = settings(max_examples=150 * SCALE, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                HealthCheck.data_too_large])


@pytest.mark.timeout(900)
@FUZZ_SETTINGS
@given(case=index_files(jsonl_lines))
def test_any_jsonl_file_gives_rows_or_one_line_errors_in_bounded_memory_and_time(small_bound, fuzz_dir, jsonl_tally,
                                                                                 case):
    fuzz(jsonl.FORMAT, fuzz_dir, jsonl_tally, *case)


@pytest.mark.timeout(900)
@FUZZ_SETTINGS
@given(case=index_files(csv_lines))
def test_any_csv_file_gives_rows_or_one_line_errors_in_bounded_memory_and_time(small_bound, fuzz_dir, csv_tally, case):
    fuzz(csv_pipeline.FORMAT, fuzz_dir, csv_tally, *case)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\,:ab\n\0'),
                           lambda items: st.lists(items, max_size=3) | st.dictionaries(
                               st.text(alphabet='[]{}"\\ab', max_size=3), items, max_size=3), max_leaves=30)


@pytest.mark.timeout(300)
@settings(max_examples=500 * SCALE, deadline=None, database=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 1]))
def test_the_depth_of_json_text_is_that_of_its_value(value, indent):
    assert json_text_depth(json.dumps(value, indent=indent).encode()) == json_depth(value)


@pytest.mark.timeout(300)
@settings(max_examples=500 * SCALE, deadline=None, database=None)
@given(text=st.binary(max_size=200) | JSON_VALUES.map(lambda value: json.dumps(value).encode()).flatmap(
    lambda data: st.builds(lambda cut: data[:cut], st.integers(0, len(data)))))
def test_any_bytes_are_measured_and_json_text_exactly(text):
    depth = json_text_depth(text)
    try:
        value = json.loads(text)
    except ValueError:
        return
    assert depth == json_depth(value)


@pytest.mark.timeout(300)
@settings(max_examples=300 * SCALE, deadline=None, database=None)
@given(name=ODD_NAMES | st.text(min_size=1, max_size=8))
def test_any_column_name_is_kept_or_refused_naming_it(name):
    control = any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in name)
    try:
        features = Features({name: Value("int64"), "s": Struct({name: Value("int8")})})
    except FeatureError as error:
        assert control or not name, name
        assert repr(name)[:30] in str(error) and "\n" not in str(error)
        return
    assert not control
    assert features.encode_example({name: 1, "s": {name: 2}}) == {name: 1, "s": {name: 2}}
