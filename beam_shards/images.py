"""Image bytes: recognising a complete encoded image, encoding PIL/numpy images, decoding,
and describing one in a few words.

Encoding keeps the source format: bytes pass through unchanged, a PIL image is saved
in its own format (PNG when it has none, or has an alpha or palette mode), and a numpy
array becomes PNG. Checks look at the container and the header only, never decoding
pixels: a JPEG's marker segments up to its end-of-image marker, a PNG's chunks (and
their CRCs) up to IEND, the trailer of a GIF and the length of a WebP; then Pillow
reads the header, and an image of more pixels than `PIL.Image.MAX_IMAGE_PIXELS` (a
decompression bomb) is refused, so a truncated, damaged or hostile file is caught.
"""

from __future__ import annotations

import functools
import io
import re
import zlib
from typing import Any

import numpy as np

from beam_shards.display import human_size

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SOI = b"\xff\xd8\xff"
_JPEG_EOI, _JPEG_SOS = 0xD9, 0xDA
# Markers without a length: TEM and RST0..RST7.
_JPEG_NO_LENGTH = frozenset([0x01, *range(0xD0, 0xD8)])
# A marker: 0xFF, any fill bytes 0xFF, then its code (0x00 after 0xFF is a stuffed byte, not a code).
_JPEG_MARKER = re.compile(rb"\xff+([^\x00\xff])")
# The marker that ends a scan's entropy-coded data (FF 00 is a stuffed byte, FF D0..D7 a restart).
_JPEG_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_ALPHA_OR_PALETTE_MODES = {"RGBA", "RGBa", "LA", "La", "P", "PA"}


def sniff_format(data: bytes) -> str:
    """Returns the image format of `data` ("JPEG", "PNG", ...), checking it is complete.

    Bytes after a JPEG's end-of-image marker or a PNG's IEND chunk are allowed (some
    cameras append data there).

    Raises:
      ValueError: `data` is empty, truncated, damaged, not an image Pillow can open, or
        of more pixels than `PIL.Image.MAX_IMAGE_PIXELS`.
    """
    if not data:
        raise ValueError("empty bytes are not an image")
    container = _check_container(data)
    with open_image(data) as image:
        return container or image.format or "unknown"


def _check_container(data: bytes) -> str | None:
    """The format whose container `data` is, after checking it is complete; None for others."""
    if data.startswith(_JPEG_SOI):
        _check_jpeg(data)
        return "JPEG"
    if data.startswith(_PNG_SIGNATURE):
        _check_png(data)
        return "PNG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if not data.rstrip(b"\x00").endswith(b";"):
            raise ValueError("truncated GIF: no trailer")
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        if int.from_bytes(data[4:8], "little") + 8 > len(data):
            raise ValueError("truncated WebP: shorter than its RIFF header says")
        return "WEBP"
    return None


def _check_jpeg(data: bytes) -> None:
    """Walks a JPEG's marker segments from SOI to EOI, as a decoder does.

    Segments are skipped by their lengths, so the end-of-image marker of an EXIF
    thumbnail (a JPEG inside the APP1 segment) is not taken for the image's own; after
    each scan header its entropy-coded data runs to the next marker. Where a segment
    ends the next marker must start: bytes there mean a length is wrong.
    """
    position = 2
    while True:
        found = _JPEG_MARKER.match(data, position)
        if found is None:
            if position >= len(data) - 1:
                raise ValueError(f"truncated JPEG: no end-of-image marker in its {len(data):,} bytes")
            raise ValueError(f"damaged JPEG: no marker at byte {position:,}, where the segment before ends "
                             f"(found {data[position:position + 2].hex(' ')})")
        marker, position = found.group(1)[0], found.end()
        if marker == _JPEG_EOI:
            return
        if marker in _JPEG_NO_LENGTH:
            continue
        end = position + int.from_bytes(data[position:position + 2], "big")
        if position + 2 > len(data) or end > len(data):
            raise ValueError(f"truncated JPEG: the segment of marker FF{marker:02X} at byte {position - 2:,} "
                             f"runs past the end ({len(data):,} bytes)")
        if end < position + 2:
            raise ValueError(f"damaged JPEG: the segment of marker FF{marker:02X} at byte {position - 2:,} "
                             f"has length {end - position}")
        position = end
        if marker == _JPEG_SOS:
            scan_end = _JPEG_SCAN_END.search(data, position)
            if scan_end is None:
                raise ValueError(f"truncated JPEG: its scan data runs to the end ({len(data):,} bytes) "
                                 "with no end-of-image marker")
            position = scan_end.start()


def _check_png(data: bytes) -> None:
    """Walks a PNG's chunks from the signature to IEND, checking each chunk's CRC."""
    view = memoryview(data)
    position = len(_PNG_SIGNATURE)
    while True:
        length = int.from_bytes(data[position:position + 4], "big")
        end = position + 12 + length
        if end > len(data):
            raise ValueError(f"truncated PNG: the chunk at byte {position:,} runs past the end "
                             f"({len(data):,} bytes) before IEND")
        kind = bytes(view[position + 4:position + 8])
        if zlib.crc32(view[position + 4:end - 4]) != int.from_bytes(view[end - 4:end], "big"):
            raise ValueError(f"damaged PNG: chunk {kind!r} at byte {position:,} fails its CRC check")
        if kind == b"IEND":
            return
        position = end


def open_image(data: bytes) -> Any:
    """Pillow's image over encoded `data`, with only its header read.

    Raises:
      ValueError: not an image Pillow can open, or of more pixels than
        `PIL.Image.MAX_IMAGE_PIXELS` (the limit Pillow sets against decompression bombs).
    """
    from PIL import Image as PILImage, UnidentifiedImageError

    try:
        image = PILImage.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ValueError("not an image in a format Pillow knows") from None
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning) as error:
        raise ValueError(f"too many pixels, a possible decompression bomb: {error} "
                         "(PIL.Image.MAX_IMAGE_PIXELS sets the limit)") from None
    except Exception as error:  # noqa: BLE001 - Pillow raises many kinds on a damaged header
        raise ValueError(f"not an image Pillow can read: {type(error).__name__}: {error}") from None
    limit = PILImage.MAX_IMAGE_PIXELS
    if limit is not None and image.width * image.height > limit:
        image.close()
        raise ValueError(f"too many pixels, a possible decompression bomb: {image.width}x{image.height} is over "
                         f"the limit of {limit:,} pixels (PIL.Image.MAX_IMAGE_PIXELS sets it)")
    return image


def encode_pil(image: Any) -> bytes:
    """Encodes a PIL image in its own format; PNG when it has none, needs alpha/palette,
    or is one Pillow reads but cannot write (such as PSD or SUN)."""
    from PIL import Image as PILImage

    fmt = image.format
    if fmt is None or image.mode in _ALPHA_OR_PALETTE_MODES or not _can_save(PILImage, fmt):
        fmt = "PNG"
    buffer = io.BytesIO()
    params: dict[str, Any] = {}
    if fmt in ("JPEG", "MPO") and getattr(image, "quantization", None):
        from PIL.JpegImagePlugin import get_sampling

        # Re-use the source's tables and subsampling: no second generation loss. Camera
        # JPEGs often open as MPO; saved as JPEG they keep their first frame.
        fmt = "JPEG"
        params.update(qtables=image.quantization, subsampling=get_sampling(image))
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def _can_save(pil: Any, fmt: str) -> bool:
    if fmt.upper() not in pil.SAVE:
        pil.init()  # Pillow registers its writers lazily
    return fmt.upper() in pil.SAVE


def encode_array(array: np.ndarray) -> bytes:
    """Encodes a uint8 HxW, HxWx1, HxWx3 or HxWx4 array as PNG.

    Raises:
      ValueError: another dtype or shape.
    """
    from PIL import Image as PILImage

    if array.dtype != np.uint8:
        raise ValueError(f"an image array must be uint8, not {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or array.ndim == 3 and array.shape[2] in (3, 4)):
        raise ValueError(f"an image array must be HxW, HxWx1, HxWx3 or HxWx4, not {array.shape}")
    buffer = io.BytesIO()
    PILImage.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def decode(data: bytes, mode: str = "pil") -> Any:
    """Decodes encoded image bytes to a PIL image (`mode="pil"`) or a numpy array ("numpy").

    A numpy array is HxW for single-channel images and HxWxC otherwise; palette images
    are converted to RGB (RGBA when they have transparency) so the array holds colours,
    not palette indices. With the `jpeg` extra (simplejpeg) installed, RGB and grey
    JPEGs decode straight to numpy through libjpeg-turbo, about 3x faster than through
    Pillow and pixel for pixel the same; anything it refuses goes through Pillow.

    Raises:
      ValueError: `data` is not an image Pillow can open, or has more pixels than
        `PIL.Image.MAX_IMAGE_PIXELS` (see `open_image`); or `mode` is unknown.
    """
    if mode == "numpy":
        fast = _decode_jpeg_to_numpy(data)
        if fast is not None:
            return fast
    image = open_image(data)
    if mode == "pil":
        return image
    if mode == "numpy":
        if image.mode in ("P", "PA"):
            has_alpha = image.mode == "PA" or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        return np.asarray(image)
    raise ValueError(f"image decode mode must be 'pil' or 'numpy', not {mode!r}")


def _decode_jpeg_to_numpy(data: bytes) -> np.ndarray | None:
    """An RGB or grey JPEG decoded by simplejpeg; None where it does not apply (not installed, another
    format or colour space, over Pillow's pixel limit, or an error: Pillow then decides)."""
    simplejpeg = _simplejpeg()
    if simplejpeg is None or not data.startswith(_JPEG_SOI):
        return None
    from PIL import Image as PILImage

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        limit = PILImage.MAX_IMAGE_PIXELS
        if colorspace not in ("YCbCr", "RGB", "Gray") or limit is not None and height * width > limit:
            return None
        grey = colorspace == "Gray"
        array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if grey else "RGB", strict=True)
    except ValueError:
        return None
    return array[:, :, 0] if grey else array


@functools.cache
def _simplejpeg() -> Any:
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def describe(data: bytes) -> str:
    """Format, size and mode of encoded image bytes, read from the header only (a bomb is not decoded)."""
    try:
        with open_image(data) as image:
            return f"{image.format} {image.width}x{image.height} {image.mode}, {human_size(len(data))}"
    except ValueError as error:
        return f"unreadable image, {human_size(len(data))} ({error})"
