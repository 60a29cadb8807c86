"""The report's MQ rate control section without Spark: the statements beside the paper's, the figures, the HTML."""
from __future__ import annotations

import pandas as pd

from spark_analysis.sections.rates import RateTables, figures, section_html, statements


def tables(overflow_on: int = 0) -> RateTables:
    rt = RateTables(present=True, burst=(100.0, 200.0), client2="mq2")
    rows = []
    for ctl, q_in, r_in in (("without control", 1_000_000, 333e3), ("with control", 200_000, 530e3)):
        for t in range(0, 300, 10):
            burst = 100 <= t <= 200
            rows.append({"cell": ctl[:4], "rep": "1", "control": ctl, "t": float(t), "client": "mq2",
                         "queue_bytes": q_in if burst else 10_000, "rate_bps": r_in if burst else 160e3,
                         "assigned_bps": 1e6 if burst else 333e3})
    rt.series = pd.DataFrame(rows)
    rt.overflow = pd.DataFrame([
        {"cell": "with", "rep": "1", "control": "without control", "client": "mq2", "accepted": 900,
         "overflowed": 450, "overflowed_in_burst": 450},
        {"cell": "with", "rep": "1", "control": "with control", "client": "mq2", "accepted": 1350,
         "overflowed": overflow_on, "overflowed_in_burst": overflow_on}])
    rt.overflow_curve = pd.DataFrame({"cell": "with", "rep": "1", "control": "without control", "client": "mq2",
                                      "t": [0.0, 150.0, 190.0], "n": [0, 1, 2]})
    rt.root = pd.DataFrame({"cell": ["a", "b"], "rep": "1", "control": ["without control", "with control"],
                            "t": [1.0, 1.0], "queue_bytes": [10_000, 30_000], "ma": [10_000.0, 30_000.0]})
    return rt


def test_every_published_statement_is_set_beside_ours():
    st = statements(tables())
    assert len(st) == 5 and list(st["holds"]) == ["yes"] * 5
    assert "450 overflowed" in st.iloc[0]["ours"] and "530 kbit/s in the burst" in st.iloc[3]["ours"]


def test_an_overflow_with_control_is_flagged():
    st = statements(tables(overflow_on=3))
    assert st.iloc[1]["holds"] == "NO" and "3 overflowed" in st.iloc[1]["ours"]


def test_figures_and_html():
    rt = tables()
    names = [name for _fig, name, _alt in figures(rt)]
    assert names == ["rate_fig9_overflow", "rate_fig10_queue", "rate_fig11_rate", "rate_fig12_root_queue"]
    page = section_html(rt, lambda df, ident: f"<table id={ident}>{len(df)}</table>")
    assert 'id="rates"' in page and "rate-statements-table" in page and "100-200 s" in page
    assert section_html(RateTables(), lambda df, ident: "") == ""


def test_the_console_line_names_every_clients_overflow():
    from testbed.accounting.rates import line
    acc = {"rule": "fixed", "clients": {"mq1": {"overflowed": 0}, "mq2": {"overflowed": 8727}},
           "root": {"max_queue_bytes": 185000, "not_now": 0}}
    assert line(acc) == 'rate control (fixed): overflowed mq1 0, mq2 8727; root queue at most 185 kB, 0 "not now"'


def test_starvation_per_client_and_its_interval_over_the_repetitions(tmp_path):
    from spark_analysis.layout import Run
    from spark_analysis.sections.rates import by_rule, starvation

    def run(rep: str, starved: float, over: int) -> Run:
        clients = {"mq1": {"starved_s": starved, "overflowed": 0, "max_queue_bytes": 150_000},
                   "mq2": {"starved_s": 0.0, "overflowed": over, "max_queue_bytes": 80_000}}
        return Run(tmp_path, "decile", rep, summary={"rate_control": {"rule": "decile", "clients": clients}})

    per_rep = starvation([run("1", 100.0, 0), run("2", 120.0, 0), run("3", 110.0, 3)])
    assert list(per_rep["starved_s"]) == [100.0, 0.0, 120.0, 0.0, 110.0, 0.0]
    table = by_rule(per_rep).set_index("client")
    assert table.loc["mq1", "n"] == 3 and table.loc["mq1", "starved_s"] == 110.0
    assert table.loc["mq1", "starved_s_ci_lo"] < 110.0 < table.loc["mq1", "starved_s_ci_hi"]
    assert table.loc["mq2", "overflowed"] == 1.0 and table.loc["mq2", "overflowed_ci_lo"] == 0.0
    rt = tables()
    rt.by_rule = by_rule(per_rep)
    assert {"rate_client_series", "rate_root_queue", "rate_starvation", "rate_by_rule"} <= set(rt.named())
    assert "rate-by-rule-table" in section_html(rt, lambda df, ident: f"<table id={ident}></table>")
