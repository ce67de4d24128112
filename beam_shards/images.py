"""Image bytes: recognising a complete encoded image, encoding PIL/numpy images, decoding,
and describing one in a few words.

Encoding keeps the source format: bytes pass through unchanged, a PIL image is saved
in its own format (PNG when it has none, or has an alpha or palette mode), and a numpy
array becomes PNG. Checks look at the container only (signature and end marker), so
a truncated or non-image file is caught without decoding pixels.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from beam_shards.display import human_size

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"IEND\xaeB`\x82"
_JPEG_SOI = b"\xff\xd8\xff"
_JPEG_EOI = b"\xff\xd9"
# Some cameras append data after the end-of-image marker; look for it near the end.
_JPEG_TAIL = 4096
_ALPHA_OR_PALETTE_MODES = {"RGBA", "RGBa", "LA", "La", "P", "PA"}


def sniff_format(data: bytes) -> str:
    """Returns the image format of `data` ("JPEG", "PNG", ...), checking it is complete.

    Raises:
      ValueError: `data` is empty, truncated, or not an image Pillow can open.
    """
    if not data:
        raise ValueError("empty bytes are not an image")
    if data.startswith(_JPEG_SOI):
        if data.rfind(_JPEG_EOI, max(0, len(data) - _JPEG_TAIL)) < 0:
            raise ValueError("truncated JPEG: no end-of-image marker")
        return "JPEG"
    if data.startswith(_PNG_SIGNATURE):
        if _PNG_IEND not in data[-64:]:
            raise ValueError("truncated PNG: no IEND chunk at the end")
        return "PNG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if not data.rstrip(b"\x00").endswith(b";"):
            raise ValueError("truncated GIF: no trailer")
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        if int.from_bytes(data[4:8], "little") + 8 > len(data):
            raise ValueError("truncated WebP: shorter than its RIFF header says")
        return "WEBP"
    return _pillow_format(data)


def _pillow_format(data: bytes) -> str:
    from PIL import Image as PILImage, UnidentifiedImageError

    try:
        with PILImage.open(io.BytesIO(data)) as image:
            return image.format or "unknown"
    except (UnidentifiedImageError, OSError, SyntaxError):
        raise ValueError("not an image in a format Pillow knows") from None


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
    not palette indices.
    """
    from PIL import Image as PILImage

    image = PILImage.open(io.BytesIO(data))
    if mode == "pil":
        return image
    if mode == "numpy":
        if image.mode in ("P", "PA"):
            has_alpha = image.mode == "PA" or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        return np.asarray(image)
    raise ValueError(f"image decode mode must be 'pil' or 'numpy', not {mode!r}")


def describe(data: bytes) -> str:
    """Format, size and mode of encoded image bytes, read from the header only."""
    from PIL import Image as PILImage, UnidentifiedImageError

    try:
        with PILImage.open(io.BytesIO(data)) as image:
            return f"{image.format} {image.width}x{image.height} {image.mode}, {human_size(len(data))}"
    except (UnidentifiedImageError, OSError):
        return f"unreadable image, {human_size(len(data))}"
