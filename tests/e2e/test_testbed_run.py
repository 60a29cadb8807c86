"""`testbed run` end to end: the real CLI in a subprocess, real namespaces, links, daemons and records.

One quick quickstart run (both modes, one rep each) is shared by the checks of
the run directory, the summary and --resume; an interrupted run and bad input
have their own tests. Budget: about 2-3 minutes together on 2 cores.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from node import schema
from testbed import netstate, registry
from testbed.accounting import check_run
from testbed.cleanup import root_links
from testbed.runtime.netns import list_netns

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
MODES = ("fragmenting", "non-fragmenting")
# Which schema kind each record file holds (node/schema.py)
RECORD_FILES = {"deliveries.jsonl": "delivery", "submissions.jsonl": "submission", "metrics.jsonl": "metrics",
                "reports.jsonl": "report"}
TOP_RECORD_FILES = {"events.jsonl": "event", "host.jsonl": "host", "workload.jsonl": "submission",
                    "accepted.jsonl": "accepted"}
RUN_TIMEOUT = 240.0        # wall seconds for the quick quickstart (2 cells of ~8 s workload + set-up and drain)


def cli_cmd(*args: str) -> list[str]:
    # -P as the `testbed` console script: the working directory is not on sys.path (see shadowing_dir)
    return [sys.executable, "-P", "-m", "testbed", *args]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONUNBUFFERED"] = "1"
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return e


def shadowing_dir(parent: Path) -> Path:
    """A working directory holding packages named `testbed` and `node` (that fail when imported): the CLI's
    helper processes (supervisor, node daemons, wire emulator) must still run the project's code from there."""
    d = parent / "shadowing-cwd"
    for package in ("testbed", "node"):
        (d / package).mkdir(parents=True, exist_ok=True)
        (d / package / "__init__.py").write_text("raise ImportError('the working directory shadowed the project')\n")
    return d


def run_cli(*args: str, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(*args), cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                pytest.fail(f"{path}:{i}: not JSON: {line[:120]}")
    return out


def leftovers(run_ids: set[str]) -> list[str]:
    """Namespaces, interfaces or registry entries of these runs still on the machine."""
    names = [n for n in list_netns() + root_links() if registry.run_id_of(n) in run_ids]
    names += [f"registry:{r}" for r in run_ids if registry.load(r) is not None]
    return names


class RunWatcher:
    """Collects the run ids a subprocess registers (to check later that it left nothing behind)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.run_ids: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for rec in registry.all_runs():
                if rec.owner_pid == self.pid:
                    self.run_ids.add(rec.run_id)
            self._stop.wait(0.2)

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(5)
        return self.run_ids


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # not pytest's tmp_path: a concurrent pytest session may prune it under running daemons
    d = Path(tempfile.mkdtemp(prefix="tb-e2e-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def quick_run(workdir: Path) -> dict:
    """`testbed run scenarios/quickstart.yaml --quick` once for the module, from a directory holding `testbed/`
    and `node/` packages."""
    return run_quick(QUICKSTART, workdir / "quickstart", cwd=shadowing_dir(workdir))


def run_quick(scenario: Path, out: Path, timeout: float = RUN_TIMEOUT, cwd: Path = REPO) -> dict:
    """`testbed run SCENARIO --quick --out OUT` to the end (SIGINT and a failure after `timeout` s): its exit
    status, output, wall time and the run ids it registered."""
    proc = subprocess.Popen(cli_cmd("run", str(scenario), "--quick", "--out", str(out)), cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = RunWatcher(proc.pid)
    t0 = time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)     # let it tear down before the test fails
        stdout, stderr = proc.communicate(timeout=120)
        pytest.fail(f"{scenario.name} did not finish within {timeout:.0f} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    wall = time.monotonic() - t0
    run_ids = watcher.stop()
    return {"out": out, "rc": proc.returncode, "stdout": stdout, "stderr": stderr, "wall": wall, "run_ids": run_ids}


@contextlib.contextmanager
def quick_run_in_tempdir(scenario: Path, timeout: float) -> Iterator[dict]:
    """run_quick into a directory of our own (not pytest's tmp_path: a concurrent pytest session may prune
    it under running daemons), removed afterwards; for a module-scoped fixture to share."""
    work = Path(tempfile.mkdtemp(prefix=f"tb-e2e-{scenario.stem}-"))
    result = run_quick(scenario, work / scenario.stem, timeout)
    print(f"{scenario.stem} --quick took {result['wall']:.1f} s")
    try:
        yield result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def only_rep(result: dict) -> Path:
    """The repetition directory of a run with one cell and one repetition."""
    [summary] = sorted(result["out"].glob("*/1/summary.json"))
    return summary.parent


def rep_dirs(out: Path) -> dict[str, Path]:
    return {mode: out / f"mode-{mode}" / "1" for mode in MODES}


@pytest.mark.root
@pytest.mark.timeout(600)
def test_quick_run_exits_zero_and_leaves_nothing_behind(quick_run):
    assert quick_run["rc"] == 0, f"stdout:\n{quick_run['stdout'][-4000:]}\nstderr:\n{quick_run['stderr'][-4000:]}"
    assert quick_run["run_ids"], "the run never registered a network"
    assert leftovers(quick_run["run_ids"]) == []
    # the final table names both cells
    assert "mode-fragmenting" in quick_run["stdout"] and "mode-non-fragmenting" in quick_run["stdout"]


@pytest.mark.root
@pytest.mark.timeout(600)
def test_experiment_json_lists_both_cells_complete(quick_run):
    doc = json.loads((quick_run["out"] / "experiment.json").read_text())
    assert doc["scenario"] == "quickstart" and doc["status"] == "complete" and doc["quick"] is True
    cells = {c["id"]: c for c in doc["cells"]}
    assert set(cells) == {f"mode-{m}" for m in MODES}
    for mode in MODES:
        c = cells[f"mode-{mode}"]
        assert c["params"]["nodes.all.mode"] == mode
        assert [r["status"] for r in c["reps"]] == ["complete"]
    seeds = [c["reps"][0]["seed"] for c in cells.values()]
    assert len(set(seeds)) == 2          # each cell its own derived seed


@pytest.mark.root
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_run_directory_is_complete_and_schema_valid(quick_run, mode):
    rep = rep_dirs(quick_run["out"])[mode]
    # (workload.jsonl exists only when a submission could not reach its node: none here)
    for name in ("scenario.yaml", "topology.json", "events.jsonl", "host.jsonl", "summary.json", ".complete"):
        assert (rep / name).is_file(), f"{rep}/{name} is missing"
    topo = json.loads((rep / "topology.json").read_text())
    nodes = sorted(p.name for p in (rep / "nodes").iterdir())
    assert nodes == [f"n{i}" for i in range(1, 7)]
    # capture: all -> one pcap per link of the 6-ring, each with at least a pcap header
    pcaps = sorted((rep / "pcap").glob("*.pcap"))
    assert len(pcaps) == 6 and all(p.stat().st_size >= 24 for p in pcaps), pcaps
    assert topo, "topology.json is empty"
    problems: list[str] = []
    for node in nodes:
        d = rep / "nodes" / node
        # record files other than metrics appear with their first record (no NDR, no file)
        for name in ("node.yaml", "node.log", "metrics.jsonl"):
            assert (d / name).is_file(), f"{d}/{name} is missing"
        for name, kind in RECORD_FILES.items():
            if not (d / name).exists():
                continue
            for i, rec in enumerate(read_jsonl(d / name), 1):
                problems += [f"{node}/{name}:{i}: {p}" for p in schema.validate(kind, rec)]
    for name, kind in TOP_RECORD_FILES.items():
        if name == "workload.jsonl" and not (rep / name).exists():
            continue
        for i, rec in enumerate(read_jsonl(rep / name), 1):
            problems += [f"{name}:{i}: {p}" for p in schema.validate(kind, rec)]
    assert problems == []
    host = read_jsonl(rep / "host.jsonl")
    assert len(host) >= 5        # one a second through at least the 8 s workload


@pytest.mark.root
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_summary_zero_loss_zero_duplicates_and_flags(quick_run, mode):
    rep = rep_dirs(quick_run["out"])[mode]
    s = json.loads((rep / "summary.json").read_text())
    assert s["complete"] is True and s["mode"] == mode
    assert s["schema"]["problems"] == 0, s["schema"]
    # nothing lost, nothing twice: the independent checker's verdict (testbed/accounting), not summary.json's
    v = check_run(rep)
    assert v.lost == 0 and v.duplicate == 0 and v.extra_deliveries == 0, v.to_dict()
    assert v.accepted == s["accepted"]
    assert s["accepted"] > 0 and s["delivered"] > 0
    # every accepted copy arrived: deliveries counted from the node records agree with the summary
    deliveries = [r for n in (rep / "nodes").iterdir() for r in read_jsonl(n / "deliveries.jsonl")]
    assert len({(r["msg_id"], r["dst"]) for r in deliveries}) == s["delivered"] == len(deliveries)
    assert {r["mode"] for r in deliveries} == {mode}
    accepted = [r for n in (rep / "nodes").iterdir() for r in read_jsonl(n / "submissions.jsonl") if r["accepted"]]
    assert s["accepted"] == len(accepted)
    assert not (rep / "workload.jsonl").exists()      # every planned submission reached its node
    # the driver's own record of what it saw accepted agrees with the nodes', and no record line was lost
    assert v.client.present and v.client.accepted == v.client.reconciled == v.accepted, v.to_dict()["client"]
    assert v.client.mismatches == 0 and s["records_failed"] == {f"n{i}": 0 for i in range(1, 7)}
    assert v.ok() and s["accounting"]["ok"] is True
    # the saturation flag is what the host records say (hostmon's own rule)
    from testbed.experiment import hostmon, summary as summary_mod
    sat = hostmon.saturation(read_jsonl(rep / "host.jsonl"))
    flag = s.get("saturation", s.get("host", {}))
    assert flag.get("saturated") == sat["saturated"]
    problems = summary_mod.check(s)
    assert not any("lost" in p or "duplicate" in p for p in problems), problems


@pytest.mark.root
@pytest.mark.timeout(600)
def test_resume_skips_complete_reps_and_reruns_an_incomplete_one(quick_run):
    out = quick_run["out"]
    reps = rep_dirs(out)
    kept, redo = reps["fragmenting"], reps["non-fragmenting"]
    kept_mtime = (kept / "summary.json").stat().st_mtime_ns
    redo_mtime = (redo / "summary.json").stat().st_mtime_ns
    (redo / ".complete").unlink()          # as if the run had been cut short there
    (redo / "stale-marker").write_text("from the earlier attempt\n")
    r = run_cli("run", str(QUICKSTART), "--quick", "--out", str(out), "--resume", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout)          # stdout holds the JSON alone; progress and the text table are on stderr
    assert result["exit_status"] == 0 and result["out"] == str(out)
    assert {(row["cell"], row["status"]) for row in result["repetitions"]} == {
        ("mode-fragmenting", "skipped"), ("mode-non-fragmenting", "complete")}
    assert (kept / "summary.json").stat().st_mtime_ns == kept_mtime
    assert (redo / ".complete").is_file() and not (redo / "stale-marker").exists()
    assert (redo / "summary.json").stat().st_mtime_ns != redo_mtime
    log = (out / "runner.log").read_text()
    assert "rep mode-fragmenting/1 skipped: already complete" in log
    assert log.count("rep mode-non-fragmenting/1 started") == 2
    doc = json.loads((out / "experiment.json").read_text())
    assert doc["status"] == "complete"
    s = json.loads((redo / "summary.json").read_text())
    assert s["complete"] is True
    v = check_run(redo)
    assert v.accepted > 0 and v.lost == 0 and v.duplicate == 0 and v.extra_deliveries == 0, v.to_dict()


@pytest.mark.root
@pytest.mark.timeout(300)
def test_sigint_mid_run_tears_down_and_marks_incomplete(workdir):
    out = workdir / "interrupted"
    proc = subprocess.Popen(cli_cmd("run", str(QUICKSTART), "--quick", "--out", str(out)), cwd=REPO, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = RunWatcher(proc.pid)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:          # plain progress lines: "HH:MM:SS [cell rep 1] workload"
            lines.append(line)
            if "] workload" in line or time.monotonic() > deadline:
                break
        assert any("] workload" in l for l in lines), "".join(lines)[-3000:]
        time.sleep(2.0)                   # mid-workload (the quick workload runs 8 s)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_ids = watcher.stop()
    text = "".join(lines)
    assert proc.returncode == 130, text[-3000:]
    doc = json.loads((out / "experiment.json").read_text())
    assert doc["status"] == "incomplete"
    statuses = [r["status"] for c in doc["cells"] for r in c["reps"]]
    assert statuses[0] == "interrupted" and all(s == "pending" for s in statuses[1:]), statuses
    rep = out / "mode-fragmenting" / "1"
    assert not (rep / ".complete").exists()
    s = json.loads((rep / "summary.json").read_text())     # what was collected is kept and summarised
    assert s["complete"] is False
    assert not (out / "mode-non-fragmenting" / "1").exists()
    assert run_ids and leftovers(run_ids) == []


@pytest.mark.root
@pytest.mark.testbed_up         # one `testbed up` network on the machine: no other test's `up` meanwhile
@pytest.mark.timeout(600)
def test_up_builds_the_links_run_built_and_takes_set(quick_run, workdir):
    """`testbed up` of the quickstart has the links `run --quick` wrote to topology.json (time_scale applied:
    320 kbit/s), started from the directory the run was started from, whose testbed/ and node/ must not
    shadow the project; a --set reaches the network (its management pool)."""
    from tests.integration.network.network_support import free_mgmt_subnet
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")
    assert quick_run["rc"] == 0, quick_run["stderr"][-3000:]
    cwd, mgmt = shadowing_dir(workdir), free_mgmt_subnet()
    r = subprocess.run(cli_cmd("up", str(QUICKSTART), "--run-dir", str(workdir / "up"), "--set",
                               f"topology.mgmt_pool={mgmt}"), cwd=cwd, env=env(), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    try:
        assert "node daemons: n1, n2, n3, n4, n5, n6 (healthy)" in r.stdout
        status = subprocess.run(cli_cmd("status", "--json"), cwd=cwd, env=env(), capture_output=True, text=True,
                                timeout=60)
        assert status.returncode == 0, status.stderr
    finally:
        down = subprocess.run(cli_cmd("down"), cwd=cwd, env=env(), capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    up = json.loads(status.stdout)
    ran = json.loads((rep_dirs(quick_run["out"])["fragmenting"] / "topology.json").read_text())

    def links(desc: dict) -> dict:
        return {l["name"]: (l["a"], l["b"], l["state"], l["a_to_b"], l["b_to_a"]) for l in desc["links"]}

    assert links(up) == links(ran) and len(links(up)) == 6
    assert {d["rate"] for l in up["links"] for d in (l["a_to_b"], l["b_to_a"])} == {8000 / 0.025}
    assert all(ipaddress.ip_address(h["mgmt_address"]) in ipaddress.ip_network(mgmt) for h in up["hosts"])


BAD_SCENARIO = "name: bad\ntopology: {generator: ring, params: {n: 4}}\nworkload: {generators: [{nodes: all}]}\nfrobnicate: 3\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, words", [
    (("run", "scenarios/does-not-exist.yaml"), "no such scenario file"),
    (("run", "{bad}"), "unknown key 'frobnicate'"),
    (("run", str(QUICKSTART), "--set", "duration=fast"), "duration"),
    (("run", str(QUICKSTART), "--set", "duration"), "expected KEY=VALUE"),
    (("run", str(QUICKSTART), "--set", "topology.params.n=2"), "topology.params.n"),
    (("run", str(QUICKSTART), "--reps", "0"), "--reps must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(workdir, args, words):
    bad = workdir / "bad.yaml"
    bad.write_text(BAD_SCENARIO)
    out = workdir / "never"
    argv = [a.replace("{bad}", str(bad)) for a in args] + ["--out", str(out)]
    r = run_cli(*argv, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("testbed: ") and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not out.exists()
