"""A crafted capture with known content: one TCP connection (a retransmission, a reordering,
known RTTs, a wrap of the 32-bit sequence space) and a UDP flow, on link "a-b" of a 2-host topology."""
from __future__ import annotations

import json
import struct
from pathlib import Path

A_LINK, B_LINK = "10.200.0.1", "10.200.0.2"
A_DATA, B_DATA = "10.202.0.1", "10.202.0.2"
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
ISN_A = 2**32 - 2500      # data crosses the 2^32 wrap after 2499 bytes
ISN_B = 77_000
MSS = 1000


def _ip(s: str) -> bytes:
    return bytes(int(x) for x in s.split("."))


def tcp_frame(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int, payload: int) -> bytes:
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq % 2**32, ack % 2**32, (5 << 12) | flags, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + payload, 1, 0x4000, 64, 6, 0, _ip(src), _ip(dst))
    return b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + tcp + b"\xab" * payload


def udp_frame(src: str, dst: str, sport: int, dport: int, payload: int) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + payload, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + payload, 1, 0, 64, 17, 0, _ip(src), _ip(dst))
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp + b"\x00" * payload


def write_pcap(path: Path, records: list[tuple[float, bytes]], snaplen: int = 128) -> None:
    """Nanosecond pcap, little endian, Ethernet: the wire emulator's format."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, 1)]
    for ts, frame in records:
        ns = round(ts * 1e9)
        cap = frame[:snaplen]
        out.append(struct.pack("<IIII", ns // 10**9, ns % 10**9, len(cap), len(frame)) + cap)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(out))


T0 = 1_700_000_000.0


def connection() -> list[tuple[float, bytes]]:
    """a:40000 -> b:5001 (data), acks back. Times relative to T0."""
    def d(t, i, retx=False):  # data segment i (0-based) of MSS bytes
        return (T0 + t, tcp_frame(A_DATA, B_DATA, 40000, 5001, ISN_A + 1 + i * MSS, ISN_B + 1, ACK | PSH, MSS))

    def a(t, acked_segments):  # cumulative ACK from b
        return (T0 + t, tcp_frame(B_DATA, A_DATA, 5001, 40000, ISN_B + 1, ISN_A + 1 + acked_segments * MSS, ACK, 0))
    return [
        (T0 + 0.000, tcp_frame(A_DATA, B_DATA, 40000, 5001, ISN_A, 0, SYN, 0)),
        (T0 + 0.010, tcp_frame(B_DATA, A_DATA, 5001, 40000, ISN_B, ISN_A + 1, SYN | ACK, 0)),
        (T0 + 0.020, tcp_frame(A_DATA, B_DATA, 40000, 5001, ISN_A + 1, ISN_B + 1, ACK, 0)),
        d(1.000, 0), a(1.050, 1),                 # RTT 0.050
        d(1.100, 1), a(1.160, 2),                 # RTT 0.060
        d(1.200, 3), d(1.210, 2),                 # segment 3 before 2: reordering (2 fills the hole)
        a(1.300, 4),                              # RTT 0.100 (seg 3) and 0.090 (seg 2)
        d(1.400, 4), d(1.700, 4, retx=True),      # segment 4 sent twice: one retransmission, no sample
        a(1.750, 5),
        d(1.800, 5), a(1.830, 6),                 # RTT 0.030
        (T0 + 2.000, tcp_frame(A_DATA, B_DATA, 40000, 5001, ISN_A + 1 + 6 * MSS, ISN_B + 1, FIN | ACK, 0)),
        (T0 + 2.010, tcp_frame(B_DATA, A_DATA, 5001, 40000, ISN_B + 1, ISN_A + 2 + 6 * MSS, FIN | ACK, 0)),
        (T0 + 2.020, tcp_frame(A_DATA, B_DATA, 40000, 5001, ISN_A + 2 + 6 * MSS, ISN_B + 2, ACK, 0)),
    ]


def udp_flow() -> list[tuple[float, bytes]]:
    return [(T0 + 0.5 + 0.1 * i, udp_frame(B_LINK, A_LINK, 9000, 9001, 200)) for i in range(5)]


EXPECTED_RTTS = sorted([0.050, 0.060, 0.100, 0.090, 0.030])
EXPECTED = {
    "packets": 18 + 5,
    "data_flow": {"packets": 11, "data_segments": 7, "retransmissions": 1, "retrans_bytes": MSS,
                  "out_of_order": 1, "payload_bytes": 7 * MSS, "rtt_samples": 5},
    "ack_flow": {"packets": 7, "data_segments": 0, "retransmissions": 0, "rtt_samples": 0},
    "udp_flow": {"packets": 5, "bytes": 5 * (14 + 28 + 200), "payload_bytes": 5 * 200},
}


def topology(rate_bps: float = 1_000_000.0) -> dict:
    """The parts of topology.json the analysis reads."""
    def host(name, link_addr, data, peer_data, peer_link):
        return {"name": name, "data_address": data, "loopback": data,
                "interfaces": [{"node": name, "ifname": "eth1", "address": link_addr + "/30", "link": "a-b"}],
                "routes": [{"destination": peer_data + "/32", "via": peer_link, "dev": "eth1"}]}
    return {"hosts": [host("a", A_LINK, A_DATA, B_DATA, B_LINK), host("b", B_LINK, B_DATA, A_DATA, A_LINK)],
            "links": [{"name": "a-b", "a": "a", "b": "b", "a_if": "eth1", "b_if": "eth1",
                       "a_to_b": {"rate": rate_bps}, "b_to_a": {"rate": rate_bps}}]}


def make_run(rep_dir: Path, extra_packets: int = 0) -> None:
    """A run directory holding only topology.json and pcap/a-b.pcap (+ empty nodes/)."""
    recs = connection() + udp_flow()
    # filler: UDP packets a->b to make the file span several parse ranges
    recs += [(T0 + 3 + i * 1e-4, udp_frame(A_LINK, B_LINK, 7000, 7001, 60)) for i in range(extra_packets)]
    write_pcap(rep_dir / "pcap" / "a-b.pcap", recs)
    (rep_dir / "nodes").mkdir(parents=True, exist_ok=True)
    (rep_dir / "topology.json").write_text(json.dumps(topology()))
