"""Tables for people, one renderer per medium: `console_table` for a console (a rich table on a terminal,
plain aligned columns at full width off one: a pipe, a log file or a test's buffer gets nothing folded into
80 columns) and `html_table` for report.html. The report and the testbed's commands show their tables
through these; both take the cells as text, so each caller formats its values once.

Here rather than in testbed/ because the report runs on a Spark driver with only spark_analysis (and
node/errors.py, node/schema.py) shipped to it; the testbed imports it from here.
"""
from __future__ import annotations

import html
from typing import Sequence, TextIO

from rich.console import Console


def _aligns(n: int, align: str) -> str:
    """One 'l' or 'r' per column: `align` as given, its last letter repeated (every column left when "")."""
    align = align or "l"
    return (align + align[-1] * n)[:n]


def plain_lines(head: Sequence[str], rows: Sequence[Sequence[str]], align: str = "", title: str = "") -> list[str]:
    """The table as plain lines, columns two spaces apart, each as wide as its widest cell; `align` per column
    ('l' left, 'r' right; the last letter holds for the columns after it); no trailing spaces."""
    rows = [list(map(str, r)) for r in rows]
    head = list(map(str, head))
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    aligns = _aligns(len(widths), align)

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w)
                         for c, w, a in zip(cells, widths, aligns)).rstrip()
    return ([title] if title else []) + [line(head)] + [line(r) for r in rows]


def console_table(head: Sequence[str], rows: Sequence[Sequence[str]], align: str = "", title: str = "",
                  console: Console | None = None, stream: TextIO | None = None) -> None:
    """Print the table: a rich table when the console is a terminal, else plain_lines(). The console is
    `console`, else one on `stream`, else one on standard output."""
    console = console or Console(file=stream)
    if console.is_terminal:
        from rich.table import Table

        table = Table(title=title or None)
        for c, a in zip(head, _aligns(len(head), align)):
            table.add_column(str(c), justify="right" if a == "r" else "left", overflow="fold")
        for r in rows:
            table.add_row(*map(str, r))
        console.print(table)
        return
    out = console.file
    for line in plain_lines(head, rows, align, title):
        print(line, file=out)


def html_table(head: Sequence[str] | None, rows: Sequence[Sequence[str]], table_id: str = "",
               row_heads: bool = False, align: str = "") -> str:
    """An HTML <table> of text cells (escaped here) in a <div class="wide"> (a table wider than the window
    scrolls on its own, not the whole page); no <thead> when `head` is None; `row_heads`: each row's first
    cell is a <th>; `align` as in plain_lines, where 'l' sets a left-aligned cell (the page's style aligns
    cells right)."""
    n = max([len(head or [])] + [len(r) for r in rows]) if rows or head else 0
    aligns = _aligns(n, align) if align else "r" * n

    def cell(i: int, v: str) -> str:
        tag = "th" if row_heads and i == 0 else "td"
        style = ' style="text-align:left"' if aligns[i] == "l" and tag == "td" else ""
        return f"<{tag}{style}>{html.escape(str(v))}</{tag}>"
    thead = "<thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in head) + "</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(cell(i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    ident = f' id="{html.escape(table_id)}"' if table_id else ""
    return f'<div class="wide"><table{ident}>{thead}<tbody>{body}</tbody></table></div>'
