"""Every module of node/, testbed/ and spark_analysis/ imports on its own, with no import cycle, and no
import crosses a wall the architecture draws.

An import cycle can work in one import order and fail in another, so each module is imported with no other
project module loaded (a child forked from an interpreter that loaded only third-party packages). The node daemon runs without the testbed: importing any node module must
not load a testbed module. The generated gRPC stubs in node/rpc/ are included (`make setup` generates them).

Cycles are found in the source, not at run time, so that an import inside a function or under
`if TYPE_CHECKING:` counts as much as one at the top (it is the same dependency, only deferred). Every
module is parsed with `ast`; every `import` statement anywhere in it is an edge to a project module:
- `import a.b.c` and `from a.b import c` where a/b/c.py (or a/b/c/) exists: an edge to `a.b.c`;
  `from a.b import name` where `name` is not a submodule: an edge to `a.b`;
- an edge to a package is an edge to its `__init__`;
- importing `a.b.c` also runs the `__init__` of `a` and `a.b` when they are not loaded yet, and an
  `__init__` that imports the world (a re-export of a loader, say) makes that a real dependency: so it is
  also an edge to each package above the target that does NOT hold the importer. A package that holds
  the importer is already initialised, or initialising, when the importer runs, so its `__init__` gets
  no edge: a package whose `__init__` re-exports its submodules is not a cycle by itself, while
  `from a.b import X` inside `a.b.c` (X defined in the `__init__`) is still the edge `a.b.c -> a.b`.
Relative imports are resolved against the importing module's package.

Walls: a node module imports no testbed and no spark_analysis module (the node runs alone); an analysis
module imports no testbed module (the analysis reads run directories: what both sides need of one, the record
schema or the clock model, lives in node/), save the report command's topology page, which is the dashboard's
(`ANALYSIS_MAY_IMPORT`); and a
module of testbed/commands/ takes no private name (a leading `_`) of another module, neither by
`from X import _name` nor as `X._name` (a command uses what a module offers, not its insides).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "testbed", "spark_analysis")
TIMEOUT = 60.0          # seconds for one module's import (pyspark and pandas take ~1 s)

# One process per module would pay the interpreter's start and the third-party imports (grpc, pyspark, pandas)
# hundreds of times. A zygote imports those once, and no project module, then forks one child per module: each
# child starts with no module of node/, testbed/ or spark_analysis/ loaded, as a fresh interpreter would, imports
# its module and reports the testbed modules that came with it (or the traceback) through a pipe.
# A child compiles what no earlier child left in the bytecode cache (tests/conftest.py keeps one for the session
# when PYTHONDONTWRITEBYTECODE is set): compiling the project from source in every child costs more than the
# imports themselves.
ZYGOTE = r"""
import importlib, json, os, select, signal, sys, time, traceback
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
# the children share the zygote's objects copy-on-write: a collection in a child would walk (and so copy) them all
import gc
gc.freeze()
timeout = float(sys.argv[1])
for line in sys.stdin:
    module = line.strip()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        gc.disable()
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)      # a module's own prints must not mix with the report
        try:
            importlib.import_module(module)
            res = {"rc": 0, "out": json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "testbed")),
                   "err": ""}
        except BaseException:
            res = {"rc": 1, "out": "", "err": traceback.format_exc()}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(res))
        os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(r) as f:
        while time.monotonic() < deadline and select.select([f], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    data = b"".join(chunks)
    res = json.loads(data) if data else {"rc": 1, "out": "", "err": f"importing {module} did not finish"}
    print(json.dumps({"module": module, **res}), flush=True)
"""


def source_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every .py in PACKAGES (a package's name is its __init__)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def project_modules() -> list[str]:
    """Dotted names of every module in PACKAGES (a `__main__` would run its command, so it is left out)."""
    return [m for m in source_files() if not m.endswith("__main__")]


MODULES = project_modules()


def third_party_modules() -> list[str]:
    """The modules the project's modules import that are not the project's own, and the names they take from
    them that may be submodules (what the zygote loads)."""
    names = set()
    for path in source_files().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
                # `from scipy import stats` loads a submodule the package's own import does not: each child
                # would pay for it again (names that are no module fail in the zygote, which ignores them)
                names.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
    return sorted(n for n in names if n.split(".")[0] not in (*PACKAGES, "__future__"))


def import_each(modules: list[str], third_party: list[str],
                root: Path = REPO) -> dict[str, subprocess.CompletedProcess]:
    """Import each of `modules` (found under `root`) in a child of its own with only `third_party` loaded."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the repository and the venv only
    r = subprocess.run([sys.executable, "-c", ZYGOTE, str(TIMEOUT), *third_party],
                       input="\n".join(modules) + "\n", cwd=root, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT * len(modules))
    out = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        out[rec["module"]] = subprocess.CompletedProcess([rec["module"]], rec["rc"], rec["out"], rec["err"])
    missing = [m for m in modules if m not in out]
    assert not missing, f"the import probe ended early ({r.returncode}): {r.stderr.strip()[-2000:]}"
    return out


@pytest.fixture(scope="module")
def imported() -> dict[str, subprocess.CompletedProcess]:
    # two zygotes share the modules: most of a child's time is its own imports
    third_party = third_party_modules()
    halves = [MODULES[i::2] for i in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda ms: import_each(ms, third_party), halves))
    return {m: r for part in results for m, r in part.items()}


def test_a_module_that_imports_only_after_another_fails(tmp_path: Path) -> None:
    # `a` reaches `pkg.b` through the package without importing it: in one interpreter that imported `b` first
    # (the order below) it would import; each in a fresh child it must not, and the bytecode cache `b` leaves
    # behind must not change that
    pkg = tmp_path / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "b.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("import pkg\nY = pkg.b.X\n")
    results = import_each(["pkg.b", "pkg.a", "pkg.b"], [], root=tmp_path / "src")
    assert results["pkg.b"].returncode == 0
    assert results["pkg.a"].returncode == 1 and "has no attribute 'b'" in results["pkg.a"].stderr


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


# --- the module graph, from the source -------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    source: str         # the importing module
    target: str         # the module imported (`from` imports: read from), as an absolute dotted name
    names: tuple[str, ...]  # the names a `from` import takes (empty for `import x`)
    where: str          # path:line, for the message


def _from_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute dotted name a `from ... import` reads from (relative ones against the module's package)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def imports_in(module: str, path: Path, source: str | None = None) -> list[Import]:
    """Every import statement of the module (or of `source` placed at `path`), wherever it stands: top level,
    function, `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    rel = path.relative_to(REPO)
    out = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            out += [Import(module, alias.name, (), where) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(Import(module, _from_base(module, path, node), tuple(a.name for a in node.names), where))
    return out


def _longest_module(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return None


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str


def _ancestors_run(source: str, target: str, modules: dict[str, Path]) -> list[str]:
    """The packages above `target` whose `__init__` importing it may run: those not holding `source`
    (a package holding the importer is already initialised or initialising when the importer runs)."""
    parts = target.split(".")
    out = []
    for n in range(1, len(parts)):
        package = ".".join(parts[:n])
        if package in modules and not (source == package or source.startswith(package + ".")):
            out.append(package)
    return out


def edges_of(imp: Import, modules: dict[str, Path]) -> list[Edge]:
    """The graph edges of one import statement, by the rule in the module docstring."""
    targets: list[str] = []
    found = [imp.target] if not imp.names else [f"{imp.target}.{n}" for n in imp.names]
    for name in found:
        target = name if name in modules else _longest_module(imp.target, modules)
        if target is not None:
            targets += [*_ancestors_run(imp.source, target, modules), target]
    return [Edge(imp.source, t, imp.where) for t in dict.fromkeys(targets) if t != imp.source]


@dataclass(frozen=True)
class Graph:
    modules: dict[str, Path]
    imports: list[Import]
    edges: list[Edge]

    def successors(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for e in self.edges:
            out[e.source].add(e.target)
        return out


def build_graph() -> Graph:
    modules = source_files()
    imports = [imp for m, path in modules.items() for imp in imports_in(m, path)]
    edges = [e for imp in imports for e in edges_of(imp, modules)]
    return Graph(modules, imports, edges)


def strongly_connected(successors: dict[str, set[str]]) -> list[frozenset[str]]:
    """The components of more than one module (a module never edges to itself here), by reachability:
    u and v share one when each reaches the other (a few hundred modules: plain searches are quick)."""
    reach: dict[str, set[str]] = {}
    for start in successors:
        seen, todo = set(), [start]
        while todo:
            for nxt in successors[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    out, placed = [], set()
    for m in sorted(successors):
        if m in placed:
            continue
        component = frozenset({m} | {n for n in reach[m] if m in reach[n]})
        placed |= component
        if len(component) > 1:
            out.append(component)
    return out


def describe(component: frozenset[str], graph: Graph) -> str:
    """The component's modules and every import between them, with where it stands."""
    lines = [f"cycle among {len(component)} modules: {', '.join(sorted(component))}"]
    for e in sorted(graph.edges, key=lambda e: (e.source, e.target, e.where)):
        if e.source in component and e.target in component:
            lines.append(f"    {e.source} -> {e.target}    ({e.where})")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_the_graph_sees_imports_inside_functions_and_type_checking(graph: Graph) -> None:
    # testbed.reproduce.table imports spark_analysis.stats inside a function; the stubs import each other
    # relatively (`from . import link_pb2`)
    targets = {(e.source, e.target) for e in graph.edges}
    assert ("testbed.reproduce.table", "spark_analysis.stats") in targets
    if "node.rpc.link_pb2_grpc" in graph.modules:
        assert ("node.rpc.link_pb2_grpc", "node.rpc.link_pb2") in targets
    src = "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n" \
          "    from .spf import Graph\ndef f():\n    from node.routing import selector\n"
    path = REPO / "node" / "routing" / "probe_only.py"      # never written: parsed from `src` below
    tree_imports = imports_in("node.routing.probe_only", path, src)
    assert [(i.target, i.names) for i in tree_imports] == [
        ("__future__", ("annotations",)), ("typing", ("TYPE_CHECKING",)), ("node.routing.spf", ("Graph",)),
        ("node.routing", ("selector",))]
    edges = [e.target for i in tree_imports for e in edges_of(i, graph.modules)]
    assert edges == ["node.routing.spf", "node.routing.selector"]


def test_a_package_above_the_target_counts_unless_it_holds_the_importer(graph: Graph) -> None:
    def targets(module: str, src: str) -> list[str]:
        path = REPO.joinpath(*module.split(".")).with_suffix(".py")     # never written
        return [e.target for i in imports_in(module, path, src) for e in edges_of(i, graph.modules)]

    # from outside testbed.scenario, its __init__ runs first (and loads the loader): an edge to it too
    assert targets("testbed.topology.probe_only", "from testbed.scenario import checks") == \
        ["testbed.scenario", "testbed.scenario.checks"]
    assert targets("testbed.topology.probe_only", "import testbed.scenario.checks") == \
        ["testbed.scenario", "testbed.scenario.checks"]
    # from inside, the package is already initialising: the submodule only
    assert targets("testbed.scenario.probe_only", "from . import checks") == ["testbed.scenario.checks"]
    assert targets("testbed.scenario.probe_only", "from testbed.scenario import load") == ["testbed.scenario"]


def test_no_import_cycle(graph: Graph) -> None:
    found = strongly_connected(graph.successors())
    assert not found, "import cycles:\n" + "\n".join(describe(c, graph) for c in found)


def test_node_imports_no_testbed_and_no_analysis_module(graph: Graph) -> None:
    crossing = [f"{i.source} imports {i.target} ({i.where})" for i in graph.imports
                if i.source.split(".")[0] == "node" and i.target.split(".")[0] in ("testbed", "spark_analysis")]
    assert crossing == []


# the one way from the analysis into the testbed: the report command writes the dashboard's topology.html
# beside report.html (spark_analysis/__main__.py `_topology_page`), a page the testbed's dashboard owns
ANALYSIS_MAY_IMPORT = {("spark_analysis.__main__", "testbed.dashboard.export")}


def test_the_analysis_imports_no_testbed_module(graph: Graph) -> None:
    crossing = [f"{i.source} imports {name} ({i.where})" for i in graph.imports
                if i.source.split(".")[0] == "spark_analysis" and i.target.split(".")[0] == "testbed"
                for name in [f"{i.target}.{n}" for n in i.names] or [i.target]
                if (i.source, name) not in ANALYSIS_MAY_IMPORT]
    assert crossing == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names_taken(module: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """`from X import _name`, and `X._name` where X names another project module, in one module."""
    out = []
    bound: dict[str, str] = {}          # local name -> the project module it is bound to
    for imp in imports_in(module, path):
        if imp.target != module:
            out += [f"{module} takes {imp.target}.{name} ({imp.where})" for name in imp.names if _private(name)]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, path, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        owner = ".".join([bound[value.id], *chain])
        if owner in modules and owner != module:
            out.append(f"{module} takes {owner}.{node.attr} ({path.relative_to(REPO)}:{node.lineno})")
    return out


def test_commands_take_no_private_name_of_another_module(graph: Graph) -> None:
    taken = [t for m, path in graph.modules.items() if m.startswith("testbed.commands")
             for t in private_names_taken(m, path, graph.modules)]
    assert taken == []


def test_the_engine_stays_the_engine_only() -> None:
    """node/mta.py is admission, store, forward and deliver; everything else has a module of its own (recovery,
    expiry, giving up, origination, the subsystems' hooks), so the engine stays readable in one sitting."""
    lines = (REPO / "node" / "mta.py").read_text().count("\n")
    assert lines <= 550, f"node/mta.py has {lines} lines: move a job out of the engine into its own module"
