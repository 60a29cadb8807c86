"""The turns between xdist workers (tests/worker_turns.py): an alone test's turn is kept for the worker's next
alone test, and handed back otherwise."""
from __future__ import annotations

import fcntl
from pathlib import Path

from tests.worker_turns import TurnFiles, Turns


def _others_can_start(files: TurnFiles) -> bool:
    """Would another worker get the shared lock now (without waiting)?"""
    with open(files.main, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


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
