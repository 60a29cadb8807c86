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


def test_clock_format():
    assert console._clock(5) == "00:05"
    assert console._clock(3725) == "1:02:05"
    assert console._clock(-3) == "00:00"
