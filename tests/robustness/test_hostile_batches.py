"""Format-5 record batches met in hostile states: a shard truncated under its reader's map, spans whose
bytes pass their CRC-32 but are no record batch, a damaged byte in a column a Beam read selects, and two
threads finding one damaged disk-cache copy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import zlib

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, CorruptCacheError, Features, ReadFromArrowShards, Value, read_metadata, \
    write_shards
from beam_shards.format import manifest as manifest_module
from beam_shards.shards import span_reader
from beam_shards.shards.shard_file import ShardFile
from beam_shards.storage import disk_cache

from _hostile import assert_clear, rewrite_table
from _support import flip_byte, options

FEATURES = Features({"id": Value("int64"), "text": Value("string")})

# Run in a child process: a read touching a mapped page past the end of the truncated file would kill it
# with SIGBUS, which must fail the test, not end pytest.
TRUNCATED_READ = """
import sys
from beam_shards import ArrowBackend, CorruptCacheError, read_metadata
path = sys.argv[1]
backend = ArrowBackend.open(path)
backend.get_row(0)  # shard 0 mapped, batch 0 read
with open(read_metadata(path).shard_path(0), "r+b") as handle:
    handle.truncate(64)
try:
    backend.get_row(9)
except CorruptCacheError as error:
    print(error)
else:
    print("served")
"""


def written(path: str, text: str = "row {i}") -> str:
    """20 rows in 2 shards of batches of 4 rows."""
    write_shards(({"id": i, "text": text.format(i=i) * (i % 5 + 1)} for i in range(20)), path, FEATURES,
                 batch_size=4, max_rows_per_shard=10)
    return path


def with_span(path: str, index: int, offset: int, length: int, crc32: int) -> None:
    """Shard 0's batch `index` listed at `offset` and `length` with `crc32` in the shard table."""
    def changed(table: pa.Table) -> pa.Table:
        for column, value in (("batch_offsets", offset), ("batch_lengths", length), ("batch_crc32s", crc32)):
            values = table.column(column).to_pylist()
            values[0][index] = value
            at = table.schema.get_field_index(column)
            table = table.set_column(at, table.schema.field(at), pa.array(values, table.schema.field(at).type))
        return table
    rewrite_table(path, changed)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("format_version", [4, 5])
def test_a_shard_truncated_after_it_was_mapped_gives_an_error_not_a_dead_process(tmp_path, monkeypatch,
                                                                                 format_version):
    monkeypatch.setattr(manifest_module, "FORMAT_VERSION", format_version)
    path = written(str(tmp_path / "cache"), "x" * 2000 + "{i}")
    done = subprocess.run([sys.executable, "-c", TRUNCATED_READ, path], capture_output=True, text=True, timeout=100,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, f"the reader died ({done.returncode}): {done.stderr[-2000:]}"
    message = done.stdout.strip()
    spans = read_metadata(path).shards.batch_spans(0)
    where = f"(bytes {spans[2].offset} to {spans[2].offset + spans[2].length})" if spans else "was not read"
    for words in ("shard 0", "was truncated to 64 bytes since it was opened", "record batch 2", where):
        assert words in message, message


def test_a_span_holding_the_end_of_stream_marker_is_refused_naming_file_and_batch(tmp_path):
    path = written(str(tmp_path / "cache"))
    data = open(read_metadata(path).shard_path(0), "rb").read()
    eos = data.rindex(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    with_span(path, 2, eos, 8, zlib.crc32(data[eos:eos + 8]))
    with pytest.raises(CorruptCacheError) as caught:
        ArrowBackend.open(path).get_row(9)
    assert_clear(caught.value, CorruptCacheError, ["shard 0", f"record batch 2 (bytes {eos} to {eos + 8})",
                                                   "is not a readable Arrow IPC record batch"])


def test_a_cut_batch_whose_crc_matches_is_refused_naming_the_batch(tmp_path):
    path = written(str(tmp_path / "cache"))
    data = open(read_metadata(path).shard_path(0), "rb").read()
    span = read_metadata(path).shards.batch_spans(0)[1]
    length = span.length - 16  # the message's body cut short
    with_span(path, 1, span.offset, length, zlib.crc32(data[span.offset:span.offset + length]))
    with pytest.raises(CorruptCacheError) as caught:
        ArrowBackend.open(path).get_row(5)
    assert_clear(caught.value, CorruptCacheError, ["shard 0", f"record batch 1 (bytes {span.offset} to "
                                                   f"{span.offset + length})", "not a readable Arrow IPC"])


@pytest.mark.timeout(300)
def test_a_beam_read_of_some_columns_checks_the_crc_of_format_5_batches(tmp_path):
    path = written(str(tmp_path / "cache"))
    shard = read_metadata(path).shard_path(0)
    data = open(shard, "rb").read()
    flip_byte(shard, data.index(pa.array([4, 5, 6, 7], pa.int64()).buffers()[1].to_pybytes()) + 8)  # id 5
    with pytest.raises(CorruptCacheError, match=r"shard 0 .*: record batch 1 .* has CRC-32 .* the shard table says"):
        with beam.Pipeline(options=options("--runner=FnApiRunner")) as pipeline:
            _ = pipeline | ReadFromArrowShards(path, columns=["id"]) | beam.Map(lambda row: row["id"])


@pytest.mark.timeout(120)
def test_two_threads_finding_a_damaged_copy_both_read_the_copy_fetched_again(tmp_path, monkeypatch):
    monkeypatch.setattr(ShardFile, "is_remote", property(lambda self: True))  # the local cache read as a store's
    path = written(str(tmp_path / "cache"))
    cache_dir = str(tmp_path / "shard_cache")
    backend = ArrowBackend.open(path, cache_dir=cache_dir)
    assert backend.get_row(0)["id"] == 0  # shard 0 downloaded, its copy opened
    entry = read_metadata(path).shards[0]
    [copy] = [os.path.join(cache_dir, name) for name in os.listdir(cache_dir)
              if name.endswith(f"-{entry.num_bytes}.arrow")]
    span = read_metadata(path).shards.batch_spans(0)[1]
    flip_byte(copy, span.offset + span.length - 20)

    both_found = threading.Barrier(2, timeout=30)  # neither fetches again before both found the damage
    real_read, refetches = span_reader.SpanReader.read, []

    def read(self, index):
        try:
            return real_read(self, index)
        except span_reader.DamagedBatchError:
            both_found.wait()
            raise

    real_refetch = disk_cache.DiskCache.refetch
    monkeypatch.setattr(span_reader.SpanReader, "read", read)
    monkeypatch.setattr(disk_cache.DiskCache, "refetch",
                        lambda self, *args: refetches.append(args) or real_refetch(self, *args))
    results: dict[str, object] = {}

    def row(name: str) -> None:
        try:
            results[name] = backend.get_row(5)["id"]
        except Exception as error:  # noqa: BLE001 - the test reports what each thread met
            results[name] = error

    threads = [threading.Thread(target=row, args=(name,)) for name in ("first", "second")]
    [thread.start() for thread in threads]
    [thread.join() for thread in threads]
    assert results == {"first": 5, "second": 5}
    assert len(refetches) == 1, "the copy was fetched again once, for both threads"


def test_advice_the_kernel_refuses_is_ignored():
    class Refusing:
        def madvise(self, *args):
            raise OSError(22, "Invalid argument")

    span_reader._advise(Refusing(), "MADV_RANDOM")  # no error: advice is a hint
