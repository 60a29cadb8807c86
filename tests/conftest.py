"""Suite-wide: tests that need root are skipped without it, and a test run must leave nothing of the testbed's behind.

Tests marked `root` (network namespaces, TAP devices, `testbed run`) are skipped when not running as root;
everything else runs anyway.

At the end of the session every namespace or interface carrying the testbed
prefix is checked against the run registry. One that belongs to no registered
run, to a run whose owner is dead, or to a run owned by this very pytest
process is a leak, and the session fails — a leak here is a leak on a user's
machine. Resources of runs owned by other live processes (a parallel test
session, a user's `testbed up`) are left alone. Under pytest-xdist the check runs once, in the
controller, and the runs of its workers count as its own.

Under pytest-xdist a test marked `alone` runs while the other workers wait (tests/worker_turns.py). The alone
tests go to one xdist group, `alone`, sent first, so that they take one turn at the start instead of one each
in the middle of the session; an alone test that shares a fixture wider than itself with tests that run beside
others stays in that fixture's group (the fixture is made once) and takes its turn where it comes. A test
marked `testbed_up` holds the session's `up` lock while it runs (one `testbed up` network at a time).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from testbed import registry
from testbed.cleanup import root_links
from testbed.runtime.netns import list_netns
from tests.worker_turns import TurnFiles, Turns, scheduling_order

# Several tests send SIGINT to a process they started and expect Ctrl-C's effect. A suite started as a
# background job of a non-interactive shell (`make test &`) inherits SIGINT ignored, and an ignored signal stays
# ignored across exec: those processes would never see it. A handled signal is reset to the default at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# What the controller learns from its xdist workers as they finish: their pids and the session's lock files.
WORKER_PIDS = pytest.StashKey[set[int]]()
TURN_FILES = pytest.StashKey[TurnFiles]()
# A worker's handles on the session's locks.
TURNS = pytest.StashKey[Turns]()
# Where a worker's time went (seconds), and the controller's collection of them, for the summary's last lines.
TIME_SPENT = pytest.StashKey[dict[str, float]]()
WORKER_TIMES = pytest.StashKey[list[dict[str, float]]]()


def leaked_resources(owner_pids: set[int]) -> list[str]:
    leaks = []
    for name in list_netns() + root_links():
        run_id = registry.run_id_of(name)
        if run_id is None:
            continue
        record = registry.load(run_id)
        if record is None or not registry.pid_alive(record.owner_pid) or record.owner_pid in owner_pids:
            leaks.append(name)
    return leaks


# The scopes of a fixture that several tests share, widest first.
SHARED_SCOPES = ("session", "package", "module", "class")
# The xdist group of the tests that run alone and share no fixture with tests that do not.
ALONE_GROUP = "alone"


def shared_fixtures(item: pytest.Item) -> list[tuple[str, str]]:
    """(defining folder or module, name) of each fixture of ours wider than one test that `item` uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    found = []
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].baseid and defs[-1].scope in SHARED_SCOPES:
            found.append((defs[-1].baseid, name))
    return found


def alone_group_members(items: list[pytest.Item]) -> set[int]:
    """Indices of the tests that run alone and share no wide fixture with a test that runs beside others."""
    alone = [runs_alone(it) for it in items]
    used_beside = {f for it, a in zip(items, alone) if not a for f in shared_fixtures(it)}
    return {i for i, it in enumerate(items) if alone[i] and not used_beside.intersection(shared_fixtures(it))}


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses a fixture of ours wider than one test, or None.

    Tests sharing such a fixture run on one worker, so it is made once (a Spark session, a Docker engine,
    a module's network or `testbed run`): a session-wide fixture groups by the folder of the conftest that
    defines it, a narrower one by the test's module.
    """
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    widest: tuple[int, str] | None = None
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if not defs or not defs[-1].baseid or defs[-1].scope not in SHARED_SCOPES:
            continue                                  # not ours (a plugin's: no baseid), or per test
        fixture = defs[-1]
        rank = SHARED_SCOPES.index(fixture.scope)
        group = fixture.baseid if fixture.scope in ("session", "package") else item.nodeid.split("::")[0]
        if widest is None or rank < widest[0]:
            widest = (rank, group)
    return None if widest is None else widest[1]


@pytest.hookimpl(tryfirst=True)      # before xdist reads the groups (its hook has no order of its own)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_root = None if os.geteuid() == 0 else pytest.mark.skip(reason="needs root: network namespaces and TAP devices")
    for item in items:
        if skip_root is not None and item.get_closest_marker("root") is not None:
            item.add_marker(skip_root)
        if item.get_closest_marker("xdist_group") is None:
            group = shared_fixture_group(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False):
        members = alone_group_members(items)
        for i, item in enumerate(items):
            name_xdist_group(item, ALONE_GROUP if i in members else None)
        groups = [it.nodeid.rpartition("@")[2] if "@" in it.nodeid else None for it in items]
        up_modules = {module_of(it) for it in items if needs_network(it)}
        late = [module_of(it) in up_modules for it in items]
        items[:] = [items[i] for i in scheduling_order(groups, ALONE_GROUP, late)]


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def needs_network(item: pytest.Item) -> bool:
    """Marked `testbed_up` and not skipped by a mark."""
    return item.get_closest_marker("testbed_up") is not None and not skipped_by_mark(item)


def pytest_collection_finish(session: pytest.Session) -> None:
    turns = session.config.stash.get(TURNS, None)
    if turns is not None and session.items:
        turns.alone_group_first = session.items[0].nodeid.endswith("@" + ALONE_GROUP)


def name_xdist_group(item: pytest.Item, group: str | None = None) -> None:
    """Append "@group" to a grouped test's node id, which is what --dist loadgroup schedules by.

    pytest-xdist 3.8 does this itself by setting `item._nodeid`, but pytest 9 keeps a node's id in `_id`,
    so without this every test would be scheduled on its own. Should xdist's own renaming work again, the
    suffix is there twice ("t@g@g"), which xdist still reads as group g.
    """
    names = [group] if group else sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                                          for m in item.iter_markers("xdist_group")})
    if names:
        item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


# The suite's reports are of a few small runs each: start Spark's JVM for short jobs (spark_analysis/session.py),
# in this process and in the `testbed` and `spark-submit` processes tests start. WANBED_SPARK_QUICK_JVM=0 keeps the default.
# The name is spark_analysis.session.QUICK_JVM_ENV, spelled here: importing that module imports pyspark in every worker.
QUICK_JVM_ENV = "WANBED_SPARK_QUICK_JVM"


# With PYTHONDONTWRITEBYTECODE set (as many CI and container shells have it) every Python process a test starts
# (a `testbed` command, a node daemon, a supervisor, a wire emulator) would compile the project's modules from
# source again: a command loads over 200 of them, several tenths of a second of CPU each time, thousands of times
# in a run. The variable is there to keep __pycache__ out of the source tree, so the suite writes its bytecode to
# a cache of the user's instead (PYTHONPYCACHEPREFIX): kept between runs, since the interpreter checks each file
# against its source, and since under a prefix the venv's own bytecode is not read either (the first run compiles
# the third-party packages there once). A prefix the user set is kept.
def bytecode_outside_the_tree() -> None:
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wanbed" / "pycache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:                 # no writable home: compile as asked
        return
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)    # the workers and every process they start inherit both
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = str(cache)
    sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(QUICK_JVM_ENV, "1")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.stash[TURNS] = Turns(TurnFiles(workerinput["testrunuid"]))
        return
    bytecode_outside_the_tree()                  # before the workers start: they inherit the environment
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False   # the order is ours (scheduling_order): the alone group first


def runs_alone(item: pytest.Item) -> bool:
    """Marked `alone` and not skipped by a mark: a test that will only report a skip needs no turn of its own
    (taking one would make the other workers finish what they run first)."""
    return item.get_closest_marker("alone") is not None and not skipped_by_mark(item)


def skipped_by_mark(item: pytest.Item) -> bool:
    try:
        from _pytest.skipping import evaluate_skip_marks
    except ImportError:              # pytest moved it: count the test as running
        return False
    try:
        return evaluate_skip_marks(item) is not None
    except Exception:                # a condition that fails to evaluate: pytest reports it in the test itself
        return False


@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    # Outermost (tryfirst), so that waiting for a turn is not counted against the test's timeout.
    turns = item.config.stash.get(TURNS, None)
    if turns is None:
        return (yield)
    alone = runs_alone(item)
    spent = item.config.stash.setdefault(TIME_SPENT, {})
    asked = time.monotonic()
    network = (turns.network(keep=nextitem is not None and needs_network(nextitem)) if needs_network(item)
               else contextlib.nullcontext())
    with network, turns.alone(keep=nextitem is not None and runs_alone(nextitem)) if alone else turns.beside_others():
        started = time.monotonic()
        try:
            return (yield)
        finally:
            ran = time.monotonic() - started
            spent["waiting"] = spent.get("waiting", 0.0) + started - asked
            spent["alone" if alone else "beside"] = spent.get("alone" if alone else "beside", 0.0) + ran
            group = "group " + (item.nodeid.rpartition("@")[2] if "@" in item.nodeid else "(none)")
            spent[group] = spent.get(group, 0.0) + ran
            write_timeline(item.nodeid, alone, time.time() - (time.monotonic() - asked), started - asked, ran)


# WANBED_TEST_TIMELINE=FILE: one JSON line per test (worker, test, when it asked for its turn, seconds waited,
# seconds run), to see where a session's wall time goes (which worker waits for what, what runs last).
TIMELINE_ENV = "WANBED_TEST_TIMELINE"


def write_timeline(nodeid: str, alone: bool, asked: float, waited: float, ran: float) -> None:
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        return
    line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "-"), "test": nodeid, "alone": alone,
                       "asked": round(asked, 3), "waited": round(waited, 3), "ran": round(ran, 3)})
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(line + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist, in the controller: a worker has finished."""
    config = node.config
    config.stash.setdefault(WORKER_PIDS, set()).add(node.workeroutput.get("pid", -1))
    config.stash.setdefault(WORKER_TIMES, []).append(node.workeroutput.get("time_spent", {}))
    config.stash[TURN_FILES] = TurnFiles(node.workerinput["testrunuid"])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        config.workeroutput["pid"] = os.getpid()      # the controller's leak check counts our runs as its own
        config.workeroutput["time_spent"] = config.stash.get(TIME_SPENT, {})
        config.stash[TURNS].close()
        return
    if TURN_FILES in config.stash:
        config.stash[TURN_FILES].remove()
    if os.geteuid() != 0:
        return
    leaks = leaked_resources({os.getpid(), *config.stash.get(WORKER_PIDS, set())})
    if leaks:
        print("\nLEAK: the test run left testbed resources behind: " + ", ".join(sorted(leaks)))
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Under xdist: where each worker's time went (tests beside others, tests alone, waiting for a turn) and the
    groups that took longest, since a group runs on one worker and the longest worker sets the wall time."""
    workers = config.stash.get(WORKER_TIMES, [])
    if not workers:
        return
    tr = terminalreporter
    tr.write_line("worker time (s): " + "; ".join(
        f"beside {w.get('beside', 0):.0f}, alone {w.get('alone', 0):.0f}, waiting {w.get('waiting', 0):.0f}"
        for w in workers))
    groups: dict[str, float] = {}
    for w in workers:
        for k, v in w.items():
            if k.startswith("group "):
                groups[k[6:]] = groups.get(k[6:], 0.0) + v
    top = sorted(groups.items(), key=lambda kv: -kv[1])[:10]
    tr.write_line("longest xdist groups (s): " + "; ".join(f"{g} {t:.0f}" for g, t in top))
