"""A write's staging: where its shards are staged, how they move to their final names, and
removing what it staged. Names come from `format.layout.CacheLayout`."""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

from beam_shards.errors import PublishError
from beam_shards.format.layout import CacheLayout
from beam_shards.shards.options import WrittenShard
from beam_shards.storage import folders, fs


def staged_shards(folder: str) -> Callable[[int], tuple[str, BinaryIO]]:
    """The `open_shard` callback of a ShardWriter staging into `folder`: part-00000.arrow, ..."""

    def open_shard(index: int) -> tuple[str, BinaryIO]:
        path = fs.join(folder, CacheLayout.staged_name(index))
        return path, fs.create(path)

    return open_shard


def staged_order(shard: WrittenShard) -> tuple[str, int, str]:
    # part-100000 after part-99999: numbered names sort by length first within a folder.
    folder, _, name = shard.path.replace("\\", "/").rpartition("/")
    return folder, len(name), name


def move_into_place(layout: CacheLayout, staged: list[WrittenShard], names: list[str]) -> bool:
    """Moves the staged shards to their final names; returns whether an earlier run had moved any."""
    finals = [layout.shard(name) for name in names]
    found = folders.sizes([s.path for s in staged] + finals)
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
    return len(sources) < len(staged)


def remove_staging(layout: CacheLayout, write_id: str, temporaries: bool = True) -> None:
    """Removes what one write staged (its folder), and `_staging/` if it is left empty; with
    `temporaries`, also the temporary files a killed run of the write left, which takes a listing
    of the cache folder (a run that finished removed its own, and `gc` removes any in time)."""
    folders.delete_tree(layout.staging(write_id))
    folders.remove_empty_dir(layout.staging_root)
    if temporaries and fs.is_local(layout.path):  # object stores write manifests whole, with no temporary file
        temporaries = [p for folder in (layout.path, layout.versions_dir, layout.tables_dir) if fs.exists(folder)
                       for p in folders.list_dir(folder, layout.temporaries_of(write_id))]
        fs.delete(sorted(temporaries))
