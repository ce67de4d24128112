"""Hugging Face feature metadata read back from files others wrote: the `huggingface` entry
of an Arrow or Parquet schema's metadata, and the JSON files of a `Dataset.save_to_disk`
folder.

None of it is trusted. JSON is measured on its brackets before it is parsed (Python's
parser recurses, so a document 100,000 levels deep would end in a RecursionError) and
refused past `MAX_DEPTH` levels; every shape is checked before it is used. Whatever a
file holds, the answer is what it says or one FeatureError line naming the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from beam_shards.display import clip, printable, short_repr
from beam_shards.errors import FeatureError
from beam_shards.features import HF_METADATA_KEY, TooDeep, load_bounded
from beam_shards.storage import fs

# A save_to_disk folder's JSON files are read whole up to this size.
_MAX_JSON_BYTES = 64 << 20


def load_json(raw: bytes | str, where: str) -> Any:
    """`raw` parsed as JSON.

    Raises:
      FeatureError: it is not UTF-8 JSON (NaN and infinities are not), or nests more than
        `MAX_DEPTH` levels; names `where`.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as error:
        raise FeatureError(f"{where} is not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return load_bounded(text)
    except TooDeep as error:
        raise FeatureError(f"{where} {error}") from None
    except ValueError as error:
        raise FeatureError(f"{where} is not valid JSON ({error})") from None


def hf_features_of(metadata: Mapping[bytes, bytes] | None, where: str) -> Mapping[str, Any]:
    """The Hugging Face features (dict form) an Arrow schema's `metadata` holds, as Hugging Face
    writes them ({"info": {"features": {...}}}); empty when it holds none. `where` names the file.

    Raises:
      FeatureError: the entry is not JSON of that shape, or nests more than `MAX_DEPTH` levels.
    """
    if not metadata or HF_METADATA_KEY not in metadata:
        return {}
    place = f"{where}: its Hugging Face metadata"
    document = load_json(metadata[HF_METADATA_KEY], place)
    info = document.get("info") if isinstance(document, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    if features is None and isinstance(document, dict) and (info is None or isinstance(info, dict)):
        return {}  # no features written
    if not isinstance(features, dict):
        raise FeatureError(f'{place} is not {{"info": {{"features": {{...}}}}}}: it is {short_repr(document)}')
    return features


def saved_dataset(folder: str) -> tuple[list[str], Mapping[str, Any]] | None:
    """The Arrow files and Hugging Face features (dict form) of a folder `Dataset.save_to_disk`
    wrote; None when `folder` is not one.

    Raises:
      FeatureError: a `DatasetDict` folder (one split's folder is an input), or a folder whose
        state or info is not JSON of Hugging Face's shape, names no files or features, or
        names a file outside the folder.
      OSError: a file that cannot be read, or holds more than 64 MiB.
    """
    splits_file = fs.join(folder, "dataset_dict.json")
    if fs.exists(splits_file):
        document = _read_json(splits_file)
        splits = document.get("splits") if isinstance(document, dict) else None
        names = [clip(printable(str(name)), 40) for name in splits[:20]] if isinstance(splits, list) else []
        raise FeatureError(f"a DatasetDict folder (splits {', '.join(names)}): give one split's folder, "
                           f"like {fs.join(folder, names[0] if names else 'train')}")
    state_file = fs.join(folder, "state.json")
    if not fs.exists(state_file):
        return None
    state, info_file = _read_json(state_file), fs.join(folder, "dataset_info.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    names = [entry.get("filename") for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
    if not names or not all(_plain_name(name) for name in names):
        raise FeatureError(f"{state_file} names no data files, or a file outside its folder: its _data_files are "
                           f"{short_repr(entries)}")
    info = _read_json(info_file)
    features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict) or not features:
        raise FeatureError(f"{info_file} names no features: its features are {short_repr(features)}")
    return [fs.join(folder, name) for name in names], features


def _read_json(path: str) -> Any:
    return load_json(fs.read_bytes(path, _MAX_JSON_BYTES), path)


def _plain_name(name: Any) -> bool:
    """Whether `name` is a file name inside its folder (no path, not `..`)."""
    return (isinstance(name, str) and name not in ("", ".", "..") and posixpath.basename(name) == name
            and "\\" not in name)
