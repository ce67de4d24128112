"""A cold open + row 0, read by read: `ArrowBackend` and MosaicML streaming's `LocalDataset` (for
`bench_training.py`'s `cold` measure, in an untimed child of its own).

Each reader's steps are its functions that read or check something, wrapped by a `ReadTrace`
(`read_trace.py`): for each call its time, the pages of the dataset's files it brought into the
page cache (file, offset, bytes: its reads from disk, readahead included) and the bytes the process
read from storage. Wrapping costs a little; the timed figure is the `cold` measure's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from read_trace import ReadTrace


def _name(path: Any) -> str:
    return os.path.basename(str(path))


def wrap_backend(trace: ReadTrace) -> None:
    """The steps of `ArrowBackend.open(path).get_row(0)`."""
    from beam_shards.format import manifest, version_files
    from beam_shards.read import backend
    from beam_shards.shards import shard_file, span_reader
    from beam_shards.storage import fs

    trace.wrap(backend, "read_metadata", "open: read_metadata")
    trace.wrap(fs, "read_bytes", lambda path, **_: f"read {_name(path)}")
    trace.wrap(fs, "exists", lambda path: f"look for {_name(path)}")
    trace.wrap(manifest.Manifest, "from_json", "parse the header")
    trace.wrap(version_files, "read_table", lambda path, ref: f"shard table {ref.file[:24]}..: CRC-32, validate")
    trace.wrap(backend.ArrowBackend, "get_row", "row 0: get_row(0)")
    trace.wrap(backend, "load_shard", lambda manifest, shard, *_: f"open shard {shard}")
    trace.wrap(fs, "map_file", lambda path: f"map {_name(path)[:40]}")
    trace.wrap(span_reader.SpanReader, "read", lambda self, index: f"batch {index}: CRC-32, read, validate")
    trace.wrap(span_reader.SpanReader, "_bytes", lambda self, index: f"batch {index}: locate, advise WILLNEED")
    trace.wrap(shard_file.ShardFile, "check_batch", "validate the batch (Arrow, full)")


def wrap_mosaic(trace: ReadTrace) -> None:
    """The steps of `LocalDataset(path)[0]`."""
    from streaming.base import local
    from streaming.base.format.mds import reader

    trace.wrap(local.LocalDataset, "__init__", "open: LocalDataset (index.json, shard readers)")
    trace.wrap(local.LocalDataset, "get_item", "row 0: ds[0]")
    trace.wrap(reader.MDSReader, "get_sample_data", lambda self, idx: f"sample {idx}: read offsets, then bytes")
    trace.wrap(reader.MDSReader, "decode_sample", "decode the sample")


TRACED: dict[str, Callable[[ReadTrace], None]] = {"backend": wrap_backend, "mosaic": wrap_mosaic}


def traced_cold_open(reader: str, folder: Path, evict: Callable[[Path], None],
                     open_row: Callable[[], Any]) -> dict[str, Any]:
    """`open_row()` with `folder` evicted first and `reader`'s steps traced: its seconds and the trace."""
    evict(folder)
    trace = ReadTrace([folder])
    resident = trace.resident_bytes()
    TRACED[reader](trace)
    start = time.perf_counter()
    open_row()
    seconds = time.perf_counter() - start
    return {"value": seconds, "resident_before": resident, "lines": trace.lines(seconds)}
