"""`ReadFromArrowShards`: a published cache back into a pipeline, split below shard level.

The shape follows Beam's splittable sources (`iobase.Read` over an SDF, `parquetio`):
the manifest is read and checked when the transform is applied, one element per
shard goes to a step that checks the shard against the manifest (size, schema, rows)
and counts its record batches, and a splittable DoFn reads each shard with an
`OffsetRange` of record batches as its restriction. Initial splitting cuts a shard
into pieces of about `desired_split_bytes`, and the runner may split a running piece
further (`try_split`), so many workers share one large shard.

Local shards are memory-mapped; other schemes are read through Beam's `FileSystems`,
fetching only the batches being read: a format-5 shard's whole batches, each checked
by its CRC-32 (also when some columns are read), an older shard's footer and the
buffers of the columns being read.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.display import DisplayDataItem

from beam_shards.beam import arrow_coder, counters  # noqa: F401 - arrow_coder registers the batches' coder
from beam_shards.errors import CorruptCacheError, SchemaMismatchError
from beam_shards.features import Features
from beam_shards.features.decode import check_image_mode, decode_table
from beam_shards.format.catalog import read_metadata
from beam_shards.format.manifest import Manifest
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.span_reader import SpanReader

_DEFAULT_SPLIT_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard of one cache version, checked and sized: the element of the reading SDF.

    Attributes:
      path: the cache folder.
      version: the version being read.
      shard_id: the shard's index in that version's manifest.
      num_batches: the shard's record batches (the offsets of its restriction).
      num_bytes: the shard's size on disk.
      split_batches: how many batches an initial split holds.
    """

    path: str
    version: int
    shard_id: int
    num_batches: int
    num_bytes: int
    split_batches: int


class BatchRangeProvider(RestrictionProvider):
    """Restrictions over a `ShardTask`: an `OffsetRange` of record batch indices.

    Example:
        >>> task = ShardTask("/tmp/cache", 1, 0, num_batches=10, num_bytes=1000, split_batches=4)
        >>> provider = BatchRangeProvider()
        >>> list(provider.split(task, provider.initial_restriction(task)))
        [OffsetRange(start=0, stop=4), OffsetRange(start=4, stop=8), OffsetRange(start=8, stop=10)]

    Sizes are estimated bytes on disk, so runners weigh a piece of a shard of large
    rows above a piece of the same number of batches of small ones.
    """

    def initial_restriction(self, task: ShardTask) -> OffsetRange:
        return OffsetRange(0, task.num_batches)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, task: ShardTask, restriction: OffsetRange) -> Iterator[OffsetRange]:
        return restriction.split(task.split_batches)

    def restriction_size(self, task: ShardTask, restriction: OffsetRange) -> int:
        return restriction.size() * task.num_bytes // max(1, task.num_batches)


def plan_shard(manifest: Manifest, shard_id: int, desired_split_bytes: int = _DEFAULT_SPLIT_BYTES) -> ShardTask:
    """Checks shard `shard_id` against the manifest (size, schema, rows) and sizes it for splitting.

    Counting rows reads every batch's header and one narrow column, not the data; a format-5
    shard's table counts its batches, and only its size is checked here (its schema, rows and
    CRC-32s are checked as each batch is read).

    Raises:
      CorruptCacheError: the shard is missing, truncated, unreadable, or differs from
        the manifest.
    """
    shard = ShardFile.of(manifest, shard_id)
    spans = manifest.shards.batch_spans(shard_id)
    if spans is not None:  # format 5: the shard table counts its batches; opening it checks its size
        SpanReader(shard, spans)
        num_batches = len(spans)
    else:
        num_batches = len(shard.batch_rows())
    split_batches = max(1, desired_split_bytes * num_batches // max(1, shard.entry.num_bytes))
    return ShardTask(manifest.path, manifest.version, shard_id, num_batches, shard.entry.num_bytes, split_batches)


class _Manifests:
    """The manifests a read needs, by (cache path, version): given up front, or read once per worker."""

    def __init__(self, known: Iterable[Manifest] = ()):
        self._by_key = {(m.path, m.version): m for m in known}

    def get(self, path: str, version: int) -> Manifest:
        manifest = self._by_key.get((path, version))
        if manifest is None:
            manifest = self._by_key[path, version] = read_metadata(path, version=version)
        return manifest


@dataclasses.dataclass(frozen=True)
class _ReadSpec:
    """What to read and how to emit it; checked once per cache."""

    columns: tuple[str, ...] | None
    as_batches: bool
    features: Features | None
    image_mode: str
    desired_split_bytes: int

    @classmethod
    def make(cls, columns: Sequence[str] | None, as_batches: bool, features: Features | None, image_mode: str,
             desired_split_bytes: int) -> _ReadSpec:
        if isinstance(columns, str):
            raise TypeError(f"columns must be a list of column names; got the string {columns!r}")
        if columns is not None and not columns:
            raise ValueError("columns must name at least one column (or be None for all)")
        if columns is not None and len(set(columns)) != len(columns):
            raise ValueError(f"columns names a column more than once: {list(columns)}")
        if features is not None and not isinstance(features, Features):
            raise TypeError(f"features must be a Features object; got {type(features).__name__}")
        if image_mode != "bytes" and as_batches:
            raise ValueError(f"image_mode={image_mode!r} decodes rows to Python values; it cannot be combined with "
                             "as_batches=True (record batches hold the image bytes)")
        if not isinstance(desired_split_bytes, int) or desired_split_bytes < 1:
            raise ValueError(f"desired_split_bytes must be a positive int; got {desired_split_bytes!r}")
        return cls(tuple(columns) if columns is not None else None, bool(as_batches), features,
                   check_image_mode(image_mode), desired_split_bytes)

    def open(self, path: str, version: int | None = None) -> Manifest:
        """The manifest of a version of the cache at `path`, checked (shards present, none listed twice) and
        fitting this read.

        Raises SchemaMismatchError or KeyError when this read does not fit the cache.
        """
        manifest = read_metadata(path, version=version)
        manifest.shards.check_distinct()  # its shards are touched in many workers, none of which sees them all
        if self.features is not None and self.features.fingerprint() != manifest.schema_fingerprint:
            raise SchemaMismatchError(
                f"the cache at {manifest.path} has schema fingerprint {manifest.schema_fingerprint} but "
                f"features= has {self.features.fingerprint()} ({_feature_diff(self.features, manifest.features)})")
        unknown = [c for c in self.columns or () if c not in manifest.features]
        if unknown:
            raise KeyError(f"unknown column(s) {unknown}; the cache at {manifest.path} has {list(manifest.features)}")
        return manifest

    @property
    def output_type(self) -> Any:
        return pa.RecordBatch if self.as_batches else dict[str, Any]

    def outputs(self, batch: pa.RecordBatch, features: Features) -> Iterable[Any]:
        if self.columns is not None:
            batch = batch.select(list(self.columns))
        if self.as_batches:
            return (batch,)
        # Arrays are numpy views; images are decoded unless image_mode is "bytes".
        return decode_table(batch, features, self.image_mode)

    def display_data(self, path: str | None) -> dict[str, Any]:
        items = {
            "columns": DisplayDataItem(str(list(self.columns)) if self.columns else "all", label="Columns"),
            "output": DisplayDataItem("record batches" if self.as_batches else
                                      f"rows ({self.image_mode} images)",
                                      label="Output"),
        }
        if path is not None:
            items["path"] = DisplayDataItem(path, label="Cache path")
        return items


def _feature_diff(expected: Features, found: Features) -> str:
    missing = [n for n in expected if n not in found]
    extra = [n for n in found if n not in expected]
    changed = [f"{n} is {found[n]!r} in the cache, {expected[n]!r} in features="
               for n in expected if n in found and found[n] != expected[n]]
    parts = ([f"the cache lacks {missing}"] if missing else []) + ([f"only the cache has {extra}"] if extra else [])
    return "; ".join(parts + changed) or "same fields in another order"


class _PlanShardsFn(beam.DoFn):
    """(cache path, version, shard id) -> a checked and sized `ShardTask`."""

    def __init__(self, manifests: _Manifests, desired_split_bytes: int):
        self._manifests = manifests
        self._desired_split_bytes = desired_split_bytes

    def process(self, ref: tuple[str, str, int]) -> Iterator[ShardTask]:
        path, version, shard_id = ref
        yield plan_shard(self._manifests.get(path, version), shard_id, self._desired_split_bytes)


class _ReadBatchesFn(beam.DoFn):
    """The splittable DoFn: reads the record batches of its restriction from one shard."""

    def __init__(self, manifests: _Manifests, spec: _ReadSpec):
        self._manifests = manifests
        self._spec = spec
        self._rows = Metrics.counter(counters.NAMESPACE, counters.ROWS_READ)
        self._bytes = Metrics.counter(counters.NAMESPACE, counters.BYTES_READ)

    def process(self, task: ShardTask,
                tracker: OffsetRestrictionTracker = beam.DoFn.RestrictionParam(BatchRangeProvider())) -> Iterator[Any]:
        restriction = tracker.current_restriction()
        if restriction.start == restriction.stop:
            return
        manifest = self._manifests.get(task.path, task.version)
        shard = ShardFile.of(manifest, task.shard_id)
        spans = manifest.shards.batch_spans(task.shard_id)
        # Format 5: each batch found by the shard table and its CRC-32 checked, which covers every column, so
        # a read of some columns reads whole batches too (`outputs` selects the columns): a damaged byte in a
        # column read is never served. Older formats read the columns' buffers alone, checked by validation.
        if spans is not None:
            read: Callable[[int], pa.RecordBatch] = SpanReader(shard, spans, sequential=True).read
            count = len(spans)
        else:
            source = shard.open_source()
            reader = shard.reader(source, self._spec.columns)
            read, count = functools.partial(shard.read_batch, reader, source=source), reader.num_record_batches
        if count != task.num_batches:
            raise CorruptCacheError(f"{shard.where} now holds {count} "
                                    f"record batches, {task.num_batches} when the read was planned")
        for index in range(restriction.start, restriction.stop):
            if not tracker.try_claim(index):
                return
            batch = read(index)
            self._rows.inc(batch.num_rows)
            self._bytes.inc(batch.nbytes)
            yield from self._spec.outputs(batch, manifest.features)


class _ReadShards(beam.PTransform):
    """(cache path, version, shard id) refs -> the rows (or batches) of those shards."""

    def __init__(self, manifests: _Manifests, spec: _ReadSpec):
        super().__init__()
        self._manifests = manifests
        self._spec = spec

    def expand(self, refs: beam.PCollection) -> beam.PCollection:
        return (refs
                | "PlanShards" >> beam.ParDo(_PlanShardsFn(self._manifests, self._spec.desired_split_bytes))
                | "ReadBatches" >> beam.ParDo(_ReadBatchesFn(self._manifests, self._spec)).with_output_types(
                    self._spec.output_type))


class ReadFromArrowShards(beam.PTransform):
    """Reads a published cache of Arrow shards into a PCollection of examples.

    The manifest is read and checked when the transform is applied, so a missing
    cache, a damaged manifest, a missing shard, a schema mismatch or an unknown column
    fails at pipeline construction. Each shard is then checked against the manifest
    (size, schema, rows) and read in ranges of record batches that the runner splits
    among workers. Values come out as written (ints, strings, lists, numpy arrays of
    the declared shape for Array features, the encoded bytes of images) unless
    `image_mode` asks for images decoded like `ShardedDataset` does.

    Example:
        >>> import apache_beam as beam
        >>> from beam_shards import ReadFromArrowShards
        >>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
        ...     labels = (p | ReadFromArrowShards("/tmp/cache", columns=["label"])
        ...               | beam.Map(lambda row: row["label"]))

    Args:
      path: the cache folder (local, gs://, s3://, ...).
      version: the version to read, pinned when the transform is applied; None for
        the latest. Workers read that version whatever is published meanwhile.
      columns: the columns to read (all by default); only their buffers are read, but
        for format-5 shards, whose batches are read whole to check their CRC-32.
      as_batches: emit `pa.RecordBatch`es instead of one dict per row.
      features: the features the cache must have been written with.
      image_mode: "bytes" (the default: images as written), "pil" or "numpy" (decoded
        as `ShardedDataset` does).
      desired_split_bytes: about how many bytes of a shard one initial split reads.

    Raises:
      CacheNotFoundError: there is no cache at `path` (when applied).
      VersionNotFoundError: `version` is not kept.
      CorruptCacheError: the manifest is invalid or a shard is missing or of another
        size (when applied); a shard's schema or rows differ (when run).
      SchemaMismatchError: the cache's schema fingerprint differs from `features`'.
      KeyError: a column the cache does not have.
      ValueError, TypeError: invalid options (at construction).
    """

    def __init__(self, path: str, *, version: int | None = None, columns: Sequence[str] | None = None,
                 as_batches: bool = False,
                 features: Features | None = None, image_mode: str = "bytes",
                 desired_split_bytes: int = _DEFAULT_SPLIT_BYTES):
        super().__init__()
        self._path = path
        self._version = version
        self._spec = _ReadSpec.make(columns, as_batches, features, image_mode, desired_split_bytes)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        manifest = self._spec.open(self._path, self._version)
        return (pbegin
                | "Shards" >> beam.Create(_shard_refs(manifest))
                | "Read" >> _ReadShards(_Manifests([manifest]), self._spec))

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data(self._path)


class ReadAllFromArrowShards(beam.PTransform):
    """Reads every cache named in a PCollection of cache paths, like `ReadFromArrowShards`.

    Each path's manifest is read and checked when the pipeline runs, so errors about a
    cache (missing, damaged, schema mismatch, unknown column) fail the pipeline then.

    Example:
        >>> import apache_beam as beam
        >>> from beam_shards import ReadAllFromArrowShards
        >>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
        ...     rows = (p | beam.Create(["/tmp/cache_a", "/tmp/cache_b"])
        ...             | ReadAllFromArrowShards(columns=["label"]))

    Args:
      columns, as_batches, features, image_mode, desired_split_bytes: as for
        `ReadFromArrowShards`, applied to every cache.

    Raises:
      ValueError, TypeError: invalid options (at construction).
    """

    def __init__(self, *, columns: Sequence[str] | None = None, as_batches: bool = False,
                 features: Features | None = None, image_mode: str = "bytes",
                 desired_split_bytes: int = _DEFAULT_SPLIT_BYTES):
        super().__init__()
        self._spec = _ReadSpec.make(columns, as_batches, features, image_mode, desired_split_bytes)

    def expand(self, paths: beam.PCollection[str]) -> beam.PCollection:
        return (paths
                | "ListShards" >> beam.FlatMap(_list_shards, self._spec)
                | "Spread" >> beam.Reshuffle()
                | "Read" >> _ReadShards(_Manifests(), self._spec))

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data(None)


def _list_shards(path: str, spec: _ReadSpec) -> list[tuple[str, int, int]]:
    return _shard_refs(spec.open(path))


def _shard_refs(manifest: Manifest) -> list[tuple[str, int, int]]:
    return [(manifest.path, manifest.version, shard_id) for shard_id in range(manifest.num_shards)]
