"""What a pipeline prints when its cache is published: where it is, and how to look at it and read it."""

from __future__ import annotations

from beam_shards import Manifest
from beam_shards.display import human_size
from beam_shards.versions import bad_inputs_path, read_bad_inputs


def report(manifest: Manifest, seconds: float | None = None) -> list[str]:
    """The lines a pipeline prints when done (in `seconds`): where the cache is and how to open it."""
    path = manifest.path
    rows = "row" if manifest.num_rows == 1 else "rows"
    lines = [f"Wrote {manifest.num_rows:,} {rows} in {manifest.num_shards} shard(s), "
             f"{human_size(manifest.num_bytes)}, to {path} as version {manifest.version} ({manifest.mode})"]
    if seconds is not None:
        lines[0] += f" in {seconds:,.1f}s ({manifest.num_rows / max(seconds, 1e-9):,.0f} rows/s)"
    dedup = manifest.metadata.get("dedup")
    if isinstance(dedup, dict):
        lines[0] += f"; dropped {dedup.get('dropped', 0):,} duplicate row(s)"
    lines += _skipped(manifest)
    return lines + [
        "Look at it:",
        f"  beam-shards info {path}",
        f"  beam-shards log {path}",
        f"  beam-shards show {path} --out grid.png",
        "Read it in Python:",
        "  from beam_shards import ShardedDataset",
        f"  ds = ShardedDataset({path!r}); print(len(ds), ds[0])",
    ]


def _skipped(manifest: Manifest) -> list[str]:
    """How many bad inputs the write skipped, of how many read, under which limit: whenever it
    skipped any, or was allowed to (`--skip_bad` records the count in the version's metadata)."""
    listed = read_bad_inputs(manifest.path)
    where = f", listed in {bad_inputs_path(manifest.path)}" if listed else ""
    counted = manifest.metadata.get("bad_inputs")
    if isinstance(counted, dict):
        return [f"Skipped {counted.get('skipped')} bad input(s) of {counted.get('read')} read "
                f"(--max_bad {counted.get('max_bad')}){where}"]
    return [f"Skipped {len(listed):,} bad input(s){where}"] if listed else []
