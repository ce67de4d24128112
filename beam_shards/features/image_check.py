"""Recognising a complete encoded image: its format, and whether it is whole and safe to decode.

Checks look at the container and the header only, never decoding pixels: a JPEG's marker segments up to its end-of-image marker, a PNG's chunks (and
their CRCs) up to IEND, the trailer of a GIF and the length of a WebP; then Pillow
reads the header, and an image of more pixels than `PIL.Image.MAX_IMAGE_PIXELS` (a
decompression bomb) is refused, so a truncated, damaged or hostile file is caught.

Pillow's header parse costs about ten times the container walk, so `sniff_format`
remembers what Pillow made of a JPEG or PNG header (see `_HeaderVerdicts`): images
with the same header bytes (same encoder, tables and size) are opened once.
"""

from __future__ import annotations

import io
import math
import re
import threading
import warnings
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8\xff"
_JPEG_EOI, _JPEG_SOS = 0xD9, 0xDA
# Markers without a length: TEM and RST0..RST7.
_JPEG_NO_LENGTH = frozenset([0x01, *range(0xD0, 0xD8)])
# A marker: 0xFF, any fill bytes 0xFF, then its code (0x00 after 0xFF is a stuffed byte, not a code).
_JPEG_MARKER = re.compile(rb"\xff+([^\x00\xff])")
# The codes after FF that do not end a scan's entropy-coded data: 00 (a stuffed byte),
# D0..D7 (restarts) and FF (fill). Any other ends it: the regex for one image, and the
# table for many at once (`_scans_run_to_eoi`).
_JPEG_IN_SCAN = bytes([0x00, *range(0xD0, 0xD8), 0xFF])
_JPEG_SCAN_END = re.compile(rb"\xff[^" + re.escape(_JPEG_IN_SCAN) + rb"]")
_JPEG_ENDS_SCAN = np.ones(256, dtype=bool)
_JPEG_ENDS_SCAN[list(_JPEG_IN_SCAN)] = False
# How many bytes of image heads first_bad_image compares at once.
_COMPARED_BYTES = 1 << 20


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
    last = _VERDICTS.last
    if last is not None and data.startswith(last.header):  # the container walk went through these bytes before
        if _common_jpeg(last) and _scan_runs_to_eoi(data, len(last.header), len(data)):
            return last.verdict[0]
        container, header = _check_after_header(data, last.container, len(last.header))
    else:
        container, header = _check_container(data)
    if header is None:
        return _open_format(data, container)
    return _VERDICTS.format_of(data, container, header)


def first_bad_image(blob: bytes | memoryview, ends: Sequence[int] | np.ndarray,
                    null: Sequence[bool] | None = None) -> tuple[int, str] | None:
    """`sniff_format` over images stored back to back: image k is `blob[ends[k]:ends[k + 1]]`.

    The common images (those that start with the last header answered for, a JPEG's,
    and whose one scan runs to its end-of-image marker) are checked together, in place:
    one pass over the blob finds every marker that ends scan data. Any other image goes
    through `sniff_format`, in order.

    Args:
      blob: the images' bytes, back to back (a memoryview of an Arrow buffer is read in
        place).
      ends: where each image starts, and where the last one ends.
      null: per image, whether it is absent (not checked).

    Returns:
      `(k, reason)` for the first image k that `sniff_format` refuses; None if none is.
    """
    ends = np.asarray(ends, dtype=np.int64)
    starts, stops = ends[:-1], ends[1:]
    done = np.zeros(len(starts), dtype=bool) if null is None else np.array(null, dtype=bool)
    last = _VERDICTS.last
    if last is not None and _common_jpeg(last) and len(starts):
        data = np.frombuffer(blob, dtype=np.uint8)
        done |= _start_with(data, starts, stops, last.header) & _scans_run_to_eoi(data, starts + len(last.header), stops)
    for k in np.flatnonzero(~done).tolist():
        try:
            sniff_format(bytes(blob[starts[k]:stops[k]]))
        except ValueError as error:
            return k, str(error)
    return None


def _start_with(data: np.ndarray, starts: np.ndarray, stops: np.ndarray, header: bytes) -> np.ndarray:
    """Per slice `data[starts[i]:stops[i]]`, whether it starts with `header` (compared about
    a MiB of heads at a time, whatever the header's length)."""
    size = len(header)
    fits = stops - starts >= size
    if len(data) < size:
        return fits
    windows, expected = sliding_window_view(data, size), np.frombuffer(header, dtype=np.uint8)
    first = np.minimum(starts, len(data) - size)
    step = max(1, _COMPARED_BYTES // size)
    for at in range(0, len(starts), step):
        fits[at:at + step] &= (windows[first[at:at + step]] == expected).all(axis=1)
    return fits


def _scans_run_to_eoi(data: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """`_scan_runs_to_eoi` for many scans of one blob: per scan, whether its data from
    `positions[i]` ends at an end-of-image marker before `ends[i]`."""
    fills = np.flatnonzero(data[:-1] == 0xFF)
    markers = fills[_JPEG_ENDS_SCAN[data[fills + 1]]]
    if len(markers) == 0:
        return np.zeros(len(positions), dtype=bool)
    found = np.searchsorted(markers, positions)
    first = markers[np.minimum(found, len(markers) - 1)]
    return (found < len(markers)) & (first + 1 < ends) & (data[first + 1] == _JPEG_EOI)


def _common_jpeg(last: _Answered) -> bool:
    """Whether the header `last` was answered for is a JPEG's within the pixel limit: an image
    that starts with it and whose one scan runs to its end-of-image marker gets its verdict."""
    return last.container == "JPEG" and within_pixel_limit(last.verdict[1])


def _scan_runs_to_eoi(data: bytes, position: int, end: int) -> bool:
    """Whether the scan data from `position` ends at an end-of-image marker before `end`."""
    found = _JPEG_SCAN_END.search(data, position, end)
    return found is not None and data[found.end() - 1] == _JPEG_EOI


def _open_format(data: bytes, container: str | None) -> str:
    with open_image(data) as image:
        return container or image.format or "unknown"


class _ReadReach(io.BytesIO):
    """A BytesIO that records how far into it any read reached.

    A read to the end, or a question that depends on the length (a seek from the end,
    readline, readinto, getvalue), counts as reaching past every header.
    """

    def __init__(self, data: bytes):
        super().__init__(data)
        self.reach = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if size is None or size < 0 or len(data) < size:
            self.reach = math.inf
        else:
            self.reach = max(self.reach, self.tell())
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END:
            self.reach = math.inf
        return super().seek(offset, whence)

    def _past_every_header(self, *args: Any) -> Any:
        raise io.UnsupportedOperation("only read and seek are tracked")

    readline = readlines = readinto = readinto1 = read1 = getvalue = getbuffer = _past_every_header


class _Answered(NamedTuple):
    """A header `_HeaderVerdicts` answered for: its bytes, its container and the verdict (format, pixels)."""

    header: bytes
    container: str
    verdict: tuple[str, int]


class _HeaderVerdicts:
    """What Pillow made of the JPEG and PNG headers it opened cleanly: header bytes -> (format, pixels).

    Pillow opens an image by reading its header: a JPEG's marker segments up to the end
    of its first scan header, a PNG's chunks up to the first IDAT (whose length it only
    stores). An entry is kept only when Pillow, given the whole image, read no byte past
    that header, warned about nothing and found the image within the pixel limit: its
    verdict then depends on the header bytes alone, and any image whose container is
    complete and whose header is the same gets it without parsing again. The pixel limit
    (`PIL.Image.MAX_IMAGE_PIXELS`) is checked on every use, as it may change; anything
    else (a new header, a refused or warned-about one) goes through `open_image`, so
    what is accepted or refused, and every message, stays as without the memo. At most
    `entries` headers of at most `header_bytes` each are kept (the oldest go first).
    """

    def __init__(self, entries: int = 256, header_bytes: int = 16 << 10):
        self._entries = entries
        self._header_bytes = header_bytes
        self._known: dict[bytes, tuple[str, int]] = {}
        # The header last answered for: images of one dataset often share a header.
        self.last: _Answered | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"_HeaderVerdicts({len(self._known)} of {self._entries} headers)"

    def format_of(self, data: bytes, container: str, header: tuple[int, int]) -> str:
        """`sniff_format`'s answer for complete `data` whose header is `data[:header[0]]`,
        when Pillow may read up to `header[1]`."""
        end, reach = header
        key = data[:end] if end <= self._header_bytes else None
        known = self._known.get(key) if key is not None else None
        if known is not None and within_pixel_limit(known[1]):
            self.last = _Answered(key, container, known)
            return known[0]
        verdict = None if key is None else self._ask_pillow(data, container, reach)
        if verdict is None:
            return _open_format(data, container)
        with self._lock:
            if len(self._known) >= self._entries:
                del self._known[next(iter(self._known))]
            self._known[key] = verdict
        self.last = _Answered(key, container, verdict)
        return verdict[0]

    @staticmethod
    def _ask_pillow(data: bytes, container: str, reach: int) -> tuple[str, int] | None:
        """(format, pixels) when Pillow opens `data` cleanly reading no byte past `reach`; else None."""
        stream = _ReadReach(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with _pil().open(stream) as image:
                    verdict = (container or image.format or "unknown", image.width * image.height)
            except Exception:  # noqa: BLE001 - open_image gives the error, with its message
                return None
        if caught or stream.reach > reach or not within_pixel_limit(verdict[1]):
            return None
        return verdict


def within_pixel_limit(pixels: int) -> bool:
    limit = (_PIL_IMAGE or _pil()).MAX_IMAGE_PIXELS
    return limit is None or pixels <= limit


def _pil() -> Any:
    """`PIL.Image`, imported on first use (once: an import statement costs more than the memo's lookup)."""
    global _PIL_IMAGE
    if _PIL_IMAGE is None:
        from PIL import Image as PILImage

        _PIL_IMAGE = PILImage
    return _PIL_IMAGE


_PIL_IMAGE: Any = None


_VERDICTS = _HeaderVerdicts()


def _check_container(data: bytes) -> tuple[str | None, tuple[int, int] | None]:
    """The format whose container `data` is, after checking it is complete (None for
    others), and for JPEG and PNG where the header Pillow reads ends: `(end of the
    header, how far Pillow may read)`."""
    if data.startswith(JPEG_SOI):
        return _header_span("JPEG", _check_jpeg(data))
    if data.startswith(_PNG_SIGNATURE):
        return _header_span("PNG", _check_png(data))
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if not data.rstrip(b"\x00").endswith(b";"):
            raise ValueError("truncated GIF: no trailer")
        return "GIF", None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        if int.from_bytes(data[4:8], "little") + 8 > len(data):
            raise ValueError("truncated WebP: shorter than its RIFF header says")
        return "WEBP", None
    return None, None


def _check_after_header(data: bytes, container: str, header: int) -> tuple[str, tuple[int, int] | None]:
    """`_check_container` for `data` whose first `header` bytes are a header it walked before."""
    if container == "JPEG":
        return _header_span(container, _check_jpeg(data, resume=header))
    return _header_span(container, _check_png(data, resume=header))


def _header_span(container: str, end: int | None) -> tuple[str, tuple[int, int] | None]:
    """`(container, (end of the header, how far Pillow may read))`; no span without a header."""
    if end is None:
        return container, None
    # Pillow reads a PNG's first IDAT chunk's length and type, and only stores the length.
    return container, (end, end + 8 if container == "PNG" else end)


def _check_jpeg(data: bytes, resume: int | None = None) -> int | None:
    """Walks a JPEG's marker segments from SOI to EOI, as a decoder does; returns where
    its first scan header ends (its header, for Pillow; None if it has no scan). With
    `resume`, where that header ends, the walk starts there, at the scan's data.

    Segments are skipped by their lengths, so the end-of-image marker of an EXIF
    thumbnail (a JPEG inside the APP1 segment) is not taken for the image's own; after
    each scan header its entropy-coded data runs to the next marker. Where a segment
    ends the next marker must start: bytes there mean a length is wrong.
    """
    position, header, size, match = 2, None, len(data), _JPEG_MARKER.match
    if resume is not None:
        position = header = resume
        position = _jpeg_scan_end(data, position)
    while True:
        found = match(data, position)
        if found is None:
            if position >= size - 1:
                raise ValueError(f"truncated JPEG: no end-of-image marker in its {size:,} bytes")
            raise ValueError(f"damaged JPEG: no marker at byte {position:,}, where the segment before ends "
                             f"(found {data[position:position + 2].hex(' ')})")
        position = found.end()
        marker = data[position - 1]
        if marker == _JPEG_EOI:
            return header
        if marker in _JPEG_NO_LENGTH:
            continue
        end = position + (data[position] << 8 | data[position + 1]) if position + 2 <= size else size + 1
        if end > size:
            raise ValueError(f"truncated JPEG: the segment of marker FF{marker:02X} at byte {position - 2:,} "
                             f"runs past the end ({size:,} bytes)")
        if end < position + 2:
            raise ValueError(f"damaged JPEG: the segment of marker FF{marker:02X} at byte {position - 2:,} "
                             f"has length {end - position}")
        position = end
        if marker == _JPEG_SOS:
            header = end if header is None else header
            position = _jpeg_scan_end(data, position)


def _jpeg_scan_end(data: bytes, position: int) -> int:
    """Where the entropy-coded data of a scan starting at `position` ends: at the next marker."""
    scan_end = _JPEG_SCAN_END.search(data, position)
    if scan_end is None:
        raise ValueError(f"truncated JPEG: its scan data runs to the end ({len(data):,} bytes) "
                         "with no end-of-image marker")
    return scan_end.start()


def _check_png(data: bytes, resume: int | None = None) -> int | None:
    """Walks a PNG's chunks from the signature to IEND, checking each chunk's CRC; returns
    where its first IDAT chunk starts (None if it has none). With `resume`, where that
    chunk starts, the walk starts there."""
    view = memoryview(data)
    position, idat = (len(_PNG_SIGNATURE), None) if resume is None else (resume, resume)
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
            return idat
        if kind == b"IDAT" and idat is None:
            idat = position
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
