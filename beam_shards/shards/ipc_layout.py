"""Where the bytes of an Arrow IPC file go, as the writer rotates shards and the merge plans count
them (pure arithmetic): the magic, the schema's message, each record batch's message, and a footer
repeating the schema with an entry per batch."""

from __future__ import annotations

import pyarrow as pa

# An IPC file begins with its 6-byte magic, padded to 8, then the schema's message.
FILE_MAGIC_BYTES = 8
# The footer repeats the schema (plus its fixed part) and holds one entry per record batch:
# offset, metadata length and body length.
FOOTER_FIXED_BYTES = 64
FOOTER_BLOCK_BYTES = 24


def first_batch_offset(schema: pa.Schema) -> int:
    """Where a file's first record batch begins: pyarrow writes the magic and the schema with it."""
    return FILE_MAGIC_BYTES + schema.serialize().size


def footer_bytes(schema: pa.Schema, batches: int) -> int:
    """The bytes of the footer of a file of `batches` record batches in `schema`."""
    return schema.serialize().size + FOOTER_FIXED_BYTES + FOOTER_BLOCK_BYTES * batches
