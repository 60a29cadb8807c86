"""One table renderer per medium: the console's (rich on a terminal, plain columns off one) and HTML's."""
from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from rich.console import Console

from spark_analysis.render import console_table, html_table, plain_lines


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


HEAD = ["cell", "n", "delay"]
ROWS = [["mode-fragmenting", "3", "148.1"], ["b", "12", "9"]]


def test_plain_lines_align_per_column_without_trailing_spaces() -> None:
    assert plain_lines(HEAD, ROWS, align="lr", title="t") == [
        "t",
        "cell               n  delay",
        "mode-fragmenting   3  148.1",
        "b                 12      9"]
    assert plain_lines(["a", "long"], [["x", "y"]]) == ["a  long", "x  y"]    # all left by default


def test_console_table_is_plain_off_a_terminal_and_rich_on_one() -> None:
    buf = io.StringIO()
    console_table(HEAD, ROWS, align="lr", title="t", stream=buf)
    assert buf.getvalue().splitlines() == plain_lines(HEAD, ROWS, align="lr", title="t")
    tty = _Tty()
    console_table(HEAD, ROWS, align="lr", console=Console(file=tty, width=60, force_terminal=True))
    drawn = tty.getvalue()
    assert "┃" in drawn or "│" in drawn                      # a rich table's rules
    assert "mode-fragmenting" in drawn and "148.1" in drawn


def test_runner_closing_table_goes_through_the_console_renderer(tmp_path) -> None:
    from tests.unit.accounting.test_accounting_check import plan_with
    from testbed.experiment import runner

    plan = plan_with({"complete": True, "lost": 0, "duplicates": 0, "late": 0, "accounting": {"ok": True}}, tmp_path)
    buf = io.StringIO()
    runner.print_table([plan], buf)
    header, row = buf.getvalue().splitlines()[:2]
    assert header.startswith("cell  rep  status") and header == header.rstrip() and row.startswith("c     1    ")
    tty = _Tty()
    runner.print_table([plan], tty)
    assert "│" in tty.getvalue() or "┃" in tty.getvalue()


def test_html_table_escapes_and_aligns() -> None:
    page = html_table(["a<b", "n"], [["x & y", "1"]], "t1")
    root = ET.fromstring(page).find("table")         # in its own scrolling box
    assert root.get("id") == "t1" and [th.text for th in root.iter("th")] == ["a<b", "n"]
    assert [td.text for td in root.iter("td")] == ["x & y", "1"] and "style" not in page
    kv = ET.fromstring(html_table(None, [["key", "value"]], row_heads=True, align="l")).find("table")
    assert kv.find("thead") is None and kv.find("tbody/tr/th").text == "key"
    assert kv.find("tbody/tr/td").get("style") == "text-align:left"
