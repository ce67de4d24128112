"""`compact`: merging the under-sized shards of a published cache into a new version.

The latest version's shards are planned into bins keeping the row order
(`merge.plan_bins(keep_order=True)`), each bin of several shards is merged by copying
its record batches (`merge.merge_shards`), and the result is published as a new version
through `commit.publish` (mode overwrite, the features, compression, column types and metadata kept,
and the identity of its rows, so training states taken on the older version resume on it),
only if no other write published meanwhile (else it publishes nothing). Merged shards
are staged under the compaction's write id; shards left whole are listed again by name,
not copied (as an append lists the shards it keeps), so the older version stays
readable as it was and gc removes a shard only once no kept version lists it.
"""

from __future__ import annotations

from beam_shards.format.catalog import read_metadata
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.shards import merge
from beam_shards.shards.merge import file_overhead, plan_bins
from beam_shards.shards.options import DEFAULT_SHARD_SIZE_BYTES, WriterOptions, WrittenShard
from beam_shards.versions.commit import abandon, publish
from beam_shards.versions.lock import refuse_links
from beam_shards.versions.staging import staged_shards


def compact(path: str, shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES) -> tuple[Manifest, Manifest | None]:
    """Merges the under-sized shards of the latest version at `path`, keeping the row order, and
    publishes the result as a new version.

    Returns:
      The version compacted and the new version; None for the new one when no two
      shards could be merged (nothing is published then).

    Raises:
      CacheNotFoundError: no cache at `path`.
      CorruptCacheError: a shard is missing or does not match its manifest entry;
        nothing is published.
      PublishError: another write published a version while this one compacted;
        nothing is published (run it again).
      CacheError: `_staging`, `_tables` or `_versions` is a link.
    """
    options = WriterOptions(shard_size_bytes=shard_size_bytes)
    latest = read_metadata(path)
    bins = plan_bins([s.num_bytes for s in latest.shards], shard_size_bytes, keep_order=True,
                     overhead=file_overhead(latest.features))
    if all(len(b) == 1 for b in bins):
        return latest, None
    layout = CacheLayout(path)
    refuse_links(layout)
    write_id = new_write_id()
    open_staged = staged_shards(layout.new_attempt(write_id))
    try:
        staged, kept = [], {}
        for index, indices in enumerate(bins):
            if len(indices) == 1:
                kept[index] = indices[0]
                continue
            inputs = [WrittenShard(layout.shard(latest.shards[i].file), latest.shards[i].num_rows,
                                   latest.shards[i].num_bytes, latest.shards[i].checksum) for i in indices]
            staged.append(merge.merge_shards(inputs, latest.features, lambda _, i=index: open_staged(i),
                                             latest.compression, latest.column_types))
        manifest = publish(path, write_id=write_id, features=latest.features, staged=staged,
                           options=WriterOptions(options.shard_size_bytes, compression=latest.compression,
                                                 column_types=latest.column_types),
                           metadata=dict(latest.metadata), mode="overwrite", parent=latest.version, kept=kept,
                           same_rows=True)
    except BaseException:
        abandon(path, write_id)
        raise
    return latest, manifest
