"""What a write settles before it runs and does once its shards are staged, without Beam: the sink
(`WriteToArrowShards` and its finalize step) and the deterministic write in one process
(`ordered_in_process`) both call these, so their checks, metadata, errors and retention are one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from beam_shards.beam.bad_limit import Skipped, check_skipped
from beam_shards.errors import EmptyWriteError, best_effort
from beam_shards.features import Features
from beam_shards.format.layout import check_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.versions.commit import check_write, publish
from beam_shards.versions.gc import Retention, collect_garbage


def settle_write(path: str, features: Features | None, metadata: dict[str, Any] | None, mode: str,
                 options: WriterOptions, write_id: str | None) -> tuple[dict[str, Any], Any, WriterOptions]:
    """The write's metadata, the version its publish looks for reruns from (`since`) and its options in
    the cache's column types (`versions.commit.check_write`), a given write id checked.

    Raises:
      ValueError, SchemaMismatchError...: as `check_write` and `check_write_id`.
    """
    metadata, since, column_types = check_write(path, features, metadata, mode)
    if write_id is not None:
        check_write_id(write_id)
    # A write id made when the write runs is newer than every version there now; one given may be a
    # rerun's, whose version is older: its publish looks from the start, so it publishes nothing twice.
    return metadata, since if write_id is None else None, dataclasses.replace(options, column_types=column_types)


def publish_staged(path: str, *, write_id: str, features: Features, staged: list[WrittenShard],
                   options: WriterOptions, metadata: dict[str, Any], mode: str, ordered: bool, since: Any,
                   allow_empty: bool, max_bad: int | float | None, skipped: Skipped | None,
                   dedup: Any = None, dropped: int = 0) -> Manifest:
    """Publishes the staged shards of a write as its new version, with the counts of its bad inputs
    (with `max_bad`) and of the duplicates it dropped (with `dedup`) in its metadata.

    Raises:
      TooManyBadError: more inputs were skipped than `max_bad` allows. EmptyWriteError: no row at all,
        without `allow_empty`. Either way nothing is published.
    """
    if dedup is not None:
        metadata = {**metadata, "dedup": {"columns": dedup, "dropped": dropped}}
    if max_bad is not None:
        written = sum(shard.num_rows for shard in staged) + dropped
        metadata = {**metadata, "bad_inputs": check_skipped(skipped, written, max_bad, path)}
    if not allow_empty and not any(shard.num_rows for shard in staged):
        raise EmptyWriteError(f"the write to {path} holds no rows; nothing was published "
                              "(allow_empty=True, --allow_empty in the pipelines, publishes an empty version)")
    return publish(path, write_id=write_id, features=features, staged=staged, options=options, metadata=metadata,
                   mode=mode, ordered=ordered, since=since)


def apply_retention(path: str, retention: Retention | None) -> None:
    """Removes what `retention` no longer keeps after a publish; a failure is only reported."""
    if retention is not None:
        with best_effort("apply retention after publishing", path):
            collect_garbage(path, retention, sweep=False)
