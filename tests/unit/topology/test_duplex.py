"""`duplex: half`: the scenario key, its plain form, and the backends and exporters that cannot express it."""
from __future__ import annotations

from pathlib import Path

import pytest

from node.errors import UserError
from testbed.commands.network import _fmt_dir
from testbed.network import LINK_PARAMS
from testbed.scenario import ScenarioError, dump_resolved, load, load_text
from testbed.shaping.base import link_duplex
from testbed.shaping.netem import check_duplex
from testbed.topology import exporters, generators
from testbed.topology.exporters import ExportRefused, kathara as kathara_export, mininet as mininet_export
from testbed.topology.model import Direction

HALF = Direction(rate=1e6, duplex="half")


def test_link_defaults_and_a_link_entry_set_the_whole_link() -> None:
    s = load_text("name: d\ntopology: {generator: linear, params: {n: 3}}\nlink_defaults: {rate: 1Mbit}\n"
                  "links:\n  - {a: n2, b: n3, duplex: half, a_to_b: {delay: 5ms}}\n")
    topo = generators.from_scenario(s)
    assert [(l.a_to_b.duplex, l.b_to_a.duplex) for l in topo.links] == [("full", "full"), ("half", "half")]
    assert load_text(dump_resolved(s)) == s
    everywhere = load_text("name: d\ntopology: {generator: ring, params: {n: 3}}\nlink_defaults: {duplex: half}\n")
    assert {d.duplex for l in generators.from_scenario(everywhere).links for d in (l.a_to_b, l.b_to_a)} == {"half"}
    assert load_text(dump_resolved(everywhere)) == everywhere


@pytest.mark.parametrize("text,line,path,wording", [
    ("name: x\nlink_defaults:\n  duplex: simplex\n", 3, "link_defaults.duplex", 'expected one of full, half, got "simplex"'),
    ("name: x\nlinks:\n  - a: n1\n    b: n2\n    a_to_b: {duplex: half}\n", 5, "links[0].a_to_b.duplex",
     "duplex belongs to the whole link"),
    ("name: x\nfaults:\n  - at: 1s\n    action: link_set\n    target: n1-n2\n    params: {duplex: half}\n", 6,
     "faults[0].params.duplex", "cannot change at run time"),
])
def test_bad_duplex_is_one_error_with_file_and_line(tmp_path: Path, text: str, line: int, path: str,
                                                    wording: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line} {path}: ") and wording in msg and "\n" not in msg, msg


def test_netem_refuses_half_duplex_in_one_line_naming_the_link() -> None:
    check_duplex("n1-n2", Direction(), Direction())
    with pytest.raises(UserError) as e:
        check_duplex("n1-n2", HALF, HALF)
    assert "link n1-n2" in str(e.value) and "duplex: half" in str(e.value) and "\n" not in str(e.value)


def test_a_link_cannot_be_half_duplex_one_way_only() -> None:
    assert link_duplex("ab", HALF, HALF) == "half"
    with pytest.raises(UserError, match="link ab: duplex is half a->b but full b->a"):
        link_duplex("ab", HALF, Direction())


@pytest.mark.parametrize("export", [mininet_export.export, kathara_export.files])
def test_exporters_refuse_half_duplex(export) -> None:
    s = load_text("name: r\ntopology: {generator: linear, params: {n: 3}}\nlinks:\n  - {a: n2, b: n3, duplex: half}\n",
                  "r.yaml")
    with pytest.raises(ExportRefused) as e:
        export(exporters.from_scenario(s))
    assert "link n2-n3" in str(e.value) and "duplex" in str(e.value) and "\n" not in str(e.value)


def test_status_shows_half_duplex_and_it_is_not_a_run_time_parameter() -> None:
    assert _fmt_dir(HALF.to_dict()).endswith(", half-duplex")
    assert "half-duplex" not in _fmt_dir(Direction().to_dict())
    assert "duplex" not in LINK_PARAMS
