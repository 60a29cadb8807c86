"""One module per CLI command group; each exposes register(subparsers)."""
from __future__ import annotations

import argparse
from typing import Any


def examples(*commands: str) -> dict[str, Any]:
    """add_parser keywords for a help text that ends with these example command lines, kept as written."""
    return {"epilog": "examples:\n" + "\n".join(f"  {c}" for c in commands),
            "formatter_class": argparse.RawDescriptionHelpFormatter}
