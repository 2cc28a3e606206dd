"""Shard indexes: where each sample of a shard starts, so the epoch plan can split shards at sample
granularity and a reader can start mid-shard with one ranged GET.

An index lives beside its shard as a JSON sidecar (``train-000000.tar.idx.json``), or, when the
bucket is read-only, in a local cache (``$S3STREAM_CACHE_DIR`` or ``~/.cache/s3stream/index``).
It records the shard's ETag: an index whose shard changed is rebuilt, never trusted.
Missing indexes are built with one streaming pass per shard, all shards in parallel.
"""

from __future__ import annotations

import array
import concurrent.futures as cf
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from . import _core
from .client import Client
from .errors import NotFoundError, PermissionDeniedError

SIDECAR_SUFFIX = ".idx.json"
TAR_BLOCK = 512
_MAX_SIZE = 1 << 62  # the most any size or offset may be (as in the native engine)


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SIZE
FORMAT = "s3stream.shard-index"
VERSION = 1


@dataclass
class ShardIndex:
    uri: str
    size: int
    etag: str
    gzip: bool
    offsets: array.array = field(repr=False)  # 'Q': sample i spans [offsets[i], offsets[i+1])

    @property
    def samples(self) -> int:
        return len(self.offsets) - 1

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "shard": self.uri.rsplit("/", 1)[-1],
                "size": self.size,
                "etag": self.etag,
                "gzip": self.gzip,
                "samples": self.samples,
                "offsets": self.offsets.tolist(),
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def build(client: Client, uri: str) -> "ShardIndex":
        """Indexes the shard: one streaming pass through it (native; the GIL is released)."""
        d = _core.build_shard_index(client._native_client(), uri)
        return ShardIndex(uri, d["size"], d["etag"], d["gzip"], array.array("Q", d["offsets"]))

    @staticmethod
    def from_json(uri: str, data: bytes) -> "ShardIndex":
        """Parses a sidecar, which is untrusted input: anything but a sane index for a shard of the
        stated size raises ValueError (the caller then rebuilds the index)."""
        try:
            d = json.loads(bytes(data))
        except RecursionError:  # nesting deeper than the stack: hostile, and the same ValueError
            raise ValueError("the sidecar nests too deeply to be an index") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} {FORMAT} document")
        size, samples, raw, gzip = d.get("size"), d.get("samples"), d.get("offsets"), d.get("gzip")
        if not _is_size(size) or not _is_size(samples) or not isinstance(raw, list) or not isinstance(gzip, bool):
            raise ValueError("size, samples, offsets or gzip is missing or of the wrong kind")
        if len(raw) != samples + 1:
            raise ValueError("samples and offsets disagree")
        for i, offset in enumerate(raw):
            # Samples start at tar header boundaries, one after another; in a plain tar, inside it.
            if not _is_size(offset) or offset % TAR_BLOCK or (i and offset <= raw[i - 1]) or (not gzip and offset > size):
                raise ValueError(f"offset {i} ({offset!r}) is not a sample boundary of a {size}-byte shard")
        return ShardIndex(uri, size, str(d.get("etag", "")), gzip, array.array("Q", raw))


def sidecar_uri(shard_uri: str) -> str:
    return shard_uri + SIDECAR_SUFFIX


def cache_dir() -> str:
    return os.environ.get("S3STREAM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "s3stream", "index")


def _cache_path(shard_uri: str, directory: str) -> str:
    return os.path.join(directory, hashlib.sha256(shard_uri.encode()).hexdigest()[:32] + SIDECAR_SUFFIX)


@dataclass
class IndexReport:
    """What load_indexes did, for progress messages and tests."""

    reused: int = 0
    built: int = 0
    written_beside: int = 0
    written_to_cache: int = 0
    missing: List[str] = field(default_factory=list)


class _Progress:
    """A one-line progress report on stderr, only once work takes more than a moment."""

    def __init__(self, total: int, what: str, enabled: bool) -> None:
        self.total, self.what, self.enabled = total, what, enabled
        self.done, self.start, self.last = 0, time.monotonic(), 0.0

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.enabled and now - self.start > 2 and (now - self.last > 1 or self.done == self.total):
            self.last = now
            print(f"\rs3stream: {self.what} {self.done}/{self.total}", end="", file=sys.stderr, flush=True)
            if self.done == self.total:
                print(file=sys.stderr)


def load_indexes(
    shards: Sequence[str],
    client: Client,
    *,
    build: bool = True,
    write: bool = True,
    missing: str = "error",
    local_cache: Optional[str] = None,
    parallelism: int = 16,
    progress: bool = True,
) -> tuple[Dict[str, ShardIndex], IndexReport]:
    """Indexes for `shards`, reusing valid sidecars or cached copies and building the rest.

    ``missing="error"`` raises NotFoundError for a shard that does not exist; ``"skip"`` leaves it
    out and names it in the report.
    """
    if missing not in ("error", "skip"):
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"missing must be 'error' or 'skip', got {missing!r}")
    directory = local_cache or cache_dir()
    report = IndexReport()
    out: Dict[str, ShardIndex] = {}

    def lookup(uri: str) -> Optional[ShardIndex]:
        head = client.head(uri)  # NotFoundError propagates: the shard itself is missing
        for source in (lambda: bytes(client.get(sidecar_uri(uri))), lambda: _read_file(_cache_path(uri, directory))):
            try:
                index = ShardIndex.from_json(uri, source())
            except (NotFoundError, FileNotFoundError):
                continue
            except (ValueError, KeyError, TypeError, RecursionError):
                continue  # unreadable, malformed, hostile or another version: rebuild
            if index.etag == head.etag and index.size == head.size:
                return index
        return None

    def build_one(uri: str) -> tuple[ShardIndex, Optional[str]]:
        index = ShardIndex.build(client, uri)
        return index, (_store(index, client, directory) if write else None)

    with cf.ThreadPoolExecutor(parallelism) as pool:
        found = _run(pool, lookup, shards, missing, report, _Progress(len(shards), "checking shard indexes", progress))
        todo = [u for u in shards if u not in report.missing and found.get(u) is None]
        if todo and not build:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"{len(todo)} shards have no up-to-date index (first: {todo[0]}); "
                                       f"build them with: s3stream index {' '.join(todo[:3])}{' ...' if len(todo) > 3 else ''}")
        built = _run(pool, build_one, todo, missing, report, _Progress(len(todo), "indexing shards", progress))
    for uri in shards:
        if uri in report.missing:
            continue
        if found.get(uri) is not None:
            out[uri] = found[uri]
            report.reused += 1
        else:
            out[uri], written = built[uri]
            report.built += 1
            report.written_beside += written == "beside"
            report.written_to_cache += written == "cache"
    return out, report


def _run(pool, fn: Callable, uris: Sequence[str], missing: str, report: IndexReport, progress: _Progress) -> dict:
    results = {}
    futures = {pool.submit(fn, u): u for u in uris}
    for future in cf.as_completed(futures):
        uri = futures[future]
        try:
            results[uri] = future.result()
        except NotFoundError:
            if missing == "error":
                for f in futures:
                    f.cancel()
                raise
            report.missing.append(uri)
        progress.step()
    return results


def _store(index: ShardIndex, client: Client, directory: str) -> str:
    """Beside the shard if the bucket lets us ("beside"), else in the local cache ("cache")."""
    data = index.to_json()
    try:
        client.put(sidecar_uri(index.uri), data)
        return "beside"
    except PermissionDeniedError:
        pass  # a read-only bucket: keep the index on this machine
    os.makedirs(directory, exist_ok=True)
    path = _cache_path(index.uri, directory)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return "cache"


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


__all__ = ["ShardIndex", "IndexReport", "load_indexes", "sidecar_uri", "cache_dir", "SIDECAR_SUFFIX"]
