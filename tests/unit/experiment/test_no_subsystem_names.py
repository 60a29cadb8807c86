"""The experiment's core loops over the subsystem registry (testbed/subsystems/) and names no subsystem:
a new subsystem is its own module and one registry line, never an edit of these files."""
import re
from pathlib import Path

import pytest

from testbed.subsystems import SUBSYSTEMS

ROOT = Path(__file__).resolve().parents[3]
CORE = ("testbed/experiment/cell.py", "testbed/experiment/driver.py", "testbed/experiment/summary.py",
        "testbed/accounting/check.py")
# word starts only: "generate", "iterate" or "separate" are not rate control
NAMES = re.compile(r"\bbroker|pubsub|\brate(?=s\b|_|\b)", re.IGNORECASE)


@pytest.mark.parametrize("path", CORE)
def test_the_core_names_no_subsystem(path):
    found = [f"{path}:{n}: {line.strip()}" for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
             if NAMES.search(line)]
    assert not found, "\n".join(found)


def test_the_pattern_tells_a_subsystem_from_a_word():
    for text in ("broker.inbox", "pubsub.account", "rates.line", "rate_control", "the rate is", "Broker"):
        assert NAMES.search(text), text
    for text in ("generate", "iterate", "separate", "accurate", "rather", "rated"):
        assert not NAMES.search(text), text


def test_every_subsystem_section_is_a_scenario_section():
    from testbed.scenario.sections import SECTIONS
    for sub in SUBSYSTEMS:
        for section in sub.sections:
            assert section in SECTIONS, f"{sub.name}: {section.key} is not in the sections registry"
