"""Prepared TensorFlow Datasets folders: finding one, its split files, and its features from TFDS metadata.

A TFDS folder (`<name>/<version>/` with `dataset_info.json` and `features.json`) says
what its records hold: class names, image shapes, tensor shapes and dtypes, and
which tensors are stored as raw or zlib-compressed bytes. `tfds_features` turns that
into `Features` and the decoder of each column, so `pipelines.tfrecord` converts a
prepared dataset with no feature inference.

The metadata is read as untrusted input: the JSON files within a size and a depth,
every field used checked for its type and range, and every shard a file inside the
dataset folder. What does not fit is a `FeatureError` naming the file and the field.
"""

from __future__ import annotations

import json
import os
import re
import reprlib
from collections.abc import Iterator, Mapping
from typing import Any

from beam_shards import FeatureError
from beam_shards.features import (VALUE_DTYPES, Array, ClassLabel, Feature, Features, Image,
                                  Sequence as SequenceFeature, Value)
from beam_shards.format import MAX_DEPTH, json_depth
from beam_shards.storage import folders, fs
from pipelines import tf_example

TFDS_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# The content fields of TFDS's Feature proto (tensorflow_datasets/core/proto/feature.proto), as proto JSON names them.
_TFDS_KINDS = ("featuresDict", "tensor", "classLabel", "image", "video", "audio", "boundingBox", "text",
               "translation", "sequence", "jsonFeature")
# The largest metadata file read: dataset_info.json, features.json or a labels.txt.
_MAX_FILE_BYTES = 64 << 20
# How deeply dataset_info.json and features.json may nest lists and objects. TFDS's own nest
# far less; half a manifest's depth leaves room for where their values go in its metadata.
MAX_JSON_DEPTH = MAX_DEPTH // 2
# How deeply FeaturesDicts and Sequences may nest in one another.
_MAX_FEATURE_NESTING = 16
# The most dimensions a tensor may have (numpy 1's limit).
_MAX_RANK = 32
_INT64_MAX = 2**63 - 1
# A whole number as proto JSON writes an int64: in a string.
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,19}")
# Beam reads a shard path as a glob pattern.
_GLOB_CHARACTERS = re.compile(r"[*?\[]")


def find_tfds_folder(path: str) -> str | None:
    """The TFDS dataset folder (`<name>/<version>/`) that `path` names, or None.

    `path` may be the version folder itself, or the dataset folder above it, where
    its latest version is taken.
    """
    if fs.exists(fs.join(path, TFDS_INFO)):
        return path
    versions = []
    for found in folders.list_files([fs.join(path, "*", TFDS_INFO)]):
        version = found.replace("\\", "/").rsplit("/", 2)[-2]
        if _VERSION.match(version):
            versions.append((tuple(int(part) for part in version.split(".")), version))
    return fs.join(path, max(versions)[1]) if versions else None


def read_json(path: str) -> dict[str, Any]:
    """The JSON object in the file at `path`.

    Raises:
      FeatureError: the file cannot be read, holds more than 64 MiB, or is not UTF-8 JSON
        holding an object, nested at most `MAX_JSON_DEPTH` levels, without NaN or infinities.
    """
    try:
        data = json.loads(fs.read_bytes(path, _MAX_FILE_BYTES).decode("utf-8"), parse_constant=_refuse_constant)
        too_deep = json_depth(data) > MAX_JSON_DEPTH
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise FeatureError(f"cannot read {path}: {error}") from None
    except RecursionError:  # deeper than Python's parser goes
        too_deep = True
    if too_deep:
        raise FeatureError(f"{path} nests lists and objects more than {MAX_JSON_DEPTH} levels deep")
    return _object(data, path)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON holds")


# --- checked fields: `what` names the file and the field ------------------------------

def _refuse(what: str, value: Any, expected: str) -> FeatureError:
    shown = reprlib.repr(value)
    return FeatureError(f"{what} is {shown if len(shown) <= 80 else shown[:77] + '...'}, expected {expected}")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(what, value, "a JSON object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _refuse(what, value, "a JSON list")
    return value


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _refuse(what, value, "a string")
    return value


def _optional_string(spec: Mapping[str, Any], key: str, what: str) -> str | None:
    value = spec.get(key)
    return None if value is None else _string(value, f"{what}: {key}")


def _integer(value: Any, what: str, minimum: int = 0) -> int:
    """A whole number from `minimum` to 2**63 - 1, as proto JSON writes one: a number, or
    (an int64) a string of digits."""
    number = int(value) if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value) else value
    if type(number) is not int or not minimum <= number <= _INT64_MAX:
        raise _refuse(what, value, f"a whole number from {minimum} to 2**63 - 1")
    return number


# --- splits --------------------------------------------------------------------------

def split_files(folder: str, info: Mapping[str, Any], split: str | None) -> tuple[str, list[str], int]:
    """`(split name, shard paths, number of examples)` of a split of a TFDS folder.

    The number of shards is checked against the files in `folder` before a path is made,
    and every shard path must name a file inside `folder`.

    Raises:
      FeatureError: no such split, shards that are not TFRecords, more shards than files,
        a shard outside `folder` or missing, or a field of the wrong type or range.
    """
    splits = {}
    for index, entry in enumerate(_list(info.get("splits", []), f"{TFDS_INFO}: splits")):
        entry = _object(entry, f"{TFDS_INFO}: splits[{index}]")
        splits[_string(entry.get("name"), f"{TFDS_INFO}: splits[{index}].name")] = entry
    if split is None and len(splits) == 1:
        split = next(iter(splits))
    if split not in splits:
        available = ", ".join(sorted(splits)) or "none"
        raise FeatureError(f"give --split: one of {available}" if split is None
                           else f"the dataset has no split {split!r} (its splits: {available})")
    entry = splits[split]
    file_format = _string(info.get("fileFormat") or "tfrecord", f"{TFDS_INFO}: fileFormat")
    if file_format != "tfrecord":
        raise FeatureError(f"the dataset's shards are {file_format} files; only TFRecord shards are read")
    where = f"{TFDS_INFO}, split {split!r}"
    lengths = [_integer(length, f"{where}: shardLengths[{index}]")
               for index, length in enumerate(_list(entry.get("shardLengths", []), f"{where}: shardLengths"))]
    count = len(lengths) or _integer(entry.get("numShards", 0), f"{where}: numShards")
    files = len(folders.list_dir(folder, recursive=True))
    if count > files:
        raise FeatureError(f"{where}: {count:,} shards, but the dataset folder holds {files:,} files")
    template = _string(entry.get("filepathTemplate") or TFDS_TEMPLATE, f"{where}: filepathTemplate")
    dataset = _string(info.get("name", ""), f"{TFDS_INFO}: name")
    digits = max(len(str(count)), 5)
    inside = _Inside(folder)
    names = []
    for index in range(count):
        name = template
        for variable, value in (("DATASET", dataset), ("SPLIT", split), ("FILEFORMAT", file_format),
                                ("SHARD_X_OF_Y", f"{index:0{digits}d}-of-{count:0{digits}d}"),
                                ("SHARD_INDEX", f"{index:0{digits}d}"), ("NUM_SHARDS", f"{count:0{digits}d}")):
            name = name.replace("{" + variable + "}", value)
        problem = inside.problem(name)
        if problem:
            raise FeatureError(f"{where}: shard {index} is {name!r}, {problem}")
        names.append(fs.join(folder, name))
    missing = [path for path, size in folders.sizes(names).items() if size is None]
    if missing:
        raise FeatureError(f"{len(missing)} shard(s) of split {split!r} are missing, such as {missing[0]}")
    return split, names, sum(lengths)


class _Inside:
    """Tells whether a path relative to `folder` names a file inside it."""

    def __init__(self, folder: str):
        self._folder = folder
        self._root = os.path.realpath(fs.local_path(folder)) if fs.is_local(folder) else None

    def problem(self, name: str) -> str | None:
        """What keeps `name` from naming a file inside the folder, or None."""
        if "\0" in name or _GLOB_CHARACTERS.search(name):
            return "which holds a NUL or a glob character (*, ? or [)"
        if self._root is None:
            outside = name.startswith("/") or "://" in name or ".." in name.split("/")
        else:
            # Resolved, links included: a link inside the folder may point out of it.
            path = os.path.realpath(fs.local_path(fs.join(self._folder, name)))
            outside = path == self._root or os.path.commonpath([self._root, path]) != self._root
        return "outside the dataset folder; a shard must be a file inside it" if outside else None


# --- features ------------------------------------------------------------------------

def _feature_where(name: str) -> str:
    """How errors name the TFDS feature `name` (a column name; "" for the root of features.json)."""
    return f"{TFDS_FEATURES}, feature {name!r}" if name else TFDS_FEATURES


def _shape(spec: Mapping[str, Any], what: str) -> tuple[int | None, ...]:
    shape = _object(spec.get("shape") or {}, f"{what}: shape")
    dimensions = _list(shape.get("dimensions", []), f"{what}: shape.dimensions")
    if len(dimensions) > _MAX_RANK:
        raise FeatureError(f"{what}: a shape of {len(dimensions)} dimensions; a tensor may have {_MAX_RANK}")
    return tuple(None if d == -1 else d for d in (_integer(d, f"{what}: shape.dimensions[{index}]", minimum=-1)
                                                   for index, d in enumerate(dimensions)))


def _array(what: str, shape: tuple[int | None, ...], dtype: str) -> Array:
    try:
        return Array(shape, dtype)
    except FeatureError as error:
        raise FeatureError(f"{what}: {error}") from None


def _tensor_feature(what: str, spec: Mapping[str, Any]) -> tuple[Feature, str | None]:
    """Our feature (and decoder) for a TFDS Tensor or Scalar; `what` names it."""
    dtype, shape = _string(spec.get("dtype", ""), f"{what}: dtype"), _shape(spec, what)
    encoding = _string(spec.get("encoding") or "none", f"{what}: encoding")
    decoder = None if encoding == "none" else encoding
    if decoder is not None and decoder not in tf_example.DECODERS:
        raise FeatureError(f"{what}: tensor encoding {encoding!r} is not supported")
    if dtype == "string":
        if decoder is None and len(shape) <= 1:
            return (Value("binary") if not shape else SequenceFeature(Value("binary"))), None
        raise FeatureError(f"{what}: string tensors of shape {shape} are not supported")
    if dtype not in VALUE_DTYPES:
        raise FeatureError(f"{what}: dtype {dtype!r} has no matching feature")
    if not shape and decoder is None:
        return Value(dtype), None
    if any(d is None for d in shape[1:]) or (decoder is not None and None in shape):
        raise FeatureError(f"{what}: tensors of shape {shape} (unknown inner dimensions) are not "
                           "supported; leave the feature out with a --features file")
    return _array(what, shape or (1,), dtype), decoder


def _labels_file(folder: str, name: str, what: str) -> list[str] | None:
    path = fs.join(folder, name.replace("/", "-") + ".labels.txt")
    if not fs.exists(path):
        return None
    try:
        text = fs.read_bytes(path, _MAX_FILE_BYTES).decode("utf-8")
    except OSError as error:
        raise FeatureError(f"{what}: cannot read {path}: {error}") from None
    except UnicodeDecodeError as error:
        raise FeatureError(f"{what}: {path} is not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x})"
                           ) from None
    return [line.strip() for line in text.split("\n") if line.strip()]


def class_label_of_spec(name: str, spec: Mapping[str, Any], folder: str) -> ClassLabel:
    """The ClassLabel of TFDS feature `name`: class names from `spec` or its labels.txt, or a number of classes.

    Raises:
      FeatureError: neither, both disagreeing, duplicate names, or fields of the wrong type.
    """
    what = _feature_where(name)
    names = spec.get("names")
    if names:
        names = [_string(item, f"{what}: names[{index}]") for index, item in enumerate(_list(names, f"{what}: names"))]
    else:
        names = _labels_file(folder, name, what)
    count = _integer(spec.get("numClasses") or 0, f"{what}: numClasses")
    if names and count and len(names) != count:
        raise FeatureError(f"{what}: {len(names)} class names for {count} classes")
    if not names and not count:
        raise FeatureError(f"{what}: a ClassLabel with neither class names nor a number of classes")
    seen: set[str] = set()
    for item in names or ():
        if item in seen:
            raise FeatureError(f"{what}: class name {item!r} is given more than once")
        seen.add(item)
    # TFDS writes -1 for an example without a label: stored as null.
    return ClassLabel(names=list(names), nullable=True) if names else ClassLabel(num_classes=count, nullable=True)


_Column = tuple[str, Feature, "str | None", dict[str, Any]]


def _tfds_columns(name: str, spec: Any, folder: str, nesting: int = 0) -> Iterator[_Column]:
    """The columns (Example keys) of one TFDS feature: `(name, feature, decoder, what TFDS says)`;
    `nesting` counts the FeaturesDicts and Sequences it is in."""
    what = _feature_where(name)
    if nesting > _MAX_FEATURE_NESTING:
        raise FeatureError(f"{what}: FeaturesDicts and Sequences nest more than {_MAX_FEATURE_NESTING} levels deep")
    spec = _object(spec, what)
    kind = next((key for key in _TFDS_KINDS if key in spec), None)
    if kind is None and "pythonClassName" not in spec:
        raise FeatureError(f"{what} has none of the fields of a TFDS feature ({', '.join(_TFDS_KINDS)})")
    tfds_class = _string(spec.get("pythonClassName", kind), f"{what}: pythonClassName").rsplit(".", 1)[-1]
    content = _object(spec.get(kind) or {}, f"{what}: {kind}")
    described: dict[str, Any] = {"tfds": tfds_class}
    if kind == "featuresDict":
        for child, child_spec in sorted(_object(content.get("features", {}), f"{what}: featuresDict.features").items()):
            yield from _tfds_columns(f"{name}/{child}" if name else child, child_spec, folder, nesting + 1)
        return
    if kind == "sequence" and tfds_class != "Dataset":
        length = _integer(content.get("length", -1), f"{what}: sequence.length", minimum=-1)
        for column, feature, decoder, inner in _tfds_columns(name, content.get("feature", {}), folder, nesting + 1):
            yield column, _sequence_of(column, feature, decoder, length), None, {
                "tfds": "Sequence", "length": None if length < 0 else length, "feature": inner}
        return
    if kind == "translation":
        if content.get("variableLanguagesPerExample"):
            raise FeatureError(f"{what}: a TranslationVariableLanguages feature is not supported")
        for index, language in enumerate(_list(content.get("languages", []), f"{what}: translation.languages")):
            yield f"{name}/{_string(language, f'{what}: translation.languages[{index}]')}", Value("string"), None, {
                "tfds": "Text"}
        return
    decoder = None
    if kind == "classLabel":
        feature = class_label_of_spec(name, content, folder)
    elif kind == "text":
        feature = Value("string")
    elif kind in ("image", "video"):
        feature = Image(nullable=False) if kind == "image" else SequenceFeature(Image(nullable=False))
        described.update(shape=list(_shape(content, what)), dtype=_optional_string(content, "dtype", what),
                         encoding_format=_optional_string(content, "encodingFormat", what) or None)
    elif kind in ("tensor", "audio", "boundingBox"):
        feature, decoder = _tensor_feature(what, {"dtype": "float32", "shape": {"dimensions": ["4"]}}
                                           if kind == "boundingBox" and not content else content)
        described.update(shape=list(_shape(content, what)), dtype=content.get("dtype"))
        if content.get("encoding") not in (None, "", "none"):
            described["encoding"] = content["encoding"]
    else:
        raise FeatureError(f"{what} is a TFDS {tfds_class}, which is not supported; "
                           "give a --features file without it")
    yield name, feature, decoder, described


def _sequence_of(name: str, feature: Feature, decoder: str | None, length: int) -> Feature:
    what = _feature_where(name)
    size = None if length < 0 else length
    if decoder is None and isinstance(feature, Value) and feature.dtype not in ("string", "binary"):
        return _array(what, (size,), feature.dtype)
    if decoder is None and isinstance(feature, Array) and not feature.variable:
        return _array(what, (size, *feature.shape), feature.dtype)
    if decoder is None and isinstance(feature, (Value, ClassLabel, Image)):
        return SequenceFeature(feature)
    raise FeatureError(f"{what}: a Sequence of {feature!r} is not supported")


def tfds_features(folder: str, spec: Any) -> tuple[Features, dict[str, str], dict[str, Any]]:
    """Our features for a TFDS `features.json`: `(features, decoders, what TFDS says of each)`.

    Nested FeaturesDicts become columns named `parent/child`, as the Examples store them.

    Raises:
      FeatureError: a feature with no equivalent here (RLDS datasets, ragged tensors...),
        FeaturesDicts and Sequences nested more than 16 deep, or a field of the wrong type
        or range, naming the feature and the field.
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
    """What the cache's metadata keeps of a TFDS dataset, under `tfds`.

    Raises:
      FeatureError: a field of dataset_info.json of the wrong type, naming it.
    """
    urls = _list(_object(info.get("location") or {}, f"{TFDS_INFO}: location").get("urls") or [],
                 f"{TFDS_INFO}: location.urls")
    supervised = info.get("supervisedKeys")
    metadata = {"name": _optional_string(info, "name", TFDS_INFO),
                "config": _optional_string(info, "configName", TFDS_INFO) or None,
                "version": _optional_string(info, "version", TFDS_INFO), "split": split, "num_examples": count,
                "num_shards": len(files), "description": _optional_string(info, "description", TFDS_INFO),
                "citation": _optional_string(info, "citation", TFDS_INFO),
                "homepage": _string(urls[0], f"{TFDS_INFO}: location.urls[0]") if urls else None,
                "supervised_keys": None if supervised is None else _object(supervised, f"{TFDS_INFO}: supervisedKeys"),
                "features": dict(described)}
    return {key: value for key, value in metadata.items() if value not in (None, "", [], {})}
