"""The independent loss checker: is every accepted message copy delivered once, reported, still held, or lost?

    from testbed.accounting import check_run
    from testbed.subsystems import SUBSYSTEMS
    verdict = check_run(Path("runs/exp/mode-fragmenting/1"), SUBSYSTEMS)
    verdict.ok(max_late=None)          # False on any loss, duplicate, lost report, unreadable spool,
                                       # accepted-set mismatch, failed record write, or more late than max_late

It reads only the run directory (records and the spools the teardown left),
never the daemons, so it can be run again on any copied or half-finished run.
Modules: check (classification), verdict (the result), spools (read-only spool
reading), coverage (whether the pieces held make a whole message), reconcile
(the workload driver's accepted.jsonl against the nodes' records), records
(JSON-lines reading shared with summary.json), text (console lines), layout
(finding repetitions below a directory, file names).
"""
from testbed.accounting.check import check_run
from testbed.accounting.layout import find_repetitions, label, scenario_max_late
from testbed.accounting.text import verdict_details, verdict_line
from testbed.accounting.verdict import Pair, Place, ReportAccount, Verdict

__all__ = ["Pair", "Place", "ReportAccount", "Verdict", "check_run", "find_repetitions", "label",
           "scenario_max_late", "verdict_details", "verdict_line"]
