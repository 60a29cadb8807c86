"""Times of a run over several machines put on the controller's clock (node/clockmodel.py) in
summary.json, the clock_uncertain flag, per-machine saturation, and a one-machine run left exactly as it was.
Run directories written by the test as real files; machines.json by testbed/experiment/machines.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from node import clockmodel as clocks
from testbed.clockoffset import Exchange, estimate
from testbed.experiment import summary
from testbed.experiment.machines import write_machines
from tests.unit.experiment.experiment_scenarios import ring_scenario
from tests.unit.experiment.spool_support import write_spool

pytestmark = pytest.mark.timeout(30)

T0 = 1_700_000_000.0
SHIFT = 0.050            # machine m2's clock runs 50 ms ahead of the controller's
LINK_DELAY = 0.010       # the smallest configured one-way delay: the flag limit is 1 ms
# (msg_id, origin, recipient, true delay s, sent at s after T0)
TRAFFIC = [("a1", "n1", "n2", 0.031, 0.0), ("a2", "n1", "n2", 0.045, 1.0), ("b1", "n2", "n1", 0.022, 2.0),
           ("b2", "n2", "n1", 0.060, 3.0), ("c1", "n1", "n1", 0.001, 4.0)]
MACHINE = {"n1": "ctl", "n2": "m2"}


def scen():
    return ring_scenario([{"interarrival": {"dist": "normal", "mean": 50}, "size": {"fragment_size": 1000}}],
                         n=2, duration=60, seed=5, extra={"time_scale": 1.0})


def lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_run(rep: Path, shift: float, host_machines: bool = True) -> Path:
    """Two nodes; n2's records stamped by a clock `shift` ahead (its deliveries' deliver_ts, and the submit_ts
    its messages carry); host.jsonl samples both machines' daemons."""
    skew = {"n1": 0.0, "n2": shift}
    subs: dict[str, list[dict]] = {"n1": [], "n2": []}
    dels: dict[str, list[dict]] = {"n1": [], "n2": []}
    for msg, src, dst, delay, at in TRAFFIC:
        sent = T0 + at + skew[src]
        got = T0 + at + delay + skew[dst]
        subs[src].append({"ts": sent, "node": src, "msg_id": msg, "src": src, "dst": dst, "size": 500,
                          "accepted": True, "reason": ""})
        dels[dst].append({"ts": got, "node": dst, "msg_id": msg, "src": src, "dst": dst, "size": 500,
                          "fragments": 1, "mode": "fragmenting", "submit_ts": sent, "deliver_ts": got, "hops": 1})
    for n in ("n1", "n2"):
        lines(rep / "nodes" / n / "submissions.jsonl", subs[n])
        lines(rep / "nodes" / n / "deliveries.jsonl", dels[n])
        write_spool(rep / "nodes" / n / "spool.db")
    host = []
    for i in range(5):
        for n, m in MACHINE.items():
            rec = {"ts": T0 + i, "node": "testbed", "cpu_percent": 30.0, "mem_percent": 20.0, "procs": {n: 5.0}}
            host.append({**rec, "machine": m} if host_machines else rec)
    lines(rep / "host.jsonl", host)
    lines(rep / "events.jsonl", [{"ts": T0 + 10, "node": "testbed", "event": "workload_end", "target": ""}])
    (rep / "scenario.yaml").write_text("name: clocks\n")
    link = {"name": "n1-n2", "a": "n1", "b": "n2", "a_to_b": {"delay": LINK_DELAY}, "b_to_a": {"delay": 0.02}}
    (rep / "topology.json").write_text(json.dumps({"links": [link]}) + "\n")
    return rep


def measured(offset: float, half_rtt: float) -> tuple:
    """Start and end estimates of a machine `offset` ahead, each the best of a few exchanges."""
    def one(start: float):
        return estimate([Exchange(start + k, start + k + half_rtt + offset, start + k + half_rtt + offset,
                                  start + k + 2 * half_rtt + 0.0001 * k) for k in range(3)])
    return one(T0 - 5), one(T0 + 20)


def delays(s: dict) -> dict[str, float]:
    return {k: v for k, v in s["delay"]["overall"].items() if k.endswith("wall_s")}


def test_cross_machine_delays_are_corrected_to_within_2ms(tmp_path: Path) -> None:
    truth = summary.summarize(write_run(tmp_path / "one" / "c" / "1", 0.0), scen(), complete=True)
    rep = write_run(tmp_path / "two" / "c" / "1", SHIFT)
    write_machines(rep, {"ctl": measured(0.0, 0.0002), "m2": measured(SHIFT, 0.0002)})
    s = summary.summarize(rep, scen(), complete=True)
    got, want = delays(s), delays(truth)
    assert want["mean_wall_s"] == pytest.approx(sum(t[3] for t in TRAFFIC) / len(TRAFFIC))
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=0.002), key
    assert s["clock_uncertain"] is False and s["clock"]["machines"]["m2"]["offset_s"] == pytest.approx(SHIFT)
    assert not [p for p in summary.check(s) if "clock" in p]
    # every single delay, not only the aggregates: the deliveries read back through the same correction
    c = clocks.load(rep)
    for d in ("n1", "n2"):
        for rec in map(json.loads, (rep / "nodes" / d / "deliveries.jsonl").read_text().splitlines()):
            true = next(t[3] for t in TRAFFIC if t[0] == rec["msg_id"])
            corrected = c.correct(rec["node"], rec["deliver_ts"]) - c.correct(rec["src"], rec["submit_ts"])
            assert corrected == pytest.approx(true, abs=0.002)


def test_an_uncertain_clock_flags_the_run(tmp_path: Path) -> None:
    rep = write_run(tmp_path / "e" / "c" / "1", SHIFT)
    # a 4 ms round trip: +-2 ms, more than 10% of the 10 ms link (1 ms)
    write_machines(rep, {"ctl": measured(0.0, 0.0002), "m2": measured(SHIFT, 0.002)})
    s = summary.summarize(rep, scen(), complete=True)
    assert s["clock_uncertain"] is True
    assert s["clock"]["limit_s"] == pytest.approx(0.1 * LINK_DELAY)
    assert s["clock"]["uncertainty_s"] == pytest.approx(0.002, abs=1e-4)
    assert any(p.startswith("clock uncertain") for p in summary.check(s))


def test_an_unreadable_machines_file_flags_the_run_and_corrects_nothing(tmp_path: Path) -> None:
    rep = write_run(tmp_path / "e" / "c" / "1", SHIFT)
    (rep / clocks.MACHINES_FILE).write_text("{not json")
    s = summary.summarize(rep, scen(), complete=True)
    assert s["clock_uncertain"] is True and "cannot be used" in s["clock"]["problem"]


def test_saturation_is_judged_per_machine(tmp_path: Path) -> None:
    rep = write_run(tmp_path / "e" / "c" / "1", 0.0)
    # m2 above 90% in 3 of its 10 samples (30%); ctl idle over 40: 3 of 50 over all (6%) would not flag it
    host = [{"ts": T0 + i, "node": "testbed", "machine": "m2", "cpu_percent": 95.0 if i < 3 else 20.0,
             "mem_percent": 1.0} for i in range(10)]
    host += [{"ts": T0 + i, "node": "testbed", "machine": "ctl", "cpu_percent": 10.0, "mem_percent": 1.0}
             for i in range(40)]
    lines(rep / "host.jsonl", host)
    s = summary.summarize(rep, scen(), complete=True)
    sat = s["saturation"]
    assert sat["saturated"] is True and sat["machine"] == "m2"
    assert sat["machines"]["ctl"]["saturated"] is False and sat["machines"]["m2"]["fraction_above"] == 0.3
    assert any("on machine m2" in p for p in summary.check(s))


def test_a_one_machine_run_is_untouched(tmp_path: Path) -> None:
    """host.jsonl's new `machine` field on one machine changes nothing: byte-identical summary.json, no clock keys."""
    plain = write_run(tmp_path / "a" / "c" / "1", 0.0, host_machines=False)
    one = tmp_path / "b" / "c" / "1"
    shutil.copytree(plain, one)
    host = [json.loads(x) for x in (one / "host.jsonl").read_text().splitlines()]
    lines(one / "host.jsonl", [{**r, "machine": "only"} for r in host])
    a = summary.write_summary(plain, scen(), complete=True)
    b = summary.write_summary(one, scen(), complete=True)
    assert "clock" not in a and "clock_uncertain" not in a and "machines" not in a["saturation"]
    assert {k: v for k, v in a.items() if k != "experiment"} == {k: v for k, v in b.items() if k != "experiment"}
    text = (plain / "summary.json").read_text()
    assert (one / "summary.json").read_text() == text.replace('"experiment": "a"', '"experiment": "b"')
    assert write_machines(one, {"only": measured(0.0, 0.0002)}) is None and not (one / "machines.json").exists()


def test_testbed_check_shows_the_clock_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testbed import cli
    rep = write_run(tmp_path / "e" / "c" / "1", SHIFT)
    write_machines(rep, {"ctl": measured(0.0, 0.0002), "m2": measured(SHIFT, 0.002)})
    assert cli.main(["check", str(rep)]) == 0           # the losses are judged apart: none here
    assert "clock uncertain" in capsys.readouterr().out
    assert cli.main(["check", "--json", str(rep)]) == 0
    row = json.loads(capsys.readouterr().out)["repetitions"][0]
    assert row["clock"]["clock_uncertain"] is True and row["clock"]["machines"]["m2"]["offset_s"] == \
        pytest.approx(SHIFT)


def test_topology_json_names_each_placed_hosts_machine(tmp_path: Path) -> None:
    """Network.describe() (topology.json) gives a host its `machine` when placed, none on one machine; the
    clocks read the mapping from there."""
    from testbed.network import Network
    from testbed.topology import addressing, generators as g

    topo = g.ring(3)
    net = Network(topo, addressing.plan(topo))          # never started: the description needs only the plan
    assert all("machine" not in h for h in net.describe()["hosts"])
    net.machines = {"n1": "ctl", "n2": "m2", "n3": "m2"}
    desc = net.describe()
    assert {h["name"]: h["machine"] for h in desc["hosts"]} == net.machines
    (tmp_path / "topology.json").write_text(json.dumps(desc))
    assert clocks.machine_of(tmp_path) == net.machines


def test_estimates_that_give_no_clock_flag_the_run(tmp_path: Path) -> None:
    rep = write_run(tmp_path / "e" / "c" / "1", SHIFT)
    start, end = measured(SHIFT, 0.0002)
    write_machines(rep, {"ctl": measured(0.0, 0.0002), "m2": (end, start)})      # the end before the start
    s = summary.summarize(rep, scen(), complete=True)
    assert s["clock_uncertain"] is True and "machine m2" in s["clock"]["problem"]


def test_a_machine_that_did_not_answer_flags_the_run(tmp_path: Path) -> None:
    """The cell runner could not measure a machine (at the start or the end): machines.json holds why, the run
    is flagged and its times are not corrected."""
    rep = write_run(tmp_path / "e" / "c" / "1", SHIFT)
    why = "machine m2 did not answer any of 16 clock probes at 10.0.0.2:4000 (at the end of the rep)"
    write_machines(rep, {"ctl": measured(0.0, 0.0002)}, problem=why)
    s = summary.summarize(rep, scen(), complete=True)
    assert s["clock_uncertain"] is True and why in s["clock"]["problem"]
