"""Shard indexes: where each sample of a shard starts, so the epoch plan can split shards at sample
granularity and a reader can start mid-shard with one ranged GET.

Missing indexes are built with one streaming pass per shard, all shards in parallel, and kept in
one of two places:

* the local cache (``$S3STREAM_CACHE_DIR`` or ``~/.cache/s3stream/index``), by default: a reader
  never writes into the bucket it was asked to read (a bucket may have event notifications,
  replication or object lock), so each machine builds its indexes once;
* beside the shards, as JSON sidecars (``train-000000.tar.idx.json``) that every machine reads, only
  when asked: ``s3stream index URL`` or ``ShardDataset(..., write_index=True)``
  (``load_indexes(write="beside")``). A sidecar that cannot be written (refused, not implemented, a
  lost connection) never fails the load: that index goes to the local cache, with one warning.

Existing sidecars are always read. Either copy records the shard's ETag and size: an index whose
shard changed is rebuilt, never trusted. Cache files are named by a hash of the shard's URI and,
for ``s3://``, the endpoint.
"""

from __future__ import annotations

import array
import concurrent.futures as cf
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Union

from . import _core
from .client import Client
from .errors import InvalidArgumentError, NotFoundError, PermissionDeniedError, S3StreamError

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


def _cache_path(shard_uri: str, directory: str, endpoint: str) -> str:
    # The same s3:// URI on two endpoints is two objects; a file:// URI names one file anywhere.
    name = shard_uri if shard_uri.startswith("file://") else f"{endpoint} {shard_uri}"
    return os.path.join(directory, hashlib.sha256(name.encode()).hexdigest()[:32] + SIDECAR_SUFFIX)


@dataclass
class IndexReport:
    """What load_indexes did, for progress messages and tests."""

    reused: int = 0
    built: int = 0
    written_beside: int = 0  # sidecars written (built now, or copied from the local cache)
    written_to_cache: int = 0
    copied_beside: int = 0  # of the reused: found only in the local cache, now written beside too
    missing: List[str] = field(default_factory=list)
    failed_writes: List[str] = field(default_factory=list)  # "<sidecar URI or cache file>: <error>"


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


WRITE_MODES = ("cache", "beside", "none")


def load_indexes(
    shards: Sequence[str],
    client: Client,
    *,
    build: bool = True,
    write: Union[str, bool] = "cache",
    missing: str = "error",
    local_cache: Optional[str] = None,
    parallelism: int = 16,
    progress: bool = True,
) -> tuple[Dict[str, ShardIndex], IndexReport]:
    """Indexes for `shards`, reusing valid sidecars or cached copies and building the rest.

    ``write`` says where an index built now is kept: ``"cache"`` (default) in the local cache
    only, so the bucket is only read; ``"beside"`` (or True) in a sidecar beside its shard, and an
    index found only in the local cache is copied there too; a sidecar that cannot be written goes to
    the local cache instead, with one warning on stderr; ``"none"`` (or False) nowhere. A failed
    write never raises: only reading the shards can fail the load.

    ``missing="error"`` raises NotFoundError for a shard that does not exist; ``"skip"`` leaves it
    out and names it in the report.
    """
    if missing not in ("error", "skip"):
        raise InvalidArgumentError(f"missing must be 'error' or 'skip', got {missing!r}")
    mode = {True: "beside", False: "none"}.get(write, write) if isinstance(write, bool) else write
    if mode not in WRITE_MODES:
        raise InvalidArgumentError(f"write must be one of {', '.join(map(repr, WRITE_MODES))} or a bool, got {write!r}")
    directory = local_cache or cache_dir()
    endpoint = client._native_client().endpoint
    keep = _Keeper(client, directory, endpoint, mode)
    report = IndexReport()
    out: Dict[str, ShardIndex] = {}

    def read_sidecar(uri: str) -> Optional[bytes]:
        try:
            return bytes(client.get(sidecar_uri(uri)))
        except (NotFoundError, PermissionDeniedError):
            return None  # no sidecar, or one we may not read

    def read_cached(uri: str) -> Optional[bytes]:
        try:
            return _read_file(_cache_path(uri, directory, endpoint))
        except OSError:
            return None  # no cached copy, or an unreadable one

    # The local cache first, unless sidecars are wanted: a cached index found then is copied beside.
    sources = (read_cached, read_sidecar) if mode == "cache" else (read_sidecar, read_cached)

    def lookup(uri: str) -> Optional[tuple[ShardIndex, Optional[str]]]:
        head = client.head(uri)  # NotFoundError propagates: the shard itself is missing
        for read in sources:
            data = read(uri)
            if data is None:
                continue
            try:
                index = ShardIndex.from_json(uri, data)
            except (ValueError, KeyError, TypeError, RecursionError):
                continue  # unreadable, malformed, hostile or another version: rebuild
            if index.etag == head.etag and index.size == head.size:
                return index, (keep.copy_beside(index) if read is read_cached and mode == "beside" else None)
        return None

    def build_one(uri: str) -> tuple[ShardIndex, Optional[str]]:
        index = ShardIndex.build(client, uri)
        return index, keep(index)

    with cf.ThreadPoolExecutor(parallelism) as pool:
        found = _run(pool, lookup, shards, missing, report, _Progress(len(shards), "checking shard indexes", progress))
        todo = [u for u in shards if u not in report.missing and found.get(u) is None]
        if todo and not build:
            raise InvalidArgumentError(f"{len(todo)} shards have no up-to-date index (first: {todo[0]}); "
                                       f"build them with: s3stream index {' '.join(todo[:3])}{' ...' if len(todo) > 3 else ''}")
        built = _run(pool, build_one, todo, missing, report, _Progress(len(todo), "indexing shards", progress))
    for uri in shards:
        if uri in report.missing:
            continue
        if found.get(uri) is not None:
            out[uri], written = found[uri]
            report.reused += 1
            report.copied_beside += written == "beside"
        else:
            out[uri], written = built[uri]
            report.built += 1
        report.written_beside += written == "beside"
        report.written_to_cache += written == "cache"
    report.failed_writes = keep.sidecar_errors + keep.cache_errors
    keep.warn()
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


class _Keeper:
    """Keeps indexes where the mode says, from many threads; a write that fails is noted, never
    raised. After one sidecar fails the rest go straight to the cache (a bucket that refused one
    write refuses them all, and a lost connection would cost every shard its retries)."""

    def __init__(self, client: Client, directory: str, endpoint: str, mode: str) -> None:
        self.client, self.directory, self.endpoint, self.mode = client, directory, endpoint, mode
        self.lock = threading.Lock()
        self.sidecar_errors: List[str] = []
        self.cache_errors: List[str] = []
        self.fell_back = 0  # indexes meant for a sidecar, kept in the cache

    def __call__(self, index: ShardIndex) -> Optional[str]:
        """Where the index went: "beside", "cache" or None."""
        if self.mode == "none":
            return None
        data = index.to_json()
        if self.mode == "beside" and self._beside(index.uri, data):
            return "beside"
        where = self._cache(index.uri, data)
        if self.mode == "beside" and where:
            with self.lock:
                self.fell_back += 1
        return where

    def copy_beside(self, index: ShardIndex) -> Optional[str]:
        """A sidecar for an index found in the local cache ("beside"), else None (it stays there)."""
        if self._beside(index.uri, index.to_json()):
            return "beside"
        with self.lock:
            self.fell_back += 1
        return None

    def _beside(self, uri: str, data: bytes) -> bool:
        if self.sidecar_errors:
            return False
        try:
            self.client.put(sidecar_uri(uri), data)
            return True
        except (S3StreamError, OSError) as e:
            with self.lock:
                self.sidecar_errors.append(_describe(sidecar_uri(uri), e))
            return False

    def _cache(self, uri: str, data: bytes) -> Optional[str]:
        path = _cache_path(uri, self.directory, self.endpoint)
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
            return "cache"
        except OSError as e:
            with self.lock:
                self.cache_errors.append(_describe(path, e))
            return None

    def warn(self) -> None:
        """One line on stderr per kind of failure, naming the first."""
        if self.sidecar_errors:
            print(f"s3stream: warning: could not write an index sidecar ({self.sidecar_errors[0]}); "
                  f"{self.fell_back} shard indexes kept in the local cache {self.directory} instead",
                  file=sys.stderr)
        if self.cache_errors:
            print(f"s3stream: warning: could not keep {len(self.cache_errors)} shard indexes in the local cache "
                  f"({self.cache_errors[0]}); they will be built again next time (S3STREAM_CACHE_DIR chooses "
                  f"another directory)", file=sys.stderr)


def _describe(target: str, error: BaseException) -> str:
    """"<target>: <error>", naming the target once (s3stream's errors name their URI already)."""
    text = f"{type(error).__name__}: {error}"
    return text if target in str(error) else f"{target}: {text}"


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


__all__ = ["ShardIndex", "IndexReport", "load_indexes", "sidecar_uri", "cache_dir", "SIDECAR_SUFFIX"]
