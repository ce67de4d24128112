"""ShardWriter: batching by rows and bytes, rotation by bytes on disk, compression, checksums."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import Features, Image, ShardWriter, Value, WriterOptions
from beam_shards.features import Sequence
from beam_shards.shards.row_sizes import row_nbytes

from _support import FEATURES, example, jpeg

PAYLOAD = Features({"i": Value("int64"), "blob": Value("binary")})


class KeptBytes(io.BytesIO):
    """A BytesIO that keeps its content when closed, and counts the closes."""

    def __init__(self):
        super().__init__()
        self.closes = 0

    def close(self):
        self.closes += 1


class WriteOnly:
    """The least a stream needs: write and close (like a gs:// upload stream)."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.closed = False

    def write(self, data) -> int:
        assert not self.closed
        self.chunks.append(bytes(data))
        return len(data)

    def close(self):
        self.closed = True


class Shards:
    """An `open_shard` callback collecting the streams it hands out."""

    def __init__(self, stream_type=KeptBytes):
        self.stream_type = stream_type
        self.streams: list = []

    def __call__(self, index: int):
        assert index == len(self.streams)
        self.streams.append(self.stream_type())
        return f"shard-{index}", self.streams[-1]

    def data(self, index: int) -> bytes:
        stream = self.streams[index]
        return stream.getvalue() if isinstance(stream, io.BytesIO) else b"".join(stream.chunks)

    def batches(self, index: int) -> list[pa.RecordBatch]:
        reader = pa.ipc.open_file(pa.BufferReader(self.data(index)))
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]

    def column(self, name: str) -> list:
        return [v for i in range(len(self.streams)) for b in self.batches(i) for v in b.column(name).to_pylist()]


def blob_rows(sizes, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [{"i": i, "blob": rng.bytes(size)} for i, size in enumerate(sizes)]


def write_all(rows, features=PAYLOAD, shards=None, **options):
    shards = shards if shards is not None else Shards()
    writer = ShardWriter(features, shards, WriterOptions(**options))
    for row in rows:
        writer.write(features.encode_example(row))
    return writer.close(), shards


def test_rotation_by_bytes_keeps_every_shard_within_target_plus_one_batch():
    target = 60_000
    infos, shards = write_all(blob_rows([1000] * 400), shard_size_bytes=target, batch_size=7)
    assert len(infos) > 5
    assert sum(s.num_rows for s in infos) == 400 and all(s.num_rows > 0 for s in infos)
    assert shards.column("i") == list(range(400))
    for index, info in enumerate(infos):
        batches = shards.batches(index)
        largest = max(pa.ipc.get_record_batch_size(b) for b in batches)
        assert info.num_bytes == len(shards.data(index))
        assert info.num_bytes <= target + largest
        if len(batches) > 1:  # the writer closes a shard before a batch would pass the target
            assert info.num_bytes <= target
    assert all(s.num_bytes > target - 2 * 7 * 1100 for s in infos[:-1])


def test_an_example_larger_than_the_target_gets_a_shard_of_its_own():
    target = 20_000
    sizes = [100, 100, 100, 50_000, 100, 100, 30_000, 40_000, 100]
    infos, shards = write_all(blob_rows(sizes), shard_size_bytes=target, batch_size=100)
    by_shard = [[row["i"] for b in shards.batches(k) for row in b.to_pylist()] for k in range(len(infos))]
    assert by_shard == [[0, 1, 2], [3], [4, 5], [6], [7], [8]]
    assert all(s.num_rows > 0 for s in infos)


def test_max_rows_per_shard():
    infos, shards = write_all(blob_rows([10] * 25), max_rows_per_shard=10, batch_size=4)
    assert [s.num_rows for s in infos] == [10, 10, 5]
    assert [[b.num_rows for b in shards.batches(k)] for k in range(3)] == [[4, 4, 2], [4, 4, 2], [4, 1]]
    assert shards.column("i") == list(range(25))


def test_max_rows_per_shard_equal_to_row_count_leaves_no_empty_shard():
    infos, _ = write_all(blob_rows([10] * 20), max_rows_per_shard=10)
    assert [s.num_rows for s in infos] == [10, 10]


def test_batches_flush_at_batch_size_rows():
    infos, shards = write_all(blob_rows([10] * 20), batch_size=7)
    assert len(infos) == 1
    assert [b.num_rows for b in shards.batches(0)] == [7, 7, 6]


def test_batches_flush_at_batch_bytes_before_passing_them():
    rows = blob_rows([1000] * 20)
    row_bytes = row_nbytes(PAYLOAD.encode_example(rows[0]))
    batch_bytes = 3 * row_bytes + row_bytes // 2
    infos, shards = write_all(rows, batch_size=1000, batch_bytes=batch_bytes)
    assert len(infos) == 1
    assert [b.num_rows for b in shards.batches(0)] == [3] * 6 + [2]


def test_a_row_larger_than_batch_bytes_is_a_batch_of_its_own():
    _, shards = write_all(blob_rows([10, 10, 5000, 10]), batch_bytes=1000)
    assert [b.num_rows for b in shards.batches(0)] == [2, 1, 1]


def test_batch_bytes_is_capped_at_a_quarter_of_the_shard_size():
    rows = blob_rows([1000] * 40)
    _, shards = write_all(rows, shard_size_bytes=16_000, batch_bytes=1 << 30, batch_size=1000)
    assert all(b.num_rows <= 4 for k in range(len(shards.streams)) for b in shards.batches(k))


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_compressed_shards_are_readable_and_smaller(compression):
    rows = [{"i": i, "blob": bytes(2000)} for i in range(50)]
    plain, _ = write_all(rows)
    packed, shards = write_all(rows, compression=compression)
    assert packed[0].num_bytes < plain[0].num_bytes / 5
    assert shards.column("blob") == [bytes(2000)] * 50 and shards.column("i") == list(range(50))


def test_compressed_rotation_stays_within_target_plus_one_batch():
    rng = np.random.default_rng(0)
    rows = [{"i": i, "blob": bytes(rng.integers(0, 4, 3000, dtype=np.uint8))} for i in range(300)]
    target = 40_000
    infos, shards = write_all(rows, shard_size_bytes=target, batch_size=10, compression="zstd")
    assert len(infos) > 3 and shards.column("i") == list(range(300))
    for index, info in enumerate(infos):
        largest = max(pa.ipc.get_record_batch_size(b) for b in shards.batches(index))
        assert info.num_bytes <= target + largest


def test_checksum_and_size_are_those_of_the_bytes_written():
    infos, shards = write_all(blob_rows([500] * 50), shard_size_bytes=8000)
    assert len(infos) > 2
    for index, info in enumerate(infos):
        data = shards.data(index)
        assert info.num_bytes == len(data)
        assert info.checksum == f"crc32:{zlib.crc32(data):08x}"
        assert info.path == f"shard-{index}"


def test_writes_to_a_write_only_stream_and_closes_each_once():
    infos, shards = write_all(blob_rows([300] * 30), shards=Shards(WriteOnly), shard_size_bytes=4000)
    assert len(infos) > 1 and all(stream.closed for stream in shards.streams)
    assert shards.column("i") == list(range(30))
    assert [s.checksum for s in infos] == [f"crc32:{zlib.crc32(shards.data(k)):08x}" for k in range(len(infos))]
    counted = Shards()
    write_all(blob_rows([300] * 30), shards=counted, shard_size_bytes=4000)
    assert [stream.closes for stream in counted.streams] == [1] * len(counted.streams)


def test_files_are_arrow_ipc_files_with_large_binary_columns_and_hugging_faces_other_types():
    features = Features({"image": Image(), "frames": Sequence(Image()), "text": Value("string"),
                         "raw": Value("binary"), "long": Value("large_string")})
    rows = [{"image": jpeg(i), "frames": [jpeg(i)], "text": "t", "raw": b"r", "long": "l"} for i in range(3)]
    _, shards = write_all(rows, features=features)
    reader = pa.ipc.open_file(pa.BufferReader(shards.data(0)))
    schema = reader.schema
    assert schema.field("image").type == pa.large_binary()
    assert schema.field("frames").type == pa.list_(pa.large_binary())
    assert schema.field("raw").type == pa.large_binary() and schema.field("text").type == pa.string()
    assert schema.field("long").type == pa.large_string()
    assert all(field.nullable for field in schema), "Hugging Face's fields are nullable; the features say which are"
    assert schema.equals(features.storage_schema("hf"), check_metadata=True)
    assert reader.read_all().column("image").to_pylist() == [jpeg(i) for i in range(3)]


def test_real_examples_round_trip_in_order():
    rows = [example(i) for i in range(60)]
    infos, shards = write_all(rows, features=FEATURES, shard_size_bytes=10_000, batch_size=8)
    assert len(infos) > 1
    assert shards.column("id") == list(range(60))
    assert shards.column("image") == [r["image"] for r in rows]


def test_no_rows_means_no_shard_and_no_stream():
    infos, shards = write_all([])
    assert infos == [] and shards.streams == []


def test_abort_drops_buffered_rows_closes_the_stream_and_lists_what_it_opened():
    shards = Shards(WriteOnly)
    writer = ShardWriter(PAYLOAD, shards, WriterOptions(shard_size_bytes=3000, batch_size=2))
    for row in blob_rows([500] * 9):
        writer.write(PAYLOAD.encode_example(row))
    opened = writer.abort()
    assert opened == [f"shard-{k}" for k in range(len(shards.streams))] and len(opened) >= 2
    assert all(stream.closed for stream in shards.streams)


@pytest.mark.parametrize("options, name", [
    (dict(shard_size_bytes=0), "shard_size_bytes"),
    (dict(shard_size_bytes=1.5), "shard_size_bytes"),
    (dict(max_rows_per_shard=0), "max_rows_per_shard"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_bytes=-1), "batch_bytes"),
    (dict(compression="gzip"), "compression"),
])
def test_options_out_of_range_are_rejected_by_name(options, name):
    with pytest.raises(ValueError, match=name):
        ShardWriter(PAYLOAD, Shards(), WriterOptions(**options))


def test_a_records_bytes_count_toward_the_batch_bound():
    # A Struct's record is a dict: its text counts, so nested rows are batched by their size too.
    assert row_nbytes({"meta": {"text": "x" * 1000, "tags": ["y" * 500]}}) >= 1500
