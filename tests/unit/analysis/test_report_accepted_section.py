"""The report's Accepted set section: the driver's accepted set against the nodes', from summary.json."""
from __future__ import annotations

from pathlib import Path

from spark_analysis.layout import Run
from spark_analysis.report import _table
from spark_analysis.sections import SECTIONS, accepted


def run(rep: str, client: dict | None, failed: dict | None = None) -> Run:
    acc = {"client": client} if client is not None else {}
    return Run(Path("/nowhere") / rep, "c", rep, summary={"accounting": acc, "records_failed": failed})


def client(accepted_: int, reconciled: int, client_only: int = 0, problem: str = "") -> dict:
    return {"present": True, "accepted": accepted_, "reconciled": reconciled, "client_only": client_only,
            "node_only": 0, "unanswered": 0, "problem": problem}


def test_one_row_per_run_with_the_drivers_record_and_a_verdict() -> None:
    runs = [run("1", client(10, 10), {"n1": 0, "n2": 0}), run("2", client(5, 4, client_only=1), {"n1": 2}),
            run("3", None)]                              # from before the driver kept the record: no row
    assert accepted.SECTION in SECTIONS and accepted.SECTION.wanted(runs)
    table = accepted.build(runs)
    assert table[["rep", "accepted", "reconciled", "client_only", "records_failed"]].values.tolist() == [
        ["1", 10, 10, 0, 0], ["2", 5, 4, 1, 2]]
    text = accepted.section_html(table, _table)
    assert 'id="accepted"' in text and "1 of 2 runs disagree" in text
    assert "All 1 runs agree: 10 of 10 accepted copies reconciled." in accepted.section_html(table[:1], _table)


def test_runs_without_the_record_show_nothing() -> None:
    runs = [run("1", None), run("2", {"present": False})]
    assert not accepted.SECTION.wanted(runs) and accepted.build(runs).empty
    assert accepted.SECTION.html(accepted.build(runs), None) == ""
