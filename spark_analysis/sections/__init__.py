"""The report's sections after its core tables, in the order report.html shows them.

A new section is one module here exporting a `Section` (see base.py) and one line in SECTIONS; the report
(spark_analysis/__main__.py builds, report.py writes) walks this registry and needs no change.
"""
from __future__ import annotations

from . import accepted, gateway, pools, pubsub, rates, routing
from .base import Page, RunData, Section

SECTIONS: tuple[Section, ...] = (
    accepted.SECTION,
    routing.SECTION,
    pubsub.SECTION,
    rates.SECTION,
    gateway.SECTION,
    pools.SECTION,
)

__all__ = ["SECTIONS", "Page", "RunData", "Section"]
