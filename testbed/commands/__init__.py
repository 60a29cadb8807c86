"""One module per CLI command group; each exposes register(subparsers). Its commands' one-line help is in
COMMANDS of testbed/cli.py, which imports the module only when one of them is chosen."""
from __future__ import annotations

import argparse
from typing import Any


def examples(*commands: str) -> dict[str, Any]:
    """add_parser keywords for a help text that ends with these example command lines, kept as written."""
    return {"epilog": "examples:\n" + "\n".join(f"  {c}" for c in commands),
            "formatter_class": argparse.RawDescriptionHelpFormatter}
