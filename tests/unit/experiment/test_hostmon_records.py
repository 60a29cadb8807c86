"""HostMonitor on the real /proc, /proc parsing on crafted files, and the saturation rule at its boundaries."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from node import schema
from testbed.experiment import hostmon
from testbed.experiment.hostmon import HostMonitor, saturation

pytestmark = pytest.mark.timeout(60)


def unused_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_monitor_writes_schema_valid_records_at_its_interval(tmp_path: Path) -> None:
    interval = 0.5
    run_for = 2.6
    stop_burn = threading.Event()

    def burn() -> None:        # keep this process busy so its own CPU share is clearly above zero
        while not stop_burn.is_set():
            sum(range(1000))

    burner = threading.Thread(target=burn, daemon=True)
    burner.start()
    gone = unused_pid()
    mon = HostMonitor(tmp_path / "sub" / "host.jsonl", lambda: {"self": os.getpid(), "gone": gone}, interval=interval)
    try:
        mon.start()
        mon.start()            # a second start is a no-op, not a second thread
        time.sleep(run_for)
    finally:
        mon.stop()
        stop_burn.set()
        burner.join()
    records = read_records(tmp_path / "sub" / "host.jsonl")
    # expected run_for / interval = 5 samples; generous bounds for a loaded 2-core machine
    assert 3 <= len(records) <= 6
    assert mon.samples == len(records)
    for r in records:
        assert schema.validate("host", r) == []
        assert r["node"] == "testbed"
        assert r["machine"] == socket.gethostname() and schema.validate_optional("host", r) == []
        assert 0.0 <= r["cpu_percent"] <= 100.0
        assert 0.0 < r["mem_percent"] <= 100.0
        assert "gone" not in r["procs"]
    # the first sample compares against the baseline taken at start: every record has the live pid
    assert all("self" in r["procs"] for r in records)
    assert max(r["procs"]["self"] for r in records) > 10.0     # one busy thread ~ 100% of a CPU
    steps = [b["ts"] - a["ts"] for a, b in zip(records, records[1:])]
    assert all(0.3 * interval < s < 3 * interval for s in steps), steps
    # stopped means stopped: nothing more is appended
    n = len(records)
    time.sleep(2 * interval)
    assert len(read_records(tmp_path / "sub" / "host.jsonl")) == n
    mon.stop()                 # idempotent


def test_monitor_survives_a_failing_pid_source(tmp_path: Path) -> None:
    def broken() -> dict[str, int]:
        raise RuntimeError("daemons gone")

    mon = HostMonitor(tmp_path / "host.jsonl", broken, interval=0.2)
    mon.start()
    try:
        time.sleep(0.7)
    finally:
        mon.stop()
    records = read_records(tmp_path / "host.jsonl")
    assert records and all(r["procs"] == {} for r in records)


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        HostMonitor(tmp_path / "h.jsonl", dict, interval=0)


# ---- /proc parsing on crafted files --------------------------------------------------------

def test_process_ticks_with_awkward_command_name(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    # comm may hold spaces and ')': fields after it: state ppid pgrp session tty tpgid flags minflt
    # cminflt majflt cmajflt utime stime ...
    (tmp_path / "42" / "stat").write_text("42 (py (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 700 300 0 0 20 0 1 0\n")
    assert hostmon.read_process_ticks(42, proc=tmp_path) == 1000
    assert hostmon.read_process_ticks(43, proc=tmp_path) is None


def test_cpu_and_memory_from_crafted_proc(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    t = hostmon.read_cpu_times(tmp_path)
    assert t.total == 1000 and t.busy == 150 and t.steal == 0     # idle + iowait = 850
    (tmp_path / "stat").write_text("cpu  100 0 50 600 50 0 0 200 0 0\n")
    t = hostmon.read_cpu_times(tmp_path)
    assert t.total == 1000 and t.busy == 350 and t.steal == 200   # steal: wanted, not given: busy
    (tmp_path / "meminfo").write_text("MemTotal:  1000 kB\nMemFree: 100 kB\nMemAvailable:  250 kB\n")
    assert hostmon.read_mem_percent(tmp_path) == pytest.approx(75.0)


def test_real_proc_parses() -> None:
    t = hostmon.read_cpu_times()
    assert 0 < t.busy < t.total
    assert 0 < hostmon.read_mem_percent() <= 100
    assert hostmon.read_process_ticks(os.getpid()) is not None


# ---- saturation: above 90% for more than 10% of the samples ------------------------

def recs(values: list[float]) -> list[dict]:
    return [{"ts": float(i), "node": "testbed", "cpu_percent": v, "mem_percent": 10.0} for i, v in enumerate(values)]


NO_STEAL = {"cause": None, "steal_threshold": 10.0, "fraction_stolen": 0.0, "max_steal": None, "mean_steal": None}


def test_exactly_ten_percent_of_samples_is_not_saturated() -> None:
    s = saturation(recs([95.0] + [20.0] * 9))
    assert s == {"saturated": False, "fraction_above": 0.1, "samples": 10, "threshold": 90.0,
                 "fraction": 0.10, "max_cpu": 95.0, "mean_cpu": 27.5, **NO_STEAL}


def test_more_than_ten_percent_is_saturated() -> None:
    s = saturation(recs([95.0, 91.0] + [20.0] * 8))
    assert s["saturated"] is True and s["fraction_above"] == pytest.approx(0.2)
    s = saturation(recs([95.0, 91.0] + [20.0] * 17))   # 2/19 = 10.5%
    assert s["saturated"] is True


def test_exactly_at_the_threshold_is_not_above() -> None:
    s = saturation(recs([90.0] * 10))
    assert s["saturated"] is False and s["fraction_above"] == 0.0 and s["max_cpu"] == 90.0
    assert saturation(recs([90.01] * 10))["saturated"] is True


def test_no_samples_and_malformed_samples() -> None:
    assert saturation([]) == {"saturated": False, "fraction_above": 0.0, "samples": 0, "threshold": 90.0,
                              "fraction": 0.10, "max_cpu": None, "mean_cpu": None, **NO_STEAL}
    mixed = recs([99.0, 10.0]) + [{"ts": 1.0}, {"cpu_percent": "high"}, {"cpu_percent": True}, "junk"]
    s = saturation(mixed)   # type: ignore[arg-type]
    assert s["samples"] == 2 and s["saturated"] is True


def test_custom_threshold_and_fraction() -> None:
    values = [60.0] * 3 + [10.0] * 7
    assert saturation(recs(values), threshold=50.0, fraction=0.3)["saturated"] is False
    assert saturation(recs(values), threshold=50.0, fraction=0.29)["saturated"] is True


def stolen(cpu: list[float], steal: list[float]) -> list[dict]:
    return [{**r, "steal_percent": st} for r, st in zip(recs(cpu), steal)]


def test_steal_above_ten_percent_in_more_than_a_tenth_of_the_samples_saturates() -> None:
    # a gunduz run of a fresh-clone suite: our own CPU 10-15%, the hypervisor took 20-38% for 18 s of 38
    s = saturation(stolen([40.0] * 14 + [12.0] * 24, [30.0] * 14 + [0.0] * 24))
    assert s["saturated"] is True and s["cause"] == "steal" and s["fraction_above"] == 0.0
    assert s["fraction_stolen"] == pytest.approx(14 / 38, abs=1e-4) and s["max_steal"] == 30.0
    text = hostmon.saturation_text(s)
    assert "steal" in text and "37%" in text and "above 90.0%" not in text
    # exactly 10% of the samples, or exactly 10% stolen, is not above
    assert saturation(stolen([20.0] * 10, [50.0] + [0.0] * 9))["saturated"] is False
    assert saturation(stolen([20.0] * 10, [10.0] * 10))["saturated"] is False
    both = saturation(stolen([95.0] * 10, [11.0] * 10))
    assert both["cause"] == "cpu and steal" and "above 90.0%" in hostmon.saturation_text(both)


def test_a_sample_records_the_steal_of_its_interval() -> None:
    mon = HostMonitor(Path("/dev/null"), dict)
    r = mon._record(hostmon.CpuTimes(busy=100, total=1000, steal=10), hostmon.CpuTimes(busy=400, total=2000, steal=260),
                    {}, {}, 1.0)
    assert r["cpu_percent"] == 30.0 and r["steal_percent"] == 25.0
    assert schema.validate_optional("host", r) == []


def test_unwritable_path_logs_and_does_not_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "host.jsonl").mkdir()          # a directory where the file should go
    mon = HostMonitor(tmp_path / "host.jsonl", dict, interval=0.1)
    with caplog.at_level("WARNING"):
        mon.start()
        time.sleep(0.3)
        mon.stop()
    assert mon.samples == 0
    assert "host monitor not running" in caplog.text
