"""`EncodedRows`: rows a step before the writer already checked, which it writes as they are."""

from __future__ import annotations

import dataclasses

import pyarrow as pa


@dataclasses.dataclass(frozen=True)
class EncodedRows:
    """Rows a step before the writer already checked against the writer's features, as
    `Features.encode_batch` returns them: `ShardWriter.add` writes them as they are, so
    they are not checked twice. Their schema must be the features' Arrow schema.

    Args:
      table: the rows, from `Features.encode_batch`.
    """

    table: pa.Table
