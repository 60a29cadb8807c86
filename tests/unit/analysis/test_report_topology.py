"""The topology drawing at the top of report.html: valid SVG naming every host and link."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pandas as pd

from spark_analysis.layout import find_runs, run_topology
from spark_analysis.topodraw import layout, topology_svg

SVG = "{http://www.w3.org/2000/svg}"


def _dir(delay: float, rate: float) -> dict:
    return {"delay": delay, "jitter": 0.0, "loss": 0.0, "rate": rate, "queue": 100}


def _topology() -> dict:
    """A ring n1..n4 with a router r1 (no daemon) hanging off n1; n3-n4 asymmetric, n4-n1 down."""
    hosts = [{"name": n, "role": "host"} for n in ("n1", "n2", "n3", "n4", "r1")]
    pairs = [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n1"), ("n1", "r1")]
    links = [{"name": f"{a}-{b}", "a": a, "b": b, "state": "down" if a == "n4" else "up",
              "a_to_b": _dir(0.01, 8000.0), "b_to_a": _dir(0.02 if a == "n3" else 0.01, 8000.0)} for a, b in pairs]
    return {"topology": "t", "hosts": hosts, "links": links}


def test_svg_is_valid_and_names_every_host_and_link() -> None:
    root = ET.fromstring(topology_svg(_topology(), daemons={"n1", "n2", "n3", "n4"}))
    hosts = {g.get("data-host"): g for g in root.iter(f"{SVG}g") if g.get("class") == "host"}
    links = {g.get("data-link"): g for g in root.iter(f"{SVG}g") if g.get("class") == "link"}
    assert set(hosts) == {"n1", "n2", "n3", "n4", "r1"} and set(links) == {"n1-n2", "n2-n3", "n3-n4", "n4-n1", "n1-r1"}
    assert all(g.find(f"{SVG}text").text == name for name, g in hosts.items())       # each host's visible name
    assert hosts["r1"].find(f"{SVG}rect") is not None and hosts["n1"].find(f"{SVG}circle") is not None
    assert links["n1-n2"].find(f"{SVG}text").text == "10 ms, 8 kbit/s"
    assert links["n3-n4"].find(f"{SVG}text").text == "n3→n4 10 ms, 8 kbit/s; n4→n3 20 ms, 8 kbit/s"
    assert links["n4-n1"].find(f"{SVG}line").get("stroke-dasharray")                  # down at the end
    assert all(name in g.find(f"{SVG}title").text for name, g in links.items())
    assert topology_svg({}) == ""


def test_layout_is_deterministic_and_separates_hosts() -> None:
    topo = _topology()
    hosts = [h["name"] for h in topo["hosts"]]
    pos, _ = layout(hosts, topo["links"])
    assert pos == layout(hosts, topo["links"])[0] and len(set(pos.values())) == len(hosts)
    line = [{"a": f"n{i}", "b": f"n{i + 1}"} for i in range(1, 5)]                     # a tree: layered
    pos, _ = layout([f"n{i}" for i in range(1, 6)], line)
    assert pos["n3"][1] < pos["n2"][1] == pos["n4"][1] < pos["n1"][1] == pos["n5"][1]


def test_report_draws_the_first_runs_topology(tmp_path) -> None:
    from spark_analysis.report import ReportTables, write

    run = tmp_path / "runs" / "c" / "1"
    for n in ("n1", "n2", "n3", "n4", "r1"):
        (run / "nodes" / n).mkdir(parents=True)
        if n != "r1":
            (run / "nodes" / n / "node.yaml").write_text("name: x\n")
    (run / "topology.json").write_text(json.dumps(_topology()))
    topo, daemons, which = run_topology(find_runs(tmp_path / "runs"))
    assert daemons == {"n1", "n2", "n3", "n4"} and which == "c/1"
    tables = ReportTables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), topology=topo, daemons=daemons,
                          topology_run=which, experiment={"time_scale": 0.025})
    page = write(tmp_path / "out", "src", tables).read_text()
    assert '<figure id="topology"><svg' in page and "model rate = wall rate × 0.025" in page
    ET.parse(tmp_path / "out" / "topology.svg")
