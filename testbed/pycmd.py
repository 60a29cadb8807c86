"""How the testbed starts a Python helper process of its own (the `up` supervisor, node daemons, the wire emulator).

`python -m X` puts the working directory first on sys.path, so a folder named `testbed` or `node` where the
user happens to stand would shadow the project (an empty one as a namespace package, which hides the
installed one). `-P` (Python 3.11+) leaves the working directory out. A child that used to find the project
only through that directory (a checkout run as `python -m testbed` without installing it) finds it through
PYTHONPATH instead: `env` puts the root of the code that is running first, so parent and child run the
same code.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# the folder holding the testbed/ and node/ packages now running (a checkout, or site-packages when installed)
ROOT = Path(__file__).resolve().parents[1]


def module_argv(module: str, *args: str) -> list[str]:
    """`python -P -m MODULE ARGS...` with this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]


def env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the project's root first on PYTHONPATH."""
    out = dict(os.environ if base is None else base)
    if ROOT.name in ("site-packages", "dist-packages"):
        return out         # an installed project: every interpreter of this venv finds it already
    parts = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), *parts])
    return out
