"""Fixtures of the robustness suites: the reliability tally, and small caches for the hostile inputs to craft."""

from __future__ import annotations

import pytest
from PIL import Image as PILImage

from beam_shards import write_shards

from _hostile import CLI_FEATURES, IMAGE_FEATURES, cli_rows, forged_png
from _reliability import Tally, print_uncaptured


@pytest.fixture(scope="module")
def tally(request) -> Tally:
    """A tally for one test module, printed when the module finishes."""
    result = Tally()
    yield result
    print_uncaptured(request, result.lines())


@pytest.fixture
def bomb_cache(tmp_path, monkeypatch) -> str:
    """A cache holding a decompression bomb, written while Pillow's pixel limit was lifted."""
    path = str(tmp_path / "bomb")
    with monkeypatch.context() as unlimited:
        unlimited.setattr(PILImage, "MAX_IMAGE_PIXELS", None)
        write_shards([{"image": forged_png(100_000, 100_000)}], path, IMAGE_FEATURES)
    return path


@pytest.fixture
def cli_cache(tmp_path) -> str:
    """A small cache with label columns, written afresh for each test to craft."""
    path = str(tmp_path / "cache")
    write_shards(cli_rows(), path, CLI_FEATURES, max_rows_per_shard=5)
    return path
