"""`WriteToArrowShards`: the Beam sink, size-rotated shards per bundle and one atomic publish.

The shape follows Beam's own `iobase.WriteImpl`: a write id made at run time (so a
re-run of the same pipeline or template never reuses one), a DoFn that writes each
bundle's shards into a staging folder of its own, and one finalize step that
publishes them. Every bundle attempt writes under a fresh attempt id, so retried or
repeated bundles never collide; only the shards reported by committed bundles reach
finalize, and finalize removes the whole staging folder with the rest.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList, AsSingleton, EmptySideInput
from apache_beam.transforms import window
from apache_beam.transforms.display import DisplayDataItem

from beam_shards import fs
from beam_shards.commit import check_write, publish, remove_staging, staged_shards
from beam_shards.errors import EncodeError
from beam_shards.features import Features
from beam_shards.local import split_key, write_example
from beam_shards.manifest import Manifest, is_write_id, new_write_id, staging_dir
from beam_shards.writer import (DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES, ShardInfo,
                                ShardWriter)

_LOGGER = logging.getLogger(__name__)
METRICS_NAMESPACE = "beam_shards"


def preview_example(example: Any, fields: int = 3) -> str:
    """A short description of an example for errors: its first few scalar fields."""
    if not isinstance(example, dict):
        return f"{type(example).__name__} value"
    shown = {k: v for k, v in example.items() if isinstance(v, (int, float)) or isinstance(v, str) and len(v) <= 80}
    if not shown:
        return f"example with fields {list(example)[:8]}"
    return repr(dict(list(shown.items())[:fields]))


def _write_id_or_fallback(write_id: Any) -> str:
    # Some runners (Prism, see apache/beam#36563) hand a DoFn an empty singleton side
    # input. Fall back to a fresh id: staged paths travel with the shard results, so
    # finalize still finds every file.
    if isinstance(write_id, EmptySideInput):
        _LOGGER.warning("beam_shards: the write id side input was empty; using a fresh id for this bundle")
        return new_write_id()
    return write_id


class _WriteBundleFn(beam.DoFn):
    """Encodes a bundle's examples and writes them into size-rotated staged shards."""

    def __init__(self, path: str, features: Features, writer_options: dict[str, Any]):
        self._path = path
        self._features = features
        self._writer_options = writer_options
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_written")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(METRICS_NAMESPACE, "shards_written")

    def start_bundle(self) -> None:
        self._writer: ShardWriter | None = None

    def teardown(self) -> None:
        # A step fused before this one failed mid-bundle: drop what this attempt staged.
        self._discard()

    def process(self, element: Any, write_id: Any) -> None:
        key, example = split_key(element, None)
        if self._writer is None:
            self._writer = self._open_writer(_write_id_or_fallback(write_id))
        try:
            write_example(self._writer, self._features, example, key)
        except EncodeError as error:
            self._discard()
            if key is None and isinstance(example, dict):  # name it by its first fields, only on failure
                raise EncodeError(error.reason, example=preview_example(example), field=error.field,
                                  feature=error.feature, got=error.got) from None
            raise
        except BaseException:
            self._discard()
            raise

    def _open_writer(self, write_id: str) -> ShardWriter:
        attempt = fs.join(staging_dir(self._path, write_id), uuid.uuid4().hex)
        return ShardWriter(self._features, staged_shards(attempt), **self._writer_options)

    def _discard(self) -> None:
        # A failed attempt removes what it staged; the runner may retry the bundle.
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                fs.delete(writer.abort())
            except Exception:  # clean-up is best effort; finalize or gc removes the rest
                _LOGGER.warning("beam_shards: could not remove the files of a failed bundle", exc_info=True)

    def finish_bundle(self):
        if self._writer is None:
            return
        try:
            shards = self._writer.close()
        except BaseException:
            self._discard()
            raise
        self._writer = None
        for shard in shards:
            self._rows.inc(shard.num_rows)
            self._shards.inc()
            self._bytes.inc(shard.num_bytes)
            yield window.GlobalWindows.windowed_value(shard)


class _FinalizeFn(beam.DoFn):
    """Publishes the staged shards of every committed bundle; safe to run more than once."""

    def __init__(self, path: str, features: Features, compression: str | None, metadata: dict[str, Any]):
        self._path = path
        self._features = features
        self._compression = compression
        self._metadata = metadata

    def process(self, unused: Any, write_id: Any, shards: list[ShardInfo]):
        if isinstance(write_id, EmptySideInput):
            write_id = _staged_write_id(shards[0].path) if shards else new_write_id()
        manifest = publish(self._path, write_id=write_id, features=self._features, staged=shards,
                           compression=self._compression, metadata=self._metadata)
        # Bundles whose write id fell back to a fresh one staged elsewhere.
        others = {_staged_write_id(s.path) for s in shards} - {write_id}
        for other in sorted(others):
            remove_staging(self._path, other)
        yield manifest


def _staged_write_id(staged_path: str) -> str:
    # <path>/_staging/<write id>/<attempt>/part-NNNNN.arrow
    return staged_path.replace("\\", "/").rstrip("/").split("/")[-3]


class WriteToArrowShards(beam.PTransform):
    """Writes a PCollection of examples into a published cache of Arrow shards.

    Elements are example dicts or `(key, dict)` pairs; a pyarrow RecordBatch or Table
    of examples (or a `(key, batch)` pair) is also accepted and checked column by
    column, which skips Beam's per-element cost for sources that read in batches.

    Each bundle encodes its examples against `features` and writes size-rotated Arrow
    IPC shards into `<path>/_staging/`; one finalize step then gives them their final
    names, writes `_metadata.json` last (the commit point) and removes the version it
    replaced and the staging folder. Readers see the old cache or the new, never a mix.
    All file access goes through Beam's FileSystems, so gs:// and s3:// paths work.

    Example:
        >>> import apache_beam as beam
        >>> from beam_shards import Features, Value, WriteToArrowShards
        >>> features = Features({"id": Value("int64"), "text": Value("string")})
        >>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
        ...     manifest = (p | beam.Create(range(1000))
        ...                 | beam.Map(lambda i: {"id": i, "text": str(i)})
        ...                 | WriteToArrowShards("/tmp/cache", features))

    Args:
      path: the cache folder (local, gs://, s3://, ...).
      features: the schema every example must match.
      shard_size_bytes: target size of a shard on disk; a shard closes before a batch
        would take it past this.
      max_rows_per_shard: optional cap on rows per shard.
      batch_size: rows per record batch at most.
      batch_bytes: bytes per record batch at most (bounds a bundle's memory).
      compression: None, "zstd" or "lz4".
      metadata: free JSON-serializable metadata stored in the manifest.
      write_id: the id of this write, from `beam_shards.manifest.new_write_id()`; by
        default one is made when the pipeline runs. Give one to clean up after a failed
        run yourself (`beam_shards.commit.abandon(path, write_id)`); it must be new for
        every run, or finalize takes the run for a retry of the published one.

    Returns (from `expand`):
      A PCollection with one element, the published `Manifest`.

    Raises:
      ValueError: an option out of range (at construction).
      EncodeError: when the pipeline runs, for an example that does not match
        `features` (names the example, the field and the feature); nothing is published.
    """

    def __init__(self, path: str, features: Features, *, shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES,
                 max_rows_per_shard: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, compression: str | None = None,
                 metadata: dict[str, Any] | None = None, write_id: str | None = None):
        super().__init__()
        self._writer_options = dict(shard_size_bytes=shard_size_bytes, max_rows_per_shard=max_rows_per_shard,
                                    batch_size=batch_size, batch_bytes=batch_bytes, compression=compression)
        self._metadata = check_write(path, features, self._writer_options, metadata)
        if write_id is not None and not is_write_id(write_id):
            raise ValueError(f"write_id must look like one from beam_shards.manifest.new_write_id(); got {write_id!r}")
        self._path = path
        self._features = features
        self._write_id = write_id

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection[Manifest]:
        if not pcoll.is_bounded:
            raise ValueError("WriteToArrowShards publishes one cache once its input ends: it needs a bounded "
                             "PCollection (window an unbounded one into files with another sink)")
        do_once = pcoll.pipeline | "DoOnce" >> beam.Create([None])
        given = self._write_id
        write_id = do_once | "NewWriteId" >> beam.Map(lambda _: given or new_write_id())
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            # Shard results are emitted in the global window; finalize reads them all.
            pcoll = pcoll | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        staged = (
            pcoll
            | "WriteBundles" >> beam.ParDo(
                _WriteBundleFn(self._path, self._features, self._writer_options), AsSingleton(write_id))
            # Like Beam's WriteImpl: a shuffle makes the shard list stable before finalize reads it.
            | "Pair" >> beam.Map(lambda shard: (None, shard))
            | "GroupShards" >> beam.GroupByKey()
            | "Extract" >> beam.FlatMap(lambda kv: kv[1]))
        return do_once | "Finalize" >> beam.ParDo(
            _FinalizeFn(self._path, self._features, self._writer_options["compression"], self._metadata),
            AsSingleton(write_id), AsList(staged))

    def display_data(self) -> dict[str, Any]:
        options = self._writer_options
        return {
            "path": DisplayDataItem(self._path, label="Cache path"),
            "shard_size_bytes": DisplayDataItem(options["shard_size_bytes"], label="Target shard size (bytes)"),
            "batch_size": DisplayDataItem(options["batch_size"], label="Rows per record batch"),
            "compression": DisplayDataItem(str(options["compression"]), label="Compression"),
            "features": DisplayDataItem(repr(self._features), label="Features"),
        }
