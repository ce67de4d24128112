"""Hostile input and damaged caches: every bad file, row, index or manifest gets a clear error.

Each corpus is a table, one case a line: a name, the input, the error class expected
and words its message must hold. Add a case by adding a line. ENCODE_CASES give each
value both as an example dict and as an Arrow column: both must store the same or
refuse it. MANIFEST_CASES and SHARD_CASES hold crafted caches that every reader and
command must answer with a clear error. Every test runs under a timeout, so a hang
fails instead of stalling the suite.

Hypothesis also mutates valid images (cuts, byte flips, inserted and deleted bytes):
each must be refused with a ValueError or accepted, and what is accepted opens with
Pillow. Damage inside compressed pixel data (a JPEG scan, GIF or WebP data) is seen
only by decoding, which the checks do not do; the tally printed at the end counts how
often such bytes were accepted. It mutates manifests too (values replaced by any JSON,
keys deleted or added, list items repeated, NaN or 1e999 written raw, then bytes cut,
flipped or inserted): every reader must give a clear error or the rows the cache held.
Set BEAM_SHARDS_HYPOTHESIS_SCALE=10 (or more) for a longer search.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import io
import json
import os
import re
import shutil
import struct
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image as PILImage

from beam_shards import (Array, ArrowBackend, CacheNotFoundError, ClassLabel, CorruptCacheError, EncodeError,
                         FeatureError, Features, Image, ReadFromArrowShards, Sequence, ShardedDataset, Value, Video,
                         encode_example, list_versions, read_metadata, verify, write_shards)
from beam_shards.cli import commands as cli
from beam_shards.cli.commands import printable
from beam_shards.features import image_check, image_codec
from beam_shards.format.layout import BAD_INPUTS_NAME, STAGING_DIR, CacheLayout
from beam_shards.format.manifest import MAX_MANIFEST_BYTES
from beam_shards.versions.bad_inputs import read_bad_inputs
from beam_shards.versions.gc import find_garbage
from pipelines import common, csv as csv_pipeline, image_folder, jsonl

from _reliability import edit_manifest, print_uncaptured
from _support import jpeg, png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so

IMAGE_FEATURES = Features({"image": Image()})
SCALE = int(os.environ.get("BEAM_SHARDS_HYPOTHESIS_SCALE", "1"))


def cases(table: list[tuple]) -> list:
    """pytest parameters from a corpus table whose first column names each case."""
    return [pytest.param(*rest, id=name) for name, *rest in table]


def assert_clear(error: BaseException, expected: type, words: list[str]) -> None:
    """`error` is an `expected` whose message holds every word, on one line."""
    message = str(error)
    assert isinstance(error, expected), f"{type(error).__name__}: {message}"
    assert "\n" not in message.strip(), message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


# ---- crafted images ------------------------------------------------------------------------

def saved(image: PILImage.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def noise(seed: int, size: int = 48) -> PILImage.Image:
    return PILImage.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width: int, height: int) -> bytes:
    """A complete PNG container whose header claims `width` x `height` pixels (a decompression bomb)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + png_chunk(b"IEND", b""))


def patched(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


def jpeg_claiming(width: int, height: int) -> bytes:
    """A small baseline JPEG whose frame header claims `width` x `height` pixels."""
    data = jpeg(1)
    return patched(data, data.index(b"\xff\xc0") + 5, struct.pack(">HH", height, width))


def gif_claiming(width: int, height: int) -> bytes:
    return patched(saved(noise(1, 8), "GIF"), 6, struct.pack("<HH", width, height))


def bmp_claiming(width: int, height: int) -> bytes:
    return patched(saved(noise(1, 8), "BMP"), 18, struct.pack("<ii", width, height))


def webp_claiming(width: int, height: int) -> bytes:
    """A lossless WebP whose VP8L header claims `width` x `height` (14 bits each, so 16384 at most)."""
    data = saved(noise(1, 8), "WEBP", lossless=True)
    bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1) | (width - 1) | (height - 1) << 14
    return patched(data, 21, bits.to_bytes(4, "little"))


def exif_with_thumbnail(thumbnail: bytes) -> bytes:
    """An EXIF block (little-endian TIFF) whose IFD1 holds a JPEG thumbnail, as cameras write it."""
    ifd1, entries = 14, 2
    start = ifd1 + 2 + 12 * entries + 4
    tiff = (b"II*\x00" + struct.pack("<I", 8) + struct.pack("<HI", 0, ifd1) + struct.pack("<H", entries)
            + struct.pack("<HHII", 0x0201, 4, 1, start) + struct.pack("<HHII", 0x0202, 4, 1, len(thumbnail))
            + struct.pack("<I", 0) + thumbnail)
    return b"Exif\x00\x00" + tiff


def camera_jpeg() -> bytes:
    """A JPEG whose APP1 segment holds an EXIF thumbnail: a whole JPEG, end-of-image marker included."""
    return saved(noise(2), "JPEG", quality=90, exif=exif_with_thumbnail(saved(noise(3, 8), "JPEG")))


CAMERA_JPEG = camera_jpeg()
THUMBNAIL_END = CAMERA_JPEG.index(b"\xff\xd9") + 2
VALID_IMAGES = {
    "jpeg": jpeg(1),
    "camera jpeg": CAMERA_JPEG,
    "progressive jpeg": saved(noise(4), "JPEG", progressive=True),
    "jpeg with restart markers": saved(noise(5), "JPEG", restart_marker_blocks=1),
    "png": png(1),
    "png rgba": png(2, mode="RGBA"),
    "gif": saved(noise(6, 8), "GIF"),
    "webp": saved(noise(7, 8), "WEBP"),
}

BOMBS = [
    ("png header of 100000x100000", forged_png(100_000, 100_000), ValueError,
     ["decompression bomb", "10000000000 pixels", "MAX_IMAGE_PIXELS"]),
    ("png just over the limit, where Pillow only warns", forged_png(10_000, 10_000), ValueError,
     ["decompression bomb", "10000x10000", "MAX_IMAGE_PIXELS"]),
    ("jpeg header of 60000x60000", jpeg_claiming(60_000, 60_000), ValueError, ["decompression bomb", "3600000000"]),
    ("gif screen of 65535x65535", gif_claiming(65_535, 65_535), ValueError, ["decompression bomb"]),
    ("bmp header of 60000x60000", bmp_claiming(60_000, 60_000), ValueError, ["decompression bomb"]),
    ("webp header of 16384x16384", webp_claiming(16_384, 16_384), ValueError, ["decompression bomb", "268435456"]),
]
IMAGE_CASES = BOMBS + [
    ("empty", b"", ValueError, ["empty bytes"]),
    ("text", b"definitely not an image", ValueError, ["not an image"]),
    ("jpeg cut just after its exif thumbnail", CAMERA_JPEG[:THUMBNAIL_END], ValueError, ["truncated JPEG"]),
    ("jpeg cut in its scan after the exif thumbnail", CAMERA_JPEG[:-200], ValueError,
     ["truncated JPEG", "no end-of-image marker"]),
    ("jpeg with a segment of length 0", patched(jpeg(1), 4, b"\x00\x00"), ValueError, ["damaged JPEG", "length 0"]),
    ("jpeg with bytes between two segments", jpeg(1)[:20] + b"\x00\x00" + jpeg(1)[20:], ValueError,
     ["damaged JPEG", "no marker at byte 20"]),
    ("jpeg whose app0 runs past the end", patched(jpeg(1), 4, b"\xff\xf0"), ValueError, ["truncated JPEG", "FFE0"]),
    ("png with a flipped pixel byte", patched(png(1), 60, bytes([png(1)[60] ^ 0x10])), ValueError,
     ["damaged PNG", "IDAT", "CRC"]),
    ("png missing bytes in the middle, IEND intact", png(1)[:100] + png(1)[200:], ValueError, ["PNG"]),
    ("png cut before IEND", png(1)[:-20], ValueError, ["truncated PNG"]),
    ("gif without its trailer", VALID_IMAGES["gif"][:-1], ValueError, ["truncated GIF"]),
    ("webp shorter than its header", VALID_IMAGES["webp"][:-10], ValueError, ["truncated WebP"]),
    ("tiff header only", b"II*\x00\x08\x00\x00\x00\x01\x00", ValueError, ["Pillow"]),
]
# Decoding reads the header only: what it refuses is what Pillow cannot open, and bombs.
DECODE_CASES = BOMBS + [
    ("empty", b"", ValueError, ["not an image"]),
    ("text", b"definitely not an image", ValueError, ["not an image"]),
]


@pytest.mark.parametrize("data, expected, words", cases(IMAGE_CASES))
def test_image_corpus_sniff(data, expected, words):
    with pytest.raises(Exception) as raised:
        image_check.sniff_format(data)
    assert_clear(raised.value, expected, words)


@pytest.mark.parametrize("data, expected, words", cases(IMAGE_CASES))
def test_image_corpus_encode_example(data, expected, words):
    with pytest.raises(Exception) as raised:
        encode_example({"image": data}, IMAGE_FEATURES, key="photo.jpg")
    assert_clear(raised.value, EncodeError, words + ["photo.jpg", "image"])
    assert isinstance(raised.value, expected)


@pytest.mark.parametrize("data, expected, words", cases(IMAGE_CASES))
def test_image_corpus_encode_batch(data, expected, words):
    batch = pa.table({"image": pa.array([png(1), data], type=pa.large_binary())})
    with pytest.raises(Exception) as raised:
        IMAGE_FEATURES.encode_batch(batch, "batch.parquet")
    assert_clear(raised.value, EncodeError, words + ["row 1", "batch.parquet"])
    assert isinstance(raised.value, expected)


@pytest.mark.parametrize("data, expected, words", cases(DECODE_CASES))
@pytest.mark.parametrize("mode", ["pil", "numpy"])
def test_image_corpus_decode(data, expected, words, mode):
    with pytest.raises(Exception) as raised:
        image_codec.decode(data, mode)
    assert_clear(raised.value, expected, words)


@pytest.fixture
def bomb_cache(tmp_path, monkeypatch) -> str:
    """A cache holding a decompression bomb, written while Pillow's pixel limit was lifted."""
    path = str(tmp_path / "bomb")
    with monkeypatch.context() as unlimited:
        unlimited.setattr(PILImage, "MAX_IMAGE_PIXELS", None)
        write_shards([{"image": forged_png(100_000, 100_000)}], path, IMAGE_FEATURES)
    return path


def test_a_bomb_in_a_cache_is_a_clear_error_on_read(bomb_cache):
    for image_mode in ("pil", "numpy"):
        with pytest.raises(ValueError, match="decompression bomb"):
            ShardedDataset(bomb_cache, image_mode=image_mode)[0]
    assert ShardedDataset(bomb_cache, image_mode="bytes")[0]["image"] == forged_png(100_000, 100_000)


@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")
def test_a_bomb_pillow_only_warns_about_is_refused_also_when_warnings_are_errors():
    with pytest.raises(ValueError, match="decompression bomb"):
        image_check.sniff_format(forged_png(10_000, 10_000))


def test_the_pixel_limit_is_pillows_own_setting(monkeypatch):
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 16 * 16 - 1)
    with pytest.raises(ValueError, match="16x16 is over the limit of 255 pixels"):
        image_check.sniff_format(png(1))
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", None)
    assert image_check.sniff_format(forged_png(10_000, 10_000)) == "PNG"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["camera jpeg", "progressive jpeg", "jpeg with restart markers", "png"])
def test_an_image_cut_anywhere_before_its_end_is_refused(name):
    data = VALID_IMAGES[name]
    accepted = []
    for cut in range(len(data)):
        try:
            image_check.sniff_format(data[:cut])
            accepted.append(cut)
        except ValueError:
            pass
    assert not accepted, f"{name} of {len(data)} bytes accepted when cut at {accepted[:10]}"


@pytest.mark.parametrize("name", sorted(VALID_IMAGES))
def test_valid_images_are_accepted_also_with_bytes_appended(name):
    data = VALID_IMAGES[name]
    fmt = image_check.sniff_format(data)
    assert fmt == PILImage.open(io.BytesIO(data)).format
    if fmt in ("JPEG", "PNG"):
        assert image_check.sniff_format(data + b"\x00camera trailer" * 500) == fmt


def test_the_camera_jpeg_holds_a_thumbnail_whose_end_marker_comes_before_the_scan():
    thumbnail = CAMERA_JPEG[CAMERA_JPEG.index(b"\xff\xd8", 2):THUMBNAIL_END]
    assert PILImage.open(io.BytesIO(thumbnail)).size == (8, 8)
    assert b"\xff\xda" in CAMERA_JPEG[THUMBNAIL_END:], "the image's own scan follows the thumbnail"
    assert len(CAMERA_JPEG) - THUMBNAIL_END < 4096, "within the window the old end-marker check searched"


# ---- one value, given in an example dict or in an Arrow column ---------------------------------

class Typed:
    """A value whose Arrow column needs `type` (pyarrow cannot infer it, or would infer another)."""

    def __init__(self, value, type: pa.DataType):
        self.value, self.type = value, type


BIG = 2**63 + 1  # an int past int64, not exact as a float64
NAMES = ClassLabel(names=["a", "b"])
# (name, feature, value, accepted): `encode_example` and `encode_batch` must both accept the value,
# storing the same, or both refuse it with an EncodeError naming the field.
ACCEPTED, REFUSED = True, False
ENCODE_CASES = [
    ("float64 past float32's range", Value("float32"), 1e300, REFUSED),
    ("float64 past float32's range, negative", Value("float32"), -1e39, REFUSED),
    ("float past float16's range", Value("float16"), 70000.0, REFUSED),
    ("float16's largest", Value("float16"), 65504.0, ACCEPTED),
    ("float32's largest", Value("float32"), 3.4028235e38, ACCEPTED),
    ("NaN as float32", Value("float32"), float("nan"), ACCEPTED),
    ("NaN as float64", Value("float64"), float("nan"), ACCEPTED),
    ("inf stays inf", Value("float32"), float("inf"), ACCEPTED),
    ("-inf stays -inf", Value("float32"), float("-inf"), ACCEPTED),
    ("int not exact as float32", Value("float32"), 2**24 + 1, REFUSED),
    ("float rounded to float32", Value("float32"), 2.0**24 + 1, ACCEPTED),
    ("large int exact as float32", Value("float32"), 2**30, ACCEPTED),
    ("large int exact as float64", Value("float64"), 2**60, ACCEPTED),
    ("int not exact as float64", Value("float64"), 2**53 + 1, REFUSED),
    ("uint64 not exact as float64", Value("float64"), Typed(BIG, pa.uint64()), REFUSED),
    ("int not exact as float16", Value("float16"), 2049, REFUSED),
    ("int exact as float16", Value("float16"), 3, ACCEPTED),
    ("bool as float", Value("float32"), True, REFUSED),
    ("int8 overflow", Value("int8"), 128, REFUSED),
    ("int8's smallest", Value("int8"), -128, ACCEPTED),
    ("uint64's largest", Value("uint64"), Typed(2**64 - 1, pa.uint64()), ACCEPTED),
    ("negative uint64", Value("uint64"), -1, REFUSED),
    ("uint64 past int64", Value("int64"), Typed(BIG, pa.uint64()), REFUSED),
    ("whole float as int", Value("int64"), 1.0, REFUSED),
    ("bool as int", Value("int64"), True, REFUSED),
    ("int as bool", Value("bool"), 1, REFUSED),
    ("bool", Value("bool"), True, ACCEPTED),
    ("None where required", Value("int64"), None, REFUSED),
    ("None where nullable", Value("int64", nullable=True), None, ACCEPTED),
    ("bytes of invalid UTF-8 as string", Value("string"), b"caf\xe9", REFUSED),
    ("bytes of UTF-8 as string", Value("string"), b"caf\xc3\xa9", ACCEPTED),
    ("empty string", Value("string"), "", ACCEPTED),
    ("int as string", Value("string"), 5, REFUSED),
    ("string as binary", Value("binary"), "text", REFUSED),
    ("empty binary", Value("binary"), b"", ACCEPTED),
    ("class name", NAMES, "b", ACCEPTED),
    ("unknown class name", NAMES, "c", REFUSED),
    ("class id past the classes", NAMES, 2, REFUSED),
    ("negative class id", NAMES, -1, REFUSED),
    ("bool as class id", NAMES, True, REFUSED),
    ("float as class id", NAMES, 1.0, REFUSED),
    ("bytes as class name", NAMES, b"a", REFUSED),
    ("class named by a digit is a name", ClassLabel(names=["1", "0"]), "0", ACCEPTED),
    ("class name without names", ClassLabel(num_classes=3), "1", REFUSED),
    ("last of a trillion classes", ClassLabel(num_classes=10**12), 10**12 - 1, ACCEPTED),
    ("uint64 class id past int64", NAMES, Typed(BIG, pa.uint64()), REFUSED),
    ("None in a fixed array", Array((2,), "float32"), [1.0, None], REFUSED),
    ("None in a variable array", Array((None,), "float32"), [1.0, None], REFUSED),
    ("only None in an array", Array((2,), "float32"), [None, None], REFUSED),
    ("None for a row of an array", Array((None, 2), "float32"), [[1.0, 2.0], None], REFUSED),
    ("float64 past float32 in a fixed array", Array((2,), "float32"), [1e300, 0.0], REFUSED),
    ("float64 past float32 in a variable array", Array((None,), "float32"), [1e300], REFUSED),
    ("float64 past float32 in a 2-D array", Array((None, 2), "float32"), [[1e300, 0.0]], REFUSED),
    ("NaN and inf in an array", Array((2,), "float64"), [float("nan"), float("inf")], ACCEPTED),
    ("int not exact as float32 in an array", Array((2,), "float32"), [2**24 + 1, 0], REFUSED),
    ("large int exact as float32 in an array", Array((2,), "float32"), [2**30, 0], ACCEPTED),
    ("uint64 not exact as float64 in an array", Array((2,), "float64"), Typed([BIG, 1], pa.list_(pa.uint64())),
     REFUSED),
    ("uint64's largest in an array", Array((2,), "uint64"), Typed([2**64 - 1, 0], pa.list_(pa.uint64())), ACCEPTED),
    ("int8 overflow in an array", Array((2,), "int8"), [1, 300], REFUSED),
    ("whole floats as ints in an array", Array((2,), "int8"), [1.0, 2.0], REFUSED),
    ("negative uint8 in an array", Array((2,), "uint8"), [-1, 0], REFUSED),
    ("bools as ints in an array", Array((2,), "int8"), [True, False], ACCEPTED),
    ("ints as bools in an array", Array((2,), "bool"), [1, 0], REFUSED),
    ("strings in an array", Array((2,), "float32"), ["a", "b"], REFUSED),
    ("a string as an array", Array((2,), "float32"), "ab", REFUSED),
    ("empty variable array", Array((None,), "float32"), [], ACCEPTED),
    ("empty variable 2-D array", Array((None, 2), "bool"), [], ACCEPTED),
    ("a row of no numbers in a variable 2-D array", Array((None, 2), "float32"), [[]], REFUSED),
    ("too long for its shape", Array((2,), "float32"), [1.0, 2.0, 3.0], REFUSED),
    ("nested lists of a 2-D shape", Array((2, 2), "float32"), [[1.0, 2.0], [3.0, 4.0]], ACCEPTED),
    ("nested lists of a 3-D shape", Array((None, 2, 3), "int16"), [[[1, 2, 3], [4, 5, 6]]], ACCEPTED),
    ("flat list for a 2-D shape", Array((2, 2), "float32"), [1.0, 2.0, 3.0, 4.0], REFUSED),
    ("ragged rows for a 2-D shape", Array((2, 2), "float32"), [[1.0, 2.0], [3.0]], REFUSED),
    ("ragged rows for a variable 2-D shape", Array((None, 2), "float32"), [[1.0, 2.0], [3.0]], REFUSED),
    ("nested lists for a 1-D shape", Array((4,), "float32"), [[1.0, 2.0], [3.0, 4.0]], REFUSED),
    ("None for a nullable array", Array((2,), "float32", nullable=True), None, ACCEPTED),
    ("None in a sequence", Sequence(Value("int64")), [1, None], REFUSED),
    ("None in a sequence of nullables", Sequence(Value("int64", nullable=True)), [1, None], ACCEPTED),
    ("whole float in a sequence of ints", Sequence(Value("int64")), [1.0], REFUSED),
    ("bool in a sequence of ints", Sequence(Value("int64")), [True], REFUSED),
    ("int in a sequence of bools", Sequence(Value("bool")), [1], REFUSED),
    ("float64 past float32 in a sequence", Sequence(Value("float32")), [1e300], REFUSED),
    ("float past float16 in a sequence", Sequence(Value("float16")), [70000.0], REFUSED),
    ("invalid UTF-8 in a sequence of strings", Sequence(Value("string")), [b"\xff"], REFUSED),
    ("class names in a sequence", Sequence(NAMES), ["a", "b"], ACCEPTED),
    ("unknown class name in a sequence", Sequence(NAMES), ["a", "c"], REFUSED),
    ("class id past the classes in a sequence", Sequence(NAMES), [0, 2], REFUSED),
    ("None in an array in a sequence", Sequence(Array((2,), "float32")), [[1.0, None]], REFUSED),
    ("arrays in a sequence", Sequence(Array((2,), "float32")), [[1.0, 2.0]], ACCEPTED),
    ("None in a sequence of sequences", Sequence(Sequence(Value("int64"))), [[1], None], REFUSED),
    ("None in a sequence of nullable sequences", Sequence(Sequence(Value("int64"), nullable=True)), [[1], None],
     ACCEPTED),
    ("empty video in a sequence", Sequence(Video()), [b""], REFUSED),
    ("a string as a sequence", Sequence(Value("int64")), "ab", REFUSED),
    ("empty sequence", Sequence(Value("int64")), [], ACCEPTED),
    ("empty image bytes", Image(), b"", REFUSED),
    ("empty image path", Image(), "", REFUSED),
    ("bytes that are no image", Image(), b"not an image", REFUSED),
    ("a png", Image(), png(1), ACCEPTED),
    ("a png cut", Image(), png(1)[:-20], REFUSED),
    ("no image", Image(), None, ACCEPTED),
    ("no image where required", Image(nullable=False), None, REFUSED),
    ("empty video", Video(), b"", REFUSED),
    ("video bytes", Video(), b"x", ACCEPTED),
]


def outcome(store: Callable[[], pa.Table]) -> tuple[bool, str]:
    """(True, the column `x` that `store()` returns, as text); (False, the field) when it raises EncodeError."""
    try:
        table = store()
    except EncodeError as error:
        return False, error.field.split("[")[0]
    # repr keeps NaN equal to NaN and tells 1 from 1.0.
    return True, repr(table.column("x").to_pylist())


def written(path: str, features: Features, example) -> tuple[bool, str]:
    """The `outcome` of writing `example` (a dict or a table) at `path` and reading it back."""
    def store() -> pa.Table:
        write_shards([example], path, features)
        return ArrowBackend.open(path).slice(0, 1)

    result = outcome(store)
    assert result[0] or not os.path.exists(os.path.join(path, "_metadata.json")), "a refused write published"
    return result


@pytest.mark.parametrize("feature, value, accepted", cases(ENCODE_CASES))
def test_an_example_and_an_arrow_column_follow_the_same_rules(tmp_path, feature, value, accepted):
    features = Features({"x": feature})
    column_type = value.type if isinstance(value, Typed) else None
    value = value.value if isinstance(value, Typed) else value
    by_dict = written(str(tmp_path / "dict"), features, {"x": value})
    by_column = written(str(tmp_path / "column"), features, pa.table({"x": pa.array([value], type=column_type)}))
    assert by_dict == by_column, f"an example gives {by_dict}, an Arrow column {by_column}"
    assert by_dict[0] == accepted and (accepted or by_dict[1] == "x"), by_dict


# (name, feature, a good chunk, a chunk whose second row is bad): the error names row 3 of the table.
CHUNKED_CASES = [
    ("sequence item", Sequence(Value("float32")), [[1.0], [2.0, 3.0]], [[1.0], [4.0, 1e300]]),
    ("row of a 2-D array", Array((None, 2), "float32"), [[[1.0, 2.0]], []], [[[1.0, 2.0]], [[1.0, 2.0], [3.0, 1e300]]]),
    ("nullable array", Array((2,), "float32", nullable=True), [[1.0, 2.0], None], [None, [1.0, 1e300]]),
    ("nullable float16", Value("float16", nullable=True), [1.0, None], [None, 1e6]),
]


@pytest.mark.parametrize("feature, good, bad", cases(CHUNKED_CASES))
def test_a_bad_value_in_a_later_chunk_or_a_slice_names_its_row(feature, good, bad):
    features = Features({"x": feature})
    table = pa.Table.from_batches([pa.record_batch({"x": pa.array(good)}), pa.record_batch({"x": pa.array(bad)})])
    for view, row in ((table, 3), (table.slice(1), 2), (table.slice(2).combine_chunks(), 1)):
        with pytest.raises(EncodeError, match=f"row {row} of batch 'b', field 'x"):
            features.encode_batch(view, "b")
    twice = pa.Table.from_batches([pa.record_batch({"x": pa.array(good)})] * 2).slice(1)
    assert features.encode_batch(twice).column("x").to_pylist() == (good * 2)[1:]


NUMERIC_DTYPES = ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "float32", "float64"]
ANY_SCALAR = (st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats()
              | st.sampled_from([127, 128, 255, 2**24 + 1, 2**53 + 1, 2**63, 2**64 - 1, 1e300, -1e39, 65520.0, 0.5])
              | st.text(max_size=3) | st.binary(max_size=3))
ANY_VALUE = st.recursive(ANY_SCALAR, lambda items: st.lists(items, max_size=3), max_leaves=6)
ANY_LEAF_FEATURE = (
    st.builds(Value, st.sampled_from(NUMERIC_DTYPES + ["string", "binary"]), nullable=st.booleans())
    | st.builds(ClassLabel, names=st.just(["a", "b", "c"]), nullable=st.booleans())
    | st.builds(ClassLabel, num_classes=st.integers(1, 5), nullable=st.booleans())
    | st.builds(Array, st.sampled_from([(2,), (None,), (2, 2), (None, 2), (1, 2, 1)]), st.sampled_from(NUMERIC_DTYPES),
                nullable=st.booleans()))
ANY_FEATURE = st.recursive(ANY_LEAF_FEATURE, lambda items: st.builds(Sequence, items, nullable=st.booleans()),
                           max_leaves=3)


@pytest.mark.timeout(600)
@settings(max_examples=300 * SCALE, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(feature=ANY_FEATURE, value=ANY_VALUE)
def test_any_value_is_encoded_alike_from_an_example_and_from_an_arrow_column(feature, value):
    features = Features({"x": feature})
    try:
        column = pa.array([value])
        if repr(column.to_pylist()) != repr([value]):
            return  # pyarrow changed it to make a column, such as [0.5, False] into [0.5, 0.0]
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return  # no Arrow column holds it, such as [1, "a"] (or ["", b"\x80"], invalid UTF-8 in a string column)
    by_dict = outcome(lambda: features.build_batch([features.encode_example({"x": value})]))
    by_column = outcome(lambda: features.encode_batch(pa.table({"x": column})))
    assert by_dict == by_column
    assert by_dict[0] or by_dict[1] == "x"


def test_an_invalid_arrow_column_is_refused_before_it_is_read(tmp_path):
    offsets_going_back = pa.ListArray.from_arrays(pa.array([0, 3, 1], pa.int32()), pa.array([1, 2, 3], pa.int64()))
    features = Features({"x": Sequence(Value("int64"))})
    with pytest.raises(EncodeError, match="field 'x'.*not a valid Arrow array"):
        write_shards([pa.table({"x": offsets_going_back})], str(tmp_path / "c"), features)


# ---- indices -------------------------------------------------------------------------------

INDEX_ROWS = 10
# One index: ArrowBackend.get_row, ShardedDataset[index] and a view's.
INDEX_CASES = [
    ("True", True, TypeError, ["bool", "True"]),
    ("numpy True", np.True_, TypeError, ["bool"]),
    ("float", 2.5, TypeError, ["2.5"]),
    ("float of a whole number", 2.0, TypeError, ["2.0"]),
    ("None", None, TypeError, ["None"]),
    ("string", "3", TypeError, ["'3'"]),
    ("past the end", 10, IndexError, ["index 10", "10 rows"]),
    ("before the start", -11, IndexError, ["index -11"]),
    ("huge", 2**64 - 1, IndexError, ["18446744073709551615"]),
    ("numpy uint64 past int64", np.uint64(2**64 - 1), IndexError, ["18446744073709551615"]),
]
# Many indices: ArrowBackend.take, ShardedDataset[indices] and ShardedDataset.__getitems__.
INDICES_CASES = [
    ("uint64 past int64", np.array([2**64 - 1], dtype=np.uint64), IndexError, ["18446744073709551615"]),
    ("uint64 just past int64", np.array([3, 2**63], dtype=np.uint64), IndexError, ["9223372036854775808"]),
    ("bool array", np.array([True, False]), TypeError, ["bools"]),
    ("list of bools", [True, False, True], TypeError, ["bools"]),
    ("ints with a bool", [1, True], TypeError, ["bools", "[1, True]"]),
    ("2-D list", [[1, 2], [3, 4]], ValueError, ["one-dimensional", "(2, 2)"]),
    ("2-D array", np.zeros((2, 3), dtype=np.int64), ValueError, ["(2, 3)"]),
    ("ragged list", [[1, 2], [3]], ValueError, ["flat", "[[1, 2], [3]]"]),
    ("float array", np.array([1.0, 2.0]), TypeError, ["float64"]),
    ("list of floats", [1.5], TypeError, ["1.5"]),
    ("object array", np.array([1, "a"], dtype=object), TypeError, ["object"]),
    ("list with None", [1, None], TypeError, ["None"]),
    ("past the end", [0, 10], IndexError, ["index 10", "10 rows"]),
    ("before the start", np.array([-11]), IndexError, ["index -11"]),
    ("int past uint64", [2**64], IndexError, ["index 18446744073709551616", "10 rows"]),
    ("int past uint64 after a good one", [1, 2**70], IndexError, ["index 1180591620717411303424"]),
    ("negative int past int64", [-2**64], IndexError, ["index -18446744073709551616"]),
]
# ShardedDataset[start:stop:step] and a view's.
DATASET_SLICE_CASES = [
    ("bool start", slice(True, 3), TypeError, ["slice start", "bool"]),
    ("bool stop", slice(0, np.True_), TypeError, ["slice stop", "bool"]),
    ("bool step", slice(0, 3, False), TypeError, ["slice step", "bool"]),
    ("float stop", slice(0, 2.5), TypeError, ["slice stop", "2.5"]),
    ("string start", slice("1", None), TypeError, ["slice start", "'1'"]),
]
# ArrowBackend.iter_batches(shard_indices) of a cache of 3 shards.
SHARD_IDS_CASES = [
    ("float", [1.0], TypeError, ["shard index", "1.0"]),
    ("bool", [True], TypeError, ["shard index", "bool"]),
    ("numpy floats", np.array([0.0, 1.0]), TypeError, ["shard index", "0.0"]),
    ("a string", "0", TypeError, ["shard_indices", "'0'"]),
    ("an int", 2, TypeError, ["shard_indices", "int 2"]),
    ("past the end", [3], IndexError, ["shard index 3", "3 shards"]),
    ("negative", [-1], IndexError, ["shard index -1"]),
    ("huge", [2**70], IndexError, ["shard index 1180591620717411303424"]),
]
# ArrowBackend.slice(start, length).
SLICE_CASES = [
    ("float length", (3, 2.5), TypeError, ["slice length", "2.5"]),
    ("float start", (2.5, 3), TypeError, ["slice start", "2.5"]),
    ("bool start", (True, 2), TypeError, ["slice start", "bool"]),
    ("None length", (0, None), TypeError, ["slice length", "None"]),
    ("negative length", (3, -1), ValueError, ["-1"]),
    ("start past the end", (11, 1), IndexError, ["11", "10 rows"]),
    ("negative start", (-1, 2), IndexError, ["-1"]),
]


@pytest.fixture(scope="module")
def index_cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("indices") / "cache")
    write_shards(({"id": i} for i in range(INDEX_ROWS)), path, Features({"id": Value("int64")}), max_rows_per_shard=4)
    return path


def assert_every_reader_refuses(readers: dict, argument, expected: type, words: list[str]) -> None:
    for name, read in readers.items():
        with pytest.raises(Exception) as raised:
            read(argument)
        try:
            assert_clear(raised.value, expected, words)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None


@pytest.mark.parametrize("index, expected, words", cases(INDEX_CASES))
def test_index_corpus(index_cache, index, expected, words):
    dataset = ShardedDataset(index_cache)
    readers = {"ArrowBackend.get_row": dataset.backend.get_row, "ShardedDataset[]": dataset.__getitem__,
               "a view's []": dataset[:].__getitem__}
    assert_every_reader_refuses(readers, index, expected, words)


@pytest.mark.parametrize("indices, expected, words", cases(INDICES_CASES))
def test_indices_corpus(index_cache, indices, expected, words):
    dataset = ShardedDataset(index_cache)
    readers = {"ArrowBackend.take": dataset.backend.take, "ShardedDataset[]": dataset.__getitem__,
               "ShardedDataset.__getitems__": dataset.__getitems__, "a view's []": dataset[:].__getitem__}
    assert_every_reader_refuses(readers, indices, expected, words)


@pytest.mark.parametrize("bounds, expected, words", cases(DATASET_SLICE_CASES))
def test_dataset_slice_corpus(index_cache, bounds, expected, words):
    dataset = ShardedDataset(index_cache)
    assert_every_reader_refuses({"ShardedDataset[]": dataset.__getitem__, "a view's []": dataset[1:].__getitem__},
                                bounds, expected, words)


@pytest.mark.parametrize("shard_indices, expected, words", cases(SHARD_IDS_CASES))
def test_shard_ids_corpus(index_cache, shard_indices, expected, words):
    backend = ArrowBackend.open(index_cache)
    assert backend.num_shards == 3
    assert_every_reader_refuses({"ArrowBackend.iter_batches": lambda ids: list(backend.iter_batches(ids))},
                                shard_indices, expected, words)


@pytest.mark.parametrize("arguments, expected, words", cases(SLICE_CASES))
def test_slice_corpus(index_cache, arguments, expected, words):
    assert_every_reader_refuses({"ArrowBackend.slice": lambda args: ArrowBackend.open(index_cache).slice(*args)},
                                arguments, expected, words)


def test_numpy_ints_of_every_width_still_index(index_cache):
    backend = ArrowBackend.open(index_cache)
    for dtype in (np.int8, np.uint8, np.int32, np.uint64):
        assert backend.take(np.array([7, 2], dtype=dtype)).column("id").to_pylist() == [7, 2]
        assert backend.get_row(dtype(7)) == {"id": 7}
    assert backend.slice(np.int64(2), np.uint64(3)).column("id").to_pylist() == [2, 3, 4]
    assert backend.take([]).num_rows == 0 and ShardedDataset(index_cache)[np.array([], dtype=np.uint64)] == []
    assert [row["id"] for row in ShardedDataset(index_cache)[np.int64(8):np.uint8(2):-3]] == [8, 5]
    assert [b.num_rows for b in backend.iter_batches(np.array([2, 0], dtype=np.uint8))] == [2, 4]


# ---- pipelines -------------------------------------------------------------------------------

GOOD_JSONL = json.dumps({"image": "a.jpg", "n": 1}) + "\n"
GOOD_CSV = "image,n\na.jpg,1\n"
INT64 = json.dumps(Features({"image": Image(), "n": Value("int64")}).to_dict())
CLASSES = json.dumps(Features({"image": Image(), "n": ClassLabel(num_classes=3)}).to_dict())
# (name, pipeline, files in the input folder, the --input file ("" for the folder), more flags, error words).
# Each fails naming the input, and with --skip_bad is skipped and listed.
PIPELINE_CASES = [
    ("jsonl number of 5000 digits", jsonl, {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "7" * 5000 + "}\n"},
     "m.jsonl", [], ["m.jsonl, line 2", "4300 digits"]),
    ("jsonl number of 5000 digits, features given", jsonl,
     {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "7" * 5000 + "}\n", "f.json": INT64},
     "m.jsonl", ["--features", "f.json"], ["m.jsonl, line 2", "4300 digits"]),
    ("jsonl nested past the recursion limit", jsonl,
     {"m.jsonl": GOOD_JSONL + '{"image": "a.jpg", "n": ' + "[" * 100_000 + "]" * 100_000 + "}\n"},
     "m.jsonl", [], ["m.jsonl, line 2", "recursion"]),
    ("csv number of 5000 digits", csv_pipeline, {"m.csv": GOOD_CSV + "a.jpg," + "7" * 5000 + "\n"},
     "m.csv", [], ["m.csv, line 3", "column 'n'", "as int64"]),
    ("csv class id of 5000 digits", csv_pipeline, {"m.csv": GOOD_CSV + "a.jpg," + "7" * 5000 + "\n", "f.json": CLASSES},
     "m.csv", ["--features", "f.json"], ["m.csv, line 3", "column 'n'", "as a class id"]),
    ("image_folder decompression bomb", image_folder, {"cat/a.jpg": jpeg(1), "cat/bomb.png": forged_png(10**5, 10**5)},
     "", [], ["bomb.png", "decompression bomb"]),
    ("image_folder camera jpeg cut after its thumbnail", image_folder,
     {"cat/a.jpg": jpeg(1), "dog/cut.jpg": CAMERA_JPEG[:-200]}, "", [], ["cut.jpg", "truncated JPEG"]),
]


def make_files(root, files: dict) -> None:
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / relative).write_bytes(content)
        else:
            (root / relative).write_text(content)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pipeline, files, input_file, flags, words", cases(PIPELINE_CASES))
def test_pipeline_corpus(tmp_path, pipeline, files, input_file, flags, words):
    root = tmp_path / "input"
    make_files(root, {"a.jpg": jpeg(1), **files})
    argv = ["--input", str(root / input_file), *[str(root / flag) if flag in files else flag for flag in flags]]
    out = str(tmp_path / "out")
    with pytest.raises(common.BadInputError) as raised:
        pipeline.run(argv + ["--output", out])
    assert_clear(raised.value, common.BadInputError, [str(root)] + words)

    manifest = pipeline.run(argv + ["--output", out, "--skip_bad"])
    assert manifest.num_rows == 1
    [bad] = read_bad_inputs(out)
    assert words[0] in bad["input"] + bad["error"]


@pytest.mark.timeout(60)
def test_a_class_id_past_int64_is_a_usage_error(tmp_path, capsys):
    make_files(tmp_path, {"a.jpg": jpeg(1), "m.jsonl": GOOD_JSONL.replace('"n": 1', f'"n": {2**64}')})
    with pytest.raises(SystemExit) as exit_info:
        jsonl.run(["--input", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out"), "--label_column", "n"])
    assert exit_info.value.code == 2
    assert f"label column 'n' holds class id {2**64}" in capsys.readouterr().err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("output", ["cache", "cat/deeper/cache"])
def test_image_folder_leaves_an_output_inside_its_input_out(tmp_path, output):
    root = tmp_path / "images"
    make_files(root, {"cat/a.jpg": jpeg(1), "dog/b.png": png(2), "emu/c.jpg": jpeg(3)})
    out = str(root / output)
    runs = [image_folder.run(["--input", str(root), "--output", out]) for _ in range(2)]
    for manifest in runs:
        assert manifest.features["label"].names == ["cat", "dog", "emu"]
        assert sorted(row["path"] for row in ShardedDataset(out, image_mode="bytes")) == [
            "cat/a.jpg", "dog/b.png", "emu/c.jpg"]
    (root / output / "grid.png").write_bytes(png(4))
    assert image_folder.run(["--input", str(root), "--output", out]).num_rows == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("output", [".", "..", "./"])
def test_image_folder_refuses_an_output_that_is_its_input_or_holds_it(tmp_path, output, capsys):
    root = tmp_path / "images"
    make_files(root, {"cat/a.jpg": jpeg(1)})
    with pytest.raises(SystemExit) as exit_info:
        image_folder.run(["--input", str(root), "--output", os.path.join(str(root), output)])
    assert exit_info.value.code == 2
    assert "is the input folder" in capsys.readouterr().err


# ---- the command line on crafted caches ---------------------------------------------------------

CLI_FEATURES = Features({"id": Value("int64"), "image": Image(), "label": ClassLabel(num_classes=10),
                         "tags": Sequence(ClassLabel(names=["x", "y"]))})
CLI_ROWS = 12


def craft_manifest(path: str, edit) -> None:
    """Edits the manifest of the cache at `path`, then recomputes its schema fingerprint (when
    the features are valid) so that the edit is all that differs."""
    def edit_and_fingerprint(data: dict) -> None:
        edit(data)
        try:
            data["schema_fingerprint"] = Features.from_dict(data["features"]).fingerprint()
        except FeatureError:
            pass

    edit_manifest(path, edit_and_fingerprint)


def crafted(edit) -> Callable[[str], None]:
    """What `craft_manifest` does to a cache with the manifest edit `edit`."""
    return lambda path: craft_manifest(path, edit)


def with_label(**label) -> Callable[[str], None]:
    """Declares the `label` column as the ClassLabel that `label` gives."""
    return crafted(lambda data: data["features"]["label"].update({"num_classes": None, "names": None, **label}))


def rename_column(old: str, new: str) -> Callable[[str], None]:
    return crafted(lambda data: data.update(features={new if k == old else k: v for k, v in data["features"].items()}))


def cut_first_shard(path: str) -> None:
    with open(read_metadata(path, check_files=False).shard_path(0), "r+b") as handle:
        handle.truncate(100)


def remove_first_shard(path: str) -> None:
    os.remove(read_metadata(path, check_files=False).shard_path(0))


def bad_inputs(content: bytes | Callable[[str], None]) -> Callable[[str], None]:
    """Puts `content` (bytes, or what a function makes at the path) where the list of skipped inputs goes."""
    def craft(path: str) -> None:
        where = os.path.join(path, BAD_INPUTS_NAME)
        if callable(content):
            content(where)
        else:
            with open(where, "wb") as handle:
                handle.write(content)
    return craft


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def sparse_file(size: int, head: bytes = b"") -> Callable[[str], None]:
    """Makes a file of `size` bytes, `head` then zeros, cheap to make however large (sparse)."""
    def make(where: str) -> None:
        with open(where, "wb") as handle:
            handle.write(head)
            handle.truncate(size)
    return make


@pytest.fixture
def cli_cache(tmp_path) -> str:
    """A small cache with label columns, written afresh for each test to craft."""
    path = str(tmp_path / "cache")
    write_shards(cli_rows(), path, CLI_FEATURES, max_rows_per_shard=5)
    return path


def cli_rows() -> Iterator[dict]:
    return ({"id": i, "image": png(i, size=4), "label": i % 7, "tags": ["x", "y"][: i % 3]} for i in range(CLI_ROWS))


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# (name, what is done to the cache first, command with {path} for the cache, words it prints): commands
# that succeed, within a bounded memory.
CLI_OUTPUT_CASES = [
    ("a trillion classes", with_label(num_classes=10**12), ["info", "{path}"],
     ["label: count per class", "999,999,999,993 of 1,000,000,000,000 classes have no values"]),
    ("ids past the declared classes", with_label(num_classes=3), ["info", "{path}"],
     ["3 (out of range)", "6 (out of range)"]),
]
# (name, what is done to the cache first, command with {path} for the cache, exit status, words of its
# one-line error).
CLI_ERROR_CASES = [
    ("not a cache", None, ["info", "{path}-missing"], 2, ["no beam_shards cache"]),
    ("a label column the shards do not have", rename_column("label", "class"), ["info", "{path}"], 1,
     ["shard 0", "has schema"]),
    ("a shard missing", remove_first_shard, ["head", "{path}"], 1, ["is missing"]),
    ("a shard cut", cut_first_shard, ["info", "{path}"], 1, ["100 bytes", "truncated"]),
    ("an unknown column", None, ["head", "{path}", "--columns", "nope"], 2, ["nope"]),
    ("show of a column that is not an image", None, ["show", "{path}", "--out", "{path}/x.png", "--image", "label"],
     2, ["no Image column 'label'"]),
    ("show into a folder that does not exist", None, ["show", "{path}", "--out", "{path}/no/such/x.png"], 2,
     ["cannot write"]),
    ("bad inputs list not JSON", bad_inputs(b'{"input": "a.jpg"\n'), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl, line 1 is not valid JSON"]),
    ("bad inputs line not an object", bad_inputs(b'{"input": "a.jpg", "error": "bad"}\n\n5\n'), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl, line 3 is not a JSON object"]),
    ("bad inputs line with NaN", bad_inputs(b'{"input": NaN}\n'), ["info", "{path}"], 1, ["line 1", "NaN"]),
    ("bad inputs list not UTF-8", bad_inputs(b'{"input": "\xff"}\n'), ["info", "{path}"], 1, ["line 1", "utf-8"]),
    ("bad inputs line nested 100000 deep", bad_inputs(nested(100_000).encode()), ["info", "{path}"], 1,
     ["line 1 is nested too deeply"]),
    ("bad inputs list a folder", bad_inputs(os.mkdir), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl", "not a regular file"]),
    ("bad inputs list a fifo", bad_inputs(os.mkfifo), ["info", "{path}"], 1,
     ["_bad_inputs.jsonl", "not a regular file"]),
    ("bad inputs list of a gigabyte without a line break", bad_inputs(sparse_file(1 << 30)), ["info", "{path}"], 1,
     ["line 1 is longer than 1,048,576 bytes"]),
]


def _command(argv: list[str], path: str) -> list[str]:
    return [part.format(path=path) for part in argv]


@pytest.mark.parametrize("craft, argv, words", cases(CLI_OUTPUT_CASES))
def test_cli_output_corpus(cli_cache, capsys, craft, argv, words):
    craft(cli_cache)
    tracemalloc.start()
    try:
        code, out, err = run_cli(capsys, _command(argv, cli_cache))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (code, err) == (0, ""), err
    for word in words:
        assert word in out, out
    assert peak < 50 * 2**20, f"{argv[0]} held {peak:,} bytes at its peak"


@pytest.mark.parametrize("craft, argv, code, words", cases(CLI_ERROR_CASES))
def test_cli_error_corpus(cli_cache, capsys, craft, argv, code, words):
    if craft is not None:
        craft(cli_cache)
    got, out, err = run_cli(capsys, _command(argv, cli_cache))
    assert got == code and not out, (got, out)
    assert err.startswith("beam-shards: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_class_counts_count_only_the_ids_that_occur(cli_cache):
    with_label(num_classes=10**12)(cli_cache)
    counts = cli.class_counts(read_metadata(cli_cache))
    assert counts["label"] == collections.Counter(i % 7 for i in range(CLI_ROWS))
    assert counts["tags"] == collections.Counter(t for i in range(CLI_ROWS) for t in [0, 1][: i % 3])



def test_head_and_show_describe_a_bomb_without_decoding_it(bomb_cache, tmp_path, capsys):
    code, out, _ = run_cli(capsys, ["head", bomb_cache])
    assert code == 0 and "unreadable image" in out and "decompression bomb" in out
    code, out, _ = run_cli(capsys, ["show", bomb_cache, "--out", str(tmp_path / "sheet.png")])
    assert code == 0 and "wrote" in out


# Strings a cache can hold that a terminal would act on: clear the screen, set the window
# title, a C1 control sequence introducer, a right-to-left override and a line break.
EVIL = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\n"
EVIL_SHOWN = r"\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\n"


def evil_manifest(data: dict) -> None:
    data.update(write_id=f"w{EVIL}", created=EVIL)
    data["writer"].update(package=f"beam_shards{EVIL}", pyarrow=EVIL)


def evil_shard_name(path: str) -> None:
    edit_manifest(path, lambda data: data["shards"][0].update(file=data["shards"][0]["file"] + EVIL))


@pytest.fixture
def evil_cache(tmp_path) -> str:
    """A cache whose column and class names, metadata, writer and write id hold EVIL, with a
    file of such a name in its staging folder (not in beam_shards' layout, so gc leaves it)."""
    path = str(tmp_path / "cache")
    features = Features({f"label{EVIL}": ClassLabel(names=[f"cat{EVIL}", "dog"]), f"image{EVIL}": Image(),
                         f"text{EVIL}": Value("string")})
    rows = ({f"label{EVIL}": i % 2, f"image{EVIL}": png(i, size=4), f"text{EVIL}": f"t{EVIL}"} for i in range(4))
    write_shards(rows, path, features, metadata={f"key{EVIL}": f"value{EVIL}"})
    edit_manifest(path, evil_manifest)
    staging = os.path.join(path, STAGING_DIR, f"write{EVIL}")
    os.makedirs(staging)
    with open(os.path.join(staging, f"junk{EVIL}"), "wb") as handle:
        handle.write(b"x")
    return path


# (name, what is done to the cache first, command with {path} for the cache, exit status, words printed).
EVIL_CASES = [
    ("info", None, ["info", "{path}"], 0, [f"label{EVIL_SHOWN}", f"cat{EVIL_SHOWN}",
                                           r'"value\u001b[2J\u001b]0;owned\u0007\x9b31m\u202e\n"',
                                           f"write id     w{EVIL_SHOWN}", f"beam_shards{EVIL_SHOWN}"]),
    ("head", None, ["head", "{path}"], 0, [f"label{EVIL_SHOWN}", f"text{EVIL_SHOWN}"]),
    ("verify", None, ["verify", "{path}"], 0, ["OK: 1 shard(s)"]),
    ("verify, a shard cut", cut_first_shard, ["verify", "{path}"], 1, ["truncated", "FAILED"]),
    ("info, a shard missing", remove_first_shard, ["info", "{path}"], 1, ["is missing"]),
    ("info, a shard name holding escapes", evil_shard_name, ["info", "{path}"], 1,
     [r".arrow\x1b", "invalid file name"]),
    ("gc listing", None, ["gc", "--dry-run", "--min_age", "0", "{path}"], 0, ["nothing to remove"]),
]


@pytest.mark.parametrize("craft, argv, code, words", cases(EVIL_CASES))
def test_cli_escapes_what_the_cache_holds(evil_cache, capsys, craft, argv, code, words):
    if craft is not None:
        craft(evil_cache)
    got, out, err = run_cli(capsys, _command(argv, evil_cache))
    assert got == code, (out, err)
    for text in (out, err):
        assert all(c.isprintable() for line in text.splitlines() for c in line), repr(text)
    for word in words:
        assert word in out + err, out + err
    assert err.count("\n") <= 1, err


def test_show_escapes_the_captions(evil_cache, tmp_path, capsys, monkeypatch):
    captions = []
    draw = cli.contact_sheet
    monkeypatch.setattr(cli, "contact_sheet", lambda images, shown, *args: captions.extend(shown) or draw(
        images, shown, *args))
    assert run_cli(capsys, ["show", evil_cache, "--out", str(tmp_path / "sheet.png")])[0] == 0
    assert sorted(captions) == [f"0 cat{EVIL_SHOWN}", "1 dog", f"2 cat{EVIL_SHOWN}", "3 dog"]


# ---- crafted manifests and shards ------------------------------------------------------------------

def write_version(path: str, **options) -> None:
    """Publishes the rows of `cli_cache` again at `path`: its next version."""
    write_shards(cli_rows(), path, CLI_FEATURES, max_rows_per_shard=5, **options)


def manifest_file(path: str, version: int | None = None) -> str:
    layout = CacheLayout(path)
    return layout.manifest if version is None else layout.version(version)


def raw_manifest(change: Callable[[str], str | bytes], version: int | None = None) -> Callable[[str], int | None]:
    """Rewrites the text of `_metadata.json` (or, after a second version is published, of
    `_versions/<version>.json`) with `change`; the craft reads that version."""
    def craft(path: str) -> int | None:
        if version is not None:
            write_version(path, mode="append")
        where = manifest_file(path, version)
        with open(where, encoding="utf-8") as handle:
            text = change(handle.read())
        with open(where, "wb") as handle:
            handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        return version
    return craft


def literal(text: str, *keys) -> Callable[[str], None]:
    """Puts the raw JSON `text` (NaN, deep nesting, huge numbers) at `keys` of the manifest."""
    placeholder = "@@literal@@"

    def put(data: dict) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = placeholder

    def craft(path: str) -> None:
        craft_manifest(path, put)
        raw_manifest(lambda manifest: manifest.replace(json.dumps(placeholder), text))(path)
    return craft


def value_at(value, *keys) -> Callable[[str], None]:
    """Sets the manifest's field at `keys` to `value` (the fingerprint follows the features)."""
    return literal(json.dumps(value), *keys)


def sequence_of_sequences(depth: int) -> dict:
    feature = {"_type": "Value", "dtype": "int64", "nullable": False}
    for _ in range(depth):
        feature = {"_type": "Sequence", "feature": feature, "nullable": False}
    return feature


def replace_manifest(make: Callable[[str], None], version: int | None = None) -> Callable[[str], int | None]:
    """Removes `_metadata.json` (or `_versions/<version>.json`) and lets `make(where)` put something there."""
    def craft(path: str) -> int | None:
        if version is not None:
            write_version(path, mode="append")
        where = manifest_file(path, version)
        os.remove(where)
        make(where)
        return version
    return craft


def on_first_shard(change: Callable[[str], None]) -> Callable[[str], None]:
    """Applies `change` to the path of the first shard."""
    return lambda path: change(read_metadata(path, check_files=False).shard_path(0))


def replaced_by(make: Callable[[str], None]) -> Callable[[str], None]:
    """The first shard removed and `make(where)` putting something else there."""
    def change(where: str) -> None:
        os.remove(where)
        make(where)
    return on_first_shard(change)


def garbage_of_same_size(where: str) -> None:
    size = os.path.getsize(where)
    with open(where, "wb") as handle:
        handle.write(np.random.default_rng(0).bytes(size))


def shard_of_another_cache(path: str) -> None:
    """The first shard replaced by a shard of another cache (other columns), its size and checksum in the manifest."""
    other = write_shards([{"text": "another cache"}], path + "-other", Features({"text": Value("string")}))
    source, target = other.shard_path(0), read_metadata(path, check_files=False).shard_path(0)
    shutil.copyfile(source, target)

    def edit(data: dict) -> None:
        data["shards"][0].update(num_bytes=other.shards[0].num_bytes, checksum=other.shards[0].checksum)
        data["num_bytes"] = sum(shard["num_bytes"] for shard in data["shards"])

    craft_manifest(path, edit)


def first_shard_name(text: str) -> Callable[[dict], None]:
    return lambda data: data["shards"][0].update(file=data["shards"][0]["file"].replace(".arrow", text + ".arrow"))


HUGE_MANIFEST = sparse_file(MAX_MANIFEST_BYTES + 1, b'{"format": "beam_shards", ')
ALL, OPENING, ROWS = "all", "opening", "rows"
# Which readers see a crafted cache's damage: ALL (every reader, command and listing reads the
# manifest), OPENING (every one that checks each shard's size and kind: all but list_versions,
# log and gc) or ROWS (those that read rows: ArrowBackend, ShardedDataset, verify, info, head,
# show). The others must read the cache as if nothing were wrong.
#
# (name, craft: what is done to a sound cache, returning the version to read (None: the latest),
# who sees it, the error class, words each error holds)
MANIFEST_CASES = [
    ("json nested 100000 deep", raw_manifest(lambda _: nested(100_000)), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("features nested 100000 deep", literal(nested(100_000), "features", "label", "names"), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("a sequence of sequences 400 deep", value_at(sequence_of_sequences(400), "features", "label"), ALL,
     CorruptCacheError, ["_metadata.json", "nested too deeply"]),
    ("metadata nested 900 deep", literal(nested(900), "metadata", "deep"), ALL, CorruptCacheError,
     ["_metadata.json", "nested too deeply"]),
    ("num_rows of 10**30", value_at(10**30, "num_rows"), ALL, CorruptCacheError, ["num_rows=10000000000000000"]),
    ("a shard of 10**30 rows", value_at(10**30, "shards", 0, "num_rows"), ALL, CorruptCacheError,
     ["shard 0", "invalid rows"]),
    ("a shard of 2**70 bytes", value_at(2**70, "shards", 0, "num_bytes"), ALL, CorruptCacheError,
     ["shard 0", "invalid rows, bytes"]),
    ("num_bytes of 2**70", value_at(2**70, "num_bytes"), ALL, CorruptCacheError,
     ["num_bytes", "1180591620717411303424"]),
    ("rows past int64 in all", lambda path: craft_manifest(path, lambda data: (
        [shard.update(num_rows=2**62 - 1) for shard in data["shards"]], data.update(num_rows=3 * (2**62 - 1)))),
     ALL, CorruptCacheError, ["rows"]),
    ("a shard claiming 10**15 rows", lambda path: craft_manifest(path, lambda data: (
        data["shards"][0].update(num_rows=10**15), data.update(num_rows=10**15 + 7))), ROWS, CorruptCacheError,
     ["shard 0", "the manifest says 1000000000000000"]),
    ("num_rows true", value_at(True, "num_rows"), ALL, CorruptCacheError, ["num_rows=True"]),
    ("a shard's num_rows true", value_at(True, "shards", 0, "num_rows"), ALL, CorruptCacheError, ["shard 0"]),
    ("format_version true", value_at(True, "format_version"), ALL, CorruptCacheError, ["format version True"]),
    ("version true", value_at(True, "version"), ALL, CorruptCacheError, ["invalid version True"]),
    ("num_rows NaN", literal("NaN", "num_rows"), ALL, CorruptCacheError, ["not valid JSON", "NaN"]),
    ("num_bytes Infinity", literal("Infinity", "shards", 0, "num_bytes"), ALL, CorruptCacheError, ["Infinity"]),
    ("metadata -Infinity", literal("-Infinity", "metadata", "x"), ALL, CorruptCacheError, ["-Infinity"]),
    ("NUL in a shard name", crafted(first_shard_name("\0")), ALL, CorruptCacheError, ["invalid file name", r"\x00"]),
    ("escape in a shard name", crafted(first_shard_name("\x1b[2J")), ALL, CorruptCacheError, ["invalid file name"]),
    ("a shard name that leaves the folder", crafted(lambda data: data["shards"][0].update(file="../x.arrow")), ALL,
     CorruptCacheError, ["invalid file name", "../x.arrow"]),
    ("NUL in a feature name", rename_column("label", "la\0bel"), ROWS, CorruptCacheError, ["has schema"]),
    ("control characters in a feature name", rename_column("label", "la\x07\x1b[2Jbel"), ROWS, CorruptCacheError,
     ["has schema"]),
    ("a label column the shards do not have", rename_column("label", "class"), ROWS, CorruptCacheError,
     ["shard 0", "has schema"]),
    ("a folder as _metadata.json", replace_manifest(os.mkdir), ALL, CorruptCacheError,
     ["_metadata.json", "not a regular file"]),
    ("a fifo as _metadata.json", replace_manifest(os.mkfifo), ALL, CorruptCacheError,
     ["_metadata.json", "not a regular file"]),
    ("_metadata.json a link to itself", replace_manifest(lambda where: os.symlink(where, where)), ALL,
     CorruptCacheError, ["_metadata.json"]),
    ("_metadata.json a link to /dev/zero", replace_manifest(lambda where: os.symlink("/dev/zero", where)), ALL,
     CorruptCacheError, ["_metadata.json", "not a regular file"]),
    ("an empty _metadata.json", raw_manifest(lambda _: ""), ALL, CorruptCacheError, ["not valid JSON"]),
    ("_metadata.json not UTF-8", raw_manifest(lambda text: b"\xff\xfe" + text.encode("utf-16-le")), ALL,
     CorruptCacheError, ["not valid JSON"]),
    ("a huge _metadata.json", replace_manifest(HUGE_MANIFEST), ALL, CorruptCacheError,
     ["_metadata.json", "more than a manifest may"]),
    ("version 1 says it is version 2", raw_manifest(lambda text: text.replace('"version": 1', '"version": 2', 1), 1),
     ALL, CorruptCacheError, ["00000000000000000001.json holds version 2, not 1"]),
    ("version 1 not JSON", raw_manifest(lambda text: text[:-40], 1), ALL, CorruptCacheError,
     ["00000000000000000001.json is not valid JSON"]),
    ("version 1 a folder", replace_manifest(os.mkdir, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "not a regular file"]),
    ("version 1 a fifo", replace_manifest(os.mkfifo, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "not a regular file"]),
    ("version 1 huge", replace_manifest(HUGE_MANIFEST, 1), ALL, CorruptCacheError,
     ["00000000000000000001.json", "more than a manifest may"]),
    ("a feature of unknown _type", crafted(lambda data: data["features"]["label"].update(_type="Tensor")), ALL,
     CorruptCacheError, ["invalid features", "Tensor"]),
    ("features a list", value_at([1, 2], "features"), ALL, CorruptCacheError, ["invalid features"]),
    ("no features", value_at({}, "features"), ALL, CorruptCacheError, ["invalid features"]),
    ("nullable a string", crafted(lambda data: data["features"]["id"].update(nullable="no")), ALL, CorruptCacheError,
     ["invalid features", "nullable"]),
    ("num_classes true", with_label(num_classes=True), ALL, CorruptCacheError, ["invalid features", "num_classes"]),
    ("num_classes 2.5", with_label(num_classes=2.5), ALL, CorruptCacheError, ["invalid features", "num_classes"]),
    ("class names a string", with_label(names="abcdefg"), ALL, CorruptCacheError, ["invalid features", "names"]),
    ("an array shape of true", crafted(lambda data: data["features"].update(
        id={"_type": "Array", "shape": [True], "dtype": "int64", "nullable": False})), ALL, CorruptCacheError,
     ["invalid features", "shape"]),
    ("a trillion classes", with_label(num_classes=10**12), ALL, None, []),
    ("10**30 classes", with_label(num_classes=10**30), ALL, None, []),
    ("a shard listed twice", crafted(lambda data: data.update(shards=data["shards"] + data["shards"][:1],
                                                               num_rows=data["num_rows"] + 5)), ALL,
     CorruptCacheError, ["more than once"]),
    ("shards an object", value_at({}, "shards"), ALL, CorruptCacheError, ["\"shards\" must be a list"]),
    ("a writer version that is a number", value_at(3, "writer", "pyarrow"), ALL, CorruptCacheError, ["writer"]),
    ("a write id that is a number", value_at(3, "write_id"), ALL, CorruptCacheError, ["write id"]),
    ("_metadata.json names a version _versions lacks", crafted(lambda data: data.update(version=7, parent_version=6)),
     ALL, None, []),
]
SHARD_CASES = [
    ("a shard cut", cut_first_shard, OPENING, CorruptCacheError, ["100 bytes", "truncated"]),
    ("a shard missing", remove_first_shard, OPENING, CorruptCacheError, ["is missing"]),
    ("a folder where a shard should be", replaced_by(os.mkdir), OPENING, CorruptCacheError, ["not a regular file"]),
    ("a fifo where a shard should be", replaced_by(os.mkfifo), OPENING, CorruptCacheError, ["not a regular file"]),
    ("a shard a link to /dev/zero", replaced_by(lambda where: os.symlink("/dev/zero", where)), OPENING,
     CorruptCacheError, ["not a regular file"]),
    ("a shard a link to itself", replaced_by(lambda where: os.symlink(where, where)), OPENING, CorruptCacheError,
     ["shard"]),
    ("a shard of another cache's schema", shard_of_another_cache, ROWS, CorruptCacheError, ["shard", "schema"]),
    ("garbage of a shard's size", on_first_shard(garbage_of_same_size), ROWS, CorruptCacheError, ["shard"]),
]


def read_rows(path: str, version: int | None) -> None:
    backend = ArrowBackend.open(path, version=version)
    backend.slice(0, backend.num_rows)
    list(backend.iter_batches())


def exhaust(rows) -> None:
    """Reads every row; unlike list(), which sets len() slots aside first, trusting a manifest's count."""
    for _ in rows:
        pass


def apply_read_transform(path: str, version: int | None) -> None:
    """Applies ReadFromArrowShards to a pipeline without running it: construction reads the manifest."""
    _ = beam.Pipeline(runner="FnApiRunner") | ReadFromArrowShards(path, version=version)


# (reader, who it is among ALL, OPENING and ROWS, what it does with the path and the version to read)
READERS = [
    ("ArrowBackend", ROWS, read_rows),
    ("ShardedDataset", ROWS, lambda path, version: exhaust(ShardedDataset(path, version=version, image_mode="bytes"))),
    ("read_metadata", OPENING, lambda path, version: read_metadata(path, version=version)),
    ("ReadFromArrowShards", OPENING, apply_read_transform),
    ("list_versions", ALL, lambda path, version: list_versions(path)),
]
# (command, who it is, its arguments; --version N is added to those that take one)
COMMANDS = [
    ("info", ROWS, ["info", "{path}"]),
    ("head", ROWS, ["head", "{path}"]),
    ("show", ROWS, ["show", "{path}", "--out", "{path}-sheet.png"]),
    ("verify", ROWS, ["verify", "{path}"]),
    ("log", ALL, ["log", "{path}"]),
    ("gc", ALL, ["gc", "--min_age", "0", "{path}"]),
]
_REACH = {ALL: 0, OPENING: 1, ROWS: 2}


def sees(reader: str, damage: str) -> bool:
    """Whether a reader of kind `reader` sees damage that readers of kind `damage` and further see."""
    return _REACH[reader] >= _REACH[damage]


def files_in(path: str) -> set[str]:
    return {os.path.join(root, name) for root, dirs, names in os.walk(path) for name in names + dirs}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("craft, seen, expected, words", cases(MANIFEST_CASES + SHARD_CASES))
def test_crafted_cache_corpus(cli_cache, capsys, craft, seen, expected, words):
    version = craft(cli_cache)
    before = files_in(cli_cache)
    tracemalloc.start()
    try:
        for name, kind, read in READERS:
            check_reader(name, lambda: read(cli_cache, version), expected if sees(kind, seen) else None, words)
        check_verify(cli_cache, version, expected if sees(ROWS, seen) else None, words)
        for name, kind, argv in COMMANDS:
            argv = _command(argv, cli_cache) + (["--version", str(version)] if version and name not in ("log", "gc")
                                                else [])
            check_command(capsys, argv, expected if sees(kind, seen) else None, words)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"the readers held {peak:,} bytes at their peak"
    if expected is not None and seen == ALL:
        assert files_in(cli_cache) == before, "gc removed files from a cache whose manifest it cannot read"


def check_reader(name: str, read: Callable[[], object], expected: type | None, words: list[str]) -> None:
    """`read()` raises `expected` with `words` (or, when `expected` is None, returns)."""
    try:
        read()
    except Exception as error:  # noqa: BLE001 - whatever it is, the assertion names it
        if expected is None:
            raise AssertionError(f"{name} failed on a cache it should read: {type(error).__name__}: {error}") from None
        try:
            assert_clear(error, expected, words)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None
    else:
        assert expected is None, f"{name} read the crafted cache without an error"


def check_verify(path: str, version: int | None, expected: type | None, words: list[str]) -> None:
    """`verify` reports the damage (or raises CacheNotFoundError, as its contract says)."""
    try:
        report = verify(path, version=version)
    except CacheNotFoundError as error:
        assert expected is not None and issubclass(expected, CacheNotFoundError), f"verify raised {error}"
        assert_clear(error, expected, words)
        return
    problems = " ".join(report.problems)
    assert report.ok == (expected is None), f"verify: {report.problems}"
    for word in words:
        assert word in problems, f"verify: {word!r} not in {problems!r}"


def check_command(capsys, argv: list[str], expected: type | None, words: list[str]) -> None:
    """The command exits 0, or (the cache damaged) 1 or 2 with one line on stderr and no traceback."""
    code, out, err = run_cli(capsys, argv)
    for text in (out, err):
        assert all(c.isprintable() for line in text.splitlines() for c in line), f"{argv[0]} printed {text!r}"
    if expected is None:
        assert (code, err) == (0, ""), f"{argv[0]}: exit {code}, {err!r}"
        return
    assert code == (2 if issubclass(expected, CacheNotFoundError) else 1), f"{argv[0]}: exit {code}, {out!r} {err!r}"
    assert "Traceback" not in out + err and err.count("\n") <= 1, f"{argv[0]}: {err!r}"
    assert err.startswith("beam-shards: ") or (argv[0] == "verify" and "FAILED" in out), f"{argv[0]}: {out!r}{err!r}"
    for word in words:
        assert printable(word) in out + err, f"{argv[0]}: {printable(word)!r} not in {out + err!r}"


# ---- fuzzing image bytes ---------------------------------------------------------------------

def mutate_bytes(draw, data: bytes, max_mutations: int = 3) -> bytes:
    """`data` with up to `max_mutations` cuts, byte flips, inserted or deleted runs of bytes."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, max_mutations))):
        kind = draw(st.sampled_from(["cut", "flip", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "cut":
            del data[at:]
        elif kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 64))]
    return bytes(data)


@st.composite
def mutated_images(draw) -> tuple[str, bytes]:
    """A valid image with one to three cuts, byte flips, inserted or deleted runs of bytes."""
    name = draw(st.sampled_from(sorted(VALID_IMAGES)))
    return name, mutate_bytes(draw, VALID_IMAGES[name])


def printed_tally(request, describe: Callable[[collections.Counter], str]) -> Iterator[collections.Counter]:
    """A count of outcomes for a fixture to yield; `describe(counts)` is printed when the module finishes."""
    outcomes: collections.Counter = collections.Counter()
    yield outcomes
    if outcomes:
        print_uncaptured(request, [describe(outcomes)])


@pytest.fixture(scope="module")
def fuzz_tally(request) -> Iterator[collections.Counter]:
    """Outcomes of the fuzzed images."""
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ images: {outcomes['cases']} cases, {outcomes['refused']} refused with a ValueError, "
        f"{outcomes['accepted']} accepted ({outcomes['pixels load']} with pixels that load, "
        f"{outcomes['pixels damaged']} with damaged pixel data)"))


def _load_pixels(data: bytes) -> bool:
    try:
        image_codec.decode(data).load()
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.timeout(600)
@settings(max_examples=1000 * SCALE, deadline=5000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_images())
def test_mutated_images_are_refused_with_a_value_error_or_open_with_pillow(case, fuzz_tally):
    name, data = case
    fuzz_tally["cases"] += 1
    try:
        fmt = image_check.sniff_format(data)
    except ValueError as error:
        assert str(error), f"{name}: a ValueError without a message"
        with pytest.raises(EncodeError, match=re.escape(str(error))):
            encode_example({"image": data}, IMAGE_FEATURES)
        fuzz_tally["refused"] += 1
        return
    assert encode_example({"image": data}, IMAGE_FEATURES)["image"] == data
    with image_codec.decode(data) as image:
        assert fmt == image.format or (fmt, image.format) == ("JPEG", "MPO"), name
    fuzz_tally["accepted"] += 1
    fuzz_tally["pixels load" if _load_pixels(data) else "pixels damaged"] += 1


# ---- fuzzing manifests -------------------------------------------------------------------------

FUZZ_FEATURES = Features({"id": Value("int64"), "text": Value("string", nullable=True), "image": Image(),
                          "label": ClassLabel(names=["cat", "dog"]), "tags": Sequence(Value("int32"))})


def fuzz_rows(first: int, count: int) -> list[dict]:
    return [{"id": i, "text": None if i % 4 == 0 else f"row {i}", "image": png(i % 3, size=4), "label": i % 2,
             "tags": list(range(i % 3))} for i in range(first, first + count)]


@pytest.fixture(scope="module")
def fuzz_cache(tmp_path_factory) -> tuple[str, dict]:
    """A cache of two versions, and the rows each holds: (path, {version: rows})."""
    path = str(tmp_path_factory.mktemp("fuzz") / "cache")
    rows = {1: fuzz_rows(0, 9), 2: fuzz_rows(100, 7)}
    for version in (1, 2):
        write_shards(rows[version], path, FUZZ_FEATURES, max_rows_per_shard=3)
    return path, rows


# Tokens a mutation may put in a manifest, so that some mutations pass the first checks.
FUZZ_WORDS = ["beam_shards", "Value", "Sequence", "ClassLabel", "Image", "Array", "int64", "string", "zstd",
              "append", "overwrite", "crc32:00000000", "", "\0", "../x.arrow",
              "shard-20261123T000000Z-00000000-00000-of-00001.arrow"]
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
                | st.sampled_from([0, 1, -1, 2, 3, 2**31, 2**62, 2**63, 2**64, 10**30])
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12) | st.sampled_from(FUZZ_WORDS))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | st.sampled_from(FUZZ_WORDS), children, max_size=4),
                           max_leaves=8) | st.integers(1, 80).map(lambda depth: json.loads(nested(depth)))
# Number literals Python's json writes only when asked, or not at all.
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-0", "7" * 5000, "1.0", "0x10"]


def json_paths(node, prefix: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indices) of every value in parsed JSON, the root first."""
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from json_paths(child, prefix + (key,))


@st.composite
def mutated_json(draw, data) -> str:
    """`data` (parsed JSON) with one to three values replaced, keys deleted or added, list items
    duplicated or numbers written as raw literals (NaN, 1e999...), as JSON text. Changes `data`."""
    raw = {}
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(json_paths(data))))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        node = parent[path[-1]] if path else data
        kind = draw(st.sampled_from(["replace", "delete", "add", "duplicate", "raw"]))
        if kind == "add" and isinstance(node, dict):
            node[draw(st.text(max_size=8) | st.sampled_from(FUZZ_WORDS))] = draw(JSON_VALUES)
        elif kind == "duplicate" and isinstance(node, list) and node:
            node.insert(draw(st.integers(0, len(node))), copy.deepcopy(draw(st.sampled_from(node))))
        elif kind == "delete" and path:
            del parent[path[-1]]
        elif kind == "raw" and path:
            placeholder = f"@@raw{len(raw)}@@"
            raw[json.dumps(placeholder)] = draw(st.sampled_from(RAW_NUMBERS))
            parent[path[-1]] = placeholder
        elif path:
            parent[path[-1]] = draw(JSON_VALUES)
    text = json.dumps(data, ensure_ascii=draw(st.booleans()))
    for placeholder, literal_text in raw.items():
        text = text.replace(placeholder, literal_text)
    return text


# The manifest a case mutates, and reads: `_metadata.json` (None: the latest) or `_versions/<N>.json`.
FUZZ_TARGETS = [None, 1, 2]
CLEAR_ERRORS = (CorruptCacheError, CacheNotFoundError)  # VersionNotFoundError is a CacheNotFoundError


def fuzz_readers(path: str, version: int | None) -> dict[str, Callable[[], object]]:
    """Every reader the fuzz runs, by name: those named in ROW_READERS return the rows they read."""
    def commands() -> None:
        for argv in (["info", path], ["log", path], ["verify", path]):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(argv + (["--version", str(version)] if version and argv[0] != "log" else []))
            assert code in (0, 1, 2) and err.getvalue().count("\n") <= 1, (argv, code, err.getvalue())

    return {
        "ArrowBackend": lambda: ArrowBackend.open(path, version=version).slice(0, 10**6).to_pylist(),
        "ShardedDataset": lambda: [row for row in ShardedDataset(path, version=version, image_mode="bytes")],
        "read_metadata": lambda: read_metadata(path, version=version),
        "list_versions": lambda: list_versions(path),
        "verify": lambda: verify(path, version=version),
        "find_garbage": lambda: find_garbage(path),
        "commands": commands,
    }


ROW_READERS = ("ArrowBackend", "ShardedDataset")
HANG_SECONDS = 20


def fuzz_copy(source: str, target: str) -> None:
    """`source` copied to `target`: shards hard-linked (readers never write them), manifests copied."""
    for root, _, names in os.walk(source):
        folder = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(folder, exist_ok=True)
        for name in names:
            copy_or_link = shutil.copyfile if name.endswith(".json") else os.link
            copy_or_link(os.path.join(root, name), os.path.join(folder, name))


@pytest.fixture(scope="module")
def manifest_tally(request) -> Iterator[collections.Counter]:
    """Outcomes of the fuzzed manifests."""
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ manifests: {outcomes['cases']} cases, {outcomes['clear error']} clear errors, "
        f"{outcomes['right rows']} right rows, {outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms)"))


@pytest.mark.timeout(600 + 60 * SCALE)
@settings(max_examples=60 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(version=st.sampled_from(FUZZ_TARGETS), data=st.data())
def test_mutated_manifests_give_a_clear_error_or_the_right_rows(fuzz_cache, manifest_tally, tmp_path, version, data):
    source, rows = fuzz_cache
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "cache")
    fuzz_copy(source, path)
    where = manifest_file(path, version)
    with open(where, "rb") as handle:
        text = data.draw(mutated_json(json.loads(handle.read()))).encode("utf-8")
    if data.draw(st.booleans()):
        text = mutate_bytes(data.draw, text)
    with open(where, "wb") as handle:
        handle.write(text)
    manifest_tally["cases"] += 1
    outcome, start = "right rows", time.monotonic()
    for name, read in fuzz_readers(path, version).items():
        try:
            got = read()
        except CLEAR_ERRORS as error:
            assert str(error) and "\n" not in str(error).strip(), f"{name}: {error!r}"
            outcome = "clear error"
            continue
        except BaseException:
            manifest_tally["crash"] += 1
            raise
        assert name not in ROW_READERS or got == rows[version or 2], f"{name} read other rows from {text[:2000]!r}"
    elapsed = time.monotonic() - start
    manifest_tally["slowest ms"] = max(manifest_tally["slowest ms"], round(1000 * elapsed))
    manifest_tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS, f"the readers took {elapsed:.0f} s"
    manifest_tally[outcome] += 1
    shutil.rmtree(path)
