"""Format 5: the shard table gives each record batch's offset, length and CRC-32 in its shard file.

The spans every writer records (the local writer, the Beam sink with its merge of staged shards,
compact, appends) are those of the IPC footer's blocks; tables of older formats keep their schema;
an older beam_shards refuses a format-5 cache naming the format.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_shards import (ArrowBackend, Features, Json, Value, WriteToArrowShards, read_metadata, verify,
                         write_shards)
from beam_shards.errors import NewerFormatError
from beam_shards.format import manifest as manifest_module
from beam_shards.format.layout import CacheLayout
from beam_shards.format.table_files import LEGACY_TABLE_SCHEMA, TABLE_SCHEMA
from beam_shards.versions.compaction import compact

from _paths import DATA
from _support import FEATURES, example, options

SMALL = Features({"id": Value("int64"), "text": Value("string"), "doc": Json()})


def small(i: int) -> dict:
    return {"id": i, "text": "x" * (i % 13), "doc": {"i": i, "tags": ["a"] * (i % 3)}}


def footer_blocks(data: bytes) -> list[tuple[int, int]]:
    """(offset, metadata length + body length) of each record batch block an Arrow IPC file's footer lists,
    read from the footer's flatbuffer (Footer: version, schema, dictionaries, recordBatches)."""
    assert data[-6:] == b"ARROW1"
    (length,) = struct.unpack_from("<i", data, len(data) - 10)
    footer = data[len(data) - 10 - length:len(data) - 10]
    (root,) = struct.unpack_from("<I", footer, 0)
    (back,) = struct.unpack_from("<i", footer, root)
    vtable = root - back
    (field,) = struct.unpack_from("<H", footer, vtable + 4 + 2 * 3)  # field 3: recordBatches
    vector = root + field + struct.unpack_from("<I", footer, root + field)[0]
    (count,) = struct.unpack_from("<I", footer, vector)
    blocks = []
    for k in range(count):
        offset, metadata, _, body = struct.unpack_from("<qiiq", footer, vector + 4 + 24 * k)
        blocks.append((offset, metadata + body))
    return blocks


def assert_spans_are_the_footers(path: str, *, expect_spans: bool = True) -> int:
    """Every shard's spans in the latest version's table are its footer's blocks, with the CRC-32 of their
    bytes and their rows; returns the number of shards checked."""
    manifest = read_metadata(path)
    for index in range(manifest.num_shards):
        spans = manifest.shards.batch_spans(index)
        if not expect_spans:
            assert spans is None
            continue
        with open(manifest.shard_path(index), "rb") as handle:
            data = handle.read()
        assert [(s.offset, s.length) for s in spans] == footer_blocks(data), manifest.shards[index].file
        assert [s.crc32 for s in spans] == [zlib.crc32(data[s.offset:s.offset + s.length]) for s in spans]
        assert [s.rows for s in spans] == manifest.shards.batch_rows(index)
    return manifest.num_shards


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_written_caches_spans_are_its_footers_blocks(tmp_path, compression):
    path = str(tmp_path / "c")
    written = write_shards((small(i) for i in range(300)), path, SMALL, batch_size=16, shard_size_bytes="8KB",
                           compression=compression)
    assert written.format_version == 5 and assert_spans_are_the_footers(path) >= 3
    header = json.loads(open(os.path.join(path, "_metadata.json")).read())
    assert header["format_version"] == 5
    table = pa.ipc.open_file(CacheLayout(path).table(written.shards.refs[0].file)).read_all()
    assert table.schema.equals(TABLE_SCHEMA)
    rows = ArrowBackend.open(path).take([0, 150, 299]).to_pylist()
    assert [(row["id"], row["text"]) for row in rows] == [(i, small(i)["text"]) for i in (0, 150, 299)]


def test_appends_onto_format5_merge_its_tables_with_their_spans(tmp_path):
    path = str(tmp_path / "c")
    write_shards((small(i) for i in range(100)), path, SMALL, batch_size=16, shard_size_bytes="8KB")
    for start in (100, 130, 160):
        appended = write_shards((small(i) for i in range(start, start + 30)), path, SMALL, batch_size=16,
                                mode="append", retention=None)
    assert appended.version == 4 and len(appended.shards.refs) < 4, "small tail tables merged"
    assert assert_spans_are_the_footers(path) == appended.num_shards
    assert ArrowBackend.open(path).slice(0, 190).column("id").to_pylist() == list(range(190)) and verify(path).ok


@pytest.mark.timeout(300)
def test_the_beam_sinks_merged_shards_and_compacted_ones_have_their_footers_spans(tmp_path):
    path = str(tmp_path / "beam")
    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(120)) | beam.Map(example)
         | WriteToArrowShards(path, FEATURES, shard_size_bytes=20_000, batch_size=8))
    assert assert_spans_are_the_footers(path) >= 2
    compacted = compact(path, shard_size_bytes=1 << 20)[1]
    assert compacted.num_shards == 1 and assert_spans_are_the_footers(path) == 1
    assert ArrowBackend.open(path).num_rows == 120 and verify(path).ok


def test_a_format4_cache_takes_appends_in_format5_and_reads_both(tmp_path, monkeypatch):
    path = str(tmp_path / "c")
    with monkeypatch.context() as m:  # this beam_shards writing as the release of format 4 did
        m.setattr(manifest_module, "FORMAT_VERSION", 4)
        old = write_shards((small(i) for i in range(100)), path, SMALL, batch_size=16, shard_size_bytes="8KB")
    assert old.format_version == 4 and assert_spans_are_the_footers(path, expect_spans=False) >= 2
    table = pa.ipc.open_file(CacheLayout(path).table(old.shards.refs[0].file)).read_all()
    assert table.schema.equals(LEGACY_TABLE_SCHEMA), "a format-4 reader refuses any other table schema"
    appended = write_shards((small(i) for i in range(100, 130)), path, SMALL, batch_size=16, mode="append")
    assert appended.format_version == 5
    spans = [appended.shards.batch_spans(i) for i in range(appended.num_shards)]
    assert spans[:old.num_shards] == [None] * old.num_shards and all(spans[old.num_shards:])
    backend = ArrowBackend.open(path)
    assert backend.slice(0, 130).column("id").to_pylist() == list(range(130))
    assert read_metadata(path, version=1).format_version == 4 and verify(path).ok
    compact(path, shard_size_bytes=1 << 20)
    assert assert_spans_are_the_footers(path) == 1 and verify(path).ok


def test_a_format3_caches_append_keeps_format3_tables(tmp_path):
    """A version in "large" column types is written in format 3 and read by the release that wrote its base:
    its new table is in the schema that release reads."""
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, "format3_cache"), path)
    appended = write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append", retention=None)
    assert appended.format_version == 3
    for ref in appended.shards.refs:
        table = pa.ipc.open_file(CacheLayout(path).table(ref.file)).read_all()
        assert table.schema.equals(LEGACY_TABLE_SCHEMA), ref.file
    assert appended.shards.batch_spans(appended.num_shards - 1) is None and verify(path).ok


def test_an_older_beam_shards_refuses_format5_naming_it(tmp_path, monkeypatch):
    path = str(tmp_path / "c")
    write_shards((small(i) for i in range(10)), path, SMALL)
    monkeypatch.setattr(manifest_module, "FORMAT_VERSION", 4)  # the release before format 5 refuses as this does
    with pytest.raises(NewerFormatError, match="has format version 5; this beam_shards reads versions 1 to 4 "
                                               r"\(upgrade beam_shards to read it\)"):
        read_metadata(path)


def test_verify_passes_on_batches_holding_nan(tmp_path):
    # verify compares each span's batch with the footer's: by value a NaN differs from itself.
    path = str(tmp_path / "cache")
    features = Features({"x": Value("float32"), "h": Value("float16")})
    write_shards([{"x": float("nan"), "h": float("nan")}, {"x": 1.0, "h": 2.0}], path, features, batch_size=1)
    assert len(read_metadata(path).shards.batch_spans(0)) == 2
    report = verify(path)
    assert report.ok, report.problems
