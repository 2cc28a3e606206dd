"""The benchmark's dataset, generated once into a cache directory keyed by its parameters.

Sample ``i`` (``i < objects``) is the same in every format:

* its payload: ``size(i)`` bytes (about ``object_size``, within +-10%), the first 8 of which are
  ``i`` (little-endian), the rest from a seeded RNG, so a reader can check any sample it receives
  (index, length, label, no duplicates) without being told what to expect;
* its label: ``label(i) = i % 1000``.

Formats, all under ``<cache>/root/<bucket>/`` (the directory the server serves):

* ``random/<i:08d>.bin``: one object per sample (the label is the key's number modulo 1000);
* ``shards/<S>MB/shard-<j:06d>.tar``: WebDataset tar shards of at most S MiB, members
  ``<i:08d>.bin`` and ``<i:08d>.cls`` (the label in ASCII), samples in order, with s3stream index
  sidecars (``.idx.json``) beside them, built through the server so their ETags are the server's;
* ``mds/<S>MB/``: mosaicml-streaming MDS shards (columns ``bin: bytes``, ``cls: int``,
  ``size_limit`` S MiB);
* ``litdata/<S>MB/``: litdata's optimized chunks (``{"bin": bytes, "cls": int}``, ``chunk_bytes``
  S MiB).

Each part is written to a temporary directory and renamed into place when complete, so an
interrupted generation is redone, never half-used.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Iterable, List, Optional

MiB = 1 << 20
BUCKET = "bench"
FORMAT_VERSION = 1
HEADER = 8  # bytes of the payload that hold the sample's index


@dataclass(frozen=True)
class Spec:
    objects: int = 10_000
    object_size: int = 100_000
    seed: int = 0

    def key(self) -> str:
        h = hashlib.sha256(json.dumps({**asdict(self), "v": FORMAT_VERSION}, sort_keys=True).encode())
        return f"n{self.objects}-s{self.object_size}-{h.hexdigest()[:10]}"

    def size(self, i: int) -> int:
        """Payload bytes of sample ``i``: within [0.9, 1.1) x object_size, at least 16."""
        spread = self.object_size // 5
        jitter = ((i * 2654435761 + self.seed) & 0xFFFFFFFF) * spread >> 32
        return max(16, self.object_size - self.object_size // 10 + jitter)

    def total_bytes(self) -> int:
        return sum(self.size(i) for i in range(self.objects))

    def payload(self, i: int) -> bytes:
        import numpy as np

        n = self.size(i)
        return i.to_bytes(HEADER, "little") + np.random.default_rng([self.seed, i]).bytes(n - HEADER)


def label(i: int) -> int:
    return i % 1000


def object_key(i: int) -> str:
    return f"random/{i:08d}.bin"


def index_of_key(key: str) -> int:
    """The sample index in an object key (``.../00001234.bin`` -> 1234)."""
    return int(key.rsplit("/", 1)[-1].split(".", 1)[0])


def default_cache_dir() -> str:
    return os.environ.get("S3STREAM_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "s3stream", "bench")


def stubs_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_stubs")


def import_streaming():
    """Imports mosaicml-streaming, with the torchvision stand-in if the real one is missing."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        if stubs_dir() not in sys.path:
            sys.path.insert(0, stubs_dir())
    import streaming

    return streaming


class Dataset:
    """The dataset for one Spec under ``cache_dir``; parts are generated on demand."""

    def __init__(self, spec: Spec, cache_dir: Optional[str] = None, log: Callable[[str], None] = print) -> None:
        self.spec = spec
        self.dir = os.path.join(cache_dir or default_cache_dir(), spec.key())
        self.root = os.path.join(self.dir, "root")
        self.bucket_dir = os.path.join(self.root, BUCKET)
        self.log = log
        os.makedirs(self.bucket_dir, exist_ok=True)

    # -- paths and URIs ------------------------------------------------------------------------------
    def part_dir(self, part: str) -> str:
        return os.path.join(self.bucket_dir, part)

    def object_uris(self) -> List[str]:
        return [f"s3://{BUCKET}/{object_key(i)}" for i in range(self.spec.objects)]

    def shard_names(self, shard_mb: int) -> List[str]:
        d = self.part_dir(f"shards/{shard_mb}MB")
        return sorted(n for n in os.listdir(d) if n.endswith(".tar"))

    def shard_keys(self, shard_mb: int) -> List[str]:
        return [f"shards/{shard_mb}MB/{n}" for n in self.shard_names(shard_mb)]

    def shard_bytes(self, shard_mb: int) -> int:
        d = self.part_dir(f"shards/{shard_mb}MB")
        return sum(os.path.getsize(os.path.join(d, n)) for n in self.shard_names(shard_mb))

    # -- generation ----------------------------------------------------------------------------------
    def _done(self, part: str) -> bool:
        return os.path.exists(os.path.join(self.part_dir(part), ".complete"))

    def _build(self, part: str, fn: Callable[[str], None]) -> None:
        """Runs fn(tmp_dir) and moves the result to the part's directory, marked complete."""
        if self._done(part):
            return
        final = self.part_dir(part)
        tmp = final.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        os.makedirs(tmp)
        t0 = time.monotonic()
        self.log(f"generating {part} ({self.spec.objects} samples of ~{self.spec.object_size} B) ...")
        fn(tmp)
        with open(os.path.join(tmp, ".complete"), "w") as f:
            f.write(json.dumps(asdict(self.spec)))
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(tmp, final)
        self.log(f"generated {part} in {time.monotonic() - t0:.1f}s")

    def ensure(self, random: bool = False, shard_sizes: Iterable[int] = (), mds: Iterable[int] = (),
               litdata: Iterable[int] = ()) -> None:
        if random:
            self._build("random", self._write_objects)
        for s in shard_sizes:
            self._build(f"shards/{s}MB", lambda d, s=s: self._write_shards(d, s))
        for s in mds:
            self._build(f"mds/{s}MB", lambda d, s=s: self._write_mds(d, s))
        for s in litdata:
            self._build(f"litdata/{s}MB", lambda d, s=s: self._write_litdata(d, s))

    def _samples(self) -> Iterable[tuple]:
        for i in range(self.spec.objects):
            yield i, self.spec.payload(i), label(i)

    def _write_objects(self, out: str) -> None:
        for i, data, _ in self._samples():
            with open(os.path.join(out, f"{i:08d}.bin"), "wb") as f:
                f.write(data)

    def _write_shards(self, out: str, shard_mb: int) -> None:
        limit = shard_mb * MiB
        shard, tar, f, size = 0, None, None, 0

        def member(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))

        for i, data, lab in self._samples():
            cls = str(lab).encode()
            need = 512 + -(-len(data) // 512) * 512 + 512 + 512
            if tar is not None and size + need + 1024 > limit:
                tar.close()
                f.close()
                shard, tar = shard + 1, None
            if tar is None:
                f = open(os.path.join(out, f"shard-{shard:06d}.tar"), "wb")
                tar = tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT)
                size = 0
            member(f"{i:08d}.bin", data)
            member(f"{i:08d}.cls", cls)
            size += need
        if tar is not None:
            tar.close()
            f.close()

    def _write_mds(self, out: str, shard_mb: int) -> None:
        streaming = import_streaming()
        with streaming.MDSWriter(out=out, columns={"bin": "bytes", "cls": "int"}, size_limit=shard_mb * MiB) as w:
            for _, data, lab in self._samples():
                w.write({"bin": data, "cls": lab})

    def _write_litdata(self, out: str, shard_mb: int) -> None:
        from litdata.streaming.writer import BinaryWriter

        w = BinaryWriter(out, chunk_bytes=shard_mb * MiB)
        for i, data, lab in self._samples():
            w.add_item(i, {"bin": data, "cls": lab})
        w.done()
        w.merge()

    # -- shard indexes (through the server: their ETags must be the server's) -------------------------
    def ensure_indexes(self, endpoint: str, shard_mb: int) -> int:
        """Writes s3stream index sidecars beside the shards where missing or stale; returns how many."""
        from s3stream import Client
        from s3stream.shard_index import ShardIndex, SIDECAR_SUFFIX
        from .server import nginx_etag

        d = self.part_dir(f"shards/{shard_mb}MB")
        client = Client(endpoint_url=endpoint, access_key_id="bench", secret_access_key="bench", region="us-east-1")
        built = 0
        for name in self.shard_names(shard_mb):
            path = os.path.join(d, name)
            side = path + SIDECAR_SUFFIX
            st = os.stat(path)
            try:
                with open(side, "rb") as f:
                    old = json.loads(f.read())
                if old.get("etag") == nginx_etag(st) and old.get("size") == st.st_size:
                    continue
            except (OSError, ValueError):
                pass
            uri = f"s3://{BUCKET}/shards/{shard_mb}MB/{name}"
            index = ShardIndex.build(client, uri)
            tmp = side + ".tmp"
            with open(tmp, "wb") as f:
                f.write(index.to_json())
            os.replace(tmp, side)
            built += 1
        return built

    # -- page cache ----------------------------------------------------------------------------------
    def warm(self, parts: Iterable[str]) -> float:
        """Reads every file of these parts once, so no library pays the disk for the server; returns GB read."""
        total = 0
        buf = bytearray(8 * MiB)
        for part in parts:
            for dirpath, _, names in os.walk(self.part_dir(part)):
                for n in names:
                    with open(os.path.join(dirpath, n), "rb", buffering=0) as f:
                        while True:
                            k = f.readinto(buf)
                            if not k:
                                break
                            total += k
        return total / 1e9


def expected_counts(spec: Spec) -> Dict[str, int]:
    return {"samples": spec.objects, "bytes": spec.total_bytes()}
