"""Publishing a write: staged shards to final names, the manifest last, then clean-up.

`publish` is the finalize step of both the local `write_shards` and the Beam sink. It
is idempotent: run again after a partial or complete run, it recognises shards
already moved, does not rewrite a manifest it already wrote, and finishes clean-up.
It deletes only the files of the version it replaced and its own staging folder, so
a concurrent writer's files are never touched: the last manifest written wins whole.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from typing import Any, BinaryIO, Callable, Iterable

from beam_shards import fs
from beam_shards.errors import BeamShardsError
from beam_shards.features import Features
from beam_shards.manifest import (MANIFEST_NAME, STAGING_DIR, Manifest, read_metadata, shard_file_name,
                                  staging_dir, writer_versions)
from beam_shards.writer import ShardInfo, validate_writer_options

_LOGGER = logging.getLogger(__name__)


class PublishError(BeamShardsError):
    """A write cannot be published, such as a staged shard missing from both places."""


def check_write(path: str, features: Features, writer_options: dict[str, Any], metadata: Any) -> dict[str, Any]:
    """Checks the arguments of a write before anything runs; returns the metadata as a dict.

    Raises:
      TypeError: `features` is not a Features object.
      ValueError: a bad path, writer option or metadata, naming it.
    """
    if not isinstance(features, Features):
        raise TypeError(f"features must be a Features object; got {type(features).__name__}")
    fs.check_cache_path(path)
    validate_writer_options(**writer_options)
    return check_metadata(metadata)


def staged_shards(folder: str) -> Callable[[int], tuple[str, BinaryIO]]:
    """The `open_shard` callback of a ShardWriter staging into `folder`: part-00000.arrow, ..."""

    def open_shard(index: int) -> tuple[str, BinaryIO]:
        path = fs.join(folder, f"part-{index:05d}.arrow")
        return path, fs.create(path)

    return open_shard


def check_metadata(metadata: Any) -> dict[str, Any]:
    """Returns `metadata` as a dict if it is JSON-serializable; raises ValueError otherwise."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict; got {type(metadata).__name__}")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as error:
        raise ValueError(f"metadata must be JSON-serializable: {error}") from None
    return metadata


def current_write_id(path: str) -> str | None:
    """The write id of the published version, read leniently (a damaged one is replaced)."""
    try:
        data = json.loads(fs.read_bytes(fs.join(path, MANIFEST_NAME)))
    except (OSError, ValueError):
        return None
    return data.get("write_id") if isinstance(data, dict) else None


def publish(path: str, *, write_id: str, features: Features, staged: Iterable[ShardInfo],
            compression: str | None, metadata: dict[str, Any]) -> Manifest:
    """Moves staged shards into place, writes the manifest, removes what it replaced.

    Args:
      path: the cache folder.
      write_id: the id of this write; it is in every final shard name.
      features: the schema the shards were written with.
      staged: the shards to publish, with their staged paths.
      compression: recorded in the manifest.
      metadata: free user metadata, recorded in the manifest.

    Raises:
      PublishError: a staged shard is neither at its staged path nor at its final one.
    """
    current = current_write_id(path)
    if current == write_id:
        manifest = read_metadata(path, check_files=False)
    else:
        ordered = sorted(staged, key=_staged_order)
        names = [shard_file_name(write_id, i, len(ordered)) for i in range(len(ordered))]
        _move_into_place(path, ordered, names)
        manifest = Manifest(
            path=path, write_id=write_id, features=features,
            shards=tuple(ShardInfo(name, s.num_rows, s.num_bytes, s.checksum) for name, s in zip(names, ordered)),
            compression=compression, metadata=metadata, writer=writer_versions(),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            previous_write_id=current)
        # A suffix of its own: two runs of one finalize never share the temporary file.
        fs.write_bytes_atomic(fs.join(path, MANIFEST_NAME), manifest.to_json(),
                              temp_suffix=f"{write_id}.{uuid.uuid4().hex[:8]}")
    try:
        _clean_up(path, manifest)
    except Exception:  # the write is published; what is left over is gc's to remove
        _LOGGER.warning("beam_shards: published %s, but could not remove the files it replaced or staged; "
                        "`beam-shards gc %s` removes them", path, path, exc_info=True)
    return manifest


def _staged_order(shard: ShardInfo) -> tuple[str, int, str]:
    # part-100000 after part-99999: numbered names sort by length first within a folder.
    folder, _, name = shard.path.replace("\\", "/").rpartition("/")
    return folder, len(name), name


def _move_into_place(path: str, staged: list[ShardInfo], names: list[str]) -> None:
    finals = [fs.join(path, name) for name in names]
    found = fs.sizes([s.path for s in staged] + finals)
    sources, destinations = [], []
    for shard, final in zip(staged, finals):
        if found[shard.path] is not None:
            sources.append(shard.path)
            destinations.append(final)
        elif found[final] != shard.num_bytes:
            raise PublishError(
                f"staged shard {shard.path} ({shard.num_rows} rows) is gone and {final} "
                f"{'does not exist' if found[final] is None else f'has {found[final]} bytes, not {shard.num_bytes}'}; "
                "was the staging folder deleted while the write ran?")
    if sources:
        fs.rename(sources, destinations)
        fs.sync_dir(destinations[0])


def _clean_up(path: str, manifest: Manifest) -> None:
    previous = manifest.previous_write_id
    if previous and previous != manifest.write_id:
        _delete_shards_of(path, previous)
    remove_staging(path, manifest.write_id)


def abandon(path: str, write_id: str) -> None:
    """Removes what an unpublished write left: its staging folder and any shard it moved."""
    if current_write_id(path) != write_id:
        _delete_shards_of(path, write_id)
    remove_staging(path, write_id)


def remove_staging(path: str, write_id: str) -> None:
    """Removes what one write staged (its folder, its temporary manifests), and an empty `_staging/`."""
    fs.delete(sorted(fs.list_dir(path, f"{MANIFEST_NAME}.{write_id}.*.tmp")))
    fs.delete_tree(staging_dir(path, write_id))
    fs.remove_empty_dir(fs.join(path, STAGING_DIR))


def _delete_shards_of(path: str, write_id: str) -> None:
    fs.delete(sorted(fs.list_dir(path, f"shard-{write_id}-*.arrow")))
