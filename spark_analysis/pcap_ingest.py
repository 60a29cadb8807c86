"""Pcaps to a Parquet packet table, parsed inside Spark tasks.

Two Spark jobs, neither collects packets to the driver:
1. ranges: one small task per capture reads its 24-byte header, the first record's
   timestamp and the file size, and cuts the file into byte ranges `chunk_bytes`
   long; nothing walks the whole file here (that walk was a serial step);
2. parse: one task per byte range reads its range plus a short window past it,
   finds its first record by resynchronising (pcap_parser.first_record: a chain
   of plausible record headers; a pcap has no sync marks), parses the records
   that START in its range (the next task resynchronises to exactly the record
   after the last one) and decodes the headers with numpy
   (pcap_parser.parse_block), yielding Arrow batches (mapInArrow).
The packets are written as Parquet partitioned by cell, rep (the run) and link.
Each packet gets its direction on the link (a_to_b / b_to_a) from the routes in
topology.json: the side whose routes send the destination over this link.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (ByteType, DoubleType, IntegerType, LongType, ShortType, StringType, StructField,
                               StructType)

from node.errors import UserError

from .layout import Run
from .storage import HadoopPath

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 32 << 20  # bytes per parse task: ~220k records at snaplen 128

RANGE_SCHEMA = StructType([
    StructField("cell", StringType()), StructField("rep", StringType()), StructField("link", StringType()),
    StructField("path", StringType()), StructField("start", LongType()), StructField("stop", LongType()),
    StructField("a_nets", StringType()), StructField("b_nets", StringType()),
])

# what a parse task yields: already the packet table (addresses as strings, built per distinct address)
RAW_SCHEMA = StructType([
    StructField("cell", StringType()), StructField("rep", StringType()), StructField("link", StringType()),
    StructField("pos", LongType()), StructField("ts", DoubleType()), StructField("direction", StringType()),
    StructField("src", StringType()), StructField("dst", StringType()),
    StructField("sport", IntegerType()), StructField("dport", IntegerType()), StructField("proto", ShortType()),
    StructField("length", LongType()), StructField("payload", LongType()), StructField("flags", ShortType()),
    StructField("seq", LongType()), StructField("ack", LongType()), StructField("window", IntegerType()),
])

PACKET_COLUMNS = ["cell", "rep", "link", "pos", "ts", "direction", "src", "dst", "sport", "dport", "proto",
                  "length", "payload", "flags", "seq", "ack", "window"]


@dataclass(frozen=True)
class Capture:
    """One pcap of one run: which link it watched and the prefixes each side routes over it."""
    cell: str
    rep: str
    link: str
    path: str
    a_nets: tuple[str, ...] = ()
    b_nets: tuple[str, ...] = ()


def _side_nets(topology: dict, link: dict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Destinations that side a (resp. b) sends over this link: its routes via the link's
    interface plus the peer's own address on the link."""
    hosts = {h["name"]: h for h in topology.get("hosts", [])}

    def side(me: str, my_if: str, peer: str) -> tuple[str, ...]:
        host = hosts.get(me, {})
        nets = [r["destination"] for r in host.get("routes", []) if r.get("dev") == my_if and r.get("destination")]
        for i in hosts.get(peer, {}).get("interfaces", []):
            if i.get("link") == link["name"] and i.get("address"):
                nets.append(i["address"].split("/")[0] + "/32")
        for key in ("data_address", "loopback"):
            if hosts.get(peer, {}).get(key):
                nets.append(hosts[peer][key] + "/32")
        return tuple(dict.fromkeys(nets))

    return side(link["a"], link.get("a_if", ""), link["b"]), side(link["b"], link.get("b_if", ""), link["a"])


def find_captures(runs: list[Run]) -> list[Capture]:
    caps = []
    for run in runs:
        pcaps = sorted((run.path / "pcap").glob("*.pcap"))
        if not pcaps:
            continue
        topo: dict = {}
        tf = run.path / "topology.json"
        if tf.is_file():
            try:
                topo = json.loads(tf.read_text())
            except ValueError as e:
                raise UserError(f"{tf} is not valid JSON ({e}).") from None
        links = {lk["name"]: lk for lk in topo.get("links", []) if "name" in lk}
        for p in pcaps:
            _check_header(p)
            a_nets, b_nets = _side_nets(topo, links[p.stem]) if p.stem in links else ((), ())
            caps.append(Capture(run.cell, run.rep, p.stem, str(p), a_nets, b_nets))
    return caps


def _check_header(path: Path | HadoopPath) -> None:
    """A local capture that is not a pcap is refused here, before any Spark job; a remote one (hdfs://, s3a://)
    is checked by its index task, so that the driver never reads a remote file."""
    from .pcap_parser import read_format

    if not isinstance(path, Path):
        return
    with path.open("rb") as fh:
        head = fh.read(24)
    if len(head) == 24:      # shorter: an empty capture, which the index task skips
        read_format(head, str(path))


# ---- task side --------------------------------------------------------------------------------

def _read_range(path: str, start: int, stop: int | None) -> bytes | memoryview:
    """Bytes [start, stop) of a local or remote (hdfs://, s3a://) file; stop None = to the end."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" not in path:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            stop = size if stop is None else min(stop, size)
            if stop <= start:
                return b""
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return bytes(m[start:stop])
    from pyarrow import fs as pafs

    uri = "s3://" + path[len("s3a://"):] if path.startswith("s3a://") else path
    filesystem, inner = pafs.FileSystem.from_uri(uri)
    with filesystem.open_input_file(inner) as fh:
        size = fh.size()
        stop = size if stop is None else min(stop, size)
        return fh.read_at(max(stop - start, 0), start) if stop > start else b""


def _file_size(path: str) -> int:
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" not in path:
        return os.path.getsize(path)
    from pyarrow import fs as pafs

    uri = "s3://" + path[len("s3a://"):] if path.startswith("s3a://") else path
    filesystem, inner = pafs.FileSystem.from_uri(uri)
    return int(filesystem.get_file_info(inner).size)


def _index_task(cap: tuple, chunk: int) -> list[tuple]:
    from .pcap_parser import read_format

    cell, rep, link, path, a_nets, b_nets = cap
    head = bytes(_read_range(path, 0, 24))
    if len(head) < 24:
        return []  # an empty capture (link never carried a frame, or the header was never flushed)
    read_format(head, path)  # not a pcap: one clear error now, not in every parse task
    size = _file_size(path)
    pts = list(range(24, size, chunk)) + [size]
    return [(cell, rep, link, path, a, b, a_nets, b_nets) for a, b in zip(pts[:-1], pts[1:])]


def _records_of_range(path: str, start: int, stop: int) -> tuple[bytes | memoryview, list[int], object]:
    """The bytes read for range [start, stop), the offsets (into those bytes) of the records whose
    header starts in the range, and the file's format."""
    from .pcap_parser import first_record, read_format, resync_window, walk_offsets

    head = bytes(_read_range(path, 0, 40))
    fmt = read_format(head[:24], path)
    if len(head) < 40:
        return b"", [], fmt
    data = _read_range(path, start, stop + resync_window(fmt))
    if start == 24:
        first: int | None = 0
    else:
        ref_sec = struct.unpack(fmt.endian + "I", head[24:28])[0]
        first = first_record(data, fmt, ref_sec)
    if first is None or first >= stop - start:
        return data, [], fmt
    return data, walk_offsets(data, fmt, first, stop - start), fmt


def _match(addr4, nets_json: str):
    import numpy as np

    hit = np.zeros(len(addr4), dtype=bool)
    for net in json.loads(nets_json or "[]"):
        n = ipaddress.ip_network(net, strict=False)
        if n.version != 4:
            continue
        mask = (0xFFFFFFFF << (32 - n.prefixlen)) & 0xFFFFFFFF
        hit |= (addr4 & mask) == int(n.network_address)
    return hit


def _parse_batches(batches: Iterator) -> Iterator:
    import numpy as np
    import pyarrow as pa

    from .pcap_parser import parse_block

    for batch in batches:
        for r in batch.to_pylist():
            data, offs, fmt = _records_of_range(r["path"], r["start"], r["stop"])
            cols = parse_block(data, fmt, offs)
            n = len(offs)
            v4 = cols["ipver"] == 4
            to_b = _match(cols["dst4"], r["a_nets"]) & v4
            to_a = _match(cols["dst4"], r["b_nets"]) & v4
            direction = np.zeros(n, dtype=np.int8)          # index into _DIRECTIONS
            direction[to_b & ~to_a] = 1
            direction[to_a & ~to_b] = 2
            arrays = {
                "cell": _constant(r["cell"], n), "rep": _constant(r["rep"], n), "link": _constant(r["link"], n),
                "pos": pa.array(np.asarray(offs, dtype=np.int64) + r["start"]),
                "direction": pa.DictionaryArray.from_arrays(direction, _DIRECTIONS).cast(pa.string()),
                "src": _addresses(cols["ipver"], cols["src4"], cols["src6"]),
                "dst": _addresses(cols["ipver"], cols["dst4"], cols["dst6"]),
            }
            for f in RAW_SCHEMA:
                if f.name not in arrays:
                    arrays[f.name] = pa.array(cols[f.name])
            tbl = pa.table({f.name: arrays[f.name] for f in RAW_SCHEMA})
            tbl = tbl.cast(pa.schema([pa.field(f.name, _arrow_type(f.dataType)) for f in RAW_SCHEMA]))
            yield from tbl.to_batches(max_chunksize=1 << 17)


_DIRECTIONS = ["unknown", "a_to_b", "b_to_a"]


def _constant(value: str, n: int):
    import numpy as np
    import pyarrow as pa

    return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int8), [value]).cast(pa.string())


def _addresses(ipver, a4, a6: list):
    """Address strings of a block: a capture holds few distinct addresses, so each is formatted once
    (np.unique) and the column is a dictionary expanded by Arrow; non-IP frames get null."""
    import numpy as np
    import pyarrow as pa

    n = len(ipver)
    idx = np.full(n, -1, dtype=np.int32)
    v4 = np.nonzero(ipver == 4)[0]
    uniq, inv = np.unique(a4[v4], return_inverse=True)
    names = [str(ipaddress.IPv4Address(int(u))) for u in uniq]
    idx[v4] = inv
    seen: dict[str, int] = {}
    for i in np.nonzero(ipver == 6)[0].tolist():  # rare in this testbed: per row
        name = a6[i]
        if name not in seen:
            seen[name] = len(names)
            names.append(name)
        idx[i] = seen[name]
    indices = pa.array(idx, mask=idx < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string())).cast(pa.string())


def _arrow_type(t):
    import pyarrow as pa

    return {StringType: pa.string(), LongType: pa.int64(), DoubleType: pa.float64(), ByteType: pa.int8(),
            ShortType: pa.int16(), IntegerType: pa.int32()}[type(t)]


# ---- driver side ------------------------------------------------------------------------------

def ranges(spark: SparkSession, captures: list[Capture], chunk_bytes: int = DEFAULT_CHUNK) -> list[tuple]:
    """Job 1: record-aligned byte ranges of every capture (one index task per file)."""
    if not captures:
        return []
    rows = [(c.cell, c.rep, c.link, c.path, json.dumps(list(c.a_nets)), json.dumps(list(c.b_nets)))
            for c in captures]
    chunk = int(chunk_bytes)
    try:
        return (spark.sparkContext.parallelize(rows, len(rows))
                .flatMap(lambda cap: _index_task(cap, chunk)).collect())
    except Exception as e:
        raise _task_error(e) from None


def _task_error(e: Exception) -> Exception:
    """A UserError raised inside a Spark task reaches the driver wrapped in a Java/Python exception;
    give back the UserError (one sentence, no traceback), else the original exception."""
    m = re.search(r"testbed\.errors\.UserError: (.+)|UserError: (.+)", str(e))
    if m:
        return UserError((m.group(1) or m.group(2)).strip())
    return e


def packets_frame(spark: SparkSession, split: list[tuple]) -> DataFrame:
    """Job 2 (lazy): the packet table of the given ranges, one parse task per range."""
    rdd = spark.sparkContext.parallelize(split, max(len(split), 1))
    raw = spark.createDataFrame(rdd, RANGE_SCHEMA).mapInArrow(_parse_batches, RAW_SCHEMA)
    return raw.select(*PACKET_COLUMNS)


def ingest(spark: SparkSession, captures: list[Capture], out: str, chunk_bytes: int = DEFAULT_CHUNK) -> DataFrame | None:
    """Parse every capture into Parquet at `out` (partitioned by cell, rep, link); returns the table read
    back, or None when there is no capture."""
    split = ranges(spark, captures, chunk_bytes)
    log.info("pcap ingestion: %d captures, %d parse tasks", len(captures), len(split))
    if not split:
        return None
    try:
        (packets_frame(spark, split).write.mode("overwrite")
         .partitionBy("cell", "rep", "link").parquet(out))
    except Exception as e:
        raise _task_error(e) from None
    return read_packets(spark, out)


def read_packets(spark: SparkSession, path: str) -> DataFrame:
    # partition values like "1" would otherwise come back as integers
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    return spark.read.parquet(path)


def uri(path: str | Path) -> str:
    s = str(path)
    return s if "://" in s else Path(s).resolve().as_uri()
