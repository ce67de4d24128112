"""`Later`: calls run on the writer's worker threads, their results and errors taken later."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from beam_shards.shards.later import Later


def _where() -> str:
    return threading.current_thread().name


def test_a_threaded_call_runs_on_a_worker_and_an_unthreaded_one_where_it_is_made():
    assert Later(_where, threaded=True).result().startswith("beam_shards-later")
    assert Later(_where, threaded=False).result() == threading.current_thread().name


@pytest.mark.parametrize("threaded", [True, False])
def test_an_error_is_raised_by_result_not_where_the_call_is_made(threaded):
    later = Later(int, "not a number", threaded=threaded)
    with pytest.raises(ValueError, match="not a number"):
        later.result()


def _in_child(queue: multiprocessing.Queue) -> None:
    queue.put(Later(sum, [1, 2], threaded=True).result())


@pytest.mark.timeout(60)
def test_a_forked_child_gets_workers_of_its_own():
    assert Later(sum, [1], threaded=True).result() == 1  # the parent's workers exist before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    assert queue.get(timeout=30) == 3
    child.join(30)
    assert child.exitcode == 0
