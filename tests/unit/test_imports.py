"""Every module of node/, testbed/ and spark_analysis/ imports on its own, in a fresh interpreter.

An import cycle can work in one import order and fail in another, so each module
gets an interpreter of its own (`python -c "import X"`). The node daemon runs
without the testbed: importing any node module must not load a testbed module.
The generated gRPC stubs in node/rpc/ are included (`make setup` generates them).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "testbed", "spark_analysis")
TIMEOUT = 60.0          # seconds for one module's import (pyspark and pandas take ~1 s)

# Imports X, then prints the testbed modules it loaded as one JSON line.
PROBE = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
         "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'testbed')))")


def project_modules() -> list[str]:
    """Dotted names of every module in PACKAGES (a `__main__` would run its command, so it is left out)."""
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "__main__.py" or "__pycache__" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


MODULES = project_modules()


def import_alone(module: str) -> tuple[str, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the repository and the venv only
    return module, subprocess.run([sys.executable, "-c", PROBE, module], cwd=REPO, env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def imported() -> dict[str, subprocess.CompletedProcess]:
    # The interpreters are independent, so a few run at once (most of the time is interpreter start-up).
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return dict(pool.map(import_alone, MODULES))


def test_the_module_list_covers_the_packages() -> None:
    assert {"node", "node.config", "node.rpc", "testbed.network", "testbed.netstate", "testbed.scenario.loader",
            "spark_analysis"} <= set(MODULES)
    assert not any(m.endswith("__main__") for m in MODULES)


def test_every_module_imports_alone(imported: dict[str, subprocess.CompletedProcess]) -> None:
    failed = {m: (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
              for m, r in imported.items() if r.returncode != 0}
    assert failed == {}


def test_node_modules_load_no_testbed_module(imported: dict[str, subprocess.CompletedProcess]) -> None:
    leaks = {}
    for module, r in imported.items():
        if module.split(".")[0] != "node" or r.returncode != 0:
            continue
        loaded = json.loads(r.stdout.strip().splitlines()[-1])
        if loaded:
            leaks[module] = loaded
    assert leaks == {}
