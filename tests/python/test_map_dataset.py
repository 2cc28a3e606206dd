"""Map-style datasets (s3stream.MapDataset) and their epoch plan (s3stream.EpochSampler), with
s3stream.DataLoader: listing once, zero-copy samples, concurrent batches, exactly-once epochs in
every DataLoader mode and under torchrun, resume with another worker count, flat memory, and the
errors bad input must produce. Everything runs against the moto server of conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import s3stream
from s3stream import loader as loader_module
from s3stream import map_dataset as map_dataset_module
from s3stream import sampler as sampler_module
from helpers import put_many, rss_growth_over_epochs, s3_uri
from proxies import RecordingProxy

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "train/"
GET_DELAY = 0.25  # what a real store adds to every GET, in the concurrency test

# This machine may have fewer cores than the workers some tests start; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


# --- data and helpers ---------------------------------------------------------------------------------


def content(i: int) -> bytes:
    """Object i's bytes: starts with its own file name, so a mix-up shows; lengths vary."""
    return f"{i:04d}.bin|".encode() + bytes([i % 251]) * (100 + 37 * (i % 11))


def populate(boto3_client, bucket: str, n: int, prefix: str = PREFIX, extra: dict | None = None) -> list[str]:
    items = {f"{prefix}{i:04d}.bin": content(i) for i in range(n)}
    items.update(extra or {})
    put_many(boto3_client, bucket, items)
    return [s3_uri(bucket, f"{prefix}{i:04d}.bin") for i in range(n)]


def index_of(uri: str) -> int:
    return int(uri.rsplit("/", 1)[-1].split(".")[0])


def checked_key(sample) -> str:
    """A transform (module level, so spawn workers can unpickle it): the key, after checking the
    bytes belong to it."""
    assert bytes(sample.data) == content(index_of(sample.key)), sample.key
    return sample.key


def collate_list(batch):
    return list(batch)


def is_list_request(r) -> bool:
    return r.method == "GET" and ("list-type", "2") in r.query_params


def is_object_get(r) -> bool:
    return r.method == "GET" and bool(r.key) and not r.query


class DelayProxy(RecordingProxy):
    """Delays every request that `match`es by `delay` seconds, and records how many of them were
    in the proxy at once (each client connection is served by its own proxy thread)."""

    def __init__(self, upstream: str, delay: float, match) -> None:
        super().__init__(upstream)
        self.delay, self.match = delay, match
        self.inflight = self.max_inflight = 0

    def _handle(self, client, up, req, raw):
        if not self.match(req):
            return super()._handle(client, up, req, raw)
        with self._lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(self.delay)
            return super()._handle(client, up, req, raw)
        finally:
            with self._lock:
                self.inflight -= 1


@pytest.fixture
def uris(boto3_client, bucket):
    return populate(boto3_client, bucket, 45)


# --- listing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_from_prefix_lists_once_across_epochs_and_workers(s3_endpoint, boto3_client, bucket, monkeypatch, context):
    all_uris = populate(boto3_client, bucket, 45, extra={f"{PREFIX}subdir/": b""})  # + a directory marker
    monkeypatch.setattr(map_dataset_module, "_LIST_PAGE_SIZE", 10)  # 46 keys: 5 pages
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        ds = s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), transform=checked_key, client=client)
        assert len(ds) == 45 and [ds.uri(i) for i in range(45)] == all_uris  # marker skipped, key order
        lists = [r for r in proxy.requests if is_list_request(r)]
        # At least the 5 pages (a parallel listing may split a range at a point that holds nothing).
        assert len(lists) >= 5 and len(proxy.requests) == len(lists), proxy.requests

        sampler = s3stream.EpochSampler(ds, seed=1)
        loader = TorchDataLoader(
            ds, batch_size=8, sampler=sampler, num_workers=2, multiprocessing_context=context,
            persistent_workers=(context == "spawn"), collate_fn=collate_list,
        )
        for epoch in range(3):
            sampler.set_epoch(epoch)
            assert sorted(k for batch in loader for k in batch) == all_uris
        del loader
        assert [r for r in proxy.requests if is_list_request(r)] == lists, "listed again after construction"
        gets = Counter(r.key for r in proxy.requests if is_object_get(r))
        assert gets == Counter({f"{PREFIX}{i:04d}.bin": 3 for i in range(45)})
        assert proxy.errors == []


def test_from_prefix_suffixes_and_key_order(boto3_client, bucket, client):
    populate(boto3_client, bucket, 5, extra={f"{PREFIX}labels.json": b"{}", f"{PREFIX}b/x.png": b"png"})
    ds = s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), client=client, suffixes=".bin")
    assert [ds.uri(i) for i in range(len(ds))] == [s3_uri(bucket, f"{PREFIX}{i:04d}.bin") for i in range(5)]
    both = s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), client=client, suffixes=[".png", ".json"])
    assert [both.uri(i) for i in range(len(both))] == [
        s3_uri(bucket, f"{PREFIX}b/x.png"),
        s3_uri(bucket, f"{PREFIX}labels.json"),
    ]


def test_progress_for_a_slow_listing(s3_endpoint, boto3_client, bucket, monkeypatch, capsys):
    from s3stream import listing as listing_module

    populate(boto3_client, bucket, 40)
    monkeypatch.setattr(map_dataset_module, "_LIST_PAGE_SIZE", 8)  # 5 pages of 0.25 s each
    uri = s3_uri(bucket, PREFIX)

    with DelayProxy(s3_endpoint, 0.25, is_list_request) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        s3stream.MapDataset.from_prefix(uri, client=client, progress=True, parallelism=1)  # under 2 s: quiet
        assert capsys.readouterr().err == ""

        monkeypatch.setattr(listing_module, "_PROGRESS_AFTER_S", 0.4)
        ds = s3stream.MapDataset.from_prefix(uri, client=client, progress=True, parallelism=1)
        err = capsys.readouterr().err
        assert len(ds) == 40
        assert f"s3stream: listing {uri}" in err and "40 objects" in err, err

        # Not asked for, and stderr is not a terminal here: nothing.
        s3stream.MapDataset.from_prefix(uri, client=client, parallelism=1)
        s3stream.MapDataset.from_prefix(uri, client=client, progress=False, parallelism=1)
        assert capsys.readouterr().err == ""


def test_from_objects_sends_no_request(s3_endpoint, boto3_client, bucket):
    all_uris = populate(boto3_client, bucket, 10)
    missing = s3_uri(bucket, "nope/missing.bin")
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        proxy.clear()
        ds = s3stream.MapDataset.from_objects(all_uris + [missing], transform=checked_key, client=client)
        s3stream.EpochSampler(ds)
        assert proxy.requests == []
        assert len(ds) == 11 and ds.uri(10) == missing
        assert ds[3] == all_uris[3]
        assert len(proxy.requests) == 1 and proxy.requests[0].key == f"{PREFIX}0003.bin"
        with pytest.raises(s3stream.NotFoundError, match="missing.bin"):
            ds[10]


# --- samples ------------------------------------------------------------------------------------------


def test_sample_is_zero_copy_and_transform_applies(uris, client):
    ds = s3stream.MapDataset.from_objects(uris, client=client)
    sample = ds[7]
    assert isinstance(sample, s3stream.Sample)
    assert sample.key == uris[7] and sample.index == 7 and bytes(sample.data) == content(7)
    key, data, index = sample  # a NamedTuple: unpacks
    assert isinstance(data, s3stream.Buffer)

    # torch.frombuffer shares the Buffer's memory: the same address, and writes show through.
    t = torch.frombuffer(sample.data, dtype=torch.uint8)
    assert t.data_ptr() == np.frombuffer(sample.data, dtype=np.uint8).ctypes.data
    assert torch.frombuffer(sample.data, dtype=torch.uint8).data_ptr() == t.data_ptr()
    t[0] = ord("X")
    assert bytes(memoryview(sample.data)[:1]) == b"X"

    seen = []
    ds2 = s3stream.MapDataset.from_objects(uris, transform=lambda s: seen.append(s.index) or len(s.data), client=client)
    assert ds2[2] == len(content(2)) and ds2.__getitems__([5, 1]) == [len(content(5)), len(content(1))]
    assert seen == [2, 5, 1]
    assert [s.index for s in ds.__getitems__([4, 4, 0])] == [4, 4, 0]
    assert ds.__getitems__([]) == []


def test_pickles_by_configuration(uris, client):
    import pickle

    ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    ds.client.get(uris[0])  # native state exists now; it must not travel
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.client._native is None and len(clone) == len(ds) and clone.fingerprint() == ds.fingerprint()
    assert clone[5] == uris[5]
    # A Sample crossing processes (an untransformed sample from a worker) carries its bytes.
    raw = s3stream.MapDataset.from_objects(uris, client=client)
    sample = pickle.loads(pickle.dumps(raw[3]))
    assert sample.key == uris[3] and bytes(sample.data) == content(3) and sample.index == 3
    loader = TorchDataLoader(raw, batch_size=8, num_workers=1, multiprocessing_context="fork", collate_fn=collate_list)
    assert [(s.key, bytes(s.data)) for b in loader for s in b] == [(u, content(i)) for i, u in enumerate(uris)]


def test_getitems_fetches_the_batch_concurrently(s3_endpoint, uris):
    with DelayProxy(s3_endpoint, GET_DELAY, is_object_get) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)

        t0 = time.monotonic()
        for i in range(4):
            ds[i]
        one_by_one = time.monotonic() - t0
        assert one_by_one >= 4 * GET_DELAY  # the delay is real

        t0 = time.monotonic()
        assert ds.__getitems__(list(range(32))) == uris[:32]
        batch = time.monotonic() - t0
        # Serially this is 32 x 0.25 s = 8 s; concurrently, about one delay.
        assert batch < 6 * GET_DELAY, f"a batch of 32 took {batch:.2f}s: not concurrent"
        assert proxy.max_inflight >= 16, proxy.max_inflight

        # DataLoader fetches each batch through __getitems__: one batch of 32 costs about one delay.
        order = list(range(32, 45)) + list(range(19))
        loader = TorchDataLoader(ds, batch_size=32, sampler=order, collate_fn=collate_list)
        t0 = time.monotonic()
        batches = list(loader)
        assert time.monotonic() - t0 < 6 * GET_DELAY
        assert batches == [[uris[i] for i in order]]
        assert proxy.errors == []


# --- the epoch plan -------------------------------------------------------------------------------------


def test_epoch_permutation_is_pinned():
    # Pinned: a change here changes every user's training order for a given seed.
    assert list(sampler_module.epoch_permutation(10, 0, 0)) == GOLDEN_PERMUTATION_10_0_0
    perms = {tuple(sampler_module.epoch_permutation(50, seed, epoch)) for seed in range(3) for epoch in range(3)}
    assert len(perms) == 9 and all(sorted(p) == list(range(50)) for p in perms)


GOLDEN_PERMUTATION_10_0_0 = [8, 6, 0, 7, 9, 2, 4, 5, 3, 1]


@pytest.mark.parametrize("n, world", [(23, 2), (23, 4), (10, 3), (3, 4), (100, 7)])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_ranks_split_every_epoch_exactly_once(n, world, remainder):
    if remainder == "drop" and n < world:
        with pytest.raises(s3stream.InvalidArgumentError, match="use remainder='pad'"):
            s3stream.EpochSampler(n, rank=0, world_size=world, remainder=remainder)
        return
    samplers = [s3stream.EpochSampler(n, rank=r, world_size=world, remainder=remainder, seed=9) for r in range(world)]
    per_rank = n // world if remainder == "drop" else -(-n // world)
    dropped_over_epochs = set()
    for epoch in range(4):
        shares = []
        for s in samplers:
            s.set_epoch(epoch)
            shares.append(list(s))
        assert [len(x) for x in shares] == [per_rank] * world  # equal counts: DDP cannot hang
        assert all(len(s) == per_rank for s in samplers)
        everything = [i for share in shares for i in share]
        counts = Counter(everything)
        if remainder == "drop":
            assert len(counts) == n - n % world and max(counts.values()) == 1  # disjoint
            dropped_over_epochs |= set(range(n)) - set(counts)
        else:
            assert set(counts) == set(range(n))  # all of them
            # duplicates only as padding: exactly world*per_rank - n extra copies
            assert sum(c - 1 for c in counts.values()) == world * per_rank - n
    if remainder == "drop" and n % world:
        assert len(dropped_over_epochs) > n % world  # the dropped tail changes with the epoch


def test_order_is_a_pure_function_of_seed_epoch_and_rank():
    a = s3stream.EpochSampler(1000, seed=3, rank=1, world_size=2)
    b = s3stream.EpochSampler(1000, seed=3, rank=1, world_size=2)
    assert list(a) == list(b) == a.indices(0)
    a.set_epoch(5)
    assert list(a) == b.indices(5) != b.indices(0)
    assert s3stream.EpochSampler(1000, seed=4, rank=1, world_size=2).indices(5) != a.indices(5)
    assert s3stream.EpochSampler(1000, seed=3, rank=0, world_size=2).indices(5) != a.indices(5)
    # Ranks take turns in the epoch's order (DistributedSampler's dealing); pad wraps to its start.
    plain = s3stream.EpochSampler(10, shuffle=False, rank=1, world_size=3, remainder="pad")
    assert list(plain) == [1, 4, 7, 0] and plain.indices(3) == [1, 4, 7, 0]
    assert s3stream.EpochSampler(10, shuffle=False, rank=2, world_size=3, remainder="pad").indices() == [2, 5, 8, 1]


def test_a_complete_pass_moves_on_to_the_next_epoch():
    """A plain loop and torchdata's StatefulDataLoader never call set_epoch: a pass that ran to its
    end moves the sampler on; set_epoch still chooses, and auto_epoch=False repeats."""
    s = s3stream.EpochSampler(10)
    assert list(s) == s.indices(0)
    assert list(s) == s.indices(1) != s.indices(0) and s.epoch == 1
    s.set_epoch(0)
    assert list(s) == s.indices(0)
    s.set_epoch(2)
    for _ in s:  # a pass left early does not move on
        break
    assert list(s) == s.indices(2)
    s.auto_epoch = False
    s.set_epoch(4)
    assert list(s) == list(s) == s.indices(4)


@pytest.mark.parametrize("new_world", [1, 3, 5])
def test_elastic_resume_at_another_world_size(new_world):
    """Rank 0's state of a 4-rank job resumes a job of any size: every index the saved run had not
    delivered comes exactly once, none it had delivered comes again."""
    n, k = 103, 7
    saved = [s3stream.EpochSampler(n, seed=5, rank=r, world_size=4) for r in range(4)]
    first = [i for s in saved for i in list(s)[:k]]
    state = json.loads(json.dumps(saved[0].state_dict(consumed=k)))
    second = []
    for r in range(new_world):
        s = s3stream.EpochSampler(n, seed=5, rank=r, world_size=new_world, remainder="pad")
        s.load_state_dict(state)
        second += list(s)
    assert not set(first) & set(second)
    assert set(first) | set(second) == set(range(n))
    assert len(second) - len(set(second)) < new_world


def test_rank_and_world_sources(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert s3stream.rank_and_world() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert s3stream.rank_and_world() == (2, 4)
    assert s3stream.rank_and_world(rank=1) == (1, 4)  # an explicit argument wins
    assert s3stream.rank_and_world(0, 1) == (0, 1)
    s = s3stream.EpochSampler(10)
    assert (s.rank, s.world_size) == (2, 4)
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(s3stream.InvalidArgumentError, match="WORLD_SIZE"):
        s3stream.rank_and_world()
    assert s3stream.worker_and_count() == (0, 1)


# --- DataLoader modes -----------------------------------------------------------------------------------

LOADER_MODES = {
    "workers0": dict(num_workers=0),
    "fork2": dict(num_workers=2, multiprocessing_context="fork"),
    "fork2-persistent": dict(num_workers=2, multiprocessing_context="fork", persistent_workers=True),
    "spawn2-persistent": dict(num_workers=2, multiprocessing_context="spawn", persistent_workers=True),
    "spawn2": dict(num_workers=2, multiprocessing_context="spawn"),
}


@pytest.mark.parametrize("mode", LOADER_MODES)
def test_dataloader_every_sample_once_per_epoch(s3_endpoint, uris, mode):
    client = s3stream.Client(endpoint_url=s3_endpoint)
    ds = s3stream.MapDataset.from_prefix(uris[0].rsplit("/", 1)[0] + "/", transform=checked_key, client=client)
    sampler = s3stream.EpochSampler(ds, seed=11)
    loader = TorchDataLoader(ds, batch_size=6, sampler=sampler, collate_fn=collate_list, **LOADER_MODES[mode])
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = [k for batch in loader for k in batch]
        assert sorted(order) == uris  # every sample exactly once
        assert order == [uris[i] for i in sampler.indices(epoch)]  # in the plan's order
        orders.append(order)
    assert len({tuple(o) for o in orders}) == 3  # reshuffled every epoch
    # The same seed gives the same order in another run (another sampler, no workers).
    again = s3stream.EpochSampler(ds, seed=11)
    for epoch in range(3):
        again.set_epoch(epoch)
        assert [ds.uri(i) for i in again] == orders[epoch]


def test_s3stream_dataloader_advances_the_epoch_by_itself(uris, client):
    ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    sampler = s3stream.EpochSampler(ds, seed=2)
    loader = s3stream.DataLoader(
        ds, batch_size=4, sampler=sampler, num_workers=2, persistent_workers=True,
        multiprocessing_context="fork", collate_fn=collate_list,
    )
    for epoch in range(3):
        assert [k for b in loader for k in b] == [uris[i] for i in sampler.indices(epoch)]
        assert sampler.epoch == epoch
    # Dropping the loader stops its persistent workers at once (no reference cycle left for the
    # garbage collector, which would make torch wait seconds per worker).
    t0 = time.monotonic()
    del loader
    assert time.monotonic() - t0 < 3
    # An explicit set_epoch (the DistributedSampler habit) wins, and is not advanced on top of.
    explicit = s3stream.EpochSampler(ds, seed=2)
    loader = s3stream.DataLoader(ds, batch_size=4, sampler=explicit, collate_fn=collate_list)
    for epoch in (0, 1, 2, 7):
        explicit.set_epoch(epoch)
        assert [k for b in loader for k in b] == [uris[i] for i in explicit.indices(epoch)]
    # Repeating an epoch on purpose needs advance_epoch=False.
    fixed = s3stream.EpochSampler(ds, seed=2)
    loader_fixed = s3stream.DataLoader(ds, batch_size=4, sampler=fixed, collate_fn=collate_list, advance_epoch=False)
    assert [[k for b in loader_fixed for k in b] for _ in range(2)] == [[uris[i] for i in fixed.indices(0)]] * 2
    loader.set_epoch(3)
    assert explicit.epoch == 3
    # A loop that breaks early repeats the epoch instead of skipping ahead.
    for _ in loader:
        break
    assert explicit.epoch == 3
    assert [k for b in loader for k in b] == [uris[i] for i in explicit.indices(3)]


def test_torchrun_two_ranks(s3_endpoint, boto3_client, bucket, tmp_path):
    all_uris = populate(boto3_client, bucket, 45)  # odd: one sample does not split over 2 ranks
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, HERE, env.get("PYTHONPATH")) if p)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        os.path.join(HERE, "torchrun_map_worker.py"),
        "--endpoint", s3_endpoint, "--prefix", s3_uri(bucket, PREFIX), "--out-dir", str(tmp_path),
    ]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        pytest.fail(f"torchrun did not finish in 120 s:\n{out[-12000:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-12000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world_size"], r["dist_world_size"]) for r in results] == [(0, 2, 2), (1, 2, 2)]
    for remainder in ("drop", "pad"):
        for epoch in ("0", "1"):
            a, b = (r[remainder][epoch] for r in results)
            assert len(a) == len(b) == (22 if remainder == "drop" else 23)  # equal counts on every rank
            if remainder == "drop":
                assert not set(a) & set(b) and len(set(a)) == len(a) == 22  # disjoint, no repeats
                assert len(set(a) | set(b)) == 44 and set(a) | set(b) < set(all_uris)
            else:
                assert set(a) | set(b) == set(all_uris)  # all, one of them twice (the padding)
                assert sum(c - 1 for c in Counter(a + b).values()) == 1
        assert results[0][remainder]["0"] != results[0][remainder]["1"]  # a new order each epoch
        assert results[0]["counts_all_ranks"][remainder] == results[1]["counts_all_ranks"][remainder]


# --- resume ---------------------------------------------------------------------------------------------


def make_loader(ds, num_workers: int, seed: int = 7, **kw) -> s3stream.DataLoader:
    mp = dict(multiprocessing_context="fork") if num_workers else {}
    return s3stream.DataLoader(
        ds, batch_size=5, sampler=s3stream.EpochSampler(ds, seed=seed), num_workers=num_workers,
        collate_fn=collate_list, **mp, **kw,
    )


@pytest.mark.parametrize("before, after", [(2, 0), (0, 3), (3, 1)])
def test_resume_mid_epoch_with_another_worker_count(uris, client, before, after):
    ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    reference = s3stream.EpochSampler(ds, seed=7)
    first = make_loader(ds, before)
    assert [k for b in first for k in b] == [uris[i] for i in reference.indices(0)]  # epoch 0, whole
    seen = []
    it = iter(first)  # epoch 1 (advanced by the loader)
    for _ in range(4):
        seen += next(it)
    state = first.state_dict()
    json.dumps(state)  # plain data: fits in any checkpoint
    assert state["sampler"]["epoch"] == 1 and state["sampler"]["consumed"] == 20 and not state["epoch_complete"]
    if before:
        # Why the loader counts: workers fetched indices ahead, so the sampler's own count is ahead.
        assert first.sampler.state_dict()["consumed"] > 20
    del it, first

    clone = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    second = make_loader(clone, after)
    second.load_state_dict(state)
    assert len(second) == 5  # 25 samples left: 5 batches
    rest = [k for b in second for k in b]
    assert seen + rest == [uris[i] for i in reference.indices(1)]  # exactly the rest, none replayed
    assert sorted(seen + rest) == uris
    assert [k for b in second for k in b] == [uris[i] for i in reference.indices(2)]  # then epoch 2


def test_resume_at_an_epoch_boundary_starts_the_next_epoch(uris, client):
    ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    first = make_loader(ds, 2)
    list(first)
    state = first.state_dict()
    assert state["epoch_complete"] and state["sampler"]["consumed"] == 45 and state["sampler"]["epoch"] == 0
    second = make_loader(ds, 0)
    second.load_state_dict(state)
    assert [k for b in second for k in b] == [uris[i] for i in s3stream.EpochSampler(ds, seed=7).indices(1)]
    # After a finished epoch and an explicit move to the next, the state points at its start ...
    first.set_epoch(1)
    state = first.state_dict()
    assert (state["sampler"]["epoch"], state["sampler"]["consumed"], state["epoch_complete"]) == (1, 0, False)
    # ... and so it does after an epoch cut short ("steps per epoch") and a move to the next.
    for step, _ in enumerate(first):
        if step == 2:
            break
    assert first.state_dict()["sampler"]["consumed"] == 15
    first.set_epoch(2)
    state = first.state_dict()
    assert (state["sampler"]["epoch"], state["sampler"]["consumed"], state["epoch_complete"]) == (2, 0, False)


def test_sampler_resume_by_hand_with_torch_dataloader(uris, client):
    """Without s3stream.DataLoader the user states what the loop consumed."""
    ds = s3stream.MapDataset.from_objects(uris, transform=checked_key, client=client)
    sampler = s3stream.EpochSampler(ds, seed=3)
    loader = TorchDataLoader(ds, batch_size=4, sampler=sampler, num_workers=2, collate_fn=collate_list)
    got = []
    for step, batch in enumerate(loader):
        got += batch
        if step == 2:
            break
    state = sampler.state_dict(consumed=len(got))
    resumed = s3stream.EpochSampler(ds, seed=3)
    resumed.load_state_dict(state)
    assert len(resumed) == 45 - 12
    rest = [k for b in TorchDataLoader(ds, batch_size=4, sampler=resumed, collate_fn=collate_list) for k in b]
    assert got + rest == [uris[i] for i in sampler.indices(0)]


def test_resume_refuses_a_state_from_other_data(uris, client):
    ds = s3stream.MapDataset.from_objects(uris, client=client)
    state = s3stream.EpochSampler(ds, seed=1).state_dict(consumed=5)
    for other, match in [
        (s3stream.EpochSampler(ds, seed=2), "seed"),
        (s3stream.EpochSampler(s3stream.MapDataset.from_objects(uris[:-1], client=client), seed=1), "num_samples"),
        (s3stream.EpochSampler(s3stream.MapDataset.from_objects(uris[::-1], client=client), seed=1), "fingerprint"),
    ]:
        with pytest.raises(s3stream.InvalidArgumentError, match=match):
            other.load_state_dict(state)
    with pytest.raises(s3stream.InvalidArgumentError, match="past"):
        s3stream.EpochSampler(ds, seed=1).load_state_dict({**state, "passes": [[1, 1, "drop", 46]]})
    with pytest.raises(s3stream.InvalidArgumentError, match="past the end"):
        s3stream.EpochSampler(ds, seed=1).state_dict(consumed=46)
    with pytest.raises(s3stream.InvalidArgumentError, match="not an EpochSampler state"):
        s3stream.EpochSampler(ds, seed=1).load_state_dict({"hello": 1})
    with pytest.raises(s3stream.InvalidArgumentError, match="not an s3stream.DataLoader state"):
        make_loader(ds, 0).load_state_dict({"version": 99})
    with pytest.raises(s3stream.InvalidArgumentError, match="EpochSampler"):
        s3stream.DataLoader(ds, batch_size=4, shuffle=True).state_dict()
    with pytest.raises(s3stream.InvalidArgumentError, match="in_order"):
        make_loader(ds, 2, in_order=False).state_dict()


# --- memory -----------------------------------------------------------------------------------------------


def test_memory_stays_flat_across_ten_epochs(boto3_client, bucket, client):
    n, size = 200, 40 * 1024  # a leaked sample per read would grow RSS by ~8 MB per epoch
    items = {f"mem/{i:04d}.bin": bytes([i % 256]) * size for i in range(n)}
    put_many(boto3_client, bucket, items)
    ds = s3stream.MapDataset.from_prefix(s3_uri(bucket, "mem/"), client=client,
                                         transform=lambda s: torch.frombuffer(s.data, dtype=torch.uint8))
    loader = s3stream.DataLoader(ds, batch_size=32, sampler=s3stream.EpochSampler(ds), num_workers=0)

    def run_epoch(epoch):
        assert sum(int(batch.shape[0]) for batch in loader) == n

    growth = rss_growth_over_epochs(run_epoch)
    assert growth < 20 * (1 << 20), f"RSS grew by {growth / (1 << 20):.1f} MB over epochs 3-10"


# --- bad input ----------------------------------------------------------------------------------------------


def test_bad_input(boto3_client, bucket, client):
    populate(boto3_client, bucket, 3, extra={"only-markers/": b"", "only-markers/a/": b""})
    empty = s3_uri(bucket, "nothing-here/")
    with pytest.raises(s3stream.InvalidArgumentError, match=f"no objects under {empty}.*check the prefix"):
        s3stream.MapDataset.from_prefix(empty, client=client)
    with pytest.raises(s3stream.InvalidArgumentError, match="directory markers"):
        s3stream.MapDataset.from_prefix(s3_uri(bucket, "only-markers/"), client=client)
    with pytest.raises(s3stream.InvalidArgumentError, match="none ending in .jpg"):
        s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), client=client, suffixes=".jpg")
    with pytest.raises(s3stream.NotFoundError):
        s3stream.MapDataset.from_prefix("s3://s3s-no-such-bucket-4242/train/", client=client)
    with pytest.raises(s3stream.InvalidArgumentError):
        s3stream.MapDataset.from_objects([], client=client)
    with pytest.raises(s3stream.InvalidArgumentError, match="list of URIs"):
        s3stream.MapDataset.from_objects(s3_uri(bucket, PREFIX), client=client)

    ds = s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), client=client)
    for bad in (3, 100, -1):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
    with pytest.raises(IndexError):
        ds.__getitems__([0, 3])
    with pytest.raises(TypeError):
        ds["0"]
    assert ds[np.int64(2)].index == 2 and ds[torch.tensor(1)].index == 1

    with pytest.raises(s3stream.InvalidArgumentError, match="remainder"):
        s3stream.EpochSampler(ds, remainder="wrap")
    with pytest.raises(s3stream.InvalidArgumentError, match="rank 2 is outside world_size 2"):
        s3stream.EpochSampler(ds, rank=2, world_size=2)
    with pytest.raises(s3stream.InvalidArgumentError):
        s3stream.EpochSampler(ds, rank=-1, world_size=2)
    with pytest.raises(s3stream.InvalidArgumentError):
        s3stream.EpochSampler(ds, rank=0, world_size=0)
    with pytest.raises(s3stream.InvalidArgumentError, match="at least one sample"):
        s3stream.EpochSampler(0)
    with pytest.raises(s3stream.InvalidArgumentError, match="epoch"):
        s3stream.EpochSampler(ds).set_epoch(-1)
    assert issubclass(s3stream.InvalidArgumentError, ValueError)


def test_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import s3stream\n"
        "assert s3stream.Client and s3stream.rank_and_world() == (0, 1) and s3stream.worker_and_count() == (0, 1)\n"
        "try:\n"
        "    s3stream.MapDataset\n"
        "except ImportError as e:\n"
        "    assert 'needs PyTorch' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('MapDataset imported without torch')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = package_root
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_batch_length_inference_for_iterable_datasets():
    infer = loader_module._leading_len
    assert infer(torch.zeros(7, 3)) == 7
    assert infer({"__key__": ["a", "b"], "jpg": torch.zeros(2, 5)}) == 2
    assert infer([torch.zeros(4, 3), torch.zeros(4)]) == 4  # default_collate of (x, y) samples
    assert infer([("a", 1), ("b", 2), ("c", 3)]) == 3  # collate_fn=list
    assert infer(torch.tensor(3.0)) is None
