"""Batches of Buffers cross from DataLoader workers in one shared-memory block (s3stream.transfer)."""

from __future__ import annotations

import collections
import pickle

import gc
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

import s3stream
from s3stream import transfer
from s3stream.transfer import PackedBatch, pack, unpack

Pair = collections.namedtuple("Pair", "a b")


def address(buf) -> int:
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data


def test_pack_round_trip_keeps_structure_and_bytes():
    bufs = [s3stream.Buffer(bytes([i]) * (10 + i)) for i in range(4)]
    batch = {"x": [bufs[0], bufs[1]], "y": Pair(bufs[2], 7), "z": (bufs[3], "s"), "n": torch.arange(3)}
    packed = pack(batch)
    assert isinstance(packed, PackedBatch)
    out = unpack(ForkingPickler.loads(ForkingPickler.dumps(packed)))
    assert [bytes(b) for b in out["x"]] == [bytes(bufs[0]), bytes(bufs[1])]
    assert isinstance(out["y"], Pair) and bytes(out["y"].a) == bytes(bufs[2]) and out["y"].b == 7
    assert bytes(out["z"][0]) == bytes(bufs[3]) and out["z"][1] == "s"
    assert torch.equal(out["n"], torch.arange(3))
    assert all(isinstance(b, s3stream.Buffer) for b in out["x"])


def test_cpu_tensors_travel_in_the_block_as_views():
    t = {
        "f": torch.randn(3, 4),
        "i": torch.arange(10, dtype=torch.int64)[::2],  # not contiguous
        "b": torch.tensor([True, False, True]),
        "h": torch.randn(5).to(torch.bfloat16),
        "c": torch.randn(2, dtype=torch.complex64).conj(),  # a conjugate view
        "s": torch.tensor(7),  # 0-dim
        "e": torch.empty(0, 3),
    }
    packed = pack({**t, "buf": s3stream.Buffer(b"xyz")})
    assert packed.tensors and all(isinstance(v, type(transfer.TENSOR_HOLE)) for k, v in packed.tree.items() if k != "buf")
    out = unpack(ForkingPickler.loads(ForkingPickler.dumps(packed)))
    for k, v in t.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape and torch.equal(out[k], v.resolve_conj()), k
    assert bytes(out["buf"]) == b"xyz"


def test_tensors_torch_must_handle_stay_in_the_tree():
    grad = torch.ones(2, requires_grad=True)
    shared = torch.ones(3).share_memory_()
    packed = pack([grad, shared, s3stream.Buffer(b"a")])
    assert packed.tree[0] is grad and packed.tree[1] is shared and not packed.tensors


def test_a_tensor_holds_its_block_like_a_buffer():
    first = unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([torch.full((1000,), 1.0)]))))[0]
    second = unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([torch.full((1000,), 2.0)]))))[0]
    assert first.data_ptr() != second.data_ptr()  # the first block is still held by `first`
    assert torch.all(first == 1.0) and torch.all(second == 2.0)


def test_batches_with_nothing_to_move_pass_unchanged():
    batch = {"t": torch.ones(2, requires_grad=True), "n": 3, "s": "x"}
    assert pack(batch) is batch and unpack(batch) is batch


@pytest.mark.parametrize("pooled", [True, False])
def test_views_keep_the_block_alive(pooled):
    packed = pack([s3stream.Buffer(b"hello"), s3stream.Buffer(b"world")], pooled=pooled)
    views = unpack(packed)
    del packed
    gc.collect()
    assert [bytes(v) for v in views] == [b"hello", b"world"]
    assert address(views[1]) == address(views[0]) + 5  # one block, back to back: no per-sample copies


def test_a_pooled_block_is_reused_only_after_its_views_are_gone():
    first = unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([s3stream.Buffer(b"a" * 1000)]))))
    second = unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([s3stream.Buffer(b"b" * 1000)]))))
    assert address(first[0]) != address(second[0])  # the first batch is still held: another block
    assert bytes(first[0]) == b"a" * 1000 and bytes(second[0]) == b"b" * 1000
    where = address(first[0])
    del first
    gc.collect()
    third = unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([s3stream.Buffer(b"c" * 1000)]))))
    assert address(third[0]) == where  # released, then refilled: no new shared memory
    assert bytes(third[0]) == b"c" * 1000 and bytes(second[0]) == b"b" * 1000


def test_when_every_pooled_block_is_held_batches_travel_in_one_off_blocks():
    held = [unpack(ForkingPickler.loads(ForkingPickler.dumps(pack([s3stream.Buffer(bytes([i]) * 5000)]))))
            for i in range(3 * transfer.POOL_BLOCKS)]
    assert [bytes(b[0]) for b in held] == [bytes([i]) * 5000 for i in range(3 * transfer.POOL_BLOCKS)]
    assert len(transfer._worker_pool().blocks) <= transfer.POOL_BLOCKS


def shard_dataset(tmp_path, samples: int, size: int = 1000):
    import io
    import tarfile

    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as t:
        for i in range(samples):
            data = i.to_bytes(4, "little") * (size // 4)
            info = tarfile.TarInfo(f"{i:05d}.bin")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return s3stream.ShardDataset(str(path), shuffle=False, progress=False, write_index=False,
                                 index_cache_dir=str(tmp_path / "cache"))


def sample_id(buf) -> int:
    data = bytes(buf)
    i = int.from_bytes(data[:4], "little")
    assert data == i.to_bytes(4, "little") * (len(data) // 4)  # whole and not overwritten
    return i


# The datasets set up the workers of a loader s3stream did not build (torch's own, or one a
# framework builds) as s3stream.DataLoader does: batches cross by reference either way.
LOADERS = {"s3stream": s3stream.DataLoader, "torch": torch.utils.data.DataLoader}


@pytest.mark.parametrize("loader_kind", LOADERS)
def test_worker_batches_arrive_as_views_of_one_block(tmp_path, loader_kind):
    ds = shard_dataset(tmp_path, 16)
    loader = LOADERS[loader_kind](ds, batch_size=4, num_workers=2)
    seen = []
    for batch in loader:
        bins = batch["bin"]
        assert all(isinstance(b, s3stream.Buffer) for b in bins)
        starts = [address(b) for b in bins]
        assert starts == [starts[0] + 1000 * k for k in range(len(bins))]
        seen.extend(sample_id(b) for b in bins)
    assert seen == list(range(16))


def test_worker_blocks_are_reused_and_dead_workers_unmapped(tmp_path):
    ds = shard_dataset(tmp_path, 400)
    loader = s3stream.DataLoader(ds, batch_size=8, num_workers=2)  # new workers every epoch
    for epoch in range(3):
        starts, seen = set(), []
        for batch in loader:
            starts.add(address(batch["bin"][0]))
            seen.extend(sample_id(b) for b in batch["bin"])
        assert sorted(seen) == list(range(400))
        assert len(starts) <= 2 * transfer.POOL_BLOCKS  # 50 batches in a handful of blocks
        assert len(transfer._mappings) <= 2 * 2 * transfer.POOL_BLOCKS  # this epoch's workers (+ the last one's)


@pytest.mark.parametrize("size", [1000, 100_000])
def test_batches_the_loop_keeps_stay_intact(tmp_path, size):
    ds = shard_dataset(tmp_path, 300, size)
    kept = list(s3stream.DataLoader(ds, batch_size=4, num_workers=2))  # every block held: one-off blocks
    assert [sample_id(b) for batch in kept for b in batch["bin"]] == list(range(300))


@pytest.mark.parametrize("loader_kind", LOADERS)
def test_worker_buffers_arrive_in_place_from_the_workers_arena(tmp_path, loader_kind):
    ds = shard_dataset(tmp_path, 200, 100_000)
    loader = LOADERS[loader_kind](ds, batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        seen, in_arena = [], 0
        for batch in loader:
            arenas = [m for name, m in transfer._mappings.items() if name.endswith("-arena")]
            bounds = [(address(m.view), address(m.view) + len(m.view)) for m in arenas]
            for b in batch["bin"]:
                in_arena += any(lo <= address(b) < hi for lo, hi in bounds)
                seen.append(sample_id(b))
        assert sorted(seen) == list(range(200))
        assert in_arena >= 150  # not copied: views of the memory the worker downloaded into


@pytest.mark.parametrize("loader_kind", LOADERS)
def test_map_dataset_objects_arrive_as_views_of_one_block(tmp_path, loader_kind):
    for i in range(16):
        (tmp_path / f"{i:02d}.bin").write_bytes(i.to_bytes(4, "little") * 250)
    ds = s3stream.MapDataset.from_prefix(tmp_path.as_uri() + "/")
    loader = LOADERS[loader_kind](ds, batch_size=4, num_workers=2)
    seen = []
    for batch in loader:
        assert all(isinstance(b, s3stream.Buffer) for b in batch.data)
        starts = [address(b) for b in batch.data]
        assert starts == [starts[0] + 1000 * k for k in range(4)]  # copied back to back, not pickled
        seen.extend(sample_id(b) for b in batch.data)
    assert seen == list(range(16))


def _arena_high_water(batch):
    from s3stream import _core

    return batch, _core._shared_arena_used()


def test_a_workers_arena_stays_bounded_over_many_batches(tmp_path):
    ds = shard_dataset(tmp_path, 3000, 100_000)  # 300 MB through one worker
    loader = s3stream.DataLoader(ds, batch_size=16, num_workers=1, collate_fn=_arena_high_water)
    used = [u for _, u in loader]
    assert len(used) == 188 and used[-1] > 0
    # Blocks are recycled: the arena's high-water mark is the read-ahead budget (64 MiB for one
    # worker) plus the batches held, rounded up to power-of-two blocks; not the bytes read.
    bound = 2 * (64 << 20) + 2 * transfer.POOL_BLOCKS * 16 * 100_000
    assert max(used) <= bound < 300_000_000, [u >> 20 for u in used[::10]]


def _memfd_with(data: bytes) -> int:
    import os

    fd = os.memfd_create("s3stream-test", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def _read_all(fd: int) -> bytes:
    import os

    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 16)


def test_a_worker_fd_is_opened_through_proc_without_a_socket_round_trip(monkeypatch):
    import os

    fd = _memfd_with(b"arena bytes")
    sent = pickle.loads(ForkingPickler.dumps(transfer._WorkerFd(fd)))
    monkeypatch.setattr(type(sent.dup), "detach", lambda self: pytest.fail("took the DupFd fallback"))
    got = sent.open()
    try:
        assert got != fd and os.fstat(got).st_ino == os.fstat(fd).st_ino
        assert _read_all(got) == b"arena bytes"
    finally:
        os.close(got)
        os.close(fd)


def test_a_worker_fd_that_proc_names_wrongly_comes_through_dupfd():
    import os

    fd = _memfd_with(b"the real file")
    sent = pickle.loads(ForkingPickler.dumps(transfer._WorkerFd(fd)))
    sent.ident = (sent.ident[0], sent.ident[1] + 1)  # as if the worker's pid were reused by another process
    got = sent.open()
    try:
        assert os.fstat(got).st_ino == os.fstat(fd).st_ino
        assert _read_all(got) == b"the real file"
    finally:
        os.close(got)
        os.close(fd)


def test_worker_blocks_reach_the_loop_without_dupfd_round_trips(tmp_path, monkeypatch):
    from multiprocessing import resource_sharer

    detached = []
    original = resource_sharer.DupFd.detach
    monkeypatch.setattr(resource_sharer.DupFd, "detach", lambda self: detached.append(1) or original(self))
    ds = shard_dataset(tmp_path, 200, 100_000)
    seen = [sample_id(b) for batch in s3stream.DataLoader(ds, batch_size=8, num_workers=2) for b in batch["bin"]]
    assert sorted(seen) == list(range(200))
    assert any(name.endswith("-arena") for name in transfer._mappings)  # blocks and arenas were mapped
    assert detached == []
