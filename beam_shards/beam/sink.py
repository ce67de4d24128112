"""`WriteToArrowShards`: the Beam sink, size-rotated shards per bundle, published as one new version.

The contract, in the shape of Beam's `iobase.WriteImpl`, each step idempotent:

- initialize: a write id is made when the pipeline runs (`NewWriteId`), so a re-run
  of the same pipeline or template never reuses one.
- write (`bundles.py`): each bundle attempt encodes its examples and stages size-rotated shards in
  a folder of its own (`_staging/<write id>/<attempt>/`), so retried or repeated
  bundles never collide; a failed attempt removes its files. A write id given at
  construction reaches the DoFn with it; one made when the pipeline runs comes as a
  side input, which costs Beam's per-window invoker on every element. With
  `on_bad="skip"`, an example that does not fit goes to a tagged output instead (only
  a committed bundle's reach it). Only the shards of committed bundles travel on,
  through a shuffle that makes the list stable.
- dedup (with `dedup`): the write step also digests each row, leaving out the bundle's own
  duplicates, the digests of the rows staged are shuffled, and the staged shards that hold
  duplicates of other bundles' rows are copied without them (`staged_dedup.py`), before the
  merge.
- merge: so that shard sizes do not follow the runner's bundles, one step plans bins
  of the under-sized staged shards (`merge.plan_bins`, from the stable list), a
  reshuffle spreads the bins over workers, and each bin's record batches are copied
  into one new staged shard in a fresh attempt folder (a retried or repeated merge
  never collides with another). A bin of one shard passes through unchanged.
- finalize: `commit.publish` moves the listed shards to their final names and commits
  them as the next version; run again, it finds its version and publishes nothing
  more. Then the write's staging goes (with the merged inputs and any abandoned
  merge attempt), and retention runs (`gc.py`).

With `deterministic=True` the write and merge steps are `ordered.py`'s instead: rows
grouped into chunks by key, each chunk written sorted, and shards merged and published
in key order, so the output does not depend on bundles (and dedup on the chunks' shards,
`ordered_dedup.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import AsList, AsSingleton, EmptySideInput
from apache_beam.transforms import window
from apache_beam.transforms.display import DisplayDataItem

from beam_shards.beam import deferred, ordered_bins, ordered_steps
from beam_shards.beam.bad_limit import check_skipping
from beam_shards.beam.count_skipped import CountSkippedFn
from beam_shards.beam import arrow_coder  # noqa: F401 - registers the coders of record batches and tables
from beam_shards.beam.bundles import BAD_TAG, WriteBundleFn, WriteBundleWithIdFn
from beam_shards.beam.ordered_dedup import ORDERED_RECORD, WriteChunkDedupFn, resized
from beam_shards.beam.merging import merge_small_shards
from beam_shards.beam.publishing import apply_retention, publish_staged, settle_write
from beam_shards.beam.runner_limits import unsupported_runner
from beam_shards.beam.staged_dedup import DIGESTS_TAG, DROPPED_TAG, DropStagedDuplicates, dedup_columns
from beam_shards.errors import best_effort
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.shards.merge import plan_bins
from beam_shards.shards.options import (DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES,
                                        WriterOptions, WrittenShard)
from beam_shards.versions.gc import Retention
from beam_shards.versions.staging import remove_staging, staged_order


class WriteWithBad(NamedTuple):
    """What `WriteToArrowShards(..., on_bad="skip")` returns: the published manifest, and
    the examples it skipped (Beam's dead-letter idiom).

    Attributes:
      manifest: a PCollection of one element, the published `Manifest`.
      bad: a PCollection of one dict per skipped example: "key" (its key; for a row of a
        batch, `(batch key, row)`), "example" (as given, or a short repr when it does
        not pickle) and "reason" (the error, naming the field and the feature).
    """

    manifest: beam.PCollection
    bad: beam.PCollection


def _plan_merge(grouped: Any, options: WriterOptions, overhead: int) -> list[tuple[str, list[WrittenShard]]]:
    """The bins to merge, from every committed bundle's shards: `(write id, shards)` pairs.

    Sorted by staged path first, so a retried plan makes the same bins whatever order
    the shuffle gave. Shards stay with their write id's staging (only runners with an
    empty write id side input stage under more than one).
    """
    by_write: dict[str, list[WrittenShard]] = {}
    for write_id, shard in sorted(grouped, key=lambda item: (item[0], staged_order(item[1]))):
        by_write.setdefault(write_id, []).append(shard)
    bins = []
    for write_id, shards in sorted(by_write.items()):
        for indices in plan_bins([s.num_bytes for s in shards], options.shard_size_bytes,
                                 rows=[s.num_rows for s in shards], max_rows=options.max_rows_per_shard,
                                 overhead=overhead):
            bins.append((write_id, [shards[i] for i in indices]))
    return bins


def _write_ids(staged: beam.PCollection) -> beam.PCollection:
    """The write ids of the gathered staged shards (`merging.gather`'s one element)."""
    return staged | "WriteIds" >> beam.FlatMap(lambda kv: sorted({item[0] for item in kv[1]}))


class _FinalizeFn(beam.DoFn):
    """Publishes the staged shards of every committed bundle as one version; safe to run more than once."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, metadata: dict[str, Any],
                 mode: str, retention: Retention | None, allow_empty: bool, in_order: bool = False,
                 since: int | None = None, max_bad: int | float | None = None, dedup: Any = None):
        self._path = path
        self._dedup = dedup
        self._max_bad = max_bad
        self._since = since
        self._allow_empty = allow_empty
        self._in_order = in_order
        self._features = features
        self._options = options
        self._metadata = metadata
        self._mode = mode
        self._retention = retention

    def process(self, unused: Any, write_id: Any, staged: list[tuple], every_write_id: list[str] = (),
                features: Features | None = None, skipped: Any = None, dropped: Iterable[int] = ()):
        """`staged` holds `(write id, shard)` pairs, or `(write id, shard, order)` for a deterministic write;
        `features` come as a side input when made as the pipeline runs (else they are the write's);
        `skipped`, with `max_bad`, the `bad_limit.Skipped` of the write; `dropped`, with `dedup`, counts
        of duplicate rows dropped, which add up to all of them."""
        dropped = sum(dropped)
        if isinstance(write_id, EmptySideInput):
            write_id = staged[0][0] if staged else new_write_id()
        if self._in_order:
            staged = sorted(staged, key=lambda item: item[2])
        manifest = publish_staged(
            self._path, write_id=write_id, features=deferred.features_for(self._features, features),
            staged=[item[1] for item in staged], options=self._options, metadata=self._metadata, mode=self._mode,
            ordered=self._in_order, since=self._since, allow_empty=self._allow_empty, max_bad=self._max_bad,
            skipped=skipped, dedup=self._dedup, dropped=dropped)
        # Bundles whose write id fell back to a fresh one staged elsewhere.
        layout = CacheLayout(self._path)
        for other in sorted(({item[0] for item in staged} | set(every_write_id)) - {write_id}):
            with best_effort(f"remove the staging of write {other}", self._path):
                remove_staging(layout, other, temporaries=False)
        apply_retention(self._path, self._retention)
        yield manifest


class WriteToArrowShards(beam.PTransform):
    """Writes a PCollection of examples into a cache of Arrow shards, published as a new version.

    Elements are example dicts or `(key, dict)` pairs; a pyarrow RecordBatch or Table
    of examples (or a `(key, batch)` pair) is also accepted and checked column by
    column, which skips Beam's per-element cost for sources that read in batches.

    Each bundle encodes its examples against `features` and writes size-rotated Arrow
    IPC shards into `<path>/_staging/`; staged shards under half of `shard_size_bytes`
    are then merged, in parallel, into shards near it by copying their record batches
    (whatever the runner's bundles, at most one published shard is under half the
    target), and one finalize step gives the shards their final
    names and commits them as the next version (`_versions/<N>.json`, created only if
    absent, then `_metadata.json`). Readers see the old version or the new, never a
    mix, and a reader that opened an older version keeps reading it until retention
    removes it. All file access goes through Beam's FileSystems, so gs:// and s3://
    paths work.

    Example:
        >>> import apache_beam as beam
        >>> from beam_shards import Features, Value, WriteToArrowShards
        >>> features = Features({"id": Value("int64"), "text": Value("string")})
        >>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
        ...     manifest = (p | beam.Create(range(1000))
        ...                 | beam.Map(lambda i: {"id": i, "text": str(i)})
        ...                 | WriteToArrowShards("/tmp/cache", features))

    Features computed when the pipeline runs (inferred from the rows, say) are given as a
    PCollection of one `Features`:

        >>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
        ...     rows = p | beam.Create([{"id": i, "text": str(i)} for i in range(1000)])
        ...     inferred = p | "Features" >> beam.Create([features])  # or a beam.CombineGlobally
        ...     manifest = rows | WriteToArrowShards("/tmp/cache", inferred)

    Args:
      path: the cache folder (local, gs://, s3://, ...).
      features: the schema every example must match: a `Features`, or a PCollection holding
        exactly one, made when the pipeline runs (then every step reads it as a side input,
        which costs Beam's per-element side input invoker: give such pipelines' examples as
        record batches). The checks that need the features (their type and size in the
        manifest, `mode="append"`'s match) then run when the pipeline runs, before any shard
        is staged, with the same errors; a PCollection of no element or several fails the
        pipeline with a ValueError naming it.
      shard_size_bytes: target size of a shard on disk; a shard closes before a batch
        would take it past this.
      max_rows_per_shard: optional cap on rows per shard.
      batch_size: rows per record batch at most.
      batch_bytes: bytes per record batch at most (bounds a bundle's memory).
      compression: None, "zstd" or "lz4".
      metadata: free JSON-serializable metadata stored in the manifest.
      mode: "overwrite" (publish these rows alone), "append" (the latest version's
        shards plus these; same features and compression) or "error" (refuse a path
        that already holds a cache, checked before the pipeline runs and again at
        publish).
      retention: the retention applied after publishing (`beam_shards.versions.gc.Retention`);
        None to keep every version.
      write_id: the id of this write, from `beam_shards.new_write_id()`; by default one is
        made when the pipeline runs. Give one to clean up after a failed run yourself
        (`beam_shards.abandon(path, write_id)`); it must be new for every run, or finalize
        takes the run for a retry of the published one.
      on_bad: "fail" (the default): an example that does not fit fails the pipeline and
        nothing is published. "skip": it is left out and goes to the `bad` output instead
        (see `WriteWithBad`), counted in the Beam counter `beam_shards:bad_inputs`; the
        cache holds the other examples.
      max_bad: with `on_bad="skip"`, the most examples to skip: a count (an int), or a
        fraction (a float, 0.01 for 1%) of the examples seen (written and skipped). A
        write that skips more fails with a `TooManyBadError` naming the count and the
        first reasons, and publishes nothing; one within it records
        `{"skipped", "read", "max_bad"}` as `"bad_inputs"` in its version's metadata.
        None (the default): no limit.
      set_aside: with `max_bad`, a PCollection of the dead letters (dicts with "key" and
        "reason") of examples the caller left out before this sink, counted toward it.
      allow_empty: publish a version of no rows when the input holds none. By default
        the pipeline fails with an `EmptyWriteError` instead, so an input that matched
        nothing (or a runner that lost the shards) cannot replace a cache with an empty
        one.
      deterministic: write the rows in key order (the input is `(key, example)` pairs
        whose keys sort), so the same input gives the same rows, order and shard bytes
        on any runner, bundling or number of workers (see `ordered`). Keys are tuples
        of str, int, float, bytes, bool and None (stored in a plain encoding, `keys`);
        key by position, an int or `(input file, position, ...)`, so neighbouring rows
        are written together. It costs a shuffle of the examples and a copy of the shards.
      dedup: None (the default), "rows" or a list of column names: exact duplicates (the same
        encoded values of every column, or of the named ones) are dropped, keeping the first
        in key order under `deterministic=True` (`ordered_dedup.py`: as below, on the chunks'
        shards, 48 bytes a row with its place in key order) and any one otherwise
        (`staged_dedup.py`: it costs digesting the rows, a shuffle of 32 bytes a row staged,
        its digest and place, and a copy of the staged shards that hold duplicates of another
        bundle's rows); memory per worker is bounded
        whatever the number of distinct rows. The count dropped is in the version's metadata
        (and the returned manifest's) as `"dedup": {"columns": "rows" | [...], "dropped": N}`.

    Returns (from `expand`):
      A PCollection with one element, the published `Manifest`; with `on_bad="skip"`, a
      `WriteWithBad` of that and the skipped examples:

          result = examples | WriteToArrowShards(path, features, on_bad="skip")
          result.bad | beam.Map(print)   # {"key": ..., "example": ..., "reason": ...}

    Raises:
      ValueError: an option out of range, an `on_bad` other than "fail" and "skip", or a
        `dedup` column the features do not have (at construction; when the pipeline runs for
        features made then); a runner that drops what `finish_bundle` emits (Beam's
        DaskRunner) or an unbounded input (when applied).
      CacheExistsError: `mode="error"` and a cache is at `path` (at construction, and again
        when the pipeline runs for features made then).
      SchemaMismatchError: `mode="append"` to a cache of other features (when the pipeline
        runs, before any shard is staged, for features made then).
      EncodeError: when the pipeline runs, for an example that does not match
        `features` (names the example, the field and the feature); nothing is published.
      EmptyWriteError: when the pipeline runs, for a write of no rows without `allow_empty`.
      TooManyBadError: when the pipeline runs, for a write that skips more than `max_bad`
        allows; nothing is published.
      TypeError: when the pipeline runs, for a deterministic write's key of another type
        than those above (names the type and the key), at its first element.
    """

    def __init__(self, path: str, features: Features | beam.PCollection, *,
                 shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, max_rows_per_shard: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, compression: str | None = None,
                 metadata: dict[str, Any] | None = None, mode: str = "overwrite",
                 retention: Retention | None = Retention(), write_id: str | None = None,
                 on_bad: str = "fail", allow_empty: bool = False, deterministic: bool = False,
                 max_bad: int | float | None = None, set_aside: beam.PCollection | None = None, dedup: Any = None):
        super().__init__()
        self._dedup = None if dedup is None else dedup_columns(dedup, deferred.known(features)) or "rows"
        check_skipping(on_bad, max_bad, set_aside is not None)
        self._max_bad = max_bad
        self._set_aside = set_aside
        self._on_bad = on_bad
        self._allow_empty = allow_empty
        self._deterministic = deterministic
        options = WriterOptions(shard_size_bytes, max_rows_per_shard, batch_size, batch_bytes, compression)
        self._metadata, self._since, self._options = settle_write(path, deferred.known(features), metadata, mode,
                                                                  options, write_id)
        self._path = path
        self._features = features
        self._mode = mode
        self._retention = retention
        self._write_id = write_id

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection[Manifest] | WriteWithBad:
        if not pcoll.is_bounded:
            raise ValueError("WriteToArrowShards publishes one cache once its input ends: it needs a bounded "
                             "PCollection (window an unbounded one into files with another sink)")
        limitation = unsupported_runner(pcoll.pipeline)
        if limitation:
            raise ValueError(f"WriteToArrowShards cannot run on this runner: {limitation}; use another runner "
                             "(FnApiRunner, Flink, Spark, Dataflow)")
        do_once = pcoll.pipeline | "DoOnce" >> beam.Create([None])
        given = self._write_id
        write_id = do_once | "NewWriteId" >> beam.Map(lambda _: given or new_write_id())
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            # Shard results are emitted in the global window; finalize reads them all.
            pcoll = pcoll | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        features = self._features
        if deferred.is_deferred(features):  # checked once when the pipeline runs, before anything is staged
            features = features | "CheckFeatures" >> deferred.CheckFeatures(self._path, self._metadata, self._mode)
        given_features, side = deferred.known(features), deferred.side_inputs(features)
        options = self._options
        if self._deterministic:
            write_runs = ordered_steps.WriteRunsFn(self._path, given_features, options, given, self._on_bad)
            if self._dedup is None:
                write_chunk, tags = ordered_steps.WriteChunkFn(self._path, given_features, options, given), ()
            else:
                write_chunk = WriteChunkDedupFn(self._path, given_features, options, given, self._dedup)
                tags = (DIGESTS_TAG, DROPPED_TAG)
            runs, chunks = ordered_steps.write_in_key_order(pcoll, write_id, write_runs, write_chunk, side, tags)
            written, write_ids, dropped = chunks.shards, None, None
            if self._dedup is not None:
                written, write_ids, dropped = (
                    (written, chunks[DIGESTS_TAG], chunks[DROPPED_TAG])
                    | "Dedup" >> DropStagedDuplicates(self._path, given_features, options, side, ORDERED_RECORD, resized))
            plan = functools.partial(ordered_bins.plan_ordered_bins, options=options)
            staged, merged = merge_small_shards(written, plan, self._path, features, options)
            if write_ids is None:
                write_ids = _write_ids(staged)
            return self._finalize(do_once, write_id, features, merged, write_ids, runs[BAD_TAG], dropped)
        dedup = self._dedup
        if given is None or side:
            write = beam.ParDo(WriteBundleWithIdFn(self._path, given_features, options, given, self._on_bad, dedup),
                               AsSingleton(write_id), *side)
        else:  # no side input: Beam's faster invoker
            write = beam.ParDo(WriteBundleFn(self._path, given_features, options, given, self._on_bad, dedup))
        tags = (BAD_TAG,) if dedup is None else (BAD_TAG, DIGESTS_TAG, DROPPED_TAG)
        written = pcoll | "WriteBundles" >> write.with_outputs(*tags, main="shards")
        shards, write_ids, dropped = written.shards, None, None
        if dedup is not None:
            shards, write_ids, dropped = ((shards, written[DIGESTS_TAG], written[DROPPED_TAG])
                                          | "Dedup" >> DropStagedDuplicates(self._path, given_features, options, side))
        plan = functools.partial(_plan_merge, options=options)
        staged, merged = merge_small_shards(shards, plan, self._path, features, options)
        if write_ids is None:
            write_ids = _write_ids(staged)
        return self._finalize(do_once, write_id, features, merged, write_ids, written[BAD_TAG], dropped)

    def _finalize(self, do_once: beam.PCollection, write_id: beam.PCollection, features: Features | beam.PCollection,
                  merged: beam.PCollection, write_ids: beam.PCollection,
                  bad: beam.PCollection, dropped: beam.PCollection | None) -> beam.PCollection[Manifest] | WriteWithBad:
        """The finalize step; `dropped`, with `dedup`, holds counts of duplicate rows dropped (a few ints)."""
        limit = {}
        if self._max_bad is not None:
            letters = bad if self._set_aside is None else (bad, self._set_aside) | "AllSkipped" >> beam.Flatten()
            limit = {"skipped": AsSingleton(letters | "CountSkipped" >> beam.CombineGlobally(CountSkippedFn()))}
        if dropped is not None:
            limit["dropped"] = AsList(dropped)
        manifest = do_once | "Finalize" >> beam.ParDo(
            _FinalizeFn(self._path, deferred.known(features), self._options, self._metadata, self._mode,
                        self._retention, self._allow_empty, self._deterministic, self._since, self._max_bad,
                        self._dedup),
            AsSingleton(write_id), AsList(merged), AsList(write_ids),
            **({"features": AsSingleton(features)} if deferred.is_deferred(features) else {}), **limit)
        return WriteWithBad(manifest, bad) if self._on_bad == "skip" else manifest

    def display_data(self) -> dict[str, Any]:
        options = self._options
        return {
            "path": DisplayDataItem(self._path, label="Cache path"),
            "mode": DisplayDataItem(self._mode, label="Mode"),
            "on_bad": DisplayDataItem(self._on_bad, label="Examples that do not fit"),
            "deterministic": DisplayDataItem(self._deterministic, label="Rows in key order"),
            "dedup": DisplayDataItem(str(self._dedup), label="Duplicates dropped by"),
            "shard_size_bytes": DisplayDataItem(options.shard_size_bytes, label="Target shard size (bytes)"),
            "batch_size": DisplayDataItem(options.batch_size, label="Rows per record batch"),
            "compression": DisplayDataItem(str(options.compression), label="Compression"),
            "features": DisplayDataItem("made when the pipeline runs" if deferred.is_deferred(self._features)
                                        else repr(self._features), label="Features"),
        }
