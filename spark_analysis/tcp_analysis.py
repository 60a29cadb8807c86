"""Per-direction TCP analysis of one connection's packets (pandas/numpy; Spark calls it per connection).

Definitions (capture point = the link's pcap, timestamps at delivery):
- data segment: a TCP packet with payload > 0; its range is [seq, seq + payload) in
  sequence space unwrapped across 2^32 relative to the direction's first packet;
- retransmission: a data segment some of whose bytes were already seen (a repeated range);
- out of order: a segment that only fills a hole left by a higher segment seen earlier
  (reordering, or a loss before the capture point);
- RTT sample (Karn): from a data segment to the first ACK in the other direction that
  covers its last byte, for segments that are neither retransmissions nor overlapped by
  one (an ACK after a retransmission cannot say which copy it acknowledges).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ACK = 0x10
SYN = 0x02
FIN = 0x01
WRAP = 1 << 32
HALF = 1 << 31

FLOW_COLUMNS = ["cell", "rep", "link", "direction", "proto", "src", "sport", "dst", "dport", "packets", "bytes",
                "payload_bytes", "first_ts", "last_ts", "duration", "throughput_bps", "goodput_bps",
                "data_segments", "retransmissions", "retrans_bytes", "out_of_order", "rtt_samples", "rtt_mean",
                "rtt_p50", "rtt_min", "rtt_max"]
RTT_COLUMNS = ["cell", "rep", "link", "src", "sport", "dst", "dport", "ts", "rel_seq", "rtt"]


def unwrap(values: np.ndarray, base: int) -> np.ndarray:
    """32-bit sequence numbers as int64 offsets from `base` (signed: a value just below base is
    negative), continuing across wrap-around."""
    rel = (values.astype(np.int64) - int(base) + HALF) % WRAP - HALF
    if len(rel) < 2:
        return rel
    d = np.diff(rel)
    step = np.where(d < -HALF, 1, np.where(d > HALF, -1, 0))
    return rel + WRAP * np.concatenate([[0], np.cumsum(step)])


def classify(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(retransmission, out_of_order) masks of data segments [s, e) in capture order."""
    n = len(s)
    retx = np.zeros(n, dtype=bool)
    ooo = np.zeros(n, dtype=bool)
    if n == 0:
        return retx, ooo
    prev_max = np.concatenate([[s[0]], np.maximum.accumulate(e)[:-1]])
    prev_max = np.maximum(prev_max, s[0])
    hole_at = np.nonzero(s > prev_max)[0]
    cand = np.nonzero(s < prev_max)[0]
    if len(cand) == 0:
        return retx, ooo
    # only the rare events are walked in Python: holes opened, and segments below the high mark
    events = sorted([(int(i), 0) for i in hole_at] + [(int(i), 1) for i in cand])
    holes: list[list[int]] = []
    for i, kind in events:
        if kind == 0:
            holes.append([int(prev_max[i]), int(s[i])])
            continue
        lo, hi = int(s[i]), int(e[i])
        fresh = 0
        kept: list[list[int]] = []
        for h_lo, h_hi in holes:
            a, b = max(lo, h_lo), min(hi, h_hi)
            if a < b:
                fresh += b - a
                if h_lo < a:
                    kept.append([h_lo, a])
                if b < h_hi:
                    kept.append([b, h_hi])
            else:
                kept.append([h_lo, h_hi])
        holes = kept
        if fresh < hi - lo:
            retx[i] = True
        else:
            ooo[i] = True
    return retx, ooo


def rtt_samples(t: np.ndarray, s: np.ndarray, e: np.ndarray, retx: np.ndarray,
                ack_t: np.ndarray, ack_rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment indices, RTTs) under Karn's rule; ack_t/ack_rel in capture order."""
    eligible = ~retx
    if retx.any():
        order = np.argsort(s, kind="stable")
        ss = s[order]
        max_len = int((e - s).max())
        for lo, hi in zip(s[retx].tolist(), e[retx].tolist()):
            # originals overlapping a retransmitted range: starts in (lo - max_len, hi)
            a = np.searchsorted(ss, lo - max_len, "right")
            b = np.searchsorted(ss, hi, "left")
            cand = order[a:b]
            eligible[cand[(e[cand] > lo) & (s[cand] < hi)]] = False
    idx = np.nonzero(eligible)[0]
    if len(idx) == 0 or len(ack_t) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    cummax = np.maximum.accumulate(ack_rel)
    k = np.maximum(np.searchsorted(ack_t, t[idx], "left"), np.searchsorted(cummax, e[idx], "left"))
    ok = k < len(ack_t)
    return idx[ok], ack_t[k[ok]] - t[idx[ok]]


def analyse_connection(pdf: pd.DataFrame) -> pd.DataFrame:
    """Flow rows (kind 'flow') and RTT rows (kind 'rtt') for the packets of one TCP connection."""
    pdf = pdf.sort_values(["ts", "pos"], kind="stable")
    out = []
    for (src, sport, dst, dport), d in pdf.groupby(["src", "sport", "dst", "dport"], sort=True):
        rev = pdf[(pdf["src"] == dst) & (pdf["sport"] == dport) & (pdf["dst"] == src) & (pdf["dport"] == sport)]
        out.extend(_direction(d, rev))
    return pd.DataFrame(out, columns=["kind", *FLOW_COLUMNS, "ts", "rel_seq", "rtt"])


def _direction(d: pd.DataFrame, rev: pd.DataFrame) -> list[dict]:
    first = d.iloc[0]
    key = {"cell": first["cell"], "rep": first["rep"], "link": first["link"], "src": first["src"],
           "sport": int(first["sport"]), "dst": first["dst"], "dport": int(first["dport"])}
    seq = d["seq"].to_numpy(np.int64)
    base = int(seq[0])
    rel = unwrap(seq, base)
    pay = d["payload"].to_numpy(np.int64)
    t_all = d["ts"].to_numpy(np.float64)
    data = pay > 0
    s, e, t = rel[data], rel[data] + pay[data], t_all[data]
    retx, ooo = classify(s, e)
    ack_rows = rev[(rev["flags"].to_numpy() & ACK) != 0]
    ack_t = ack_rows["ts"].to_numpy(np.float64)
    ack_rel = unwrap(ack_rows["ack"].to_numpy(np.int64), base) if len(ack_rows) else np.zeros(0, np.int64)
    idx, rtt = rtt_samples(t, s, e, retx, ack_t, ack_rel)
    first_ts, last_ts = float(t_all[0]), float(t_all[-1])
    duration = last_ts - first_ts
    nbytes = int(d["length"].sum())
    good = int(pay[data][~retx].sum())
    flow = dict(key, kind="flow", direction=first["direction"], proto=6, packets=len(d), bytes=nbytes,
                payload_bytes=int(pay.sum()), first_ts=first_ts, last_ts=last_ts, duration=duration,
                throughput_bps=nbytes * 8 / duration if duration > 0 else None,
                goodput_bps=good * 8 / duration if duration > 0 else None,
                data_segments=int(data.sum()), retransmissions=int(retx.sum()),
                retrans_bytes=int((e - s)[retx].sum()), out_of_order=int(ooo.sum()), rtt_samples=len(rtt),
                rtt_mean=float(rtt.mean()) if len(rtt) else None,
                rtt_p50=float(np.median(rtt)) if len(rtt) else None,
                rtt_min=float(rtt.min()) if len(rtt) else None, rtt_max=float(rtt.max()) if len(rtt) else None)
    rows = [flow]
    rows.extend(dict(key, kind="rtt", ts=float(t[i]), rel_seq=int(s[i]), rtt=float(r))
                for i, r in zip(idx.tolist(), rtt.tolist()))
    return rows
