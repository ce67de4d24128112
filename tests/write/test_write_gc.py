"""write_shards leaves what was alive before it out of garbage collections while it writes, and
the collector as it found it afterwards."""

from __future__ import annotations

import gc

import pytest

from beam_shards import Features, Value, write_shards

FEATURES = Features({"x": Value("int64")})


def rows(seen: list[int]):
    for i in range(5):
        seen.append(gc.get_freeze_count())
        yield {"x": i}


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_alive_before_a_write_are_frozen_during_it_and_unfrozen_after(tmp_path, unfrozen):
    seen = []
    write_shards(rows(seen), str(tmp_path / "cache"), FEATURES)
    assert min(seen) > 0 and gc.get_freeze_count() == 0


def test_a_failed_write_unfreezes_too(tmp_path, unfrozen):
    with pytest.raises(Exception, match="expected an int"):
        write_shards([{"x": 1}, {"x": "two"}], str(tmp_path / "cache"), FEATURES)
    assert gc.get_freeze_count() == 0


def test_what_the_process_froze_itself_stays_frozen_and_a_disabled_collector_untouched(tmp_path, unfrozen):
    gc.freeze()
    seen = []
    write_shards(rows(seen), str(tmp_path / "one"), FEATURES)
    assert gc.get_freeze_count() > 0 and min(seen) > 0  # not unfrozen by the write
    gc.unfreeze()
    gc.disable()
    try:
        seen = []
        write_shards(rows(seen), str(tmp_path / "two"), FEATURES)
        assert set(seen) == {0} and not gc.isenabled()
    finally:
        gc.enable()
