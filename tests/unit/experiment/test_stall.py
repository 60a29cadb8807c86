"""testbed/accounting/stall.py: nothing delivered for stall_after while copies are held = stalled."""
from __future__ import annotations

import pytest

from testbed.accounting import stall

pytestmark = pytest.mark.timeout(10)

WHERE = {"n1": {"queued": 4}, "n2": {"queued": 4}}


def test_silent_to_the_end_with_copies_held_is_stalled() -> None:
    s = stall.stall([101.0, 105.0], start=100.0, end=130.0, stall_after=20.0, held=8, held_where=WHERE)
    assert s["stalled"] is True
    assert (s["since_model_s"], s["silent_model_s"], s["held"]) == (5.0, 25.0, 8)
    assert s["held_where"] == WHERE
    assert "STALLED" in stall.text(s) and "n1, n2" in stall.text(s) and "not lost" in stall.text(s)


def test_nothing_held_is_never_stalled() -> None:
    """A network that delivered everything and then idled is finished, not stalled."""
    s = stall.stall([101.0], start=100.0, end=500.0, stall_after=20.0, held=0)
    assert s["stalled"] is False and s["held_where"] == {} and stall.text(s) == ""


def test_a_recent_delivery_is_not_a_stall() -> None:
    s = stall.stall([101.0, 125.0], start=100.0, end=130.0, stall_after=20.0, held=3, held_where=WHERE)
    assert s["stalled"] is False and s["silent_model_s"] == 5.0


def test_no_delivery_at_all_counts_from_the_workload_start() -> None:
    s = stall.stall([], start=100.0, end=125.0, stall_after=20.0, held=16)
    assert s["stalled"] is True and s["since_model_s"] == 0.0 and s["silent_model_s"] == 25.0


def test_model_seconds_are_wall_over_time_scale() -> None:
    s = stall.stall([110.0], start=100.0, end=150.0, stall_after=30.0, held=1, time_scale=0.1)
    assert s["stalled"] is True
    assert (s["since_model_s"], s["silent_model_s"], s["stall_after_model_s"]) == (100.0, 400.0, 300.0)


def test_deliveries_after_the_end_and_before_the_start_do_not_count() -> None:
    s = stall.stall([90.0, 200.0], start=100.0, end=130.0, stall_after=20.0, held=1)
    assert s["stalled"] is True and s["since_model_s"] == 0.0


def test_the_final_table_and_its_warnings_show_a_stall(tmp_path) -> None:
    """A stalled rep is late, not failing: the table says STALLED and a warning says why."""
    import io

    from tests.unit.accounting.test_accounting_check import plan_with
    from testbed.experiment import runner

    info = stall.stall([], start=0.0, end=30.0, stall_after=10.0, held=16, held_where=WHERE)
    doc = {"complete": True, "lost": 0, "duplicates": 0, "late": 16, "accounting": {"ok": True},
           "stalled": True, "stall": info}
    buf = io.StringIO()
    assert runner.print_table([plan_with(doc, tmp_path)], buf) is False
    header, row = buf.getvalue().splitlines()[:2]
    assert "stalled" in header and "STALLED" in row
    assert any(line.startswith("warning: c/1: STALLED") for line in buf.getvalue().splitlines())
    assert runner.table_rows([plan_with({"complete": True}, tmp_path)])[0]["stalled"] == "-"     # older summary
