"""Manifests: a dataset's objects written down once, so that it starts without listing.

``s3stream ls --manifest train.jsonl s3://bucket/train/`` writes one JSON object per line::

    {"uri":"s3://bucket/train/0001.jpg","size":10342,"etag":"9b2cf535f27731c974343645a3985328"}

and ``MapDataset.from_manifest("train.jsonl")`` (or ``"s3://bucket/train.jsonl"``) reads it back.
A manifest written by other tools may name objects by ``"key"`` relative to a ``base`` URI instead
of by ``"uri"``, carry a label per object (``"label": 7``: any field, named by ``label_field``), and
other fields, which are ignored. Parquet files with the same columns are read too, through pyarrow
when it is installed.

A manifest is untrusted input: every line is checked (JSON, a key or URI, a whole non-negative
size when there is one, the label when one is asked for, no object listed twice), and the first
problem raises :class:`s3stream.ManifestError` naming the manifest, the line and what to fix. The
size is optional; where it is given, the dataset checks each object it reads against it (a stale
manifest raises ObjectChangedError instead of training on other data).
"""

from __future__ import annotations

import json
import os
from array import array
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple, Union

from .client import Client
from .errors import InvalidArgumentError, ManifestError, MissingDependencyError
from .listing import uri_base

MAX_SIZE = 1 << 62  # the most any size may be (as in the native engine)
UNKNOWN_SIZE = (1 << 64) - 1  # in Rows.sizes: the entry gave none
FORMATS = ("jsonl", "parquet")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_EXAMPLE = '{"uri": "s3://bucket/train/0001.jpg", "size": 10342}'


class Rows(NamedTuple):
    """A manifest's objects in its order: URIs as ``base`` + one UTF-8 blob
    (``blob[offsets[i]:offsets[i+1]]``, as a listing stores keys: a dataset from a manifest and one
    from listing the same objects are the same), their sizes, and their labels (None when none
    were asked for)."""

    source: str
    base: str
    blob: bytes
    offsets: array  # 'Q'
    sizes: array  # 'Q'; UNKNOWN_SIZE where the entry gave none
    labels: Optional[Union[array, List[Any]]]  # array('q') when every label is an integer


def is_uri(source: str) -> bool:
    return source.startswith(("s3://", "file://"))


def manifest_format(source: str, format: Optional[str] = None) -> str:
    """``format`` as given, else ``"parquet"`` for ``.parquet`` / ``.pq`` names and ``"jsonl"`` otherwise."""
    if format is not None:
        if format not in FORMATS:
            raise InvalidArgumentError(f"manifest format must be one of {', '.join(FORMATS)}, got {format!r}")
        return format
    return "parquet" if source.lower().endswith(_PARQUET_SUFFIXES) else "jsonl"


def read_manifest(
    source: Union[str, "os.PathLike[str]"],
    client: Client,
    *,
    base: Optional[str] = None,
    label_field: Optional[str] = None,
    format: Optional[str] = None,
) -> Rows:
    """Reads and checks a manifest from a local path or an ``s3://`` / ``file://`` URI."""
    name = os.fspath(source) if isinstance(source, os.PathLike) else source
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a manifest is a path or an s3:// or file:// URI, got {source!r}")
    if base is not None and (not isinstance(base, str) or not base):
        raise InvalidArgumentError(f"base must be a URI such as 's3://bucket/train/', got {base!r}")
    if label_field is not None and (not isinstance(label_field, str) or not label_field):
        raise InvalidArgumentError(f"label_field must be a field name such as 'label', got {label_field!r}")
    rows = _Builder(name, base, label_field)
    if manifest_format(name, format) == "parquet":
        _read_parquet(name, client, rows)
    else:
        with _open(name, client) as f:
            for number, line in enumerate(f, 1):
                rows.add_line(number, line)
    return rows.finish()


def _open(source: str, client: Client):
    return client.open(source, "rb") if is_uri(source) else open(source, "rb")


def _read_parquet(source: str, client: Client, rows: "_Builder") -> None:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(
            f"reading the Parquet manifest {source} needs pyarrow: pip install pyarrow "
            "(or write the manifest as JSON lines: s3stream ls --manifest out.jsonl URI)"
        ) from None
    with _open(source, client) as f:
        try:
            table = pq.read_table(f)
        except Exception as e:  # pyarrow's own errors: not a Parquet file, truncated, ...
            raise ManifestError(f"{source} is not a readable Parquet file ({e}); "
                                "write it with pyarrow, or as JSON lines", source) from None
    wanted = [c for c in ("uri", "key", "size", "etag", rows.label_field) if c and c in table.column_names]
    columns = {c: table.column(c).to_pylist() for c in wanted}
    for i in range(table.num_rows):
        rows.add(i + 1, {c: values[i] for c, values in columns.items() if values[i] is not None}, "row")


class _Builder:
    """Checks rows one by one and packs them; ``finish`` checks the whole (empty, duplicates)."""

    def __init__(self, source: str, base: Optional[str], label_field: Optional[str]) -> None:
        self.source, self.base, self.label_field = source, base, label_field
        self.blob = bytearray()
        self.offsets = array("Q", [0])
        self.sizes = array("Q")
        self.hashes = array("q")
        self.lines = array("Q")  # where each row came from, for messages
        self.labels: Optional[List[Any]] = [] if label_field else None
        self.unit = "line"  # what a number counts: JSON lines, or Parquet rows
        self.base_uri: Optional[str] = None  # what every URI so far starts with ("s3://bucket/")

    def fail(self, number: int, what: str, message: str) -> "ManifestError":
        return ManifestError(f"{self.source}, {what} {number}: {message}", self.source, number)

    def add_line(self, number: int, line: bytes) -> None:
        if not line.strip():
            return  # blank lines (a trailing newline, a spacer) hold no object
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise self.fail(number, "line", f"not valid JSON ({e.msg} at column {e.colno}); "
                                            f"each line must be one JSON object such as {_EXAMPLE}") from None
        except UnicodeDecodeError:
            raise self.fail(number, "line", "not UTF-8 text; a manifest is UTF-8 JSON lines") from None
        except RecursionError:
            raise self.fail(number, "line", "nests too deeply to be a manifest entry") from None
        if not isinstance(row, dict):
            raise self.fail(number, "line", f"expected a JSON object such as {_EXAMPLE}, got {type(row).__name__}")
        self.add(number, row, "line")

    def add(self, number: int, row: dict, what: str) -> None:
        self.unit = what
        uri = self._uri(number, row, what)
        size = row.get("size")
        size = UNKNOWN_SIZE if size is None else self._size(number, what, uri, size)
        etag = row.get("etag")
        if etag is not None and not isinstance(etag, str):
            raise self.fail(number, what, f"etag of {uri} must be a string, got {etag!r}")
        if self.labels is not None:
            label = row.get(self.label_field)
            if label is None:
                raise self.fail(number, what, f"{uri} has no {self.label_field!r} (label_field={self.label_field!r}); "
                                              "every entry needs one, or pass label_field=None")
            self.labels.append(label)
        if self.base_uri is None:
            self.base_uri = uri_base(uri)
        if not uri.startswith(self.base_uri):
            self._unbase()
        self.blob += uri[len(self.base_uri) :].encode("utf-8")
        self.offsets.append(len(self.blob))
        self.sizes.append(size)
        self.hashes.append(hash(uri))
        self.lines.append(number)

    def _size(self, number: int, what: str, uri: str, size: Any) -> int:
        if isinstance(size, bool) or not isinstance(size, (int, float)) or (
                isinstance(size, float) and not size.is_integer()):
            raise self.fail(number, what, f"size of {uri} must be a whole number of bytes, got {size!r}")
        if size < 0:
            raise self.fail(number, what, f"size of {uri} is negative ({size}); sizes are bytes, 0 or more")
        if size > MAX_SIZE:
            raise self.fail(number, what, f"size of {uri} ({size}) is larger than any object can be")
        return int(size)

    def _unbase(self) -> None:
        """URIs from more than one bucket: store them whole (once; rare)."""
        base = self.base_uri.encode("utf-8") if self.base_uri else b""
        blob, offsets = bytearray(), array("Q", [0])
        for i in range(len(self.offsets) - 1):
            blob += base + self.blob[self.offsets[i] : self.offsets[i + 1]]
            offsets.append(len(blob))
        self.blob, self.offsets, self.base_uri = blob, offsets, ""

    def _uri(self, number: int, row: dict, what: str) -> str:
        has_uri, has_key = "uri" in row, "key" in row
        if has_uri == has_key:
            fields = ", ".join(sorted(map(str, row))) or "none"
            if has_uri:
                raise self.fail(number, what, "has both \"uri\" and \"key\"; give one of them")
            raise self.fail(number, what, f"names no object (fields: {fields}); give \"uri\": \"s3://bucket/key\", "
                                          "or \"key\" with base= passed to from_manifest")
        value = row["uri"] if has_uri else row["key"]
        field = "uri" if has_uri else "key"
        if not isinstance(value, str) or not value:
            raise self.fail(number, what, f"\"{field}\" must be a non-empty string, got {value!r}")
        if has_key:
            if self.base is None:
                raise self.fail(number, what, f"has a \"key\" ({value!r}) but no base URI was given: pass "
                                              "base='s3://bucket/prefix/' to from_manifest, or write full URIs as \"uri\"")
            value = self.base + value
        if value.startswith("s3://"):
            bucket, _, key = value[len("s3://") :].partition("/")
            if not bucket or not key:
                raise self.fail(number, what, f"{value!r} names no object; expected s3://bucket/key")
        elif not value.startswith(("file://", "/")):
            raise self.fail(number, what, f"{value!r} is not an s3:// or file:// URI or an absolute path")
        return value

    def finish(self) -> Rows:
        count = len(self.sizes)
        if count == 0:
            raise ManifestError(f"{self.source} lists no objects; write one with: s3stream ls --manifest "
                                f"{self.source} s3://bucket/prefix/", self.source)
        duplicate = self._first_duplicate()
        if duplicate is not None:
            first, second = duplicate
            what = self.unit
            raise self.fail(self.lines[second], what, f"{self._uri_at(second)} is listed again (first on {what} "
                                                      f"{self.lines[first]}); a dataset lists each object once")
        labels: Optional[Union[array, List[Any]]] = self.labels
        if labels is not None and all(type(v) is int and -(1 << 63) <= v < (1 << 63) for v in labels):
            labels = array("q", labels)  # compact, and forked workers read it without touching refcounts
        return Rows(self.source, self.base_uri or "", bytes(self.blob), self.offsets, self.sizes, labels)

    def _uri_at(self, i: int) -> str:
        return (self.base_uri or "") + bytes(self.blob[self.offsets[i] : self.offsets[i + 1]]).decode("utf-8")

    def _first_duplicate(self) -> Optional[Tuple[int, int]]:
        """(earlier, later) indices of the object listed twice with the earliest repeat, or None.
        Equal hashes are confirmed by comparing the URIs (a collision is not a duplicate)."""
        pairs: Iterable[Tuple[int, int]]
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and len(self.hashes) > 1:
            values, order = torch.sort(torch.frombuffer(self.hashes, dtype=torch.int64), stable=True)
            same = (values[1:] == values[:-1]).nonzero().flatten().tolist()
            pairs = ((order[i].item(), order[i + 1].item()) for i in same)
        else:
            first_of: dict = {}
            found = []
            for i, h in enumerate(self.hashes):
                if h in first_of:
                    found.append((first_of[h], i))
                else:
                    first_of[h] = i
            pairs = found
        best: Optional[Tuple[int, int]] = None
        for a, b in pairs:
            a, b = min(a, b), max(a, b)
            if (best is None or b < best[1]) and self._uri_at(a) == self._uri_at(b):
                best = (a, b)
        return best


def write_manifest(objects: Iterable[Any], out: str, client: Client, base: str) -> Tuple[int, int]:
    """Writes ``{"uri", "size", "etag"}`` per object (``base + object.key``) as JSON lines to a local
    path (atomically: a failed listing leaves no partial file) or to an ``s3://`` / ``file://``
    URI (committed when complete). Returns (objects, bytes of objects) written."""
    count = total = 0

    def lines() -> Iterable[bytes]:
        nonlocal count, total
        chunk: List[str] = []
        for info in objects:
            entry = {"uri": base + info.key, "size": info.size}
            if info.etag:
                entry["etag"] = info.etag
            chunk.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
            count += 1
            total += info.size
            if len(chunk) >= 10000:
                yield ("\n".join(chunk) + "\n").encode("utf-8")
                chunk = []
        if chunk:
            yield ("\n".join(chunk) + "\n").encode("utf-8")

    if is_uri(out):
        with client.open(out, "wb") as f:
            for data in lines():
                f.write(data)
        return count, total
    tmp = f"{out}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            for data in lines():
                f.write(data)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return count, total


__all__ = ["Rows", "read_manifest", "write_manifest", "manifest_format", "FORMATS", "MAX_SIZE"]
