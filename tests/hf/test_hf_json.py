"""Hugging Face's Json both ways: a real `datasets.Dataset` of mixed shapes in, the same values out."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pytest

from beam_shards import FeatureError, Features, Json, Sequence, ShardedDataset, Value, from_hf, shard_paths, write_shards
from beam_shards.hf import from_hf_features, to_hf_features

pytestmark = pytest.mark.timeout(120)
D = datasets
MIXED = [{"a": 1, "b": [True, None]}, [1, "two", {"three": 3.5}], "text", 7, -0.25, False, None, [], {}]


def test_the_json_feature_maps_both_ways():
    assert from_hf_features(D.Features({"j": D.Json(), "l": D.List(D.Json())})) == Features(
        {"j": Json(), "l": Sequence(Json(), nullable=True)})
    assert to_hf_features(Features({"j": Json(nullable=False)})) == D.Features({"j": D.Json()})


def test_json_that_hf_does_not_decode_has_no_equal():
    with pytest.raises(FeatureError, match="column 'j': Hugging Face Json\\(decode=False\\) has no equal here"):
        from_hf_features(D.Features({"j": D.Json(decode=False)}))


def test_a_dataset_of_mixed_json_goes_out_and_comes_back_equal(tmp_path):
    original = D.Dataset.from_dict({"id": list(range(len(MIXED))), "j": MIXED},
                                   features=D.Features({"id": D.Value("int64"), "j": D.Json()}))
    assert [row["j"] for row in original] == MIXED
    path = str(tmp_path / "cache")
    assert from_hf(original, path).features["j"] == Json()
    ours = ShardedDataset(path)
    assert [row["j"] for row in ours] == MIXED
    back = ours.to_hf()
    assert back.features == original.features
    assert [row["j"] for row in back] == MIXED
    # HF's own loader reads the shards as Json: they store HF's JSON extension type.
    loaded = D.load_dataset("arrow", data_files=shard_paths(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.features == original.features and [row["j"] for row in loaded] == MIXED


def test_hf_mixed_types_become_a_list_of_json_and_come_back(tmp_path):
    original = D.Dataset.from_dict({"a": [[{"b": 0}, {"c": [1]}], [], [{"d": None}]]}, on_mixed_types="use_json")
    assert original.features == D.Features({"a": D.List(D.Json())})
    from_hf(original, str(tmp_path / "cache"))
    back = ShardedDataset(str(tmp_path / "cache")).to_hf()
    assert back.features == original.features and back[:] == original[:]


def test_a_cache_written_here_goes_to_hf_as_json(tmp_path):
    path = str(tmp_path / "cache")
    write_shards([{"j": value, "n": i} for i, value in enumerate(MIXED)], path,
                 Features({"j": Json(), "n": Value("int64")}))
    shard = pa.ipc.open_file(shard_paths(path)[0]).schema
    assert shard.field("j").type == pa.json_(pa.string())
    back = ShardedDataset(path).to_hf()
    assert back.features["j"] == D.Json() and back["j"] == MIXED


def test_a_parquet_export_of_hf_json_converts_with_no_flags(tmp_path):
    from pipelines import parquet

    D.Dataset.from_dict({"j": MIXED}, features=D.Features({"j": D.Json()})).to_parquet(str(tmp_path / "e.parquet"))
    manifest = parquet.run(["--input", str(tmp_path / "e.parquet"), "--output", str(tmp_path / "cache")])
    assert manifest.features == Features({"j": Json()})
    assert [row["j"] for row in ShardedDataset(str(tmp_path / "cache"))] == MIXED
