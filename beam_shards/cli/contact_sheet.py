"""A contact sheet: encoded images drawn as thumbnails above their captions (`beam-shards show`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from beam_shards.features.image_check import open_image

CAPTION_HEIGHT = 14


def _sheet_size(count: int, tile: int, columns: int | None = None) -> tuple[int, int]:
    """The (width, height) in pixels of a contact sheet of `count` images: `columns`
    cells across (about a square by default), each `tile` pixels wide and `tile +
    CAPTION_HEIGHT` high."""
    across = columns or max(1, math.ceil(math.sqrt(count)))
    down = max(1, math.ceil(count / across))
    return across * tile, down * (tile + CAPTION_HEIGHT)


def contact_sheet(images: Sequence[bytes | None], captions: Sequence[str], tile: int = 128,
                  columns: int | None = None):
    """A PIL image with each encoded image as a thumbnail above its caption."""
    from PIL import Image as PILImage, ImageDraw, ImageFont

    across = columns or max(1, math.ceil(math.sqrt(len(images))))
    sheet = PILImage.new("RGB", _sheet_size(len(images), tile, columns), (24, 24, 24))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for position, (data, caption) in enumerate(zip(images, captions)):
        left, top = (position % across) * tile, (position // across) * (tile + CAPTION_HEIGHT)
        thumbnail = _thumbnail(data, tile - 4)
        if thumbnail is not None:
            sheet.paste(thumbnail, (left + (tile - thumbnail.width) // 2, top + (tile - thumbnail.height) // 2),
                        thumbnail)
        else:
            draw.line((left + 4, top + 4, left + tile - 5, top + tile - 5), fill=(200, 40, 40), width=2)
            draw.line((left + 4, top + tile - 5, left + tile - 5, top + 4), fill=(200, 40, 40), width=2)
            caption = f"{caption} ({'no image' if data is None else 'unreadable'})"
        while caption and draw.textlength(caption, font=font) > tile - 4:
            caption = caption[:-1]
        draw.text((left + 2, top + tile + 1), caption, fill=(230, 230, 230), font=font)
    return sheet


def _thumbnail(data: bytes | None, size: int):
    """Encoded image bytes decoded and scaled to fit size x size (RGBA), None if they do not decode."""
    from PIL import ImageOps

    if data is None:
        return None
    try:
        with open_image(data) as image:
            return ImageOps.contain(image.convert("RGBA"), (size, size))
    except Exception:  # noqa: BLE001 - Pillow raises many kinds; a bad image is drawn as a cross, not a crash
        return None
