"""spark_analysis report on a synthetic run tree: numbers, HTML, errors."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from spark_analysis.__main__ import main, report
from node.errors import UserError

from .runtree import MODES, log_ci2, make_tree, mean_ci2

REPO = Path(__file__).resolve().parents[3]


def test_per_run_figures_match(built):
    expected, out, _ = built
    runs = pd.read_csv(out / "runs.csv", dtype={"rep": str})
    assert len(runs) == 4
    for row in runs.itertuples():
        exp = expected[(row.cell, row.rep)]
        assert row.mode == exp["mode"]
        for k in ("submitted", "accepted", "delivered", "undelivered", "duplicates"):
            assert getattr(row, k) == exp[k], (row.cell, row.rep, k)
        assert row.throughput_multi == pytest.approx(exp["throughput_multi"], rel=1e-9)


def test_loss_and_duplicates_detected(built):
    expected, out, _ = built
    runs = pd.read_csv(out / "runs.csv", dtype={"rep": str}).set_index(["cell", "rep"])
    assert "lost" not in runs.columns     # the records' shortfall is not the loss checker's verdict
    assert runs.loc[("frag", "2"), "undelivered"] == 3
    assert runs.loc[("frag", "2"), "duplicates"] == 2
    assert runs.loc[("nofrag", "1"), "duplicates"] == 1
    assert runs.loc[("nofrag", "2"), ["undelivered", "duplicates"]].tolist() == [0, 0]


def test_summary_means_and_ci(built):
    expected, out, _ = built
    summary = pd.read_csv(out / "summary.csv")
    for cell in MODES:
        for metric in ("delivered", "undelivered", "duplicates", "throughput_multi"):
            row = summary[(summary.cell == cell) & (summary.metric == metric)].iloc[0]
            a, b = expected[(cell, "1")][metric], expected[(cell, "2")][metric]
            m, ci = mean_ci2(a, b)
            assert row["n"] == 2
            assert row["mean"] == pytest.approx(m, rel=1e-9)
            if metric == "throughput_multi":  # strictly positive: t on logs, bounds > 0
                g, lo, hi = log_ci2(a, b)
                assert row["ci_method"] == "t on logs" and 0 < row["ci95_lo"]
                assert (row["ci_centre"], row["ci95_lo"], row["ci95_hi"]) == pytest.approx((g, lo, hi), rel=1e-9)
                assert row["ci95"] == pytest.approx((hi - lo) / 2, rel=1e-9)
            else:  # counts can be 0: t on raw values, the lower bound never below 0
                assert row["ci95_lo"] == pytest.approx(max(0.0, m - ci), rel=1e-9, abs=1e-12)
                assert row["ci95_hi"] == pytest.approx(m + ci, rel=1e-9, abs=1e-12)
                assert row["ci95"] == pytest.approx((row["ci95_hi"] - row["ci95_lo"]) / 2, rel=1e-9)


def test_delay_by_bucket(built):
    expected, out, _ = built
    delays = pd.read_csv(out / "delay_by_size.csv", dtype={"bucket": str})
    assert set(delays["bucket"]) == {"1", "2-10", "11-20", "21-30", "71-80"}
    assert len(delays) == 10
    for row in delays.itertuples():
        a, b = expected[(row.cell, "1")]["delay"][row.bucket], expected[(row.cell, "2")]["delay"][row.bucket]
        m, _ = mean_ci2(a, b)
        g, lo, hi = log_ci2(a, b)
        assert row.n == 2
        assert row.mean_delay_s == pytest.approx(m, rel=1e-9)
        assert (row.ci_centre, row.ci95_lo, row.ci95_hi) == pytest.approx((g, lo, hi), rel=1e-9)
        assert row.ci95_lo > 0
    # fragmenting was generated 1.5x slower per fragment: visible in the largest bucket
    big = delays[delays.bucket == "71-80"].set_index("mode")["mean_delay_s"]
    assert big["fragmenting"] > big["non-fragmenting"]


def test_html_self_contained(built):
    _, out, page = built
    text = Path(page).read_text()
    for section in ('id="summary"', 'id="delay"', 'id="runs"', 'id="headline-table"'):
        assert section in text
    # the headline comes before the per-metric summary, with the CI method named
    assert text.index('class="headline"') < text.index('id="headline-table"') < text.index('id="summary"')
    assert "Fragmenting delivered messages of 2+ fragments at" in text and "t on logs" in text
    headline = pd.read_csv(out / "headline.csv")
    assert set(headline["mode"]) == {"fragmenting", "non-fragmenting"} and (headline["throughput_multi_lo"] > 0).all()
    assert "data:image/png;base64,iVBOR" in text
    assert "<td>fragmenting</td>" in text and "<th>n</th>" in text
    assert (out / "delay_by_size.png").read_bytes().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def single_run(spark, tmp_path_factory):
    """(exit status, stdout, report folder) of the CLI's report of one run directory, whose submissions hold
    one to a list of recipients with an integer timestamp."""
    tmp = tmp_path_factory.mktemp("single")
    make_tree(tmp / "exp", messages=10)
    f = tmp / "exp" / "frag" / "1" / "nodes" / "a" / "submissions.jsonl"
    f.write_text(f.read_text() + '{"ts": 1700000100, "node": "a", "msg_id": "multi", "src": "a", '
                 '"dst": ["b", "c"], "size": 10, "accepted": true, "reason": ""}\n')
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["report", str(tmp / "exp" / "frag" / "1"), "--out", str(tmp / "o")])
    return rc, stdout.getvalue(), tmp / "o"


def test_cli_single_run_dir(single_run):
    rc, stdout, out = single_run
    assert rc == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs[["cell", "mode", "delivered"]].values.tolist() == [["frag", "fragmenting", 10]]
    assert "report written to" in stdout


def test_schema_violation_names_file_and_line(spark, tmp_path):
    make_tree(tmp_path / "exp", messages=10)
    f = tmp_path / "exp" / "nofrag" / "2" / "nodes" / "b" / "deliveries.jsonl"
    lines = f.read_text().splitlines()
    lines[4] = lines[4].replace('"hops": 2', '"hops": "two"')
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        report(str(tmp_path / "exp"), str(tmp_path / "o"), spark=spark)
    msg = str(err.value)
    assert f"{f}:5:" in msg and "'hops'" in msg


def test_missing_dir_exits_2_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "spark_analysis", "report", str(tmp_path / "nope")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_runs_exits_2(tmp_path):
    assert main(["report", str(tmp_path)]) == 2


def test_mean_ci_student_t():
    from spark_analysis.stats import mean_ci, t975

    assert t975(1) == pytest.approx(12.706, abs=1e-3) and t975(4) == pytest.approx(2.776, abs=1e-3)
    m, ci, n = mean_ci([1.0, 2.0, 3.0])
    assert (m, n) == (2.0, 3) and ci == pytest.approx(t975(2) * 1.0 / 3 ** 0.5)
    assert mean_ci([5.0])[2] == 1 and mean_ci([])[2] == 0


def test_list_dst_and_integer_ts_are_read(single_run):
    row = pd.read_csv(single_run[2] / "runs.csv").iloc[0]
    assert (row["submitted"], row["accepted"], row["delivered"], row["undelivered"]) == (12, 11, 10, 1)


def test_runs_without_records_is_a_user_error(spark, tmp_path):
    (tmp_path / "exp" / "c" / "1" / "nodes" / "a").mkdir(parents=True)
    with pytest.raises(UserError, match="no submission or delivery records"):
        report(str(tmp_path / "exp"), spark=spark)


# ---- sections added with the full report -------------------------------------------------------

def html_table(text: str, table_id: str) -> list[list[str]]:
    """Rows (header first) of the table with this id in our own report HTML."""
    import html as html_mod
    import re

    body = text.split(f'<table id="{table_id}">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body)
    return [[html_mod.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", r)] for r in rows]


def test_html_numbers_agree_with_csv(built):
    from spark_analysis.report import _fmt

    _, out, page = built
    text = Path(page).read_text()
    for table_id, csv in (("summary-table", "summary.csv"), ("runs-table", "runs.csv"),
                          ("comparison-table", "comparison.csv"), ("health-table", "health.csv")):
        rows = html_table(text, table_id)
        df = pd.read_csv(out / csv, dtype={"rep": str, "cell": str})
        assert rows[0] == list(df.columns), table_id
        assert len(rows) - 1 == len(df), table_id
        for html_row, csv_row in zip(rows[1:], df.itertuples(index=False)):
            for h, v in zip(html_row, csv_row):
                if isinstance(v, float) and not pd.isna(v):
                    assert float(h) == pytest.approx(v, rel=1e-3), table_id   # shown with 4 significant digits
                elif pd.isna(v):
                    assert h in ("–", "nan", ""), table_id
                else:
                    assert h == _fmt(v) or h == str(v), table_id
    for section in ('id="comparison"', 'id="delivery"', 'id="health"'):
        assert section in text
    # nothing swept, no resource metrics, no pcaps: those sections and their links are left out
    for anchor in ("sweeps", "resources", "network"):
        assert f'id="{anchor}"' not in text and f'href="#{anchor}"' not in text, anchor
    assert "no data" not in text


def test_delivery_probability_and_comparison_ratio(built):
    expected, out, _ = built
    runs = pd.read_csv(out / "runs.csv", dtype={"rep": str}).set_index(["cell", "rep"])
    assert runs.loc[("frag", "2"), "delivery_prob"] == pytest.approx(97 / 100)
    assert runs.loc[("nofrag", "2"), "delivery_prob"] == pytest.approx(1.0)
    # the cell's interval: Wilson on the pooled counts, inside [0, 1]
    summary = pd.read_csv(out / "summary.csv")
    prob = summary[summary.metric == "delivery_prob"].set_index("cell")
    assert (prob["ci_method"] == "Wilson on pooled counts").all()
    assert prob.loc["nofrag", "ci95_hi"] == 1.0 and ((prob["ci95_lo"] >= 0) & (prob["ci95_hi"] <= 1)).all()
    comp = pd.read_csv(out / "comparison.csv")
    row = comp[(comp.setting == "all") & (comp.metric == "throughput_multi")].iloc[0]
    frag = (expected[("frag", "1")]["throughput_multi"] + expected[("frag", "2")]["throughput_multi"]) / 2
    nofrag = (expected[("nofrag", "1")]["throughput_multi"] + expected[("nofrag", "2")]["throughput_multi"]) / 2
    assert row["frag_n"] == 2 and row["nonfrag_n"] == 2
    assert row["ratio_frag_nonfrag"] == pytest.approx(frag / nofrag, rel=1e-9)
    # every output table also exists as Parquet
    for name in ("runs", "summary", "comparison", "health", "latency_cdf", "hops"):
        assert (out / "tables" / f"{name}.parquet").is_file(), name


def test_health_flags_losses_and_duplicates(built):
    _, out, _ = built
    health = pd.read_csv(out / "health.csv", dtype={"rep": str}, keep_default_na=False).set_index(["cell", "rep"])
    # summary.json has no checker verdict here: the records' shortfall is named undelivered, never lost
    assert "undelivered=3" in health.loc[("frag", "2"), "problems"] and "lost=" not in health.loc[("frag", "2"), "problems"]
    assert "duplicates=2" in health.loc[("frag", "2"), "problems"]
    assert health.loc[("nofrag", "2"), "problems"] == ""
    assert "host saturated (steal)" in health.loc[("nofrag", "1"), "problems"]
    assert {"late", "undelivered"} <= set(health.columns)            # the checker's late copies beside losses
    assert int(health.loc[("frag", "2"), "undelivered"]) == 3
    refusals = pd.read_csv(out / "refusals.csv", dtype={"rep": str})
    assert set(refusals["reason"]) == {"spool full"} and refusals["refused"].tolist() == [1, 1, 1, 1]


def test_latency_cdf_and_hops(built):
    _, out, _ = built
    cdf = pd.read_csv(out / "latency_cdf.csv")
    keys = list(zip(cdf["cell"], cdf["mode"], cdf["q"]))
    assert keys == sorted(keys)            # rows in order of cell, mode and quantile, as the other tables
    for (_, _), g in cdf.groupby(["cell", "mode"]):
        assert g["delay_s"].is_monotonic_increasing and g["n_runs"].iloc[0] == 2
    hops = pd.read_csv(out / "hops.csv")
    assert set(hops["hops"]) == {2}


def test_svg_plots_and_bad_plot_format(built, tmp_path):
    _, out, _ = built       # reported with plots="png,svg"
    assert (out / "delay_by_size.svg").read_text().lstrip().startswith("<?xml")
    assert (out / "delay_by_size.png").read_bytes().startswith(b"\x89PNG")
    assert main(["report", str(out.parent / "synthetic"), "--out", str(tmp_path / "o"), "--plots", "gif"]) == 2
    assert not (tmp_path / "o").exists()
