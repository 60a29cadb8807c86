"""The commit behind every row a reproduction writes, and one sentence when the rows mix commits.

Each repetition records the checkout's short commit it ran at (experiment.json, `commit` of the rep, with
"-dirty" when the tree had changes; testbed/experiment/runner.py). A resumed figure keeps the commits of
the repetitions it skipped, so a figure finished at a later commit can hold rows of two. Every CSV in the
figure folder gets a `commit` column: a row about one repetition (columns cell and rep) names its commit;
a row about a cell (cell), or a pair of cells (of_cell, to_cell), the distinct commits of their
repetitions joined by "+"; any other row those of the whole experiment. A repetition from before commits
were recorded is "unknown". COMMITS_FILE in the figure folder says in one sentence whether they mix.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from node.natural import natural_key

COLUMN = "commit"
UNKNOWN = "unknown"
COMMITS_FILE = "commits.txt"


def rep_commits(out: Path) -> dict[tuple[str, str], str]:
    """(cell, rep) -> the commit that repetition ran at, from OUT/experiment.json."""
    try:
        doc = json.loads((Path(out) / "experiment.json").read_text())
    except (OSError, ValueError):
        return {}
    found: dict[tuple[str, str], str] = {}
    for cell in doc.get("cells", []) if isinstance(doc, dict) else []:
        if not isinstance(cell, dict):
            continue
        for rep in cell.get("reps", []):
            if isinstance(rep, dict):
                found[(str(cell.get("id", "")), str(rep.get("rep", "")))] = str(rep.get("commit") or UNKNOWN)
    return found


def _joined(values: set[str]) -> str:
    return "+".join(sorted(values)) if values else UNKNOWN


def row_commit(row: dict[str, str], commits: dict[tuple[str, str], str]) -> str:
    """The commit(s) behind one CSV row (the module's rules)."""
    cell, rep = row.get("cell"), row.get("rep")
    if cell and rep and (cell, rep) in commits:
        return commits[(cell, rep)]
    cells = {c for c in (cell, row.get("of_cell"), row.get("to_cell")) if c}
    if cells:
        own = {v for (c, _r), v in commits.items() if c in cells}
        if own:
            return _joined(own)
    return _joined(set(commits.values()))


def stamp(path: Path, commits: dict[tuple[str, str], str]) -> None:
    """Add (or refresh) the commit column of the CSV at `path`, in place."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = [c for c in (reader.fieldnames or []) if c != COLUMN]
        rows = list(reader)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*fields, COLUMN], extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({**row, COLUMN: row_commit(row, commits)})
    tmp.replace(path)


def note(commits: dict[tuple[str, str], str]) -> str:
    """One sentence: the commit every row was made at, or which repetitions ran at which commit."""
    distinct = sorted(set(commits.values()))
    if not distinct:
        return "No repetition recorded: the rows name no commit."
    if len(distinct) == 1:
        return f"Every row was produced at commit {distinct[0]}."
    parts = []
    for c in distinct:
        reps = sorted((f"{cell}/{rep}" for (cell, rep), v in commits.items() if v == c), key=natural_key)
        parts.append(f"{c} ({', '.join(reps)})")
    return (f"The rows mix {len(distinct)} commits: " + "; ".join(parts)
            + ". A row's commit column says which it rests on.")


def stamp_folder(out: Path, figure_dir: Path, since: float = 0.0) -> str:
    """Stamp every CSV in the figure folder written at `since` (epoch s) or later with the commits of the
    experiment in `out` (an older file there is another run's: left alone); write and return the note."""
    commits = rep_commits(out)
    for path in sorted(Path(figure_dir).glob("*.csv")):
        if path.stat().st_mtime >= since - 1:       # the filesystem's mtime may be coarser than time.time()
            stamp(path, commits)
    text = note(commits)
    Path(figure_dir).mkdir(parents=True, exist_ok=True)
    (Path(figure_dir) / COMMITS_FILE).write_text(text + "\n")
    return text
