"""Shared by the hostile-input tests (tests/robustness/test_hostile_*.py): corpus tables and the clear-error check;
their fixtures are in tests/robustness/conftest.py."""

from __future__ import annotations

import collections
import io
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from PIL import Image as PILImage

from beam_shards import ClassLabel, FeatureError, Features, Image, Sequence, Value, cli, read_metadata
from beam_shards.format.layout import CacheLayout
from beam_shards.format.shard_table import TableRef
from beam_shards.format.table_files import table_file
from beam_shards.storage.checksum import checksum_of

from _reliability import edit_manifest, print_uncaptured
from _support import png

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


def printed_tally(request, describe: Callable[[collections.Counter], str]) -> Iterator[collections.Counter]:
    """A count of outcomes for a fixture to yield; `describe(counts)` is printed when the module finishes."""
    outcomes: collections.Counter = collections.Counter()
    yield outcomes
    if outcomes:
        print_uncaptured(request, [describe(outcomes)])


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


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def sparse_file(size: int, head: bytes = b"") -> Callable[[str], None]:
    """Makes a file of `size` bytes, `head` then zeros, cheap to make however large (sparse)."""
    def make(where: str) -> None:
        with open(where, "wb") as handle:
            handle.write(head)
            handle.truncate(size)
    return make


def cli_rows() -> Iterator[dict]:
    return ({"id": i, "image": png(i, size=4), "label": i % 7, "tags": ["x", "y"][: i % 3]} for i in range(CLI_ROWS))


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_command(argv: list[str], path: str) -> list[str]:
    return [part.format(path=path) for part in argv]


def rewrite_table(path: str, change: Callable[[pa.Table], pa.Table]) -> None:
    """Lists `change(the latest version's shard table)` as that version's shards, in a table file of its
    own, with every count of its header (`_versions/<N>.json` and `_metadata.json`) made to agree."""
    layout, manifest = CacheLayout(path), read_metadata(path)
    table = change(manifest.shards.arrow())
    name, data = table_file(table, manifest.write_id)
    with open(layout.table(name), "wb") as handle:
        handle.write(data)
    counts = {field: sum(table.column(field).to_pylist()) for field in ("num_rows", "num_bytes")}
    with open(layout.version(manifest.version), "rb") as handle:
        header = json.load(handle)
    header.update(tables=[TableRef(name, table.num_rows, counts["num_rows"], counts["num_bytes"], len(data),
                                   checksum_of(data)).to_dict()],
                  num_shards=table.num_rows, statistics=None, **counts)
    for where in (layout.version(manifest.version), layout.manifest):
        with open(where, "w") as handle:
            json.dump(header, handle)
