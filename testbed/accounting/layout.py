"""Where the repetitions are: a repetition directory, or every one below an experiment or cell directory."""
from __future__ import annotations

import os
from pathlib import Path

import yaml

SCENARIO_FILE = "scenario.yaml"
ACCEPTED_FILE = "accepted.jsonl"     # the workload driver's record of the submissions it saw accepted
EVENTS_FILE = "events.jsonl"


def is_repetition(path: Path) -> bool:
    """A run directory of one repetition: it has the nodes' records (nodes/) or a summary.json."""
    return (path / "nodes").is_dir() or (path / "summary.json").is_file()


def find_repetitions(root: Path) -> list[Path]:
    """`root` itself when it is a repetition, else every repetition below it (not below a repetition),
    sorted by cell and then by rep number."""
    root = Path(root)
    if is_repetition(root):
        return [root]
    found: list[Path] = []
    for current, dirs, _files in os.walk(root):
        here = Path(current)
        if here != root and is_repetition(here):
            found.append(here)
            dirs.clear()          # a repetition's own folders (nodes/, pcap/) hold no repetitions
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(found, key=_order)


def label(rep_dir: Path) -> str:
    """`<cell>/<rep>`, how the runner names a repetition."""
    return f"{rep_dir.parent.name}/{rep_dir.name}"


def scenario_max_late(rep_dir: Path) -> int | None:
    """The `max_late` the repetition ran with (its resolved scenario.yaml); None when absent or unreadable."""
    try:
        data = yaml.safe_load((Path(rep_dir) / SCENARIO_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    value = data.get("max_late") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _order(rep_dir: Path) -> tuple:
    name = rep_dir.name
    return (str(rep_dir.parent), int(name) if name.isdigit() else 0, name)
