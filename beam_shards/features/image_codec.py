"""Image bytes made and read: encoding PIL/numpy images, decoding, and describing one in a few words.

Encoding keeps the source format: bytes pass through unchanged, a PIL image is saved
in its own format (PNG when it has none, or has an alpha or palette mode), and a numpy
array becomes PNG. Decoding gives PIL images or numpy arrays (JPEGs straight to numpy
through simplejpeg when it is installed). `image_check` decides whether bytes are a
whole image first.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import numpy as np

from beam_shards.display import human_size
from beam_shards.features.image_check import JPEG_SOI, open_image, within_pixel_limit

_ALPHA_OR_PALETTE_MODES = {"RGBA", "RGBa", "LA", "La", "P", "PA"}


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
    if simplejpeg is None or not data.startswith(JPEG_SOI):
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if colorspace not in ("YCbCr", "RGB", "Gray") or not within_pixel_limit(height * width):
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
