"""Imported topologies (generators mininet and kathara) and `testbed export`: mapping, one-line errors, round trips."""
from __future__ import annotations

import contextlib
import io
import logging
import textwrap
from pathlib import Path

import pytest

from testbed import cli
from testbed.scenario import ScenarioError, dump_resolved, load, load_text
from testbed.topology import exporters, generators, overlay
from testbed.topology.exporters import ExportRefused, kathara as kathara_export, mininet as mininet_export
from testbed.topology.model import Direction, GilbertElliott

CUSTOM = '''\
from mininet.topo import Topo
from mininet.link import TCLink


class Custom(Topo):
    def build(self, n=2):
        s1 = self.addSwitch('s1', dpid='1')
        for i in range(1, n + 1):
            h = self.addHost('h%d' % i, ip='10.0.0.%d/24' % i)
            self.addLink(h, s1, cls=TCLink, bw=10, delay='5ms', loss=1, max_queue_size=50,
                         params2={'jitter': '1.5ms', 'delay': '99ms'})


topos = {'custom': Custom}
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def scenario(folder: Path, topology: str, extra: str = "", name: str = "imp") -> Path:
    return write(folder, f"{name}.yaml", f"name: {name}\ntopology: {topology}\n{extra}")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


# ---- mininet: import -----------------------------------------------------------------------------------

def test_mininet_options_map_to_link_fields_in_mininets_units(tmp_path: Path, caplog) -> None:
    write(tmp_path, "custom.py", CUSTOM)
    path = scenario(tmp_path, "{generator: mininet, params: {file: custom.py, class: custom, args: {n: 3}}}",
                    "link_defaults: {rate: 1Mbit}\n")
    with caplog.at_level(logging.WARNING):
        s = load(path)
    topo = generators.from_scenario(s)
    assert topo.node_names() == ["s1", "h1", "h2", "h3"]
    assert [l.name for l in topo.links] == ["h1-s1", "h2-s1", "h3-s1"]
    link = topo.links[0]
    assert link.a_to_b == Direction(delay=0.005, loss=0.01, rate=10e6, queue=50)
    # params2 is node2's (s1's) interface; options given directly win over it, as in Mininet
    assert link.b_to_a == Direction(delay=0.005, jitter=0.0015, loss=0.01, rate=10e6, queue=50)
    assert overlay.daemon_hosts(s.nodes, topo.node_names()) == ["h1", "h2", "h3"]      # the switch is a hub
    assert s.topology.params["file"] == str(tmp_path / "custom.py")                   # relative to the scenario
    assert load_text(dump_resolved(s), "again.yaml") == s
    warned = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warned) == 1 and "host option ip (line 9)" in warned[0] and "switch option dpid" in warned[0]


def test_mininet_library_topologies_and_lopts(tmp_path: Path) -> None:
    write(tmp_path, "lib.py", """\
        from mininet.topo import LinearTopo
        from mininet.topolib import TreeTopo
        """)
    tree = load(scenario(tmp_path, "{generator: mininet, params: {file: lib.py, class: TreeTopo, "
                                   "args: {depth: 2, fanout: 2, lopts: {delay: 2ms}}}}"))
    topo = generators.from_scenario(tree)
    assert sorted(topo.node_names()) == ["h1", "h2", "h3", "h4", "s1", "s2", "s3"] and len(topo.links) == 6
    assert all(l.a_to_b.delay == l.b_to_a.delay == 0.002 for l in topo.links)
    linear = load(scenario(tmp_path, "{generator: mininet, params: {file: lib.py, class: LinearTopo, "
                                     "args: {k: 3}}}", name="lin"))
    assert len(generators.from_scenario(linear).links) == 5
    assert set(linear.nodes.per_node) == {"s1", "s2", "s3"}


@pytest.mark.parametrize("body, where, what", [
    ("self.addHost('h1', cpu=0.5)", ":6: addHost('h1'): option 'cpu'", "behaviour"),
    ("self.addHost('h1'); self.addHost('h2')\n        self.addLink('h1', 'h2', speedup=2)",
     ":7: addLink('h1', 'h2'): link option 'speedup'", "not supported"),
    ("self.addHost('h1'); self.addHost('h2')\n        self.addLink('h1', 'h2', delay=10)",
     ":7: addLink('h1', 'h2'): delay=10", "unit"),
    ("self.addHost('h1'); self.addHost('h2')\n        self.addLink('h1', 'h2', loss=150)",
     ":7: addLink('h1', 'h2'): loss=150", "0 to 100"),
    ("self.addHost('a-very-long-host-name')", ":6: the name 'a-very-long-host-name'", "wanbed host name"),
    ("self.addHost('h1', cls=object)", ":6: addHost('h1'): option 'cls'", "host class"),
    ("raise RuntimeError('no topology today')", ":6: RuntimeError while building", "no topology today"),
    ("self.addHost('h1'", ":6: not valid Python", ""),
])
def test_mininet_bad_file_is_one_scenario_error_with_the_line(tmp_path: Path, body: str, where: str,
                                                               what: str) -> None:
    write(tmp_path, "bad.py", "from mininet.topo import Topo\n\n\nclass Bad(Topo):\n    def build(self):\n"
                              f"        {body}\n")
    path = scenario(tmp_path, "{generator: mininet, params: {file: bad.py}}")
    with pytest.raises(ScenarioError) as e:
        load(path)
    message = str(e.value)
    assert "\n" not in message and "topology.params" in message and f"bad.py{where}" in message
    assert what in message


def test_mininet_choosing_the_class(tmp_path: Path) -> None:
    write(tmp_path, "two.py", "from mininet.topo import Topo\nclass A(Topo):\n    pass\nclass B(Topo):\n    pass\n")
    with pytest.raises(ScenarioError, match="defines 2 topologies"):
        load(scenario(tmp_path, "{generator: mininet, params: {file: two.py}}"))
    with pytest.raises(ScenarioError, match="no Topo class or topos entry 'C'"):
        load(scenario(tmp_path, "{generator: mininet, params: {file: two.py, class: C}}"))
    with pytest.raises(ScenarioError, match="no such Mininet topology file"):
        load(scenario(tmp_path, "{generator: mininet, params: {file: missing.py}}"))
    with pytest.raises(ScenarioError, match="needs params.file"):
        load(scenario(tmp_path, "{generator: mininet}"))


# ---- kathara: import -----------------------------------------------------------------------------------

LAB = """\
LAB_DESCRIPTION="three on a LAN, two links"
a[0]="lan1"
b[0]="lan1"
c[0]=lan1
c[1]="cd"
d[0]="cd/00:00:00:00:00:0d"   # a MAC address after the domain
d[1]="de"
e[0]="de"
e[image]="kathara/frr"
"""


def test_kathara_lab_lan_and_links(tmp_path: Path, caplog) -> None:
    write(tmp_path, "lab/lab.conf", LAB)
    write(tmp_path, "lab/e.startup", "ip addr add 10.0.0.1/24 dev eth0\ntc qdisc add dev eth0 root netem delay 7ms\n")
    with caplog.at_level(logging.WARNING):
        s = load(scenario(tmp_path, "{generator: kathara, params: {lab: lab}}", "link_defaults: {delay: 3ms}\n"))
    topo = generators.from_scenario(s)
    assert topo.node_names() == ["a", "b", "c", "d", "e"]
    assert [(l.a, l.b) for l in topo.links] == [("c", "d"), ("d", "e")]
    assert [(x.name, x.members) for x in topo.lans] == [("lan1", ["a", "b", "c"])]
    assert topo.links[1].a_to_b.delay == 0.003 and topo.links[1].b_to_a.delay == 0.007   # e's netem line
    assert any("e[image]" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("conf, startup, what", [
    ("a[0]=x\nthis is not a lab line\n", "", "lab.conf:2: expected machine[N]=collision_domain"),
    ("a[0]=x\na[0]=y\n", "", "lab.conf:2: a[0] is given twice"),
    ("pc.one[0]=x\n", "", "lab.conf:1: the name 'pc.one'"),
    ("a[0]=x\nb[0]=x\n", "tc qdisc add dev eth0 root netem delay 5ms reorder 25%\n",
     "a.startup:1: netem option 'reorder'"),
])
def test_kathara_bad_lab_is_one_line(tmp_path: Path, conf: str, startup: str, what: str) -> None:
    write(tmp_path, "lab/lab.conf", conf)
    if startup:
        write(tmp_path, "lab/a.startup", startup)
    with pytest.raises(ScenarioError) as e:
        load(scenario(tmp_path, "{generator: kathara, params: {lab: lab/lab.conf}}"))
    assert "\n" not in str(e.value) and what in str(e.value)


# ---- round trips -----------------------------------------------------------------------------------------

SOURCE = """\
name: trip
topology: {generator: ring, nodes: [n1, r1, n2, n3, r2]}
link_defaults: {delay: 12.5ms, rate: 7.3Mbit, loss: 0.37%, queue: 64}
links:
  - {a: n1, b: r1, a_to_b: {delay: 80ms, jitter: 2ms}, b_to_a: {queue: 20, rate: unlimited, loss: 0}}
  - {a: n3, b: n2, delay: 1.234567ms, a_to_b: {rate: 123456789bit}}
nodes: {r1: {daemon: false}, r2: {daemon: false}}
"""


def assert_same_network(a, b) -> None:
    ta, tb = generators.from_scenario(a), generators.from_scenario(b)
    assert ta.node_names() == tb.node_names()
    assert {l.name: (l.a, l.b, l.a_to_b, l.b_to_a) for l in ta.links} == \
           {l.name: (l.a, l.b, l.a_to_b, l.b_to_a) for l in tb.links}


def test_round_trip_through_mininet(tmp_path: Path) -> None:
    src = write(tmp_path, "trip.yaml", SOURCE)
    code, script, err = run_cli("export", str(src), "--to", "mininet")
    assert code == 0, err
    write(tmp_path, "trip_topo.py", script)
    compile(script, "trip_topo.py", "exec")              # the whole script, run() included, is valid Python
    back = load(scenario(tmp_path, "{generator: mininet, params: {file: trip_topo.py, class: trip}}", name="back"))
    assert_same_network(load(src), back)
    assert load(src).nodes == back.nodes                  # the routers came back as switches without daemons


def test_round_trip_through_kathara(tmp_path: Path) -> None:
    src = write(tmp_path, "trip.yaml", SOURCE)
    # Gilbert-Elliott loss and duplication: Mininet has neither, netem both (with gemodel the plain loss
    # field means nothing and netem cannot carry it: 0 here)
    s = load(src, overrides=["links.1.b_to_a.loss_model={type: gilbert, p: 1%, r: 30%}", "links.1.b_to_a.loss=0",
                             "links.1.b_to_a.duplicate=0.5%"])
    lab = tmp_path / "lab"
    kathara_export.write(exporters.from_scenario(s), lab)
    assert (lab / "lab.conf").read_text().count("[") == 10 and (lab / "r1.startup").exists()
    back = load(scenario(tmp_path, "{generator: kathara, params: {lab: lab}}",
                         "nodes: {r1: {daemon: false}, r2: {daemon: false}}\n", name="back"))
    assert_same_network(s, back)
    # the override named the link n3-n2: its b_to_a is what n2 sends, the link n2-n3's a_to_b
    assert generators.from_scenario(back).link("n2", "n3").a_to_b.gilbert == GilbertElliott(0.01, 0.3)


def test_export_refusals_are_one_line_and_exit_2(tmp_path: Path) -> None:
    src = write(tmp_path, "trip.yaml", SOURCE)
    code, out, err = run_cli("export", str(src), "--to", "mininet",
                             "--set", "links.0.a_to_b.loss_model={type: gilbert, p: 1%, r: 30%}")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "link n1-r1" in err and "Gilbert" in err
    code, _, err = run_cli("export", str(src), "--to", "mininet", "--set", "links.1.duplicate=1%")
    assert code == 2 and err.count("\n") == 1 and "link n2-n3" in err
    lan = write(tmp_path, "lan.yaml", "name: lan\ntopology: {generator: star, params: {n: 3, lan: true}}\n")
    code, _, err = run_cli("export", str(lan), "--to", "mininet")
    assert code == 2 and "LAN segment lan" in err
    code, _, err = run_cli("export", str(src), "--to", "kathara")
    assert code == 2 and "give one" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "lab.conf").write_text("")
    code, _, err = run_cli("export", str(src), "--to", "kathara", str(tmp_path / "full"))
    assert code == 2 and "already holds lab.conf" in err


def test_import_errors_through_the_cli_are_one_line_and_exit_2(tmp_path: Path) -> None:
    write(tmp_path, "bad.py", CUSTOM.replace("max_queue_size=50", "max_queue_size=50, enable_red=True"))
    bad = scenario(tmp_path, "{generator: mininet, params: {file: bad.py}}")
    code, _, err = run_cli("export", str(bad), "--to", "mininet")
    assert code == 2 and err.count("\n") == 1 and "bad.py:10: addLink('h1', 's1'): link option 'enable_red'" in err
    write(tmp_path, "lab/lab.conf", "a[0]=x\nb[0]=\n")
    lab = scenario(tmp_path, "{generator: kathara, params: {lab: lab}}", name="lab")
    code, _, err = run_cli("export", str(lab), "--to", "mininet")
    assert code == 2 and err.count("\n") == 1 and "lab.conf:2: b[0] names no collision domain" in err


@pytest.mark.parametrize("seconds", [0.025, 0.0015, 2e-6, 1.0, 0.1234567, 1 / 3, 1e-9, 7.25])
def test_durations_are_written_to_read_back_exactly(seconds: float) -> None:
    from testbed import units
    assert units.parse_duration(mininet_export.duration(seconds)) == seconds


def test_refused_reorder(tmp_path: Path) -> None:
    s = load_text("name: r\ntopology: {generator: linear, params: {n: 2}}\nlink_defaults: {reorder: true}\n", "r.yaml")
    with pytest.raises(ExportRefused, match="link n1-n2"):
        mininet_export.export(exporters.from_scenario(s))


def test_shipped_examples_load() -> None:
    examples = Path(__file__).resolve().parents[3] / "scenarios" / "examples"
    mn = load(examples / "mininet-linear.yaml")
    topo = generators.from_scenario(mn)
    assert topo.link("s1", "s2").a_to_b == Direction(delay=0.015, loss=0.001, rate=10e6, queue=200)
    assert overlay.mta_neighbours(topo, overlay.daemon_hosts(mn.nodes, topo.node_names())) == \
        {"h1": ["h2", "h3"], "h2": ["h1", "h3"], "h3": ["h1", "h2"]}     # MTAs neighbours across the hubs
    lab = load(examples / "kathara-lab.yaml")
    topo = generators.from_scenario(lab)
    assert [x.name for x in topo.lans] == ["officeA", "officeB"] and len(topo.links) == 2
    assert topo.link("gwa", "core").b_to_a == Direction(delay=0.03, jitter=0.002, rate=5e6)
