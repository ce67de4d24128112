"""Hugging Face round trips keep every attribute: decode=False, sampling rates, file paths, and -1 as "no label"."""

from __future__ import annotations

import io
import wave

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets.table import InMemoryTable, table_cast

from beam_shards import (Audio, ClassLabel, EncodeError, Features, Image, ShardedDataset, Video, encode_example,
                         from_hf, write_shards)
from beam_shards.features import feature_from_dict
from beam_shards.hf import from_hf_features, to_hf_features

from _support import png

pytestmark = pytest.mark.timeout(120)
D = datasets


def _wav(frames: int = 50) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1), handle.setsampwidth(2), handle.setframerate(8000)
        handle.writeframes(b"\x00\x01" * frames)
    return out.getvalue()


def _dataset(features: datasets.Features, columns: dict) -> datasets.Dataset:
    """A Dataset from HF's storage form of its columns (no encoding, so no decoder is needed)."""
    table = pa.table({name: pa.array(values, features.arrow_schema.field(name).type) for name, values in columns.items()})
    return D.Dataset(InMemoryTable(table_cast(table, features.arrow_schema)), info=D.DatasetInfo(features=features))


def _stored(dataset: datasets.Dataset) -> list:
    return dataset.with_format("arrow")[:].to_pylist()


@pytest.mark.parametrize("feature", [Image(decode=False), Audio(8000, decode=False, keep_path=True),
                                     Video(keep_path=True, nullable=False), Audio()])
def test_the_file_kinds_attributes_round_trip_through_json(feature):
    assert feature_from_dict(feature.to_dict()) == feature
    assert "decode" not in Audio().to_dict() and "keep_path" not in Image().to_dict(), "older forms stay the same"
    assert repr(Audio(8000, decode=False, keep_path=True)) == "Audio(sampling_rate=8000, decode=False, keep_path=True)"


def test_audio_that_hf_does_not_decode_comes_back_undecoded_at_its_sampling_rate(tmp_path):
    features = D.Features({"speech": D.Audio(sampling_rate=8000, decode=False)})
    original = _dataset(features, {"speech": [{"bytes": _wav(), "path": "a.wav"}, None, {"bytes": _wav(9), "path": None}]})
    assert from_hf_features(original.features)["speech"] == Audio(8000, decode=False)
    assert from_hf(original, str(tmp_path / "cache")).features["speech"] == Audio(8000, decode=False, keep_path=True)
    back = ShardedDataset(str(tmp_path / "cache")).to_hf()
    assert back.features == original.features
    assert back.features["speech"].decode is False and back.features["speech"].sampling_rate == 8000
    # Reading a row needs no audio decoder: HF hands the stored file back as it is.
    assert back[0]["speech"] == {"bytes": _wav(), "path": "a.wav"} and back[1]["speech"] is None
    assert _stored(back) == _stored(original)


def test_image_and_audio_paths_come_back_from_the_cache(tmp_path):
    (tmp_path / "on_disk.png").write_bytes(png(7))
    features = D.Features({"image": D.Image(), "sound": D.Audio(sampling_rate=16000)})
    original = _dataset(features, {
        "image": [{"bytes": png(1), "path": "train/cat.png"}, {"bytes": None, "path": str(tmp_path / "on_disk.png")},
                  None],
        "sound": [{"bytes": _wav(), "path": "clips/a.wav"}, {"bytes": _wav(), "path": None}, None],
    })
    from_hf(original, str(tmp_path / "cache"))
    ours = ShardedDataset(str(tmp_path / "cache"), image_mode="bytes")
    assert ours[0] == {"image": png(1), "sound": _wav()}, "readers here read the bytes, as before"
    assert ours[1]["image"] == png(7), "a file stored by path alone is read into the cache"
    stored = _stored(ours.to_hf())
    assert [row["image"] and row["image"]["path"] for row in stored] == ["train/cat.png", str(tmp_path / "on_disk.png"),
                                                                         None]
    assert [row["sound"] and row["sound"]["path"] for row in stored] == ["clips/a.wav", None, None]
    assert stored[1]["image"]["bytes"] == png(7)
    assert ours.to_hf().features == original.features


def test_paths_of_files_nested_in_records_and_lists_come_back(tmp_path):
    features = D.Features({"rec": {"img": D.Image(), "n": D.Value("int8")}, "imgs": D.List(D.Image())})
    original = _dataset(features, {"rec": [{"img": {"bytes": png(1), "path": "a.png"}, "n": 1}],
                                   "imgs": [[{"bytes": png(2), "path": "b.png"}, {"bytes": png(3), "path": None}]]})
    manifest = from_hf(original, str(tmp_path / "cache"))
    assert manifest.features["rec"].fields["img"] == manifest.features["imgs"].feature == Image(keep_path=True)
    ours = ShardedDataset(str(tmp_path / "cache"), image_mode="bytes")
    assert ours[0]["imgs"] == [png(2), png(3)] and ours[0]["rec"] == {"img": png(1), "n": 1}
    back = ours.to_hf()
    assert back.features == original.features and _stored(back) == _stored(original)


def test_a_kind_that_keeps_paths_keeps_the_path_a_value_names(tmp_path):
    (tmp_path / "dog.png").write_bytes(png(2))
    features = Features({"image": Image(keep_path=True)})
    assert encode_example({"image": str(tmp_path / "dog.png")}, features)["image"] == {
        "bytes": png(2), "path": str(tmp_path / "dog.png")}
    assert encode_example({"image": png(2)}, features)["image"] == {"bytes": png(2), "path": None}
    write_shards([{"image": str(tmp_path / "dog.png")}, {"image": None}], str(tmp_path / "cache"), features)
    ours = ShardedDataset(str(tmp_path / "cache"), image_mode="bytes")
    assert [row["image"] for row in ours] == [png(2), None]
    assert _stored(ours.to_hf())[0]["image"] == {"bytes": png(2), "path": str(tmp_path / "dog.png")}


def test_a_batch_of_files_keeps_its_paths_and_checks_its_bytes():
    features = Features({"image": Image(keep_path=True)})
    column = pa.array([{"bytes": png(1), "path": "a.png"}, None, {"bytes": png(3), "path": None}])
    table = features.encode_batch(pa.table({"image": column}))
    assert table.column("image").to_pylist() == column.to_pylist()
    assert features.encode_batch(pa.table({"image": pa.array([png(1)])})).column("image").to_pylist() == [
        {"bytes": png(1), "path": None}]
    with pytest.raises(EncodeError, match="row 1 of a batch, field 'image'"):
        features.encode_batch(pa.table({"image": pa.array([{"bytes": png(1), "path": "a"}, {"bytes": b"no", "path": "b"}])}))


def test_an_old_image_column_goes_to_hf_without_paths(tmp_path):
    write_shards([{"image": png(1)}], str(tmp_path / "cache"), Features({"image": Image()}))
    back = ShardedDataset(str(tmp_path / "cache")).to_hf()
    assert _stored(back) == [{"image": {"bytes": png(1), "path": None}}]
    assert to_hf_features(Features({"image": Image()})) == D.Features({"image": D.Image()})


def test_no_label_in_hf_data_is_null(tmp_path):
    features = D.Features({"label": D.ClassLabel(names=["neg", "pos"]), "labels": D.List(D.ClassLabel(num_classes=3))})
    original = _dataset(features, {"label": [1, -1, 0, -1], "labels": [[0, -1], [], None, [2]]})
    from_hf(original, str(tmp_path / "cache"))
    ours = ShardedDataset(str(tmp_path / "cache"))
    assert [row["label"] for row in ours] == [1, None, 0, None]
    assert [row["labels"] for row in ours] == [[0, None], [], None, [2]]
    assert ours.to_hf()["label"] == [1, None, 0, None]


def test_no_label_in_a_parquet_export_of_hf_data_is_null(tmp_path):
    from pipelines import parquet

    original = D.Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, -1, 1]},
                                   features=D.Features({"text": D.Value("string"),
                                                        "label": D.ClassLabel(names=["neg", "pos"])}))
    original.to_parquet(str(tmp_path / "export.parquet"))
    assert pq.read_table(tmp_path / "export.parquet").column("label").to_pylist() == [0, -1, 1]
    manifest = parquet.run(["--input", str(tmp_path / "export.parquet"), "--output", str(tmp_path / "cache")])
    assert manifest.features["label"] == ClassLabel(names=["neg", "pos"], nullable=True)
    assert [row["label"] for row in ShardedDataset(str(tmp_path / "cache"))] == [0, None, 1]


def test_minus_one_is_null_only_where_the_label_is_nullable():
    nullable = Features({"label": ClassLabel(num_classes=2, nullable=True)})
    assert encode_example({"label": -1}, nullable) == {"label": None}
    assert nullable.encode_batch(pa.table({"label": [1, -1]})).column("label").to_pylist() == [1, None]
    required = Features({"label": ClassLabel(num_classes=2)})
    for attempt in (lambda: encode_example({"label": -1}, required),
                    lambda: required.encode_batch(pa.table({"label": [1, -1]}))):
        with pytest.raises(EncodeError, match='out of range 0..1 \\(-1, Hugging Face\'s "no label", is null in a '
                                              'nullable ClassLabel\\)'):
            attempt()
    with pytest.raises(EncodeError, match="out of range 0..1; got int -2"):
        encode_example({"label": -2}, nullable)
