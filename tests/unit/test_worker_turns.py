"""The turns between xdist workers (tests/worker_turns.py): an alone test's turn is kept for the worker's next
alone test, and handed back otherwise; the alone group is scheduled first and its turn is not raced."""
from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

from tests.worker_turns import TurnFiles, Turns, scheduling_order


def _would_get(path: Path, mode: int) -> bool:
    """Would another worker get this lock now (without waiting)?"""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def _others_can_start(files: TurnFiles) -> bool:
    return _would_get(files.main, fcntl.LOCK_SH)


def test_an_alone_turn_is_kept_for_the_next_alone_test_and_handed_back_after_the_last(tmp_path: Path) -> None:
    files = TurnFiles("t", tmp_path)
    turns = Turns(files)
    try:
        with turns.alone(keep=True):
            assert not _others_can_start(files)
        assert not _others_can_start(files)          # kept between the two: nobody slips in
        with turns.alone(keep=False):
            assert not _others_can_start(files)
        assert _others_can_start(files)
    finally:
        turns.close()


def test_a_kept_turn_is_handed_back_when_the_next_test_runs_beside_others(tmp_path: Path) -> None:
    files = TurnFiles("t", tmp_path)
    turns = Turns(files)
    try:
        with turns.alone(keep=True):
            pass
        with turns.beside_others():
            assert _others_can_start(files)
    finally:
        turns.close()


def test_the_alone_group_comes_first_then_bigger_groups_before_smaller() -> None:
    groups = [None, "b", "alone", "c", "c", "b", "alone", "c", None]
    order = scheduling_order(groups, "alone")
    assert [groups[i] for i in order] == ["alone", "alone", "c", "c", "c", "b", "b", None, None]
    assert order[:2] == [2, 6] and order[-2:] == [0, 8]           # collection order within a rank


def test_a_first_test_beside_others_waits_for_the_alone_groups_turn_to_begin(tmp_path: Path) -> None:
    files = TurnFiles("t", tmp_path)
    alone_worker, other = Turns(files), Turns(files)
    other.alone_group_first = True
    order: list[str] = []

    def run_alone() -> None:
        time.sleep(0.3)                                # the other worker asked first: without the wait it would win
        with alone_worker.alone():
            order.append("alone")
            time.sleep(0.2)

    try:
        t = threading.Thread(target=run_alone)
        t.start()
        with other.beside_others():
            order.append("beside")
        t.join()
        assert order == ["alone", "beside"]
        with other.beside_others():                    # only the first test waits
            pass
    finally:
        alone_worker.close()
        other.close()


def test_without_an_alone_group_the_first_test_does_not_wait(tmp_path: Path) -> None:
    turns = Turns(TurnFiles("t", tmp_path))
    try:
        started = time.monotonic()
        with turns.beside_others():
            pass
        assert time.monotonic() - started < Turns.FIRST_TURN_WAIT_S / 10
    finally:
        turns.close()


def test_within_a_group_modules_with_a_testbed_up_test_come_last() -> None:
    groups = ["docker", "docker", "docker", "docker", None]
    late = [True, True, False, False, False]
    order = scheduling_order(groups, "alone", late)
    assert order == [2, 3, 0, 1, 4]


def test_ungrouped_testbed_up_tests_are_spread_over_the_ungrouped_ones_not_left_to_the_end() -> None:
    groups = ["g", "g"] + [None] * 9
    late = [False, False, True, True, True] + [False] * 6
    order = scheduling_order(groups, "alone", late)
    assert order[:2] == [0, 1]
    assert order[2:] == [5, 2, 6, 7, 3, 8, 4, 9, 10]       # at 6 * k // 4 of the 6 others, all in their order
    assert sorted(order) == list(range(11))


def _up_is_free(files: TurnFiles) -> bool:
    return _would_get(files.up, fcntl.LOCK_EX)


def test_the_up_lock_is_kept_across_a_module_and_a_kept_turn_is_handed_back_before_waiting_for_it(
        tmp_path: Path) -> None:
    files = TurnFiles("t", tmp_path)
    turns = Turns(files)
    try:
        with turns.network(keep=True):
            assert not _up_is_free(files)
        assert not _up_is_free(files)                   # the module's network outlives its first test
        with turns.network(keep=False):
            pass
        assert _up_is_free(files)
        with turns.alone(keep=True):
            pass
        assert not _others_can_start(files)
        # The next test needs `up`: the kept turn goes back first (lock order: `up`, then the turn), so that a
        # worker holding `up` and waiting for its turn cannot wait on us.
        with turns.network():
            assert _others_can_start(files)
            with turns.alone():
                assert not _others_can_start(files)
        assert _others_can_start(files) and _up_is_free(files)
    finally:
        turns.close()
