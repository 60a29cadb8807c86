"""The per-connection TCP logic without Spark: wrap-around, holes, Karn."""
import numpy as np

from spark_analysis.tcp_analysis import classify, rtt_samples, unwrap


def test_unwrap_across_2_32() -> None:
    base = 2**32 - 10
    seq = np.array([base, base + 5, (base + 20) % 2**32, (base + 15) % 2**32,
                    (base + 2**30) % 2**32, (base + 2**31 + 2**29) % 2**32])
    assert unwrap(seq, base).tolist() == [0, 5, 20, 15, 2**30, 2**31 + 2**29]
    # an ACK just below the base is negative, not 2^32 - 1
    assert unwrap(np.array([base - 1]), base).tolist() == [-1]


def test_classify_retransmission_vs_reordering() -> None:
    s = np.array([0, 100, 300, 200, 300, 400, 150])
    e = s + 100
    e[-1] = 250   # a repacketised retransmission overlapping seen bytes
    retx, ooo = classify(s, e)
    assert retx.tolist() == [False, False, False, False, True, False, True]
    assert ooo.tolist() == [False, False, False, True, False, False, False]


def test_partial_hole_fill_then_repeat() -> None:
    s = np.array([0, 300, 100, 100])
    e = np.array([100, 400, 200, 200])
    retx, ooo = classify(s, e)
    assert ooo.tolist() == [False, False, True, False] and retx.tolist() == [False, False, False, True]


def test_rtt_karn_excludes_retransmitted_ranges() -> None:
    t = np.array([0.0, 0.1, 0.2, 0.5])
    s = np.array([0, 100, 200, 100])
    e = s + 100
    retx = np.array([False, False, False, True])
    ack_t = np.array([0.05, 0.6, 0.7])
    ack_rel = np.array([100, 300, 300])
    idx, rtt = rtt_samples(t, s, e, retx, ack_t, ack_rel)
    assert idx.tolist() == [0, 2]
    assert rtt.tolist() == [0.05, 0.6 - 0.2]
