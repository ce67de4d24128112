"""Exceptions raised by beam_shards, each carrying the values that explain it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

_LOGGER = logging.getLogger("beam_shards")


class BeamShardsError(Exception):
    """Base class of every error raised by beam_shards."""


class EncodeError(BeamShardsError, ValueError):
    """An example does not match its features.

    Attributes:
        example: the example's key, or its position in the input when it has no key.
        field: the path of the offending field, like ``"frames[2]"``; None for the
            example as a whole.
        feature: ``repr`` of the feature the value was checked against.
        row: for a batch of examples, the row of the offending example in it.
        got: a short description of the offending value.
        reason: what is wrong.
    """

    def __init__(
        self,
        reason: str,
        *,
        example: Any = None,
        field: str | None = None,
        feature: str | None = None,
        got: str | None = None,
        row: int | None = None,
    ):
        self.reason = reason
        self.row = row
        self.example = example
        self.field = field
        self.feature = feature
        self.got = got
        super().__init__(self._message())

    def _message(self) -> str:
        if (self.example is None and self.field is None and self.feature is None and self.got is None
                and self.row is None):
            # Re-raised from its own message text (as Beam does to add the step name).
            return self.reason
        if self.row is not None:
            where = f"row {self.row} of batch {self.example!r}" if self.example is not None else f"row {self.row} of a batch"
        else:
            where = f"example {self.example!r}" if self.example is not None else "example"
        if self.field is not None:
            where += f", field {self.field!r}"
        if self.feature is not None:
            where += f" ({self.feature})"
        text = f"{where}: {self.reason}"
        if self.got is not None:
            text += f"; got {self.got}"
        return text

    def __reduce__(self):
        # Beam ships exceptions between processes by pickling them.
        return (_rebuild_encode_error, (self.reason, self.example, self.field, self.feature, self.got, self.row))


def _rebuild_encode_error(reason, example, field, feature, got, row=None) -> EncodeError:
    return EncodeError(reason, example=example, field=field, feature=feature, got=got, row=row)


class FeatureError(BeamShardsError, ValueError):
    """A feature declaration (or its JSON form) is invalid."""


class CacheError(BeamShardsError):
    """A cache on disk cannot be used as it is."""


class CacheNotFoundError(CacheError, FileNotFoundError):
    """There is no published cache at a path (no ``_metadata.json``)."""


class CorruptCacheError(CacheError):
    """A published cache does not match its manifest (missing, truncated or altered shard)."""


class NewerFormatError(CorruptCacheError):
    """A manifest of a format newer than this beam_shards reads: not damage, so nothing is to be
    moved aside; a newer beam_shards reads it."""


class SchemaMismatchError(CacheError):
    """A cache was written with other features than the reader expects."""


class VersionNotFoundError(CacheNotFoundError):
    """A cache exists, but not the version asked for (never published, or removed by retention)."""


class CacheExistsError(CacheError, FileExistsError):
    """A write with `mode="error"` found a cache already at its path; nothing was published."""


class PublishError(BeamShardsError):
    """A write cannot be published (a staged shard is gone, or other writers kept winning); nothing was published."""


class EmptyWriteError(PublishError):
    """A write holds no rows and was not allowed to publish an empty version; nothing was published."""


class TooManyBadError(PublishError):
    """A write skipped more bad examples than its `max_bad` allows; nothing was published."""


class StoreAccessError(BeamShardsError):
    """An object store cannot be used at a URI: no credentials, no such bucket, or its endpoint does not answer."""


class FileTooLargeError(OSError):
    """A file holds more bytes than its reader takes."""


class WriteInProgressError(BeamShardsError):
    """A local publish or gc holds the cache folder's lock, so gc must not run now."""


@contextlib.contextmanager
def best_effort(what: str, path: str) -> Iterator[None]:
    """Runs a clean-up step whose failure must neither fail nor hide the error of its caller: it is logged.

    Example:
        >>> with best_effort("remove the staging of write W", "/tmp/cache"):
        ...     raise OSError("disk gone")
    """
    try:
        yield
    except Exception:
        _LOGGER.warning("beam_shards: could not %s (`beam-shards gc %s` removes what is left)", what, path,
                        exc_info=True)
