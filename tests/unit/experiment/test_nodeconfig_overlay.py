"""Node configs over the MTA overlay: daemon-less hosts get none, far neighbours are dialled at their loopback."""
from pathlib import Path

from testbed.experiment import nodeconfig
from testbed.network import Network
from testbed.scenario.spec import NodesSpec, Scenario
from testbed.topology import addressing, generators as g


def configs(topo, nodes: NodesSpec, routing: str = "auto") -> tuple[dict, Network]:
    net = Network(topo, addressing.plan(topo))          # never started: only the address plan is read
    scenario = Scenario(name="t", nodes=nodes, routing=routing)
    return nodeconfig.node_configs(scenario, net, Path("/nonexistent")), net


def test_every_host_a_daemon_gives_todays_configs() -> None:
    topo = g.ring(5)
    out, net = configs(topo, NodesSpec(all={"mode": "non-fragmenting"}))
    assert list(out) == topo.node_names()
    for name, cfg in out.items():
        # neighbours next door, dialled on the shared link, in topology order
        assert cfg["neighbours"] == {p: f"{net.link_address(p, name)}:{nodeconfig.DATA_PORT}"
                                     for p in topo.neighbours(name)}
        assert set(cfg["routes"]) == set(topo.node_names()) - {name}
        assert cfg["mode"] == "non-fragmenting"


def test_daemonless_router_in_the_middle() -> None:
    topo = g.linear(3, nodes=["n1", "r", "n2"])
    out, net = configs(topo, NodesSpec(all={"daemon": True}, per_node={"r": {"daemon": False}}))
    assert list(out) == ["n1", "n2"]                                    # r gets no config
    assert out["n1"]["neighbours"] == {"n2": f"{net.data_address('n2')}:{nodeconfig.DATA_PORT}"}
    assert out["n2"]["neighbours"] == {"n1": f"{net.data_address('n1')}:{nodeconfig.DATA_PORT}"}
    assert out["n1"]["routes"] == {"n2": "n2"} and out["n2"]["routes"] == {"n1": "n1"}
    assert "daemon" not in out["n1"] and "mta_neighbours" not in out["n1"]
    assert nodeconfig.daemon_hosts(Scenario(name="t", nodes=NodesSpec(per_node={"r": {"daemon": False}})),
                                   net) == ["n1", "n2"]


def test_listed_neighbour_far_away_and_adjacent_one_on_the_link() -> None:
    topo = g.linear(4)
    out, net = configs(topo, NodesSpec(per_node={"n1": {"mta_neighbours": ["n2", "n4"]}}))
    assert out["n1"]["neighbours"] == {"n2": f"{net.link_address('n2', 'n1')}:{nodeconfig.DATA_PORT}",
                                       "n4": f"{net.data_address('n4')}:{nodeconfig.DATA_PORT}"}
    assert out["n4"]["neighbours"]["n1"] == f"{net.data_address('n1')}:{nodeconfig.DATA_PORT}"
    assert out["n1"]["routes"]["n4"] == "n4" and out["n1"]["routes"]["n3"] in ("n2", "n4")
