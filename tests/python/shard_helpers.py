"""Helpers for the ShardDataset tests (test_shard_dataset.py and torchrun_shard_worker.py): tar
shards with deterministic content made with Python's tarfile, uploads, and sample checks.

Every sample's content is a pure function of its key, so any process (a DataLoader worker, a torchrun
rank) can check the bytes it received without being told what to expect:

    key "s002_00017" -> {"cls": b"7", "txt": b"s002_00017", "bin": <64..575 bytes derived from the key>}
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import s3stream

try:  # the package may not export the torch adapters yet
    ShardDataset = s3stream.ShardDataset  # type: ignore[attr-defined]
except AttributeError:
    from s3stream.shard_dataset import ShardDataset  # noqa: F401
try:
    decode = s3stream.decode  # type: ignore[attr-defined]
except AttributeError:
    from s3stream.decoders import decode  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTDATA = os.environ.get("S3STREAM_TESTDATA_DIR") or os.path.join(REPO, "tests", "data")

Fields = Dict[str, bytes]


# --- content ------------------------------------------------------------------------------------------


def sample_key(shard: int, i: int) -> str:
    return f"s{shard:03d}_{i:05d}"


def payload(key: str, size: int) -> bytes:
    """Deterministic bytes for `key` (prefix-stable: payload(k, n) starts with payload(k, m), m < n)."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def fields_of(key: str) -> Fields:
    """The fields of the sample called `key` (made by sample_key)."""
    n = int(key.rsplit("_", 1)[1])
    size = 64 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:2], "big") % 512
    return {"cls": str(n % 10).encode(), "txt": key.encode(), "bin": payload(key, size)}


def tar_bytes(members: Sequence[Tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    """A tar archive of `members` (name, data) in that order, reproducible byte for byte."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def samples_tar(samples: Sequence[Tuple[str, Fields]]) -> bytes:
    return tar_bytes([(f"{key}.{ext}", data) for key, fields in samples for ext, data in fields.items()])


def sample_offsets(data: bytes) -> List[int]:
    """Where each sample's first member header starts, and the end of the last sample's data: what
    an index must record (samples grouped by key as WebDataset does)."""
    offsets, last_key, end = [], None, 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for info in tar:
            key = info.name.split(".", 1)[0]
            if key != last_key:
                offsets.append(info.offset)
                last_key = key
            end = info.offset_data + (info.size + 511) // 512 * 512
    return offsets + [end]


@dataclass
class Shards:
    """A set of shards: their names (in listing order), bytes, and the samples each holds."""

    names: List[str]
    data: Dict[str, bytes]
    keys: Dict[str, List[str]]  # shard name -> its sample keys in order
    uris: List[str] = field(default_factory=list)

    @property
    def all_keys(self) -> List[str]:
        """Every sample key, shards in listing order, samples in shard order."""
        return [k for name in self.names for k in self.keys[name]]


def make_shards(counts: Sequence[int], pattern: str = "train-{:06d}.tar", first_shard: int = 0) -> Shards:
    """One shard per count, holding that many samples (keys unique across all shards)."""
    names, data, keys = [], {}, {}
    for j, n in enumerate(counts):
        shard = first_shard + j
        name = pattern.format(shard)
        ks = [sample_key(shard, i) for i in range(n)]
        names.append(name)
        keys[name] = ks
        data[name] = samples_tar([(k, fields_of(k)) for k in ks])
    return Shards(names, data, keys)


def upload(boto3_client, bucket: str, shards: Shards, prefix: str = "shards/") -> Shards:
    for name in shards.names:
        boto3_client.put_object(Bucket=bucket, Key=prefix + name, Body=shards.data[name])
    shards.uris = [f"s3://{bucket}/{prefix}{name}" for name in shards.names]
    return shards


def write_local(directory: str, shards: Shards) -> Shards:
    os.makedirs(directory, exist_ok=True)
    for name in shards.names:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(shards.data[name])
    shards.uris = ["file://" + os.path.abspath(os.path.join(directory, name)) for name in shards.names]
    return shards


# --- checks (module level: DataLoader workers, also spawned ones, must be able to unpickle them) ------


def check_sample(sample: dict, expected: Optional[Fields] = None) -> None:
    """Asserts the sample holds exactly the expected fields, byte for byte."""
    key = sample["__key__"]
    want = fields_of(key) if expected is None else expected
    got = {k: bytes(v) for k, v in sample.items() if not k.startswith("__")}
    assert set(got) == set(want), f"{key}: fields {sorted(got)}, expected {sorted(want)}"
    for ext, data in want.items():
        assert got[ext] == data, f"{key}.{ext}: {len(got[ext])} bytes differ from the expected {len(data)}"


def checked_key(sample: dict) -> str:
    """A transform: the sample's key, after checking its bytes."""
    check_sample(sample)
    return sample["__key__"]


def collate_list(batch):
    return list(batch)


