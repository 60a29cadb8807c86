"""The progress display: plain lines when not on a terminal, rich panel on one."""
from __future__ import annotations

import io

from testbed.experiment import console


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_when_not_a_terminal():
    buf = io.StringIO()
    p = console.make_progress(buf)
    assert isinstance(p, console.PlainProgress)
    p.phase("mode-fragmenting", 1, "workload")
    p.tick(1.0, 8.0, 3, 1)          # first tick of a phase prints
    p.tick(2.0, 8.0, 5, 2)          # then at most one per TICK_EVERY seconds
    p.event("kill n3")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].endswith("[mode-fragmenting rep 1] workload")
    assert "00:01/00:08 submitted 3 delivered 1" in lines[1]
    assert lines[2].endswith("[mode-fragmenting rep 1] kill n3")


def test_rich_progress_on_a_terminal_renders_and_closes():
    buf = FakeTTY()
    p = console.make_progress(buf)
    assert isinstance(p, console.RichProgress)
    p.phase("mode-non-fragmenting", 2, "drain")
    p.tick(5.0, 20.0, 40, 38)
    p.event("drain ended")
    p.close()
    p.close()                        # idempotent: the runner and the CLI may both close it
    assert "drain ended" in buf.getvalue()


def test_a_sweep_shows_one_bar_of_repetitions_with_an_eta():
    buf = FakeTTY()
    p = console.make_progress(buf)
    p.repetitions(3, 4)                                   # one repetition was complete already (--resume)
    p.phase("mode-fragmenting", 1, "workload")
    p.phase("mode-fragmenting", 1, "teardown")            # phases of one repetition: still the first
    p.phase("mode-non-fragmenting", 1, "workload")
    p.tick(2.0, 8.0, 12, 9)
    [task] = p.bar.tasks                                   # one bar, counting repetitions, not phases
    assert (task.completed, task.total) == (1, 3)
    p.bar.refresh()
    frame = buf.getvalue()
    assert "rep 2/3" in frame and "ETA" in frame and "1 of 4 repetitions complete already" in frame
    p.close()


def test_plain_progress_counts_repetitions():
    buf = io.StringIO()
    p = console.make_progress(buf)
    p.repetitions(2, 2)
    p.phase("a", 1, "building")
    p.phase("a", 1, "workload")
    p.phase("b", 1, "building")
    lines = [l.split(" ", 1)[1] for l in buf.getvalue().splitlines()]
    assert [l for l in lines if l.startswith(("repetition", "2 repetition"))] == [
        "2 repetition(s) to run", "repetition 1/2: a rep 1", "repetition 2/2: b rep 1"]


def test_clock_format():
    assert console._clock(5) == "00:05"
    assert console._clock(3725) == "1:02:05"
    assert console._clock(-3) == "00:00"
