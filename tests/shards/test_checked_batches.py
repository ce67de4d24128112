"""Batches of plain rows are checked on a thread while the next batch is gathered: what is
written, refused and reported must be what checking each row where it is built gives."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest
from test_plain_rows import PLAIN, encoded_table, plain_example, write
from test_writer import Shards

from beam_shards import EncodeError, Features, ShardWriter, WriterOptions
from beam_shards.shards import plain_rows

from _support import jpeg

ROWS = plain_rows.THREADED_ROWS + 40  # batches large enough to be checked on a thread
PLAIN_EMBEDDING = list(PLAIN).index("embedding")


def test_batches_checked_on_a_thread_are_written_in_order(monkeypatch):
    threads = []
    check = Features.check_plain
    monkeypatch.setattr(Features, "check_plain",
                        lambda self, batch: (threads.append(threading.current_thread().name), check(self, batch))[1])
    examples = [plain_example(i) for i in range(3 * ROWS)]
    table, _ = write(examples, batch_size=ROWS)
    assert len(threads) == 3 and all(name.startswith("beam_shards-later") for name in threads)
    assert table.equals(encoded_table(examples))


@pytest.mark.parametrize("field, value", [("image", jpeg(1)[:-300]), ("label", 10), ("image", b"not an image")])
def test_a_bad_value_in_a_batch_checked_on_a_thread_gets_the_per_row_error(field, value):
    examples = [plain_example(i) for i in range(2 * ROWS)]
    examples[ROWS + 7][field] = value
    with pytest.raises(EncodeError) as expected:
        PLAIN.encode_values(examples[ROWS + 7], ROWS + 7)
    with pytest.raises(EncodeError) as caught:
        write(examples, batch_size=ROWS)
    assert str(caught.value) == str(expected.value) and caught.value.example == ROWS + 7
    skipped = []
    table, _ = write(examples, on_bad=lambda e, key, error: skipped.append((key, e is examples[key], str(error))),
                     batch_size=ROWS)
    assert skipped == [(ROWS + 7, True, str(expected.value))]
    kept = [e for i, e in enumerate(examples) if i != ROWS + 7]
    assert table.equals(encoded_table(kept))


def test_a_failed_check_keeps_the_rows_encoded_when_added():
    examples = [plain_example(i) for i in range(ROWS)]
    examples[3]["id"] = np.int64(3)  # not plain: encoded when added, kept as encoded
    examples[9]["image"] = jpeg(2)[:-100]
    skipped = []
    table, _ = write(examples, on_bad=lambda e, key, error: skipped.append(key), batch_size=ROWS)
    assert skipped == [9]
    assert table.equals(encoded_table(examples[:9] + examples[10:]))


def test_an_unkeyed_bad_example_of_a_checked_batch_is_named_by_its_first_fields():
    examples = [plain_example(i) for i in range(ROWS)]
    examples[ROWS - 2]["image"] = b"\xff\xd8\xff broken"
    with pytest.raises(EncodeError, match=rf"'id': {ROWS - 2}, 'small': "):
        write(examples, keys=[None] * ROWS, batch_size=ROWS)


def test_an_array_over_the_memory_of_bytes_is_kept_and_a_writable_one_copied():
    immutable = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32)
    writable = np.arange(4, dtype=np.float32)
    kept = PLAIN.plain_values({**plain_example(0), "embedding": immutable})
    copied = PLAIN.plain_values({**plain_example(0), "embedding": writable})
    assert kept[PLAIN_EMBEDDING] is immutable
    assert copied[PLAIN_EMBEDDING] is not writable and np.array_equal(copied[PLAIN_EMBEDDING], writable)
    view = np.frombuffer(bytearray(16), np.float32)  # over a bytearray: its memory may change
    assert PLAIN.plain_values({**plain_example(0), "embedding": view})[PLAIN_EMBEDDING] is not view


def test_a_write_aborted_while_a_batch_is_checked_writes_nothing_more():
    shards = Shards()
    writer = ShardWriter(PLAIN, shards, WriterOptions(batch_size=ROWS))
    for i in range(ROWS + 1):  # one batch built and being checked, one row buffered
        writer.add(plain_example(i), i)
    writer.abort()
    assert shards.streams == [] and writer.shards == []



def arrow_batch(examples: list) -> pa.RecordBatch:
    return PLAIN.build_batch([PLAIN.encode_example(e) for e in examples])


def test_batches_encoded_on_a_thread_keep_their_place_among_dict_rows():
    examples = [plain_example(i) for i in range(4 * ROWS)]
    shards = Shards()
    writer = ShardWriter(PLAIN, shards, WriterOptions(batch_size=ROWS))
    writer.add(arrow_batch(examples[:ROWS]), "a")
    writer.add(arrow_batch(examples[ROWS:2 * ROWS]), "b")  # encoded while "a" is written
    for i in range(2 * ROWS, 3 * ROWS):
        writer.add(examples[i], i)
    writer.add(arrow_batch(examples[3 * ROWS:]), "c")
    writer.close()
    batches = [b for i in range(len(shards.streams)) for b in shards.batches(i)]
    assert pa.Table.from_batches(batches).equals(encoded_table(examples))


def test_a_bad_batch_encoded_on_a_thread_gets_its_error_from_the_next_add_or_close():
    examples = [plain_example(i) for i in range(ROWS)]
    bad = arrow_batch(examples).set_column(list(PLAIN).index("label"), "label", pa.array([3] * (ROWS - 1) + [10]))
    with pytest.raises(EncodeError) as expected:
        PLAIN.encode_batch(bad, "bad")
    assert expected.value.row == ROWS - 1
    for then in ("add", "close"):
        writer = ShardWriter(PLAIN, Shards(), WriterOptions(batch_size=ROWS))
        assert writer.add(bad, "bad") == ROWS  # encoded on a thread: counted until then
        with pytest.raises(EncodeError) as caught:
            writer.add(plain_example(0), 0) if then == "add" else writer.close()
        assert str(caught.value) == str(expected.value)


def test_a_bad_batch_encoded_on_a_thread_goes_to_on_bad_row_by_row():
    examples = [plain_example(i) for i in range(ROWS)]
    bad = arrow_batch(examples).set_column(list(PLAIN).index("label"), "label", pa.array([3] * (ROWS - 1) + [10]))
    skipped = []
    shards = Shards()
    writer = ShardWriter(PLAIN, shards, WriterOptions(batch_size=ROWS),
                         lambda example, key, error: skipped.append(key))
    writer.add(bad, "bad")
    writer.close()
    assert skipped == [("bad", ROWS - 1)]
    assert sum(b.num_rows for i in range(len(shards.streams)) for b in shards.batches(i)) == ROWS - 1
