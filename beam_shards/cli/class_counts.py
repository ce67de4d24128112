"""What `beam-shards info` says of label columns: how many values each class has, and its lines."""

from __future__ import annotations

import collections

import pyarrow.compute as pc

from beam_shards.features import ClassLabel, Feature, Sequence as SequenceFeature
from beam_shards.format.manifest import Manifest
from beam_shards.shards.shard_file import ShardFile


def label_feature(feature: Feature) -> ClassLabel | None:
    """The ClassLabel of a label column (or of a Sequence of one); None for another feature."""
    if isinstance(feature, SequenceFeature):
        feature = feature.feature
    return feature if isinstance(feature, ClassLabel) else None


def class_counts(manifest: Manifest) -> dict[str, collections.Counter]:
    """For each ClassLabel column (or Sequence of one), how many values each class id has;
    the key None counts nulls.

    From the version's statistics, reading no shard; only a version without them (of
    format 1 or 2) or a label of more classes than statistics count has its label
    columns read, batch by batch, counting the ids that occur (memory follows the data,
    not `num_classes`; ids out of range, in a damaged shard, are counted as they are).

    Raises:
      CorruptCacheError: a shard is missing, unreadable or does not match the manifest
        (its rows included).
    """
    labels, counts = [], {}
    for name, feature in manifest.features.items():
        stats = manifest.statistics.columns[name] if manifest.statistics is not None else None
        if stats is not None and stats.classes is not None:
            counts[name] = collections.Counter({i: n for i, n in enumerate(stats.classes) if n})
            if stats.nulls and not isinstance(feature, SequenceFeature):
                counts[name][None] = stats.nulls
        elif label_feature(feature):
            labels.append(name)
            counts[name] = collections.Counter()
    for shard_id in range(manifest.num_shards if labels else 0):
        for batch in ShardFile.of(manifest, shard_id).iter_batches(labels):
            for name in labels:
                column = batch.column(name)
                if isinstance(manifest.features[name], SequenceFeature):
                    column = column.flatten()
                for entry in pc.value_counts(column).to_pylist():
                    counts[name][entry["values"]] += entry["counts"]
    return counts


def count_lines(feature: ClassLabel, counts: collections.Counter) -> list[str]:
    """`info`'s lines for one label column: each class that occurs with its count and share,
    ids out of range and nulls, then how many classes have no values."""
    ids = sorted(i for i in counts if i is not None)
    names = [feature.int2str(i) if 0 <= i < feature.num_classes else f"{i} (out of range)" for i in ids]
    width = max(map(len, names), default=0)
    total = max(sum(counts.values()), 1)
    lines = [f"  {name:<{width}}  {counts[i]:>10,}  {100 * counts[i] / total:5.1f}%" for name, i in zip(names, ids)]
    if counts[None]:
        lines.append(f"  {'(null)':<{width}}  {counts[None]:>10,}")
    empty = feature.num_classes - sum(0 <= i < feature.num_classes for i in ids)
    if empty:
        lines.append(f"  ({empty:,} of {feature.num_classes:,} classes have no values)")
    return lines
