"""Format 5 readers check each record batch's CRC-32 on their own first touch, find batches without the footer,
and advise their maps for how they read; a damaged disk-cache copy is fetched again once."""

from __future__ import annotations

import mmap
import os
import re
import zlib

import pytest

from beam_shards import ArrowBackend, CorruptCacheError, Features, ShardedDataset, Value, verify, write_shards
from beam_shards.format.catalog import read_metadata
from beam_shards.shards import span_reader
from beam_shards.shards.shard_file import ShardFile
from beam_shards.storage import disk_cache, fs

from _support import flip_byte

FEATURES = Features({"id": Value("int64"), "value": Value("binary")})
ROWS = 40
BATCH = 4  # row 7 is in batch 1 of shard 0


def value(i: int) -> bytes:
    return bytes([i + 1]) * 200


def rows(start: int, stop: int):
    return ({"id": i, "value": value(i)} for i in range(start, stop))


@pytest.fixture
def cache(tmp_path) -> str:
    path = str(tmp_path / "cache")
    write_shards(rows(0, ROWS), path, FEATURES, batch_size=BATCH, max_rows_per_shard=20)
    return path


def test_a_value_damaged_after_readers_checked_it_is_refused_by_every_new_reader(cache):
    """The held-out case: a copy damaged in place after this process checked it is never served again."""
    manifest = read_metadata(cache)
    shard = manifest.shard_path(0)
    assert ArrowBackend.open(cache).get_row(7)["value"] == value(7)  # batch 1 checked by a reader of this process
    assert ShardedDataset(cache)[7]["value"] == value(7)
    with open(shard, "rb") as handle:
        data = handle.read()
    flip_byte(shard, data.index(value(7)) + 100)
    span = manifest.shards.batch_spans(0)[1]
    with open(shard, "rb") as handle:
        found = zlib.crc32(handle.read()[span.offset:span.offset + span.length])
    message = (rf"shard 0 \({re.escape(manifest.shards[0].file)}\) .*: record batch 1 \(bytes {span.offset} to "
               rf"{span.offset + span.length}\) has CRC-32 {found:08x} over {span.length} bytes, the shard table says "
               rf"{span.crc32:08x}")
    backend, dataset = ArrowBackend.open(cache), ShardedDataset(cache)
    for read in (lambda: backend.get_row(7), lambda: backend.take([20, 7]), lambda: dataset[7],
                 lambda: dataset.__getitems__([6]), lambda: list(backend.iter_batches([0]))):
        with pytest.raises(CorruptCacheError, match=message):
            read()
    assert backend.get_row(3)["value"] == value(3) and dataset[8]["value"] == value(8), "other batches read"
    assert not verify(cache).ok


def test_a_point_read_reads_no_footer(cache, monkeypatch):
    shard = read_metadata(cache).shard_path(0)
    for back in range(11, 60, 7):  # inside the footer's flatbuffer, before its length and the magic
        flip_byte(shard, os.path.getsize(shard) - back)
    report = verify(cache)
    assert any("is not a readable Arrow IPC file" in problem for problem in report.problems), report.problems

    def no_footer(*args, **kwargs):
        raise AssertionError("a format-5 read must not open the shard by its footer")
    monkeypatch.setattr(ShardFile, "reader", no_footer)
    backend = ArrowBackend.open(cache)
    assert [backend.get_row(i)["id"] for i in (0, 7, 19, 39)] == [0, 7, 19, 39]
    assert backend.take([13, 2]).column("value").to_pylist() == [value(13), value(2)]
    assert [row["id"] for row in ShardedDataset(cache)] == list(range(ROWS))


class RecordingMap(mmap.mmap):
    """A map that notes the advice it is given."""

    advice: list[tuple]

    def madvise(self, option, start=0, length=None):
        self.advice.append((option, start, length))
        return super().madvise(option, start, len(self) - start if length is None else length)


@pytest.fixture
def advice(monkeypatch) -> dict[str, list[tuple]]:
    """The advice each shard's map got, by file name."""
    given: dict[str, list[tuple]] = {}

    def map_file(path: str):
        with open(path, "rb") as handle:
            mapped = RecordingMap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            mapped.advice = given.setdefault(os.path.basename(path), [])
            return mapped, os.fstat(handle.fileno())
    monkeypatch.setattr(fs, "map_file", map_file)
    return given


def test_point_reads_advise_random_access_and_scans_sequential(cache, advice):
    manifest = read_metadata(cache)
    name, spans = manifest.shards[0].file, manifest.shards.batch_spans(0)
    ArrowBackend.open(cache).get_row(7)
    page = mmap.PAGESIZE
    start = spans[1].offset - spans[1].offset % page
    assert advice[name] == [(mmap.MADV_RANDOM, 0, None),
                            (mmap.MADV_WILLNEED, start, spans[1].offset + spans[1].length - start)]
    advice.clear()
    list(ArrowBackend.open(cache).iter_batches([0]))
    assert advice[name][0] == (mmap.MADV_SEQUENTIAL, 0, None)
    needed = {(s, length) for option, s, length in advice[name] if option == mmap.MADV_WILLNEED}
    assert {(span.offset - span.offset % page, span.offset % page + span.length) for span in spans} <= needed
    advice.clear()
    dataset = ShardedDataset(cache)
    [dataset[i] for i in range(12)]  # reads in order: the map turns sequential once batch 1 follows batch 0
    assert [a[0] for a in advice[name] if a[0] != mmap.MADV_WILLNEED] == [mmap.MADV_RANDOM, mmap.MADV_SEQUENTIAL]


def copy_of(cache_dir, entry) -> str:
    [copy] = [os.path.join(cache_dir, name) for name in os.listdir(cache_dir)
              if name.endswith(f"crc32-{entry.checksum[6:]}-{entry.num_bytes}.arrow")]
    return copy


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_disk_cache_copy_is_checked_batch_by_batch_and_fetched_again_once(store, tmp_path, monkeypatch):
    remote = store.uri("cache")
    write_shards(rows(0, ROWS), remote, FEATURES, batch_size=BATCH, max_rows_per_shard=20)
    cache_dir = str(tmp_path / "shard_cache")
    downloads, whole_reads = [], []
    real_download, real_complete = disk_cache.DiskCache._download, disk_cache._complete
    monkeypatch.setattr(disk_cache.DiskCache, "_download",
                        lambda self, uri, *args: downloads.append(uri) or real_download(self, uri, *args))
    monkeypatch.setattr(disk_cache, "_complete",
                        lambda path, key, size, whole_check=True: whole_reads.append(whole_check) or
                        real_complete(path, key, size, whole_check))
    assert ArrowBackend.open(remote, cache_dir=cache_dir).get_row(7)["value"] == value(7)
    assert len(downloads) == 1  # shard 0, checked whole as it came
    entry = read_metadata(remote).shards[0]
    copy = copy_of(cache_dir, entry)
    whole_reads.clear()
    # The held-out case: this process downloaded and checked the copy, then it was damaged in place.
    with open(copy, "rb") as handle:
        flip_byte(copy, handle.read().index(value(7)) + 50)

    backend = ArrowBackend.open(remote, cache_dir=cache_dir)
    assert backend.get_row(2)["value"] == value(2) and len(downloads) == 1, "batch 0 is sound: served from the copy"
    assert whole_reads and not any(whole_reads), "the copy was not read whole to be served"
    assert backend.get_row(7)["value"] == value(7), "the damaged copy was fetched again, and served right"
    assert len(downloads) == 2 and fs.read_bytes(copy) == fs.read_bytes(remote + "/" + entry.file)

    # Damaged at the source too: the download is checked whole and refused, naming it.
    fs.write_bytes(remote + "/" + entry.file, bytes(entry.num_bytes))
    flip_byte(copy, os.path.getsize(copy) // 2)
    with pytest.raises(CorruptCacheError, match=f"the download of {re.escape(remote)}/.* has {entry.num_bytes} "
                                                "bytes with checksum"):
        ArrowBackend.open(remote, cache_dir=cache_dir).slice(0, 20)
    assert len(downloads) == 3


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_copy_damaged_again_after_it_was_fetched_again_fails_naming_it(store, tmp_path, monkeypatch):
    remote = store.uri("cache")
    write_shards(rows(0, 8), remote, FEATURES, batch_size=BATCH)
    cache_dir = str(tmp_path / "shard_cache")
    downloads = []
    real_download = disk_cache.DiskCache._download
    monkeypatch.setattr(disk_cache.DiskCache, "_download",
                        lambda self, uri, *args: downloads.append(uri) or real_download(self, uri, *args))
    monkeypatch.setattr(span_reader, "crc32", lambda data: 0)  # every batch looks damaged
    with pytest.raises(CorruptCacheError, match=r"the disk-cache copy .*\.arrow of shard 0 .*: record batch 0 .* "
                                                r"\(the copy was fetched again once already\)"):
        ArrowBackend.open(remote, cache_dir=cache_dir).get_row(0)
    assert len(downloads) == 2, "downloaded, then fetched again once"
