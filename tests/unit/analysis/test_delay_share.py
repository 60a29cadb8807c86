"""The delay by message size stands beside the share of the bucket's accepted copies it covers."""
from __future__ import annotations

import math

import pandas as pd

from spark_analysis.compare import RUN_METRICS, summarize


def test_each_size_bucket_has_its_delivered_share_pooled_over_the_repetitions() -> None:
    runs = pd.DataFrame({"cell": ["c", "c"], "rep": ["1", "2"], "mode": "fragmenting",
                         **{m: [1.0, 1.0] for m in RUN_METRICS}})
    delay = pd.DataFrame({"cell": "c", "rep": ["1", "2", "1", "2"], "mode": "fragmenting",
                          "bucket": ["1", "1", "91-100", "91-100"], "mean_delay_s": [1.0, 1.2, 50.0, math.nan],
                          "messages": [10, 10, 3, 0], "accepted": [10, 10, 4, 4]})
    _summary, delays = summarize(runs, delay)
    row = delays.set_index("bucket")
    assert row.loc["1", "delivered_share"] == 1.0 and row.loc["1", "accepted"] == 20
    # 3 of 8 delivered: the one delivered mean delay speaks for 37.5% of the bucket
    assert row.loc["91-100", "delivered_share"] == 0.375
    assert 0 < row.loc["91-100", "delivered_share_lo"] < 0.375 < row.loc["91-100", "delivered_share_hi"] < 1
