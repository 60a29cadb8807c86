"""The report's core walks the section registry and names no subsystem: a new section is one module in
spark_analysis/sections/ plus one line in SECTIONS, with no edit of report.py or __main__.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_analysis.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[3]
CORE = ("spark_analysis/report.py", "spark_analysis/__main__.py")

# Whole words or prefixes naming a subsystem or its section. A bare "rate" stays allowed: a link's
# configured rate is the network's own vocabulary (the link-throughput caption), not rate control's.
SUBSYSTEM_WORDS = re.compile(r"\b(broker|pub[/_ -]?sub|rates\b|rate[_ -]?control|routing|routes?\b)",
                             re.IGNORECASE)


@pytest.mark.parametrize("path", CORE)
def test_core_file_names_no_subsystem(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    found = [f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for m in SUBSYSTEM_WORDS.finditer(text)]
    assert found == []


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in ("from .pubsub import x", "t.rates", "Pub/sub", "rate_control", "the broker", "RoutingTables",
                 "rate control"):
        assert SUBSYSTEM_WORDS.search(text), text
    assert not SUBSYSTEM_WORDS.search("each with its configured rate (topology.json); separate; generated")


def test_registry_names_are_unique_and_links_have_anchors() -> None:
    names = [s.name for s in SECTIONS]
    assert len(names) == len(set(names)) and all(names)      # the keys of ReportTables.sections
    assert all(s.step for s in SECTIONS)                      # the progress line while it is built
    assert all(bool(s.anchor) == bool(s.link) for s in SECTIONS)
