"""The zip for `spark-submit --py-files`: spark_analysis plus node/schema.py and node/errors.py.

Executors import spark_analysis.pcap_parser (which raises node.errors.UserError) and the driver
checks records against node/schema.py; nothing else of the repository is needed on a cluster.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from node.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
EXTRA = ("node/__init__.py", "node/schema.py", "node/errors.py")


def members() -> list[str]:
    pkg = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "spark_analysis").rglob("*.py"))  # sections/ too
    return [*pkg, *EXTRA]


def write_bundle(out: str | Path) -> Path:
    """Write the zip (paths relative to the repository root, as Python imports them); returns its path."""
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out} is a folder: give a .zip file name.")
    if not out.parent.is_dir():
        raise UserError(f"folder {out.parent} does not exist.")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for m in members():
            z.write(ROOT / m, m)
    return out
