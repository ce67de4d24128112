"""The bad-inputs list: the inputs a conversion pipeline skipped (`--skip_bad`).

It lives beside the cache as `<path>/_bad_inputs.jsonl`, one JSON object per line:
`{"write_id": ..., "input": "data.csv, line 7", "error": "..."}`. It is written after
the cache is published, atomically, and removed by a later write that skipped nothing,
so it always describes the published version (its `write_id` says which one).
"""

from __future__ import annotations

import json
from typing import Any

from beam_shards.errors import CorruptCacheError
from beam_shards.format.layout import CacheLayout
from beam_shards.format.manifest import parse_json
from beam_shards.storage import fs

MAX_LINE_BYTES = 1 << 20


def bad_inputs_path(path: str) -> str:
    return CacheLayout(path).bad_inputs


def write_bad_inputs(path: str, write_id: str, records: list[dict[str, Any]]) -> None:
    """Replaces the list beside the cache at `path`; removes it when `records` is empty.

    Args:
      path: the cache folder.
      write_id: the write that skipped these inputs.
      records: dicts with "input" (what was skipped) and "error" (why).
    """
    target = bad_inputs_path(path)
    if not records:
        fs.delete([target])
        return
    lines = [json.dumps({"write_id": write_id, **record}, ensure_ascii=False) + "\n" for record in records]
    fs.write_bytes_atomic(target, "".join(lines).encode("utf-8"), CacheLayout.temporary(target, write_id))


def read_bad_inputs(path: str) -> list[dict[str, Any]]:
    """The records of the list beside the cache at `path` (empty when there is none).

    Read line by line, each line at most `MAX_LINE_BYTES`, so a damaged list costs
    bounded memory.

    Raises:
      CorruptCacheError: the list cannot be read, or a line of it is not a JSON object.
    """
    source = bad_inputs_path(path)
    if not fs.exists(source):
        return []
    records = []
    try:
        with fs.open_read(source) as handle:
            for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
                if line.strip():
                    records.append(_record(line, f"{source}, line {number}"))
    except OSError as error:
        raise CorruptCacheError(f"cannot read {source}: {error}") from None
    return records


def _record(line: bytes, where: str) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise CorruptCacheError(f"{where} is longer than {MAX_LINE_BYTES:,} bytes")
    record = parse_json(line, where)
    if not isinstance(record, dict):
        raise CorruptCacheError(f"{where} is not a JSON object")
    return record
