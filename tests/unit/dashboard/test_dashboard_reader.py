"""The dashboard's incremental readers: offsets kept between reads, a shrunk or replaced file read again, bad
lines reported (never raised), a half-written line waited for, a 100 MB file streamed in bounded memory."""
from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

from testbed.dashboard.reader import JsonFile, JsonlReader


def line(**kw) -> str:
    return json.dumps({"ts": 1.0, "node": "testbed", **kw}) + "\n"


def host(cpu: float) -> str:
    return line(cpu_percent=cpu, mem_percent=10.0)


def records(r: JsonlReader) -> tuple[list[dict], list[str]]:
    items = list(r.read())
    return [i.record for i in items if i.record is not None], [i.problem for i in items if i.problem]


def test_reads_from_its_offset_and_waits_for_the_rest_of_a_line(tmp_path: Path) -> None:
    p = tmp_path / "host.jsonl"
    r = JsonlReader(p, "host")
    assert records(r) == ([], [])                               # not there yet: nothing, no problem
    p.write_text(host(1) + host(2))
    got, problems = records(r)
    assert [g["cpu_percent"] for g in got] == [1, 2] and not problems
    half = host(3)
    with open(p, "a") as f:
        f.write(half[:10])                                      # its writer is mid-line
    assert records(r) == ([], []) and r.offset == len(host(1) + host(2))
    with open(p, "a") as f:
        f.write(half[10:] + host(4))
    got, problems = records(r)
    assert [g["cpu_percent"] for g in got] == [3, 4] and not problems and r.lineno == 4


def test_a_shrunk_or_replaced_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    p = tmp_path / "host.jsonl"
    p.write_text(host(1) + host(2) + host(3))
    r = JsonlReader(p, "host")
    assert len(records(r)[0]) == 3
    p.write_text(host(9))                                       # truncated and rewritten: shorter
    got, problems = records(r)
    assert [g["cpu_percent"] for g in got] == [9]
    assert len(problems) == 1 and "truncated or replaced" in problems[0]
    new = tmp_path / "new"
    new.write_text(host(7) + host(8))                           # rotated: another file, longer than the offset
    os.replace(new, p)
    got, problems = records(r)
    assert [g["cpu_percent"] for g in got] == [7, 8] and len(problems) == 1


def test_malformed_and_off_schema_lines_are_problems_and_reading_goes_on(tmp_path: Path) -> None:
    p = tmp_path / "host.jsonl"
    p.write_text(host(1) + "{not json\n" + "[1, 2]\n" + line(cpu_percent="high", mem_percent=1) + "\n" + host(2))
    got, problems = records(JsonlReader(p, "host"))
    assert [g["cpu_percent"] for g in got] == [1, 2]
    assert len(problems) == 3
    assert "line 2: not JSON" in problems[0] and "line 3: not a JSON object" in problems[1]
    assert "line 4" in problems[2] and "cpu_percent" in problems[2]


def test_a_line_that_stays_half_written_is_reported_once(tmp_path: Path) -> None:
    p = tmp_path / "host.jsonl"
    p.write_text(host(1) + '{"ts": 2, "no')                      # its writer was killed mid-line
    r = JsonlReader(p, "host")
    assert len(records(r)[0]) == 1 and r.take_problem() is None
    records(r)
    assert "line 2: half-written" in (r.take_problem() or "")
    records(r)
    assert r.take_problem() is None


def test_an_over_long_line_is_skipped_not_buffered(tmp_path: Path) -> None:
    p = tmp_path / "host.jsonl"
    p.write_text(host(1) + line(pad="x" * 5000) + host(2))
    got, problems = records(JsonlReader(p, "host", chunk=512, max_line=1024))
    assert [g["cpu_percent"] for g in got] == [1, 2]
    assert len(problems) == 1 and "line 2: longer than 1024 bytes" in problems[0]


def test_a_100_mb_file_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    rec = line(spool_messages=0, spool_bytes=0, neighbours={}, delivered=0, pad="x" * (1 << 20)).encode()
    with open(p, "wb") as f:
        for _ in range(100):
            f.write(rec)
    assert p.stat().st_size > 100 * 10**6
    r = JsonlReader(p, "metrics")
    tracemalloc.start()
    try:
        n = sum(1 for item in r.read() if item.record is not None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 100 and r.offset == p.stat().st_size
    assert peak < 12 * 2**20, f"peak {peak / 2**20:.1f} MiB while reading a 100 MB file"


def test_a_json_document_is_read_again_only_when_replaced(tmp_path: Path) -> None:
    p = tmp_path / "topology.json"
    f = JsonFile(p)
    assert not f.changed() and f.load() == (None, None)
    p.write_text('{"links": []}')
    assert f.changed() and f.load() == ({"links": []}, None) and not f.changed()
    tmp = tmp_path / "t.tmp"
    tmp.write_text('{"links": [1]}')
    os.replace(tmp, p)                                          # as Network._save_state replaces it
    assert f.changed() and f.load()[0] == {"links": [1]}
    p.write_text('{"links": [')                                 # torn: a problem, tried again next time
    doc, problem = f.load()
    assert doc is None and "cannot be read" in (problem or "") and f.changed()
