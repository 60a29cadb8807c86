"""What a report section is: the tables it computes from the runs, the tables it writes, its HTML.

The report walks the registry (spark_analysis/sections/__init__.py) in order: `__main__` builds each
section that is `wanted` for the runs, `report.write` writes each section's `tables` and puts its
`html` into report.html. A section overrides only the hooks it needs; the defaults compute nothing,
write nothing and show nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from ..layout import Run, RunTimeline


def empty_table(columns: list[str]) -> pd.DataFrame:
    """A table with these columns and no rows: what a section shows for runs without its records."""
    return pd.DataFrame(columns=columns)


@dataclass(frozen=True)
class RunData:
    """What a section may read while it is built: the runs and the report's shared Spark tables."""
    spark: Any                  # the SparkSession
    runs: list[Run]
    submissions: Any            # Spark DataFrame: the schema-checked submission records (records.read)
    deliveries: Any             # Spark DataFrame: one row per delivered copy (compare.unique_deliveries)


@dataclass(frozen=True)
class Page:
    """How a section renders into report.html, as the rest of the page does."""
    table: Callable[[pd.DataFrame, str], str]       # (table, HTML id) -> <table>
    figure: Callable[[Any, str, str], str]          # (matplotlib figure, file name, alt) -> <img>; saved beside
    # (cell, rep) -> the run's phases and faults, for a section's time plots (plots.mark_runs)
    timelines: dict[tuple[str, str], RunTimeline] = field(default_factory=dict)


class Section:
    """One section of the report. What `build` returns is kept by the report under `name` and handed back
    to `tables` and `html` (None when the section was not built): sections hold no state of their own."""
    name: str = ""              # key in ReportTables.sections
    anchor: str = ""            # HTML id of its heading: the page's list of sections links there
    link: str = ""              # the words of that link (shown when the section's HTML is not empty)
    step: str = ""              # the progress line while it is built
    # What its records are called when they make a report on their own, without any submission or
    # delivery record ("" when they do not); `has_records` says whether the runs have them.
    alone: str = ""

    def wanted(self, runs: list[Run]) -> bool:
        """Whether to build the section for these runs at all (no progress step when not)."""
        return True

    def has_records(self, runs: list[Run]) -> bool:
        return False

    def build(self, data: RunData) -> Any:
        return None

    def tables(self, built: Any) -> dict[str, pd.DataFrame]:
        """Tables to write beside report.html (CSV) and in tables/ (Parquet), by file name."""
        return {}

    def html(self, built: Any, page: Page) -> str:
        """The section's part of report.html, heading included; "" for none."""
        return ""
