"""Batches of Buffers cross from DataLoader workers in one shared-memory block (s3stream.transfer)."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import torch

import s3stream
from s3stream.transfer import PackedBatch, pack, unpack

Pair = collections.namedtuple("Pair", "a b")


def address(buf) -> int:
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data


def test_pack_round_trip_keeps_structure_and_bytes():
    bufs = [s3stream.Buffer(bytes([i]) * (10 + i)) for i in range(4)]
    batch = {"x": [bufs[0], bufs[1]], "y": Pair(bufs[2], 7), "z": (bufs[3], "s"), "n": torch.arange(3)}
    packed = pack(batch)
    assert isinstance(packed, PackedBatch) and packed.block.is_shared()
    out = unpack(pickle.loads(pickle.dumps(packed)))
    assert [bytes(b) for b in out["x"]] == [bytes(bufs[0]), bytes(bufs[1])]
    assert isinstance(out["y"], Pair) and bytes(out["y"].a) == bytes(bufs[2]) and out["y"].b == 7
    assert bytes(out["z"][0]) == bytes(bufs[3]) and out["z"][1] == "s"
    assert torch.equal(out["n"], torch.arange(3))
    assert all(isinstance(b, s3stream.Buffer) for b in out["x"])


def test_batches_without_buffers_pass_unchanged():
    batch = {"t": torch.ones(2)}
    assert pack(batch) is batch and unpack(batch) is batch


def test_views_keep_the_block_alive():
    packed = pack([s3stream.Buffer(b"hello"), s3stream.Buffer(b"world")])
    views = unpack(packed)
    del packed
    assert [bytes(v) for v in views] == [b"hello", b"world"]
    assert address(views[1]) == address(views[0]) + 5  # one block, back to back: no per-sample copies


def test_worker_batches_arrive_as_views_of_one_block(tmp_path):
    import tarfile, io

    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as t:
        for i in range(16):
            data = bytes([i]) * 1000
            info = tarfile.TarInfo(f"{i:03d}.bin")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    ds = s3stream.ShardDataset(str(path), shuffle=False, progress=False, write_index=False,
                               index_cache_dir=str(tmp_path / "cache"))
    loader = s3stream.DataLoader(ds, batch_size=4, num_workers=2)
    seen = []
    for batch in loader:
        bins = batch["bin"]
        assert all(isinstance(b, s3stream.Buffer) for b in bins)
        starts = [address(b) for b in bins]
        assert starts == [starts[0] + 1000 * k for k in range(len(bins))]
        seen.extend(bytes(b)[0] for b in bins)
    assert seen == list(range(16))
