"""machines.json: each machine's clock against the controller's, written beside a repetition's records.

The cell runner measures every machine at the start and the end of a repetition
(testbed/clockservice.py) and hands the estimates to `write_machines`. A run on
one machine has nothing to correct: no file is written, and the run directory
is exactly as before. node/clockmodel.py reads the file back.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from node.clockmodel import MACHINES_FILE
from testbed.clockoffset import ClockError, Estimate, clock_model


def write_machines(rep_dir: Path, measured: dict[str, tuple[Estimate, Estimate]],
                   problem: str = "") -> Path | None:
    """machine -> (start, end estimate) written to rep_dir/machines.json atomically; nothing (None) for
    one machine or none. Estimates that give no clock model (an end before its start), and a `problem` the
    caller met measuring (a machine that did not answer), are written as the file's `problem`, so the run is
    flagged rather than its summary lost or its times used uncorrected."""
    if len(measured) <= 1 and not problem:
        return None
    machines: dict[str, Any] = {}
    for name, (start, end) in sorted(measured.items()):
        if problem:
            break
        try:
            model = clock_model(start, end)
        except ClockError as exc:
            problem = f"machine {name}: {exc}"
            break
        machines[name] = {"offset": model.offset, "drift": model.drift, "at": model.at,
                          "uncertainty": model.uncertainty, "start": _estimate(start), "end": _estimate(end),
                          "samples": start.samples + end.samples}
    doc: dict[str, Any] = {"machines": {}, "problem": problem} if problem else {"machines": machines}
    rep_dir = Path(rep_dir)
    rep_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".machines.", suffix=".tmp", dir=rep_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, rep_dir / MACHINES_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rep_dir / MACHINES_FILE


def _estimate(e: Estimate) -> dict[str, Any]:
    return {"offset": e.offset, "uncertainty": e.uncertainty, "at": e.at, "rtt": e.rtt, "samples": e.samples}
