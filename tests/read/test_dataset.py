"""ShardedDataset: indexing, views, batched fetch, iteration and decoding to PIL/numpy/int."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image as PILImage

from beam_shards import (Array, ArrowBackend, ClassLabel, FeatureError, Features, Image, Sequence, ShardedDataset,
                         Value, write_shards)

from _paths import REPO
from _support import jpeg

N = 57
NAMES = [f"class{k}" for k in range(10)]
FEATURES = Features({
    "id": Value("int64"),
    "image": Image(),
    "label": ClassLabel(names=NAMES),
    "embedding": Array((8,), "float32"),
    "grid": Array((2, 3), "int16"),
    "boxes": Array((None, 4), "float32"),
    "caption": Value("string"),
    "tags": Sequence(Value("string")),
})


def example(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "image": None if i % 11 == 5 else jpeg(i % 5),
        "label": NAMES[i % 10] if i % 2 else i % 10,
        "embedding": rng.standard_normal(8).astype(np.float32),
        "grid": np.arange(6, dtype=np.int16).reshape(2, 3) + i,
        "boxes": rng.random((i % 4, 4)).astype(np.float32),
        "caption": f"caption {i}",
        "tags": [f"t{j}" for j in range(i % 3)],
    }


def check(item: dict, i: int, image_mode: str = "pil") -> None:
    """`item` is example `i` decoded."""
    want = example(i)
    assert item["id"] == i and item["caption"] == want["caption"] and item["tags"] == want["tags"]
    assert item["label"] == i % 10 and type(item["label"]) is int
    for name, shape, dtype in (("embedding", (8,), np.float32), ("grid", (2, 3), np.int16),
                               ("boxes", (i % 4, 4), np.float32)):
        assert isinstance(item[name], np.ndarray) and item[name].shape == shape and item[name].dtype == dtype
        np.testing.assert_array_equal(item[name], want[name])
    image = item["image"]
    if want["image"] is None:
        assert image is None
    elif image_mode == "bytes":
        assert image == want["image"]
    elif image_mode == "pil":
        assert isinstance(image, PILImage.Image) and image.format == "JPEG" and image.size == (16, 16)
        np.testing.assert_array_equal(np.asarray(image), np.asarray(PILImage.open(io.BytesIO(want["image"]))))
    else:
        assert isinstance(image, np.ndarray) and image.shape == (16, 16, 3) and image.dtype == np.uint8
        np.testing.assert_array_equal(image, np.asarray(PILImage.open(io.BytesIO(want["image"]))))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("dataset") / "cache")
    write_shards((example(i) for i in range(N)), path, FEATURES, max_rows_per_shard=10, batch_size=3)
    return path


@pytest.fixture
def ds(cache) -> ShardedDataset:
    return ShardedDataset(cache)


def ids(items) -> list[int]:
    return [item["id"] for item in items]


def test_len_int_and_negative_int(ds):
    assert len(ds) == N
    for i in (0, 5, 9, 10, 33, N - 1):
        check(ds[i], i)
    check(ds[-1], N - 1)
    check(ds[-N], 0)
    check(ds[np.int64(12)], 12)


@pytest.mark.parametrize("index", [N, N + 3, -N - 1])
def test_out_of_range_names_index_and_length(ds, index):
    with pytest.raises(IndexError, match=f"index {index} out of range for a dataset of {N} rows"):
        ds[index]


@pytest.mark.parametrize("mode", ["pil", "numpy", "bytes"])
def test_image_modes(cache, mode):
    ds = ShardedDataset(cache, image_mode=mode)
    for i in (0, 5, 16, 56):
        check(ds[i], i, mode)
    with pytest.raises(ValueError, match="image_mode"):
        ShardedDataset(cache, image_mode="tensor")


def test_class_names_are_reachable_through_the_features(ds):
    label = ds.features["label"]
    assert label.int2str(ds[13]["label"]) == "class3" and label.str2int("class7") == 7


def test_slice_is_a_view_that_reads_nothing(ds):
    view = ds[10:30]
    assert isinstance(view, ShardedDataset) and view.backend is ds.backend
    assert ds.backend.open_shards == []
    assert len(view) == 20
    check(view[0], 10)
    check(view[-1], 29)
    assert ids(view) == list(range(10, 30))
    with pytest.raises(IndexError, match="index 20 out of range for a dataset of 20 rows"):
        view[20]


def test_views_of_views_and_steps(ds):
    view = ds[5:50][3:40:4]
    expected = list(range(5, 50))[3:40:4]
    assert len(view) == len(expected) and ids(view) == expected
    assert ids(view[::-1]) == expected[::-1]
    assert ids(ds[::-1][:3]) == [N - 1, N - 2, N - 3]
    assert ids(view[[0, -1]]) == [expected[0], expected[-1]]
    assert len(ds[40:10]) == 0 and list(ds[40:10]) == []
    assert ids(ds[-5:]) == list(range(N - 5, N))


def test_list_of_ints_and_getitems(ds):
    indices = [3, -1, 3, 20, 0]
    items = ds[indices]
    assert ids(items) == [3, N - 1, 3, 20, 0]
    for item, i in zip(items, [3, N - 1, 3, 20, 0]):
        check(item, i)
    assert ids(ds.__getitems__(np.array([7, 6]))) == [7, 6]
    assert ids(ds[np.array([50, 1])]) == [50, 1]
    assert ds.__getitems__([]) == []
    with pytest.raises(IndexError, match=f"index {N} out of range for a dataset of {N} rows"):
        ds.__getitems__([1, N])
    with pytest.raises(TypeError, match="ints"):
        ds.__getitems__([1.5])
    with pytest.raises(TypeError):
        ds[2.0]


def test_iteration_yields_every_example_in_order(ds):
    items = list(ds)
    assert ids(items) == list(range(N))
    for i, item in enumerate(items):
        check(item, i)


def test_columns_select_what_is_returned(cache):
    ds = ShardedDataset(cache, columns=["label", "embedding"])
    assert set(ds[4]) == {"label", "embedding"} and ds[4]["label"] == 4
    assert all(set(item) == {"label", "embedding"} for item in ds[:3])
    with pytest.raises(KeyError, match="nope"):
        ShardedDataset(cache, columns=["label", "nope"])


def test_transform_is_applied_everywhere(cache):
    ds = ShardedDataset(cache, columns=["id", "label"], transform=lambda ex: (ex["id"], ex["label"] * 10))
    assert ds[3] == (3, 30)
    assert ds[[1, 2]] == [(1, 10), (2, 20)]
    assert list(ds[:2]) == [(0, 0), (1, 10)]


def test_pickles_small_and_reads_the_same(ds):
    view = ds[10:20:2]
    view[0]
    data = pickle.dumps(view)
    assert len(data) < 50_000
    clone = pickle.loads(data)
    assert ids(clone) == [10, 12, 14, 16, 18] and clone.backend.open_shards == [1]


def test_from_a_backend(cache):
    backend = ArrowBackend.open(cache, max_open_shards=2)
    ds = ShardedDataset(backend)
    assert ds.backend is backend and ids(ds[[0, 20, 40]]) == [0, 20, 40]
    assert len(backend.open_shards) == 2
    with pytest.raises(FeatureError, match="opened on a cache"):
        ShardedDataset(ArrowBackend.from_table(pa.table({"x": [1]})))
    assert "num_rows=57" in repr(ds) and cache in repr(ds)


def test_nullable_arrays_decode_to_none(tmp_path):
    features = Features({"a": Array((2,), "float32", nullable=True), "v": Array((None,), "int8", nullable=True),
                         "s": Sequence(Array((2,), "uint8"), nullable=True)})
    examples = [{"a": None, "v": [1, 2], "s": None}, {"a": [1, 2], "v": None, "s": [[1, 2]]}]
    path = str(tmp_path / "c")
    write_shards(examples, path, features)
    first, second = ShardedDataset(path)[[0, 1]]
    assert first["a"] is None and first["v"].tolist() == [1, 2] and first["s"] is None
    assert second["a"].tolist() == [1.0, 2.0] and second["v"] is None and second["s"][0].tolist() == [1, 2]


def within(array: np.ndarray, buffer: pa.Buffer) -> bool:
    return buffer.address <= array.ctypes.data and array.ctypes.data + array.nbytes <= buffer.address + buffer.size


def test_arrays_decode_as_views_of_arrow_memory(cache):
    table = ArrowBackend.open(cache).slice(10, 3)  # one batch of a memory-mapped shard
    fixed = table.column("grid").chunk(0)
    rows = FEATURES["grid"].decode(fixed)
    assert all(within(r, fixed.values.buffers()[1]) and not r.flags.writeable for r in rows)
    ragged = table.column("boxes").chunk(0)
    rows = FEATURES["boxes"].decode(ragged)
    assert [r.shape for r in rows] == [(2, 4), (3, 4), (0, 4)]
    assert all(within(r, ragged.values.values.buffers()[1]) for r in rows if r.size)


@pytest.mark.timeout(120)
def test_reading_rows_never_imports_pandas(tmp_path):
    """pyarrow's to_numpy imports pandas when it is installed, a third of a second in every fresh worker."""
    path = str(tmp_path / "cache")
    write_shards((example(i) for i in range(30)), path, FEATURES, shard_size_bytes=8_000)
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    marker = tmp_path / "pandas_imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('a stand-in')\n")
    script = ("from beam_shards import ArrowBackend, ShardedDataset\n"
              f"ds = ShardedDataset({path!r}, image_mode='numpy')\n"
              "rows = [ds[0], ds[29]] + ds.__getitems__([3, 17, 3])\n"
              "assert rows[1]['embedding'].shape == (8,) and rows[2]['id'] == 3\n"
              f"ArrowBackend.open({path!r}).get_row(5)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), REPO])})
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    check = subprocess.run([sys.executable, "-c", "import pyarrow as pa; pa.array([1]).to_numpy(zero_copy_only=False)"],
                           capture_output=True, text=True, timeout=100, env={**os.environ, "PYTHONPATH": str(fake.parent)})
    assert check.returncode == 0 and marker.exists()  # the stand-in does catch pyarrow's import
