"""Image encoding rules: what each kind of input becomes, and what is rejected."""

from __future__ import annotations

import io
import pathlib
import struct

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image as PILImage

from beam_shards import EncodeError, Features, Image, encode_example
from beam_shards.features import Sequence, image_check, image_codec

from _support import jpeg, png

FEATURES = Features({"image": Image()})


def encode(value) -> bytes | None:
    return encode_example({"image": value}, FEATURES)["image"]


def open_bytes(data: bytes) -> PILImage.Image:
    image = PILImage.open(io.BytesIO(data))
    image.load()
    return image


def encoded_as(image: PILImage.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def pixels(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def sun_raster_rgb() -> bytes:
    """A 2x2 RGB Sun raster: a format Pillow reads but cannot write."""
    body = bytes([0, 0, 255, 0, 255, 0, 255, 0, 0, 10, 20, 30])  # BGR rows, 6 bytes each
    return struct.pack(">8I", 0x59A66A95, 2, 2, 24, len(body), 1, 0, 0) + body


# ---- bytes and paths are kept exactly --------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: jpeg(3), lambda: png(4), lambda: png(5, mode="RGBA"),
    lambda: encoded_as(PILImage.fromarray(pixels(1, (8, 8, 3))), "GIF"),
    lambda: encoded_as(PILImage.fromarray(pixels(2, (8, 8, 3))), "WEBP"),
    lambda: encoded_as(PILImage.fromarray(pixels(3, (8, 8, 3))), "BMP"),
])
def test_bytes_pass_through_unchanged(make):
    data = make()
    for value in (data, bytearray(data), memoryview(data), {"bytes": data, "path": None}):
        assert encode(value) == data


def test_a_path_is_read_as_is_so_jpeg_stays_jpeg(tmp_path):
    data = jpeg(7, size=24, quality=35)
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    for value in (str(path), path, {"path": str(path)}, {"bytes": None, "path": path}):
        encoded = encode(value)
        assert encoded == data
        assert open_bytes(encoded).format == "JPEG"


def test_a_file_uri_is_read_like_a_path(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(jpeg(7))
    assert encode(path.as_uri()) == encode({"path": path.as_uri()}) == jpeg(7)


def test_a_path_with_a_misleading_extension_keeps_its_real_format(tmp_path):
    path = tmp_path / "really_a_png.jpg"
    path.write_bytes(png(1))
    assert encode(str(path)) == png(1)


# ---- PIL images keep their own format ----------------------------------------------------

def test_pil_jpeg_is_saved_as_jpeg_with_its_own_tables():
    ramp = np.add.outer(np.arange(32), np.arange(32)).astype(np.uint8) * 4
    source = open_bytes(encoded_as(PILImage.fromarray(np.stack([ramp, ramp.T, 255 - ramp], axis=2)), "JPEG",
                                   quality=60))
    encoded = encode(source)
    again = open_bytes(encoded)
    assert again.format == "JPEG" and again.size == source.size and again.mode == source.mode
    assert again.quantization == source.quantization
    difference = np.abs(np.asarray(again, dtype=np.int16) - np.asarray(source, dtype=np.int16))
    assert difference.mean() < 3


def test_pil_mpo_camera_jpeg_is_saved_as_jpeg_with_its_own_tables():
    first = PILImage.fromarray(pixels(12, (16, 16, 3)))
    source = open_bytes(encoded_as(first, "MPO", save_all=True, append_images=[first], quality=40))
    assert source.format == "MPO"
    again = open_bytes(encode(source))
    assert again.format == "JPEG" and again.quantization == source.quantization


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "WEBP"])
def test_pil_image_keeps_a_format_it_was_read_in(fmt):
    source = open_bytes(encoded_as(PILImage.fromarray(pixels(4, (10, 12, 3))), fmt))
    again = open_bytes(encode(source))
    assert again.format == fmt and again.size == source.size
    if fmt != "WEBP":  # Pillow re-encodes WebP lossily
        np.testing.assert_array_equal(np.asarray(again), np.asarray(source))


@pytest.mark.parametrize("make, mode", [
    (lambda: PILImage.fromarray(pixels(5, (6, 7, 3))), "RGB"),
    (lambda: PILImage.new("L", (5, 4), 77), "L"),
    (lambda: open_bytes(png(6, mode="RGBA")), "RGBA"),
    (lambda: open_bytes(encoded_as(PILImage.fromarray(pixels(7, (8, 8, 4))), "WEBP", lossless=True)), "RGBA"),
    (lambda: open_bytes(encoded_as(PILImage.fromarray(pixels(8, (8, 8, 3))), "GIF")), "P"),
    (lambda: PILImage.fromarray(pixels(9, (8, 8, 3))).convert("P"), "P"),
    (lambda: PILImage.new("LA", (3, 3), (10, 200)), "LA"),
    (lambda: open_bytes(sun_raster_rgb()), "RGB"),
])
def test_pil_image_without_a_writable_format_or_with_alpha_or_palette_becomes_png(make, mode):
    source = make()
    assert source.mode == mode
    again = open_bytes(encode(source))
    assert again.format == "PNG" and again.mode == mode
    np.testing.assert_array_equal(np.asarray(again), np.asarray(source))


# ---- numpy arrays become PNG ------------------------------------------------------------

@pytest.mark.parametrize("shape, mode", [((9, 11), "L"), ((9, 11, 1), "L"), ((9, 11, 3), "RGB"),
                                         ((9, 11, 4), "RGBA")])
def test_numpy_uint8_becomes_png_with_exact_pixels(shape, mode):
    array = pixels(10, shape)
    again = open_bytes(encode(array))
    assert again.format == "PNG" and again.mode == mode and again.size == (11, 9)
    np.testing.assert_array_equal(np.asarray(again), array.reshape(array.shape[:2] + array.shape[3:])
                                  if array.ndim == 3 and array.shape[2] == 1 else array)


def test_numpy_non_contiguous_view_is_encoded_as_seen():
    array = pixels(11, (8, 8, 3))[::2, ::-1]
    np.testing.assert_array_equal(np.asarray(open_bytes(encode(array))), array)


@pytest.mark.parametrize("array, reason", [
    (np.zeros((4, 4), dtype=np.uint16), "must be uint8, not uint16"),
    (np.zeros((4, 4, 3), dtype=np.float32), "must be uint8, not float32"),
    (np.zeros((4, 4, 3), dtype=np.int8), "must be uint8, not int8"),
    (np.zeros((4, 4, 2), dtype=np.uint8), "not (4, 4, 2)"),
    (np.zeros((4, 4, 5), dtype=np.uint8), "not (4, 4, 5)"),
    (np.zeros((16,), dtype=np.uint8), "not (16,)"),
    (np.zeros((2, 4, 4, 3), dtype=np.uint8), "not (2, 4, 4, 3)"),
])
def test_numpy_other_dtypes_and_shapes_are_rejected(array, reason):
    with pytest.raises(EncodeError) as info:
        encode_example({"image": array}, FEATURES, key="k")
    assert reason in str(info.value) and info.value.field == "image" and info.value.feature == "Image()"


# ---- None and bad input -----------------------------------------------------------------

def test_none_is_null_unless_the_image_is_required():
    assert encode(None) is None
    with pytest.raises(EncodeError, match="nullable"):
        encode_example({"image": None}, Features({"image": Image(nullable=False)}))


@pytest.mark.parametrize("value, reason", [
    (b"", "empty bytes"),
    (b"definitely not an image", "not an image"),
    (jpeg(1)[:-300], "truncated JPEG"),
    (png(1)[:-20], "truncated PNG"),
    (encoded_as(PILImage.new("RGB", (4, 4)), "GIF")[:-1], "truncated GIF"),
    (encoded_as(PILImage.new("RGB", (4, 4)), "WEBP")[:-10], "truncated WebP"),
    ({"bytes": None, "path": None}, "neither bytes nor path"),
    (12, "expected image bytes, a path"),
    ([1, 2, 3], "expected image bytes"),
])
def test_bad_images_are_rejected_with_the_reason(value, reason):
    with pytest.raises(EncodeError) as info:
        encode_example({"image": value}, FEATURES, key=4)
    assert reason in str(info.value) and info.value.example == 4 and info.value.field == "image"


def test_a_missing_path_names_the_path(tmp_path):
    missing = tmp_path / "gone.jpg"
    with pytest.raises(EncodeError) as info:
        encode_example({"image": str(missing)}, FEATURES, key="k")
    assert str(missing) in str(info.value)


def test_a_path_to_a_non_image_is_rejected(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("hello")
    with pytest.raises(EncodeError, match="not an image"):
        encode(pathlib.Path(path))


def test_images_in_a_sequence_follow_the_same_rules():
    row = encode_example({"frames": [jpeg(1), pixels(1, (4, 4)), None]}, Features({"frames": Sequence(Image())}))
    assert row["frames"][0] == jpeg(1) and open_bytes(row["frames"][1]).format == "PNG" and row["frames"][2] is None


# ---- sniffing and decoding --------------------------------------------------------------

def test_sniff_format_names_formats():
    assert image_check.sniff_format(jpeg(1)) == "JPEG"
    assert image_check.sniff_format(png(1)) == "PNG"
    assert image_check.sniff_format(encoded_as(PILImage.new("RGB", (2, 2)), "GIF")) == "GIF"
    assert image_check.sniff_format(encoded_as(PILImage.new("RGB", (2, 2)), "BMP")) == "BMP"
    assert image_check.sniff_format(jpeg(1) + b"\x00" * 100) == "JPEG"  # trailing camera data


def test_decode_modes():
    data = png(3, mode="RGBA")
    as_pil = image_codec.decode(data)
    assert isinstance(as_pil, PILImage.Image) and as_pil.mode == "RGBA"
    as_numpy = image_codec.decode(data, "numpy")
    assert as_numpy.shape == (16, 16, 4) and as_numpy.dtype == np.uint8
    with pytest.raises(ValueError, match="'tensor'"):
        image_codec.decode(data, "tensor")


@pytest.mark.parametrize("make, shape", [
    (lambda: PILImage.fromarray(pixels(1, (6, 5, 3))).convert("P"), (6, 5, 3)),
    (lambda: PILImage.new("P", (5, 6)), (6, 5, 3)),
    (lambda: PILImage.new("L", (5, 6)), (6, 5)),
    (lambda: PILImage.new("LA", (5, 6)), (6, 5, 2)),
])
def test_decode_numpy_gives_colours_not_palette_indices(make, shape):
    source = make()
    array = image_codec.decode(encoded_as(source, "PNG"), "numpy")
    assert array.shape == shape and array.dtype == np.uint8
    if source.mode == "P":
        np.testing.assert_array_equal(array, np.asarray(source.convert("RGB")))


def test_decode_numpy_keeps_palette_transparency():
    source = PILImage.fromarray(pixels(2, (4, 4, 3))).convert("P")
    array = image_codec.decode(encoded_as(source, "PNG", transparency=0), "numpy")
    assert array.shape == (4, 4, 4)


def test_image_decode_keeps_nulls_in_every_mode():
    import pyarrow as pa

    column = pa.array([png(1), None], type=pa.large_binary())
    assert Image().decode(column, "bytes") == [png(1), None]
    decoded = Image().decode(column, "numpy")
    assert decoded[0].shape == (16, 16, 3) and decoded[1] is None


def _jpeg(mode: str, size=(37, 53), **params) -> bytes:
    pixels = np.random.default_rng(1).integers(0, 255, size + (3,), dtype=np.uint8)
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).convert(mode).save(buffer, "JPEG", quality=85, **params)
    return buffer.getvalue()


@pytest.mark.parametrize("data", [
    _jpeg("RGB", subsampling="4:4:4"), _jpeg("RGB", subsampling="4:2:0"), _jpeg("RGB", subsampling="4:2:2"),
    _jpeg("L"), _jpeg("RGB", progressive=True), _jpeg("CMYK"), _jpeg("RGB", size=(1, 1)),
], ids=["444", "420", "422", "grey", "progressive", "cmyk", "1x1"])
def test_numpy_decoding_of_jpegs_is_pillows_pixel_for_pixel(data):
    assert image_codec._simplejpeg() is not None  # the test extra installs the fast path; this compares it
    expected = np.asarray(PILImage.open(io.BytesIO(data)))
    got = image_codec.decode(data, "numpy")
    assert got.shape == expected.shape and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)


def test_a_damaged_jpeg_fails_as_pillow_fails_it_and_the_pixel_limit_holds(monkeypatch):
    truncated = _jpeg("RGB", size=(64, 64))[:-300]
    with pytest.raises(OSError) as fast:
        image_codec.decode(truncated, "numpy")
    with pytest.raises(OSError) as slow:
        np.asarray(PILImage.open(io.BytesIO(truncated)))
    assert str(fast.value) == str(slow.value)
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(ValueError, match="too many pixels"):
        image_codec.decode(_jpeg("RGB", size=(20, 20)), "numpy")


# ---- what Pillow made of a header is remembered -----------------------------------------------

def _counting_opens(monkeypatch) -> list:
    opened = []
    original = PILImage.open

    def counting(*args, **kwargs):
        opened.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(PILImage, "open", counting)
    return opened


@pytest.mark.parametrize("make", [lambda seed: jpeg(seed, size=24), lambda seed: png(seed, size=24)],
                         ids=["jpeg", "png"])
def test_images_with_the_same_header_are_opened_by_pillow_once(monkeypatch, make):
    monkeypatch.setattr(image_check, "_VERDICTS", image_check._HeaderVerdicts())
    opened = _counting_opens(monkeypatch)
    first, second = make(101), make(102)
    assert first != second
    assert image_check.sniff_format(first) == image_check.sniff_format(second) == image_check.sniff_format(first)
    assert len(opened) == 1, "the second image shares the first one's header: Pillow's verdict is remembered"
    with pytest.raises(ValueError, match="truncated"):
        image_check.sniff_format(second[:-10])  # the container walk still runs for every image
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 24 * 24 - 1)
    with pytest.raises(ValueError, match="24x24 is over the limit of 575 pixels"):
        image_check.sniff_format(second)  # the pixel limit is checked again on every use


def test_a_header_pillow_refuses_or_warns_about_is_not_remembered(monkeypatch):
    monkeypatch.setattr(image_check, "_VERDICTS", image_check._HeaderVerdicts())
    opened = _counting_opens(monkeypatch)
    bad_frame = bytearray(jpeg(1))
    bad_frame[bad_frame.index(b"\xff\xc0") + 4] = 12  # 12-bit samples: Pillow cannot open it
    for _ in range(2):
        with pytest.raises(ValueError, match="not an image in a format Pillow knows"):
            image_check.sniff_format(bytes(bad_frame))
    assert len(opened) == 4, "each refusal asks Pillow again (once quietly, once for the message)"
    assert "0 of 256" in repr(image_check._VERDICTS)


def test_the_remembered_headers_are_bounded(monkeypatch):
    verdicts = image_check._HeaderVerdicts(entries=2)
    monkeypatch.setattr(image_check, "_VERDICTS", verdicts)
    for size in (8, 9, 10, 11):
        image_check.sniff_format(png(1, size=size))
    assert "2 of 2" in repr(verdicts)


def _same_header_variants() -> list[bytes]:
    """Images sharing one JPEG header: whole ones, and ones a check must refuse or accept past it."""
    good = [jpeg(seed) for seed in range(3)]
    head, eoi = good[0][:-2], good[0][-2:]
    return [
        good[0], good[1],
        head[:len(head) // 2 + 300],  # cut inside the scan data: no end-of-image marker
        good[2] + b"trailer bytes after EOI",  # allowed, as some cameras write them
        head + b"\xff\xc4\x00\x40",  # another marker after the scan, whose segment runs past the end
        head + b"\xff\xd0" + eoi,  # a restart marker is part of the scan
        head + b"\xff\xff\xff" + eoi,  # fill bytes before EOI
        b"",
    ]


def test_first_bad_image_agrees_with_sniff_format_image_by_image():
    image_check.sniff_format(jpeg(0))  # the header is the last one seen: the in-place path is taken
    variants = _same_header_variants()
    assert all(v.startswith(image_check._VERDICTS.last.header) for v in variants[:7])
    for k, data in enumerate(variants):
        try:
            image_check.sniff_format(data)
            expected = None
        except ValueError as error:
            expected = (0, str(error))
        image_check.sniff_format(jpeg(0))
        assert image_check.first_bad_image(data, [0, len(data)]) == expected, k
    blob = b"".join(variants)
    ends = np.cumsum([0] + [len(v) for v in variants]).tolist()
    assert image_check.first_bad_image(blob, ends)[0] == 2
    null = [k in (2, 4, 7) for k in range(len(variants))]
    assert image_check.first_bad_image(blob, ends, null) is None


def _first_refused(variants: list[bytes], null: list[bool]) -> tuple[int, str] | None:
    for k, data in enumerate(variants):
        if null[k]:
            continue
        try:
            image_check.sniff_format(data)
        except ValueError as error:
            return k, str(error)
    return None


@pytest.mark.parametrize("seed", range(12))
def test_first_bad_image_agrees_with_sniff_format_on_mixed_batches(seed, monkeypatch):
    """Batches mixing two JPEG headers (the common one changes midway), PNGs and damaged
    images, some absent: the first image refused, and its reason, are sniff_format's.
    Every third batch compares its image heads a few at a time."""
    if seed % 3 == 0:
        monkeypatch.setattr(image_check, "_COMPARED_BYTES", 2000)
    rng = np.random.default_rng(seed)
    other = [jpeg(seed, size=24), jpeg(seed + 1, size=24)]
    not_jpeg = b"\x00" * 700 + b"\xff\xd9"  # past the common header's length, runs to an EOI marker
    pool = _same_header_variants() + other + [png(seed), other[0][:-2] + b"\xff\xd0", other[1][:40], not_jpeg]
    picks = rng.integers(0, len(pool), 40)
    variants = [pool[i] for i in picks]
    null = (rng.random(40) < 0.2).tolist()
    blob = b"".join(variants)
    ends = np.cumsum([0] + [len(v) for v in variants])
    image_check.sniff_format(jpeg(0) if seed % 2 else other[0])  # which header is common when the batch starts
    got = image_check.first_bad_image(blob, ends, null)
    image_check.sniff_format(jpeg(0) if seed % 2 else other[0])
    assert got == _first_refused(variants, null)
    good = [not null[k] and _first_refused([v], [False]) is None for k, v in enumerate(variants)]
    image_check.sniff_format(jpeg(0) if seed % 2 else other[0])
    assert image_check.first_bad_image(blob, ends, [not g for g in good]) is None


def test_a_scan_is_not_ended_by_the_marker_of_the_image_after_it():
    image_check.sniff_format(jpeg(0))
    cut = _same_header_variants()[2]  # the common header, then scan data with no end-of-image marker
    assert cut.startswith(image_check._VERDICTS.last.header)
    blob = cut + b"\x00\xff\xd9" + jpeg(2)
    ends = [0, len(cut), len(cut) + 3, len(blob)]
    assert image_check.first_bad_image(blob, ends)[0] == 0
    image_check.sniff_format(jpeg(0))
    assert image_check.first_bad_image(blob, ends, [True, False, False])[0] == 1


def test_every_image_head_is_compared_a_few_at_a_time(monkeypatch):
    monkeypatch.setattr(image_check, "_COMPARED_BYTES", 2000)
    image_check.sniff_format(jpeg(0))
    good = _same_header_variants()[0]
    batch = [good] * 7 + [b"\x00" * len(good) + b"\xff\xd9"]  # not a JPEG, though its bytes run to EOI
    blob = b"".join(batch)
    assert image_check.first_bad_image(blob, np.cumsum([0] + [len(v) for v in batch]))[0] == 7


def test_common_images_are_checked_without_sniff_format(monkeypatch):
    image_check.sniff_format(jpeg(0))
    variants = _same_header_variants()
    good = [variants[i] for i in (0, 1, 3, 5, 6)] * 20
    blob = b"".join(good)
    calls = []
    monkeypatch.setattr(image_check, "sniff_format", lambda data: calls.append(data))
    assert image_check.first_bad_image(blob, np.cumsum([0] + [len(v) for v in good])) is None
    assert calls == []


def test_a_batch_image_column_names_the_row_of_a_sliced_array_with_nulls():
    from beam_shards.features.base import Invalid

    variants = _same_header_variants()
    column = pa.array([jpeg(5), None] + variants, pa.large_binary()).slice(1)  # offset 1: row k is variants[k - 1]
    with pytest.raises(Invalid) as caught:
        Image().check_array(column, "image")
    assert caught.value.row == 3 and "truncated JPEG" in caught.value.reason
    assert Image().check_array(column.slice(0, 3), "image").null_count == 1
    Image().check_array(column.slice(4, 1), "image")
    with pytest.raises(Invalid) as caught:
        Image().check_array(column.slice(5), "image")
    assert caught.value.row == 0 and "runs past the end" in caught.value.reason
