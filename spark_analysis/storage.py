"""Run directories on any Hadoop file system (hdfs://, s3a://, file://), listed through the Spark JVM.

A local path stays a pathlib.Path. A URI with another scheme (or file:// when asked) becomes a
HadoopPath: the small part of the pathlib API the analysis uses (`/`, name, parent, is_dir, is_file,
glob, read_text, open, stat().st_size), answered by `org.apache.hadoop.fs.FileSystem` of the
session's Hadoop configuration. So the Spark configuration (fs.s3a.* keys, core-site.xml of a
cluster) decides how a directory is reached, not this code. str() of a HadoopPath is its URI, which
Spark readers and the pcap tasks (pcap_ingest._read_range) take as they are.
"""
from __future__ import annotations

import fnmatch
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCAL_SCHEMES = ("", "file")


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def is_local(uri: str) -> bool:
    return scheme(uri) in LOCAL_SCHEMES


@dataclass(frozen=True)
class Stat:
    st_size: int


class HadoopPath:
    """A file or folder on a Hadoop FileSystem, addressed by its URI."""

    def __init__(self, uri: str, spark: Any) -> None:
        self._uri = uri.rstrip("/") if uri.count("/") > 3 else uri
        self._spark = spark

    # ---- pure path arithmetic (no I/O) ----
    def __str__(self) -> str:
        return self._uri

    def __repr__(self) -> str:
        return f"HadoopPath({self._uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HadoopPath) and other._uri == self._uri

    def __hash__(self) -> int:
        return hash(self._uri)

    def __lt__(self, other: "HadoopPath") -> bool:
        return self._uri < other._uri

    def __truediv__(self, name: str) -> "HadoopPath":
        return HadoopPath(self._uri.rstrip("/") + "/" + str(name).strip("/"), self._spark)

    @property
    def name(self) -> str:
        rest = self._uri.split("://", 1)[-1]
        return rest.rstrip("/").rsplit("/", 1)[-1] if "/" in rest else ""

    @property
    def stem(self) -> str:
        n = self.name
        return n.rsplit(".", 1)[0] if "." in n[1:] else n

    @property
    def parent(self) -> "HadoopPath":
        head, _, _ = self._uri.rstrip("/").rpartition("/")
        return HadoopPath(head if head.count("/") > 2 else head + "/", self._spark)

    # ---- I/O through the JVM ----
    def _jpath(self) -> Any:
        return self._spark._jvm.org.apache.hadoop.fs.Path(self._uri)

    def _fs(self) -> Any:
        return self._jpath().getFileSystem(self._spark._jsc.hadoopConfiguration())

    def _status(self) -> Any | None:
        try:
            return self._fs().getFileStatus(self._jpath())
        except Exception as e:  # py4j wraps the Java exception; its text names the class
            text = str(e)
            if "FileNotFoundException" in text:
                return None
            from node.errors import UserError
            first = next((ln.strip() for ln in text.splitlines() if "Exception" in ln), text.strip()[:200])
            raise UserError(f"cannot read {self._uri} through Hadoop ({first[:300]}).") from None

    def exists(self) -> bool:
        return self._status() is not None

    def is_dir(self) -> bool:
        st = self._status()
        return st is not None and st.isDirectory()

    def is_file(self) -> bool:
        st = self._status()
        return st is not None and st.isFile()

    def stat(self) -> Stat:
        st = self._status()
        if st is None:
            raise FileNotFoundError(self._uri)
        return Stat(int(st.getLen()))

    def iterdir(self) -> list["HadoopPath"]:
        if not self.is_dir():
            return []
        return sorted(self / s.getPath().getName() for s in self._fs().listStatus(self._jpath()))

    def glob(self, pattern: str) -> list["HadoopPath"]:
        """Shell-style pattern, one component per level (like pathlib, without **)."""
        level = [self]
        for part in pattern.strip("/").split("/"):
            level = [c for p in level for c in p.iterdir() if fnmatch.fnmatchcase(c.name, part)]
        return sorted(level)

    def read_bytes(self) -> bytes:
        jvm = self._spark._jvm
        stream = self._fs().open(self._jpath())
        try:
            return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open(self, mode: str = "r", encoding: str = "utf-8") -> io.IOBase:
        if mode not in ("r", "rt", "rb"):
            raise ValueError("HadoopPath is read-only")
        data = self.read_bytes()
        return io.BytesIO(data) if "b" in mode else io.StringIO(data.decode(encoding))


def resolve(directory: str | Path, spark: Any = None, hadoop: bool | None = None) -> Path | HadoopPath:
    """The root of a run tree: a local Path, or a HadoopPath for other schemes (and file:// when hadoop=True).

    hadoop=None chooses by scheme; a non-local scheme needs a Spark session (its JVM does the I/O)."""
    s = str(directory)
    use_hadoop = (not is_local(s)) if hadoop is None else hadoop
    if not use_hadoop:
        return Path(s.removeprefix("file://"))
    if spark is None:
        from node.errors import UserError
        raise UserError(f"{s} is not a local path: reading it needs a Spark session (pass spark=...).")
    if "://" not in s:
        s = Path(s).resolve().as_uri()
    return HadoopPath(s, spark)
