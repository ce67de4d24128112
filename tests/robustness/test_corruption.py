"""Damaged caches: `verify` reports every kind of damage; readers fail clearly where they can see it.

What each reader can see without reading every byte:
- `read_metadata`/`ArrowBackend.open`/`ShardedDataset`/`ReadFromArrowShards` (when
  applied): the manifest (JSON, format version, fields, row totals) and each shard's
  presence and size.
- Reading a shard: each record batch's CRC-32 (format 5: the shard table gives it), so
  a changed byte inside a batch, even in a data buffer (a pixel, a digit of a number, a
  character that stays valid UTF-8), is refused; its schema, record batch metadata, row
  count, and every offset and length inside its batches (full validation).
- Only `verify`: the footer and the file's header (a format-5 reader finds batches
  without them).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import (Array, ArrowBackend, CacheNotFoundError, CorruptCacheError, Features, ReadFromArrowShards,
                         Sequence, ShardedDataset, Value, read_metadata, verify, write_shards)
from beam_shards.format.layout import MANIFEST_NAME

from _reliability import SCRIPTS, edit_manifest, print_uncaptured
from _support import options

FEATURES = Features({
    "id": Value("int64"),
    "text": Value("string", nullable=True),
    "blob": Value("binary"),
    "seq": Sequence(Value("int32")),
    "arr": Array((3,), "float32", nullable=True),
    "var": Array((None, 2), "int16"),
})
NUM_ROWS = 40


def _example(i: int) -> dict:
    return {"id": i, "text": None if i % 7 == 3 else f"text {i} " * (i % 4), "blob": bytes([i]) * (5 + i % 3),
            "seq": list(range(i % 5)), "arr": None if i % 9 == 4 else np.full(3, i, np.float32),
            "var": np.arange(2 * (i % 3), dtype=np.int16).reshape(-1, 2)}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("pristine") / "cache")
    write_shards((_example(i) for i in range(NUM_ROWS)), path, FEATURES, max_rows_per_shard=10, batch_size=4)
    assert verify(path).ok
    return path


@pytest.fixture
def cache(pristine, tmp_path) -> str:
    """A fresh copy of the pristine cache, to damage."""
    path = str(tmp_path / "cache")
    shutil.copytree(pristine, path)
    return path


def _shard(path: str, index: int) -> str:
    return read_metadata(path, check_files=False).shard_path(index)


def _read_with_beam(path: str) -> None:
    with beam.Pipeline(options=options()) as p:
        p | ReadFromArrowShards(path) | beam.Map(lambda row: None)


def _read_with_backend(path: str) -> None:
    backend = ArrowBackend.open(path)
    backend.slice(0, backend.num_rows)


def _read_with_dataset(path: str) -> None:
    list(ShardedDataset(path))


def _assert_every_reader_refuses(path: str, exception: type, *patterns: str) -> None:
    """Reading every row with each reader raises `exception` whose message holds every pattern (a
    damaged shard is seen when it is first read, a damaged manifest at open)."""
    for open_reader in (_read_with_backend, _read_with_dataset, _read_with_beam):
        with pytest.raises(exception) as raised:
            open_reader(path)
        for pattern in patterns:
            assert pattern in str(raised.value), f"{open_reader.__name__}: {raised.value}"


def _assert_verify_reports(path: str, *patterns: str) -> None:
    report = verify(path)
    assert not report.ok
    text = "\n".join(report.problems)
    for pattern in patterns:
        assert pattern in text, text


def test_a_damaged_batch_is_refused_on_its_first_touch_and_the_others_read(cache):
    """A mapped shard's batches are checked when first touched, not at open: one whose
    string offsets point past its data is refused, naming the shard, by every read that
    touches it, and the shard's other batches still read."""
    path = _shard(cache, 0)  # rows 0-9 in batches of 4: rows 4-7 are its batch 1
    with pa.memory_map(path) as source:
        base = source.read_buffer(source.size()).address
        offsets = pa.ipc.open_file(source).get_batch(1).column("text").buffers()[1]
        last_offset = offsets.address - base + offsets.size - 8  # large_string: int64 offsets
    with open(path, "r+b") as handle:
        handle.seek(last_offset)
        handle.write((1 << 40).to_bytes(8, "little"))
    backend = ArrowBackend.open(cache)
    assert backend.get_row(0)["id"] == 0 and backend.take([9, 2]).column("id").to_pylist() == [9, 2]
    for read in (lambda: backend.get_row(5), lambda: backend.take([9, 6]), lambda: ShardedDataset(cache)[7]):
        with pytest.raises(CorruptCacheError, match="shard 0"):
            read()


def test_truncated_shard(cache):
    shard = _shard(cache, 1)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as handle:
        handle.truncate(size - 100)
    name = os.path.basename(shard)
    _assert_verify_reports(cache, f"shard {name} has {size - 100} bytes, the manifest says {size} (truncated)")
    _assert_every_reader_refuses(cache, CorruptCacheError, name, "truncated")


def test_missing_shard(cache):
    shard = _shard(cache, 2)
    os.remove(shard)
    name = os.path.basename(shard)
    _assert_verify_reports(cache, f"shard {name} is missing")
    _assert_every_reader_refuses(cache, CorruptCacheError, name, "missing")


def test_flipped_byte_in_the_footer(cache):
    shard = _shard(cache, 0)
    with open(shard, "r+b") as handle:
        data = bytearray(handle.read())
        data[-12] ^= 0xFF  # inside the footer's flatbuffer, before its length and the magic
        handle.seek(0)
        handle.write(data)
    _assert_verify_reports(cache, f"shard {os.path.basename(shard)} has checksum", "is not a readable Arrow IPC file")
    # Format 5 finds batches where the shard table says: readers never read the footer, and serve the rows.
    assert ArrowBackend.open(cache).take([0, 9]).column("id").to_pylist() == [0, 9]
    _read_with_beam(cache)


def test_flipped_byte_in_a_data_buffer_is_refused_by_its_batchs_crc(cache):
    shard = _shard(cache, 0)
    with open(shard, "r+b") as handle:
        data = bytearray(handle.read())
        position = data.index(bytes([7]) * 6)  # the blob of example 7, in batch 1 (rows 4-7)
        data[position] = 8
        handle.seek(0)
        handle.write(data)
    _assert_verify_reports(cache, f"shard {os.path.basename(shard)} has checksum crc32:", "record batch 1 (bytes")
    assert len(verify(cache).problems) == 2, "the checksum and batch 1's CRC-32 differ, nothing else"
    backend = ArrowBackend.open(cache)
    with pytest.raises(CorruptCacheError, match="shard 0 .*: record batch 1 .* has CRC-32 [0-9a-f]{8} over"):
        backend.get_row(7)
    assert backend.get_row(3)["id"] == 3, "the shard's other batches read"


def test_shard_replaced_by_another_of_another_size(cache):
    small, big = sorted((_shard(cache, i) for i in range(4)), key=os.path.getsize)[::3]
    assert os.path.getsize(small) < os.path.getsize(big)
    shutil.copyfile(big, small)
    name = os.path.basename(small)
    _assert_verify_reports(cache, f"shard {name} has {os.path.getsize(big)} bytes", f"shard {name} has checksum")
    _assert_every_reader_refuses(cache, CorruptCacheError, name, "altered")


def test_shard_replaced_by_a_twin_is_refused_by_its_batches_crcs(tmp_path):
    """Same size, schema and rows: the checksums tell the shards apart, the whole file's (verify) and each
    batch's (every reader, since format 5)."""
    path = str(tmp_path / "cache")
    fixed = Features({"id": Value("int64"), "arr": Array((4,), "float32")})
    write_shards(({"id": i, "arr": np.full(4, i, np.float32)} for i in range(30)), path, fixed,
                 max_rows_per_shard=10, batch_size=5)
    manifest = read_metadata(path)
    assert len({s.num_bytes for s in manifest.shards}) == 1
    shutil.copyfile(manifest.shard_path(2), manifest.shard_path(0))
    _assert_verify_reports(path, f"shard {manifest.shards[0].file} has checksum", "record batch 0 (bytes",
                           "record batch 1 (bytes")
    assert len(verify(path).problems) == 3
    with pytest.raises(CorruptCacheError, match="shard 0 .*: record batch 1 .* has CRC-32"):
        ArrowBackend.open(path).get_row(7)


def test_shard_replaced_by_one_of_another_schema(cache, tmp_path):
    other = str(tmp_path / "other")
    other_features = Features({"id": Value("int64"), "text": Value("string", nullable=True), "blob": Value("binary"),
                               "seq": Sequence(Value("int64")), "arr": Array((3,), "float32", nullable=True),
                               "var": Array((None, 2), "int16")})
    write_shards((_example(i) for i in range(10)), other, other_features, batch_size=4)
    shard = _shard(cache, 0)
    shutil.copyfile(read_metadata(other).shard_path(0), shard)
    def resize(data: dict) -> None:
        data["shards"][0].update(num_bytes=os.path.getsize(shard))
        data["num_bytes"] = sum(entry["num_bytes"] for entry in data["shards"])

    edit_manifest(cache, resize)
    _assert_verify_reports(cache, "has schema", "list<item: int64>")
    backend = ArrowBackend.open(cache)
    with pytest.raises(CorruptCacheError, match="shard 0 .* has schema"):
        backend.get_row(0)
    with pytest.raises(Exception, match="shard 0 .* has schema"):
        _read_with_beam(cache)


def test_manifest_with_a_wrong_total_row_count(cache):
    edit_manifest(cache, lambda data: data.update(num_rows=NUM_ROWS + 1))
    _assert_verify_reports(cache, f"says num_rows={NUM_ROWS + 1} but its shards hold {NUM_ROWS} rows")
    _assert_every_reader_refuses(cache, CorruptCacheError, f"num_rows={NUM_ROWS + 1}")


def test_manifest_with_a_wrong_shard_row_count(cache):
    def edit(data):
        data["shards"][1]["num_rows"] -= 1
        data["num_rows"] -= 1

    edit_manifest(cache, edit)
    name = read_metadata(cache, check_files=False).shards[1].file
    _assert_verify_reports(cache, f"shard 1 ({name})", "holds 10 rows, the manifest says 9")
    backend = ArrowBackend.open(cache)
    assert backend.num_rows == NUM_ROWS - 1
    with pytest.raises(CorruptCacheError, match="holds 10 rows, the manifest says 9"):
        backend.take([15])
    assert backend.get_row(0)["id"] == 0, "the intact shards stay readable"
    with pytest.raises(Exception, match="holds 10 rows, the manifest says 9"):
        _read_with_beam(cache)


def test_manifest_of_an_unknown_format_version(cache):
    edit_manifest(cache, lambda data: data.update(format_version=6))
    _assert_verify_reports(cache, "has format version 6; this beam_shards reads versions 1 to 5 (upgrade beam_shards")
    _assert_every_reader_refuses(cache, CorruptCacheError, "format version 6")


def test_manifest_that_is_not_json(cache):
    where = os.path.join(cache, MANIFEST_NAME)
    with open(where, "r+b") as handle:
        handle.truncate(os.path.getsize(where) // 2)
    _assert_verify_reports(cache, "is not valid JSON")
    _assert_every_reader_refuses(cache, CorruptCacheError, "is not valid JSON")


def test_missing_manifest(cache):
    os.remove(os.path.join(cache, MANIFEST_NAME))
    with pytest.raises(CacheNotFoundError, match=f"no beam_shards cache at {cache}"):
        verify(cache)
    _assert_every_reader_refuses(cache, CacheNotFoundError, f"no beam_shards cache at {cache}")


def _scan(cache: str, shard: int, positions: list[int]) -> dict[int, dict]:
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, "flip_scan.py"), cache, str(shard),
                           *map(str, positions)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {int(p): outcome for p, outcome in json.loads(done.stdout).items()}


@pytest.mark.slow
def test_any_flipped_byte_gives_an_error_or_intact_rows_never_a_crash(pristine, request):
    """Each of the last 300 bytes (the footer) and every thirteenth byte of the rest, flipped one at a
    time (13 is prime to the 8-byte alignment of Arrow's buffers: every offset within a word is hit).

    A reader must raise CorruptCacheError, or return rows that are intact (a format-5
    reader never returns rows that differ); it must never crash the process (pyarrow trusts
    offsets, and a bad one read through a memory map is a SIGBUS) or raise anything
    else. `verify` must report every flip.
    """
    size = read_metadata(pristine).shards[1].num_bytes
    positions = sorted(set(range(0, size - 300, 13)) | set(range(size - 300, size)))
    results = _scan(pristine, 1, positions)
    reads = collections.Counter(outcome["read"].split(":")[0] for outcome in results.values())
    print_uncaptured(request, [f"RELIABILITY flipped byte in a shard: {len(results)} trials, "
                               + ", ".join(f"{kind}: {n}" for kind, n in sorted(reads.items()))
                               + f"; verify reported {sum(o['verify'] is True for o in results.values())}"])
    bad = {p: o for p, o in results.items() if o["read"] not in ("same", "wrong", "corrupt")}
    assert not bad, f"{len(bad)} flips crashed the reader or raised another error, e.g. {list(bad.items())[:5]}"
    unreported = [p for p, o in results.items() if o["verify"] is not True]
    assert not unreported, f"verify missed the flips at {unreported[:10]}: {[results[p] for p in unreported[:3]]}"
    # Format 5 checks each batch's CRC-32: no flip in a batch is served; the footer and header are not read.
    assert reads["corrupt"] > 0 and reads["same"] > 0 and reads["wrong"] == 0
