"""What the sink's steps do to staged files, without Beam: a bundle's examples written into
size-rotated staged shards (`BundleWriter`), and a bin of staged shards merged into one
(`merge_bin`). The Beam steps (`bundles`, `ordered`'s, `merging`) and the deterministic
write in one process (`ordered_in_process`) compose them.
"""

from __future__ import annotations

import pickle
from typing import Any

from beam_shards.display import short_repr
from beam_shards.errors import EncodeError, best_effort
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout
from beam_shards.shards.merge import merge_shards
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.writer import ShardWriter
from beam_shards.shards.writer_inputs import BatchHook
from beam_shards.storage import fs
from beam_shards.versions.staging import staged_shards

# A shard whole, or its record batches [first, end): what a bin merges, in order.
Span = WrittenShard | tuple[WrittenShard, int, int]


def dead_letter(example: Any, key: Any, error: EncodeError) -> dict[str, Any]:
    """The record of a skipped example: its key, the example (a short repr when it does not
    pickle, so the record can travel between workers) and the reason."""
    try:
        pickle.dumps(example)
    except Exception:  # noqa: BLE001 - anything pickle refuses
        example = short_repr(example)
    return {"key": key, "example": example, "reason": str(error)}


class BundleWriter:
    """Writes one bundle at a time into size-rotated shards staged in an attempt folder of its own:
    `start` a bundle, `add` its examples, `finish` it (or `discard` it). No Beam inside: the
    sink's write step and the deterministic write's steps (`ordered`) compose it.

    With `skip_bad`, an example that does not fit becomes a dead letter (`take_letters`)
    instead of failing the bundle; a batch that does not fit is written row by row, so
    only its bad rows are skipped. A bundle that fails removes what it staged.

    Args:
      path: the cache folder.
      features: the schema of the shards.
      options: the shards' sizes, compression and column types.
      skip_bad: dead-letter examples that do not fit instead of raising.
      hidden: columns the caller added to the examples, left out of their dead letters.
      hook: the shard writers' `BatchHook`, if any.
    """

    def __init__(self, path: str, features: Features, options: WriterOptions, skip_bad: bool = False,
                 hidden: tuple[str, ...] = (), hook: BatchHook | None = None):
        self._layout = CacheLayout(path)
        self._hook = hook
        self._features = features
        self._options = options
        self._skip = skip_bad
        self._hidden = hidden
        self._writer: ShardWriter | None = None
        self._letters: list[dict[str, Any]] = []

    @property
    def started(self) -> bool:
        """Whether a bundle is started and not yet finished or discarded."""
        return self._writer is not None

    def start(self, write_id: str) -> None:
        """Starts a bundle of write `write_id`, in a fresh attempt folder (retries never collide).

        A bundle started before and never finished failed: its files are removed first.
        """
        self.discard()
        self._letters = []
        self._writer = ShardWriter(self._features, staged_shards(self._layout.new_attempt(write_id)), self._options,
                                   self._skip_bad if self._skip else None, self._hook)

    def add(self, example: Any, key: Any) -> None:
        """Adds an example (or a batch of them, or `EncodedRows`) of the started bundle.

        Raises:
          EncodeError: it does not fit (and `skip_bad` is off); the bundle is discarded, as on any error.
        """
        writer = self._started()
        try:
            writer.add(example, key)
        except BaseException:
            self.discard()
            raise

    def _started(self) -> ShardWriter:
        if self._writer is None:
            raise RuntimeError("BundleWriter: start a bundle before adding to or finishing it")
        return self._writer

    def _skip_bad(self, example: Any, key: Any, error: EncodeError) -> None:
        """The writer's `on_bad`: a dead letter for an example (or a batch's row) left out."""
        if self._hidden and isinstance(example, dict):
            example = {name: value for name, value in example.items() if name not in self._hidden}
        self._letters.append(dead_letter(example, key, error))

    def take_letters(self) -> list[dict[str, Any]]:
        """The dead letters made since the last call (plain examples are checked with their
        batch, so a letter may come with a later example, or only with `finish`)."""
        letters, self._letters = self._letters, []
        return letters

    def finish(self) -> list[WrittenShard]:
        """Writes what is buffered and returns the bundle's shards, all on disk."""
        writer = self._started()
        try:
            shards = writer.close()
        except BaseException:
            self.discard()
            raise
        self._writer = None
        return shards

    def discard(self) -> None:
        """Drops the started bundle and removes its files (a runner may retry it)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with best_effort("remove the files of a failed bundle", self._layout.path):
                fs.delete(writer.abort())


def merge_bin(layout: CacheLayout, write_id: str, spans: list[Span], features: Features,
              options: WriterOptions) -> WrittenShard:
    """One bin of staged shards merged into one staged shard, copied in a fresh attempt folder of write
    `write_id` (a retried or repeated merge never collides with another); a bin of one whole shard is
    that shard."""
    if len(spans) == 1 and isinstance(spans[0], WrittenShard):
        return spans[0]
    shards = [span if isinstance(span, WrittenShard) else span[0] for span in spans]
    batches = [None if isinstance(span, WrittenShard) else span[1:] for span in spans]
    return merge_shards(shards, features, staged_shards(layout.new_attempt(write_id)), options.compression,
                        options.column_types, batches)
