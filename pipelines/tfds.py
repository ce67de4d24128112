"""Prepared TensorFlow Datasets folders: finding one, its split files, and its features from TFDS metadata.

A TFDS folder (`<name>/<version>/` with `dataset_info.json` and `features.json`) says
what its records hold: class names, image shapes, tensor shapes and dtypes, and
which tensors are stored as raw or zlib-compressed bytes. `tfds_features` turns that
into `Features` and the decoder of each column, so `pipelines.tfrecord` converts a
prepared dataset with no feature inference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from beam_shards.errors import FeatureError
from beam_shards.features import (VALUE_DTYPES, Array, ClassLabel, Feature, Features, Image,
                                  Sequence as SequenceFeature, Value)
from beam_shards.storage import fs
from pipelines import tf_example

TFDS_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# The content fields of TFDS's Feature proto (tensorflow_datasets/core/proto/feature.proto), as proto JSON names them.
_TFDS_KINDS = ("featuresDict", "tensor", "classLabel", "image", "video", "audio", "boundingBox", "text",
               "translation", "sequence", "jsonFeature")



def find_tfds_folder(path: str) -> str | None:
    """The TFDS dataset folder (`<name>/<version>/`) that `path` names, or None.

    `path` may be the version folder itself, or the dataset folder above it, where
    its latest version is taken.
    """
    if fs.exists(fs.join(path, TFDS_INFO)):
        return path
    versions = []
    for found in fs.list_files([fs.join(path, "*", TFDS_INFO)]):
        version = found.replace("\\", "/").rsplit("/", 2)[-2]
        if _VERSION.match(version):
            versions.append((tuple(int(part) for part in version.split(".")), version))
    return fs.join(path, max(versions)[1]) if versions else None


def read_json(path: str) -> Any:
    try:
        return json.loads(fs.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FeatureError(f"cannot read {path}: {error}") from None


def split_files(folder: str, info: Mapping[str, Any], split: str | None) -> tuple[str, list[str], int]:
    """`(split name, shard paths, number of examples)` of a split of a TFDS folder.

    Raises:
      FeatureError: no such split, shards that are not TFRecords, or a shard missing.
    """
    splits = {entry.get("name"): entry for entry in info.get("splits", [])}
    if split is None and len(splits) == 1:
        split = next(iter(splits))
    if split not in splits:
        available = ", ".join(sorted(map(str, splits))) or "none"
        raise FeatureError(f"give --split: one of {available}" if split is None
                           else f"the dataset has no split {split!r} (its splits: {available})")
    entry = splits[split]
    file_format = info.get("fileFormat") or "tfrecord"
    if file_format != "tfrecord":
        raise FeatureError(f"the dataset's shards are {file_format} files; only TFRecord shards are read")
    lengths = [int(length) for length in entry.get("shardLengths", [])]
    count = len(lengths) or int(entry.get("numShards", 0))
    digits = max(len(str(count)), 5)
    names = []
    for index in range(count):
        name = entry.get("filepathTemplate") or TFDS_TEMPLATE
        for variable, value in (("DATASET", info.get("name", "")), ("SPLIT", split), ("FILEFORMAT", file_format),
                                ("SHARD_X_OF_Y", f"{index:0{digits}d}-of-{count:0{digits}d}"),
                                ("SHARD_INDEX", f"{index:0{digits}d}"), ("NUM_SHARDS", f"{count:0{digits}d}")):
            name = name.replace("{" + variable + "}", value)
        names.append(fs.join(folder, name))
    missing = [path for path, size in fs.sizes(names).items() if size is None]
    if missing:
        raise FeatureError(f"{len(missing)} shard(s) of split {split!r} are missing, such as {missing[0]}")
    return split, names, sum(lengths)


def _shape(spec: Mapping[str, Any]) -> tuple[int | None, ...]:
    return tuple(None if int(d) < 0 else int(d) for d in (spec.get("shape") or {}).get("dimensions", []))


def _tensor_feature(name: str, spec: Mapping[str, Any]) -> tuple[Feature, str | None]:
    """Our feature (and decoder) for a TFDS Tensor or Scalar."""
    dtype, shape = spec.get("dtype", ""), _shape(spec)
    encoding = spec.get("encoding") or "none"
    decoder = None if encoding == "none" else encoding
    if decoder is not None and decoder not in tf_example.DECODERS:
        raise FeatureError(f"feature {name!r}: tensor encoding {encoding!r} is not supported")
    if dtype == "string":
        if decoder is None and len(shape) <= 1:
            return (Value("binary") if not shape else SequenceFeature(Value("binary"))), None
        raise FeatureError(f"feature {name!r}: string tensors of shape {shape} are not supported")
    if dtype not in VALUE_DTYPES:
        raise FeatureError(f"feature {name!r}: dtype {dtype!r} has no matching feature")
    if not shape and decoder is None:
        return Value(dtype), None
    if any(d is None for d in shape[1:]) or (decoder is not None and None in shape):
        raise FeatureError(f"feature {name!r}: tensors of shape {shape} (unknown inner dimensions) are not "
                           "supported; leave the feature out with a --features file")
    return Array(shape or (1,), dtype), decoder


def _labels_file(folder: str, name: str) -> list[str] | None:
    path = fs.join(folder, name.replace("/", "-") + ".labels.txt")
    if not fs.exists(path):
        return None
    return [line.strip() for line in fs.read_bytes(path).decode("utf-8").split("\n") if line.strip()]


def class_label_of_spec(name: str, spec: Mapping[str, Any], folder: str) -> ClassLabel:
    names = spec.get("names") or _labels_file(folder, name)
    count = int(spec.get("numClasses", 0) or 0)
    if names and count and len(names) != count:
        raise FeatureError(f"feature {name!r}: {len(names)} class names for {count} classes")
    if not names and not count:
        raise FeatureError(f"feature {name!r}: a ClassLabel with neither class names nor a number of classes")
    # TFDS writes -1 for an example without a label: stored as null.
    return ClassLabel(names=list(names), nullable=True) if names else ClassLabel(num_classes=count, nullable=True)


_Column = tuple[str, Feature, "str | None", dict[str, Any]]


def _tfds_columns(name: str, spec: Mapping[str, Any], folder: str) -> Iterator[_Column]:
    """The columns (Example keys) of one TFDS feature: `(name, feature, decoder, what TFDS says)`."""
    kind = next((key for key in _TFDS_KINDS if key in spec), None)
    tfds_class = str(spec.get("pythonClassName", kind)).rsplit(".", 1)[-1]
    content = spec.get(kind) or {}
    described: dict[str, Any] = {"tfds": tfds_class}
    if kind == "featuresDict":
        for child, child_spec in sorted(content.get("features", {}).items()):
            yield from _tfds_columns(f"{name}/{child}" if name else child, child_spec, folder)
        return
    if kind == "sequence" and tfds_class != "Dataset":
        length = int(content.get("length", -1))
        for column, feature, decoder, inner in _tfds_columns(name, content.get("feature", {}), folder):
            yield column, _sequence_of(column, feature, decoder, length), None, {
                "tfds": "Sequence", "length": None if length < 0 else length, "feature": inner}
        return
    if kind == "translation":
        if content.get("variableLanguagesPerExample"):
            raise FeatureError(f"feature {name!r}: a TranslationVariableLanguages feature is not supported")
        for language in content.get("languages", []):
            yield f"{name}/{language}", Value("string"), None, {"tfds": "Text"}
        return
    decoder = None
    if kind == "classLabel":
        feature = class_label_of_spec(name, content, folder)
    elif kind == "text":
        feature = Value("string")
    elif kind in ("image", "video"):
        feature = Image(nullable=False) if kind == "image" else SequenceFeature(Image(nullable=False))
        described.update(shape=list(_shape(content)), dtype=content.get("dtype"),
                         encoding_format=content.get("encodingFormat") or None)
    elif kind in ("tensor", "audio", "boundingBox"):
        feature, decoder = _tensor_feature(name, {"dtype": "float32", "shape": {"dimensions": ["4"]}}
                                           if kind == "boundingBox" and not content else content)
        described.update(shape=list(_shape(content)), dtype=content.get("dtype"))
        if content.get("encoding") not in (None, "", "none"):
            described["encoding"] = content["encoding"]
    else:
        raise FeatureError(f"feature {name!r} is a TFDS {tfds_class}, which is not supported; "
                           "give a --features file without it")
    yield name, feature, decoder, described


def _sequence_of(name: str, feature: Feature, decoder: str | None, length: int) -> Feature:
    size = None if length < 0 else length
    if decoder is None and isinstance(feature, Value) and feature.dtype not in ("string", "binary"):
        return Array((size,), feature.dtype)
    if decoder is None and isinstance(feature, Array) and not feature.variable:
        return Array((size, *feature.shape), feature.dtype)
    if decoder is None and isinstance(feature, (Value, ClassLabel, Image)):
        return SequenceFeature(feature)
    raise FeatureError(f"feature {name!r}: a Sequence of {feature!r} is not supported")


def tfds_features(folder: str, spec: Mapping[str, Any]) -> tuple[Features, dict[str, str], dict[str, Any]]:
    """Our features for a TFDS `features.json`: `(features, decoders, what TFDS says of each)`.

    Nested FeaturesDicts become columns named `parent/child`, as the Examples store them.

    Raises:
      FeatureError: a feature with no equivalent here (RLDS datasets, ragged tensors...).
    """
    features, decoders, described = {}, {}, {}
    for name, feature, decoder, info in _tfds_columns("", spec, folder):
        features[name] = feature
        described[name] = info
        if decoder:
            decoders[name] = decoder
    if not features:
        raise FeatureError(f"{fs.join(folder, TFDS_FEATURES)} declares no features")
    return Features(features), decoders, described


def tfds_metadata(info: Mapping[str, Any], split: str, files: list[str], count: int,
                   described: Mapping[str, Any]) -> dict[str, Any]:
    metadata = {"name": info.get("name"), "config": info.get("configName") or None,
                "version": info.get("version"), "split": split, "num_examples": count, "num_shards": len(files),
                "description": info.get("description"), "citation": info.get("citation"),
                "homepage": (info.get("location") or {}).get("urls", [None])[0],
                "supervised_keys": info.get("supervisedKeys"), "features": dict(described)}
    return {key: value for key, value in metadata.items() if value not in (None, "", [], {})}
