"""Crafted capture through the Spark pipeline: exact packets, flows, retransmissions, reordering, RTTs."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spark_analysis import pcap_ingest, traffic
from spark_analysis.layout import find_runs

from . import crafted

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("pcaprun") / "exp"
    # 3000 filler packets and 40 kB ranges: the capture is split into several parse tasks
    crafted.make_run(root / "c1" / "1", extra_packets=3000)
    crafted.make_run(root / "c1" / "2")
    runs = find_runs(root)
    caps = pcap_ingest.find_captures(runs)
    split = pcap_ingest.ranges(spark, caps, chunk_bytes=40_000)
    out = root.parent / "out"
    packets = pcap_ingest.ingest(spark, caps, str(out / "packets"), chunk_bytes=40_000)
    tt = traffic.derive(spark, packets, runs, str(out / "tcp"))
    flows = [r.asDict() for r in tt.flows.collect()]
    rtt = [r.asDict() for r in tt.rtt.collect()]
    links = [r.asDict() for r in tt.links.collect()]
    util = [r.asDict() for r in tt.utilisation.collect()]
    return {"split": split, "packets": packets, "flows": flows, "rtt": rtt, "links": links, "util": util,
            "out": out}


def _flow(t, rep, proto, src, sport):
    rows = [f for f in t["flows"] if f["rep"] == rep and f["proto"] == proto and f["src"] == src
            and f["sport"] == sport]
    assert len(rows) == 1
    return rows[0]


def test_large_capture_split_into_ranges(tables):
    ranges = [r for r in tables["split"] if r[1] == "1"]
    assert len(ranges) >= 5
    # contiguous, record aligned: each range starts where the previous stopped
    assert ranges[0][4] == 24 and all(a[5] == b[4] for a, b in zip(ranges, ranges[1:]))


def test_packet_counts_and_partitioning(tables):
    pk = tables["packets"]
    assert pk.where("rep = '2'").count() == crafted.EXPECTED["packets"]
    assert pk.where("rep = '1'").count() == crafted.EXPECTED["packets"] + 3000
    # no packet parsed twice or dropped at range borders: positions are unique
    assert pk.select("rep", "pos").distinct().count() == pk.count()
    parts = sorted(p.relative_to(tables["out"] / "packets").parts[:3]
                   for p in (tables["out"] / "packets").rglob("*.parquet"))
    assert {p for p in parts} == {("cell=c1", "rep=1", "link=a-b"), ("cell=c1", "rep=2", "link=a-b")}
    tbl = pq.read_table(tables["out"] / "packets" / "cell=c1" / "rep=2" / "link=a-b")
    for col in ("ts", "direction", "src", "dst", "sport", "dport", "proto", "length", "flags", "seq", "ack",
                "window"):
        assert col in tbl.column_names


def test_fields_of_first_packets(tables):
    rows = tables["packets"].where("rep = '2' AND proto = 6").orderBy("ts").limit(2).collect()
    syn, synack = rows
    assert (syn.src, syn.dst, syn.sport, syn.dport, syn.flags, syn.seq) == (
        crafted.A_DATA, crafted.B_DATA, 40000, 5001, crafted.SYN, crafted.ISN_A)
    assert syn.direction == "a_to_b" and synack.direction == "b_to_a"
    assert synack.ack == crafted.ISN_A + 1 and synack.window == 65535 and syn.length == 54
    assert syn.ts == pytest.approx(crafted.T0, abs=1e-6)


@pytest.mark.parametrize("rep", ["1", "2"])
def test_tcp_flow_retransmission_reordering(tables, rep):
    f = _flow(tables, rep, 6, crafted.A_DATA, 40000)
    for k, v in crafted.EXPECTED["data_flow"].items():
        assert f[k] == v, k
    back = _flow(tables, rep, 6, crafted.B_DATA, 5001)
    for k, v in crafted.EXPECTED["ack_flow"].items():
        assert back[k] == v, k
    # duration = FIN-ACK at 2.020 - SYN at 0 (configured in crafted.connection)
    assert f["duration"] == pytest.approx(2.020, abs=1e-6)
    assert f["goodput_bps"] == pytest.approx(6 * crafted.MSS * 8 / 2.020, rel=1e-6)


def test_rtt_samples_karn(tables):
    got = sorted(r["rtt"] for r in tables["rtt"] if r["rep"] == "2")
    assert got == pytest.approx(crafted.EXPECTED_RTTS, abs=2e-6)
    # the retransmitted segment 4 (relative seq 4001) gives no sample, neither copy
    assert 4001 not in {r["rel_seq"] for r in tables["rtt"]}


def test_udp_flow(tables):
    f = _flow(tables, "2", 17, crafted.B_LINK, 9000)
    for k, v in crafted.EXPECTED["udp_flow"].items():
        assert f[k] == v, k
    assert f["direction"] == "b_to_a"


def test_link_utilisation_against_rate(tables):
    # rep 2: bin [T0+1, T0+2) carries data segments 0..5 (7 x 1054 bytes) + the two SYN-time... only a_to_b
    rows = {(u["direction"], round(u["bin"] - crafted.T0)): u for u in tables["util"] if u["rep"] == "2"}
    u = rows[("a_to_b", 1)]
    assert u["bytes"] == 7 * 1054 and u["rate_bps"] == 1_000_000.0
    assert u["utilisation"] == pytest.approx(7 * 1054 * 8 / 1_000_000.0)
    link = [lk for lk in tables["links"] if lk["rep"] == "2" and lk["direction"] == "a_to_b"][0]
    assert link["retransmissions"] == 1 and link["rtt_samples"] == 5
    assert link["rtt_min"] == pytest.approx(0.030, abs=2e-6)
