"""Hostile image bytes: crafted images, decompression bombs and cut files are refused by every path, and
Hypothesis mutations of valid images (cuts, byte flips, inserted and deleted bytes) are refused with a
ValueError or accepted, and what is accepted opens with Pillow. Damage inside compressed pixel data (a
JPEG scan, GIF or WebP data) is seen only by decoding, which the checks do not do; the tally printed at
the end counts how often such bytes were accepted.

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import collections
import io
import re
import struct
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image as PILImage

from beam_shards import EncodeError, ShardedDataset, encode_example
from beam_shards.features import image_check, image_codec

from _hostile import (CAMERA_JPEG, IMAGE_FEATURES, SCALE, assert_clear, cases, forged_png, mutate_bytes, noise,
                      printed_tally, saved)
from _support import jpeg, png

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- crafted images ------------------------------------------------------------------------


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


# ---- fuzzing image bytes ---------------------------------------------------------------------


@st.composite
def mutated_images(draw) -> tuple[str, bytes]:
    """A valid image with one to three cuts, byte flips, inserted or deleted runs of bytes."""
    name = draw(st.sampled_from(sorted(VALID_IMAGES)))
    return name, mutate_bytes(draw, VALID_IMAGES[name])


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
