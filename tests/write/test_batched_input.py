"""Examples given as pyarrow RecordBatches or Tables: same checks as dicts, no per-row Python."""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import (ArrowBackend, ClassLabel, EncodeError, Features, Image, Sequence, ShardedDataset, Value,
                         WriteToArrowShards, read_metadata, verify, write_shards)

from _support import FEATURES, example, options


def _table(ids) -> pa.Table:
    rows = [example(i) for i in ids]
    return pa.Table.from_pylist([{**row, "embedding": row["embedding"].tolist()} for row in rows])


def _replace(table: pa.Table, name: str, values: list, type: pa.DataType | None = None) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, type=type))


def _rows(path) -> list[dict]:
    return sorted(ShardedDataset(str(path), image_mode="bytes"), key=lambda row: row["id"])


def test_batches_write_the_same_cache_as_dicts(tmp_path):
    by_batch = write_shards([_table(range(0, 30)), ("second", _table(range(30, 45)).to_batches()[0])],
                            str(tmp_path / "batches"), FEATURES, shard_size_bytes=12_000, batch_size=8)
    write_shards((example(i) for i in range(45)), str(tmp_path / "dicts"), FEATURES)
    assert by_batch.num_rows == 45 and by_batch.num_shards > 1
    assert all(s.num_rows <= 8 * 5 for s in by_batch.shards)
    ours, reference = _rows(tmp_path / "batches"), _rows(tmp_path / "dicts")
    for a, b in zip(ours, reference):
        np.testing.assert_array_equal(a.pop("embedding"), b.pop("embedding"))
        assert a == b
    assert verify(str(tmp_path / "batches")).ok


def test_batches_respect_batch_size_and_max_rows(tmp_path):
    manifest = write_shards([_table(range(100))], str(tmp_path / "c"), FEATURES, batch_size=7,
                            max_rows_per_shard=30)
    assert [s.num_rows for s in manifest.shards] == [30, 30, 30, 10]
    backend = ArrowBackend.open(str(tmp_path / "c"))
    batch_rows = {b.num_rows for b in backend.iter_batches()}
    assert max(batch_rows) <= 7


@pytest.mark.parametrize("spoil, message", [
    (lambda t: t.drop_columns(["caption"]), r"missing column 'caption'"),
    (lambda t: t.append_column("extra", pa.array(range(len(t)))), r"unexpected column 'extra'"),
    (lambda t: _replace(t, "label", [i % 12 for i in range(len(t))]), r"row 10 of batch 0, field 'label'.*out of range"),
    (lambda t: _replace(t, "image", [b if i != 3 else b[:40] for i, b in enumerate(t.column("image").to_pylist())]),
     r"row 3 of batch 0, field 'image'.*truncated JPEG"),
    (lambda t: _replace(t, "embedding", [e if i != 5 else e[:3] for i, e in enumerate(t.column("embedding").to_pylist())]),
     r"row 5 of batch 0, field 'embedding'.*wrong shape: a list of 3 where 8 are declared"),
    (lambda t: _replace(t, "id", [None if i == 4 else i for i in range(len(t))]),
     r"row 4 of batch 0, field 'id'.*None where a value is required"),
    (lambda t: _replace(t, "caption", [1.5] * len(t)), r"field 'caption'.*a double column cannot hold"),
    (lambda t: _replace(t, "id", [float(i) for i in range(len(t))]), r"field 'id'.*a double column cannot hold"),
    (lambda t: _replace(t, "label", ["seven"] * len(t)), r"field 'label'.*class names are not declared"),
])
def test_bad_batches_name_row_field_and_publish_nothing(tmp_path, spoil, message):
    path = tmp_path / "cache"
    with pytest.raises(EncodeError, match=message):
        write_shards([spoil(_table(range(12)))], str(path), FEATURES)
    assert not os.path.exists(path / "_metadata.json")


def test_int_overflow_in_a_batch_is_an_error_not_a_wrap(tmp_path):
    features = Features({"x": Value("int8")})
    with pytest.raises(EncodeError, match=r"row 2 of batch 0, field 'x'.*do not fit int8.*got int 300"):
        write_shards([pa.table({"x": [1, 2, 300]})], str(tmp_path / "c"), features)


def test_class_names_in_a_batch_become_ids(tmp_path):
    features = Features({"label": ClassLabel(names=["cat", "dog"])})
    write_shards([pa.table({"label": ["dog", "cat"]})], str(tmp_path / "c"), features)
    assert ArrowBackend.open(str(tmp_path / "c")).take([0, 1]).column("label").to_pylist() == [1, 0]
    with pytest.raises(EncodeError, match=r"row 1 of batch 0, field 'label'.*unknown class name; got str 'cow'"):
        write_shards([pa.table({"label": ["dog", "cow"]})], str(tmp_path / "d"), features)


def test_images_inside_sequences_are_checked_with_their_row(tmp_path):
    from _support import jpeg

    features = Features({"frames": Sequence(Image())})
    good = jpeg(1)
    table = pa.table({"frames": [[good], [good, good], [good, b"not an image"]]})
    with pytest.raises(EncodeError, match=r"row 2 of batch 0, field 'frames\[\]'"):
        write_shards([table], str(tmp_path / "c"), features)


def test_sink_accepts_batches_and_dicts_in_one_pcollection(tmp_path):
    out = tmp_path / "cache"

    def make(part):
        if part % 2:
            yield _table(range(part * 20, part * 20 + 20)).to_batches()[0]
        else:
            yield from (example(i) for i in range(part * 20, part * 20 + 20))

    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(4)) | beam.FlatMap(make)
         | WriteToArrowShards(str(out), FEATURES, shard_size_bytes=15_000, batch_size=8))
    assert read_metadata(str(out)).num_rows == 80
    assert [row["id"] for row in _rows(out)] == list(range(80))


def test_sink_names_the_row_of_a_bad_batch(tmp_path):
    bad = _replace(_table(range(10)), "label", [3] * 9 + [42])
    with pytest.raises(Exception, match=r"row 9 of batch 'part-1', field 'label'"):
        with beam.Pipeline(options=options()) as p:
            p | beam.Create([0]) | beam.Map(lambda _: ("part-1", bad)) | WriteToArrowShards(str(tmp_path / "c"), FEATURES)
    assert not os.path.exists(tmp_path / "c" / "_metadata.json")


def test_a_huge_row_in_a_batch_gets_a_shard_of_its_own(tmp_path):
    features = Features({"id": Value("int64"), "blob": Value("binary")})
    blobs = [b"x" * 100] * 500
    blobs[250] = b"y" * 400_000
    table = pa.table({"id": list(range(500)), "blob": blobs})
    manifest = write_shards([table], str(tmp_path / "c"), features, shard_size_bytes=100_000, batch_size=1000)
    backend = ArrowBackend.open(str(tmp_path / "c"))
    offsets = backend.shard_offsets
    [huge_shard] = [i for i in range(manifest.num_shards) if offsets[i] <= 250 < offsets[i + 1]]
    assert manifest.shards[huge_shard].num_rows == 1
    assert all(s.num_bytes <= 100_000 for i, s in enumerate(manifest.shards) if i != huge_shard)


def test_row_sizes_of_lists_of_numbers_are_their_lengths_times_the_width():
    from beam_shards.shards.row_sizes import arrow_row_nbytes

    table = pa.table({"x": pa.array([[1, 2, 3], None, []], pa.large_list(pa.int32())),
                      "flags": pa.array([[True], [False, True], None], pa.list_(pa.bool_()))})
    assert arrow_row_nbytes(table).tolist() == [8 + (3 * 4 + 8) + (1 + 8), 8 + 8 + (2 + 8), 8 + 8 + 8]


def test_row_sizes_follow_the_arrow_offsets():
    from beam_shards.shards.row_sizes import arrow_row_nbytes

    table = FEATURES.encode_batch(_table(range(3)))
    expected = []
    for i in range(3):
        row = example(i)
        tags = sum(len(t) + 8 for t in row["tags"]) + 8
        # row, id, image, label, embedding (8 float32), caption, tags
        expected.append(8 + 8 + len(row["image"]) + 8 + 8 + 8 * 4 + len(row["caption"]) + 8 + tags)
    assert arrow_row_nbytes(table).tolist() == expected



_BOUNDED_TYPES = [pa.int8(), pa.bool_(), pa.float16(), pa.binary(), pa.large_binary(), pa.large_string(), pa.list_(pa.int16()),
                  pa.large_list(pa.bool_()), pa.list_(pa.float64(), 3), pa.struct({"a": pa.string(), "b": pa.int32()}),
                  pa.null(), pa.list_(pa.string()), pa.large_list(pa.list_(pa.int32())),
                  pa.list_(pa.struct({"a": pa.binary()}))]


def _values_of(arrow_type: pa.DataType):
    from hypothesis import strategies as st

    if pa.types.is_null(arrow_type):
        return st.none()
    if pa.types.is_boolean(arrow_type):
        value = st.booleans()
    elif pa.types.is_integer(arrow_type):
        value = st.integers(-100, 100)
    elif pa.types.is_floating(arrow_type):
        value = st.floats(-10, 10)
    elif pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        value = st.binary(max_size=40)
    elif pa.types.is_large_string(arrow_type) or pa.types.is_string(arrow_type):
        value = st.text(max_size=20)
    elif pa.types.is_fixed_size_list(arrow_type):
        value = st.lists(_values_of(arrow_type.value_type), min_size=arrow_type.list_size,
                         max_size=arrow_type.list_size)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        value = st.lists(_values_of(arrow_type.value_type), max_size=6)
    else:
        value = st.fixed_dictionaries({field.name: _values_of(field.type) for field in arrow_type})
    return st.none() | value


@pytest.mark.parametrize("arrow_type", _BOUNDED_TYPES, ids=str)
def test_the_size_from_offsets_is_the_rows_sizes_summed(arrow_type):
    from hypothesis import given, settings, strategies as st

    from beam_shards.shards.row_sizes import arrow_nbytes, arrow_row_nbytes

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def check(data):
        values = pa.array(data.draw(st.lists(_values_of(arrow_type), max_size=12)), arrow_type)
        sliced = values.slice(data.draw(st.integers(0, len(values))))
        cuts = sorted(data.draw(st.lists(st.integers(0, len(sliced)), max_size=2)))
        edges = [0, *cuts, len(sliced)]
        table = pa.table({"x": pa.chunked_array([sliced.slice(a, b - a) for a, b in zip(edges, edges[1:])],
                                                arrow_type)})
        # pyarrow gives a null no bytes, so the size from offsets is the sum itself
        assert arrow_nbytes(table) == int(arrow_row_nbytes(table).sum())

    check()


def test_the_size_from_offsets_counts_bytes_under_a_null_that_the_rows_sizes_do_not():
    from beam_shards.shards.row_sizes import arrow_nbytes, arrow_row_nbytes

    # row 1 is null, yet its offsets step over 5 bytes ("hello")
    values = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(bytes([0b01])),
                                                    pa.py_buffer(np.array([0, 2, 7], np.int32).tobytes()),
                                                    pa.py_buffer(b"hihello")])
    table = pa.table({"x": values})
    assert arrow_row_nbytes(table).tolist() == [8 + 2 + 8, 8 + 8]
    assert arrow_nbytes(table) == 8 + 2 + 8 + 8 + 5 + 8


@pytest.mark.parametrize("batch_bytes", [1 << 30, 3000], ids=["one batch", "cut by sizes"])
def test_a_table_within_one_batch_is_written_as_sizing_each_row_would_cut_it(tmp_path, monkeypatch, batch_bytes):
    from beam_shards.shards import row_sizes

    table = FEATURES.encode_batch(_table(range(40)))
    sized, real_sizes = [], row_sizes.arrow_row_nbytes
    monkeypatch.setattr(row_sizes, "arrow_row_nbytes", lambda table: sized.append(1) or real_sizes(table))
    digests = []
    for summed in (True, False):
        if not summed:
            monkeypatch.setattr(row_sizes, "arrow_nbytes", lambda table: 1 << 62)  # never fits: rows sized
        sized.clear()
        out = tmp_path / str(summed)
        manifest = write_shards([table], str(out), FEATURES, shard_size_bytes=1 << 24, batch_bytes=batch_bytes,
                                progress=False)
        digests.append([shard.checksum for shard in manifest.shards])
        batches = [len(batch) for batch in ArrowBackend.open(str(out)).iter_batches()]
        assert (batches == [40]) == (batch_bytes > 1 << 20)
        assert bool(sized) == (not summed or batch_bytes < 1 << 20), "rows sized only when the table does not fit"
    assert digests[0] == digests[1]
