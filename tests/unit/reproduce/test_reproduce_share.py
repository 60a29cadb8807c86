"""A figure by message size carries the delivered share beside each mean delay: in its CSV and a panel."""
from __future__ import annotations

import csv
from pathlib import Path

from testbed.reproduce.plot import write_png
from testbed.reproduce.spec import MESSAGE_SIZE, Plot
from testbed.reproduce.table import points, write_csv

PLOT = Plot(x=MESSAGE_SIZE, y="mean_delay_s", series=["nodes.all.mode"])


def test_the_share_goes_from_the_reports_table_to_the_figures_csv_and_png(tmp_path: Path) -> None:
    report = tmp_path / "delay_by_size.csv"
    report.write_text("cell,mode,bucket,mean_delay_s,ci95_lo,ci95_hi,ci_centre,ci_method,n,messages,accepted,"
                      "delivered_share,delivered_share_lo,delivered_share_hi\n"
                      "c,fragmenting,1,2.0,1.5,2.5,2.0,t on logs,3,30,30,1.0,0.88,1.0\n"
                      "c,fragmenting,91-100,60.0,40,90,60.0,t on logs,2,3,8,0.375,0.14,0.69\n")
    pts = points(report, {"c": {"nodes.all.mode": "fragmenting"}}, PLOT)
    out = tmp_path / "fig.csv"
    write_csv(pts, out)
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["x"], r["accepted"], r["delivered_share"]) for r in rows] == [("1", "30", "1.0"),
                                                                            ("91-100", "8", "0.375")]
    png = tmp_path / "fig.png"
    write_png(pts, PLOT, "by size", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
