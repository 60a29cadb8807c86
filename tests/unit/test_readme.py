"""The README as users read it: its sample of `testbed run`'s closing table has the columns the runner prints,
its table of contents reaches every section in the documented order, its links to headings (and those of
docs/*.md) resolve, and no page speaks of the project's history or of one machine."""
from __future__ import annotations

import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters of any script kept), spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every heading outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.+)", line)):
            out.append((len(m.group(1)), m.group(2)))
    return out


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    for _, h in _headings(text):
        s = _slug(h)
        seen[s] = seen.get(s, -1) + 1
    return {s if n == 0 else f"{s}-{n}" for s, n in seen.items() for n in range(n + 1)}


def test_quickstart_sample_has_the_columns_the_runner_prints(tmp_path) -> None:
    from tests.unit.accounting.test_accounting_check import plan_with
    from testbed.experiment import runner

    quick = README.read_text().split("### `make run`", 1)[1]
    block = re.search(r"```\n(cell .*?)```", quick, re.S)
    assert block, "no sample of the closing table (a code block starting with 'cell') under `make run`"
    head, *rows = block.group(1).strip().splitlines()
    buf = io.StringIO()                          # not a terminal: the plain columns the README shows
    runner.print_table([plan_with({"complete": True, "lost": 0, "duplicates": 0, "late": 0,
                                   "accounting": {"ok": True}}, tmp_path)], buf)
    printed = buf.getvalue().splitlines()[0]
    assert head.split() == printed.split()
    assert rows and all(len(r.split()) == len(head.split()) for r in rows), rows


def test_contents_reach_every_section_in_order_and_links_resolve() -> None:
    text = README.read_text()
    sections = [h for level, h in _headings(text) if level == 2 and h != "Contents"]
    toc = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    top = re.findall(r"^- \[(.+?)\]\(#(.+?)\)$", toc, re.M)
    assert [t for t, _ in top] == sections and all(a == _slug(t) for t, a in top), top
    order = ["Requirements", "Quick start", "Commands", "`testbed run`", "Scenario reference", "Reproductions",
             "Architecture"]
    assert [sections.index(s) for s in order] == sorted(sections.index(s) for s in order), sections
    pages = {README: text, **{d: d.read_text() for d in DOCS}}
    for page, body in pages.items():
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)", body):
            dest = (page.parent / target).resolve() if target else page
            assert dest in pages and anchor in _anchors(pages[dest]), f"{page.name}: broken link {target}#{anchor}"


def test_no_page_speaks_of_history_or_of_one_machine() -> None:
    words = ["this machine lacks", "the behaviour before this", "Later issues", "development machine",
             "as before", "used to be", "not measured yet", "as today"]
    tracker = re.compile(r"\bissues? #?\d", re.IGNORECASE)      # a user's clone has no issue tracker
    for page in [README, ROOT / "Makefile", *DOCS]:
        body = page.read_text()
        found = [w for w in words if w.lower() in body.lower()] + tracker.findall(body)
        assert not found, (page.name, found)
