"""ShardDataset end to end: tar shards in the moto bucket (s3://) and on local disk (file:// and
plain paths), read through the epoch plan (docs/epoch_plan.md).

Exactly once per epoch across ranks x workers (a real torchrun run, and in-process ranks under every
DataLoader mode), determinism and reshuffling, resume with another worker count, shard indexes
(the local cache by default, sidecars on request, reuse, rebuild, sidecars that cannot be written,
the `s3stream index` command),
URL forms, byte-for-byte parity with the webdataset package, zero-copy fields and decoders, flat
memory over many epochs, and the errors bad input must produce.

Shards are made with Python's tarfile (or GNU tar) with content derived from each sample's key
(see shard_helpers.py), so every byte delivered can be checked.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import s3stream
from helpers import boto3_etag, boto3_get, make_boto3_client, rss_growth_over_epochs, s3_uri
from proxies import FaultProxy, RecordingProxy, reset_before_response, status
from shard_helpers import (
    HERE,
    TESTDATA,
    ShardDataset,
    check_sample,
    checked_key,
    collate_list,
    decode,
    fields_of,
    make_shards,
    payload,
    sample_offsets,
    samples_tar,
    tar_bytes,
    upload,
    write_local,
)

# This machine may have fewer cores than the workers some tests start; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

UNEVEN = [37, 41, 29, 33, 13]  # 153 samples: neither shards nor samples split evenly over 2 ranks
FEW = [7, 4]  # 11 samples in 2 shards: fewer shards than 2 ranks x 3 workers
BATCH = 8


def dataset(urls, client, **kw) -> ShardDataset:
    kw.setdefault("progress", False)
    return ShardDataset(urls, client=client, **kw)


def keys_of(iterable) -> list[str]:
    """Keys of what a dataset or loader yields (samples, keys, or batches of either)."""
    out = []
    for item in iterable:
        for x in item if isinstance(item, list) else [item]:
            out.append(x if isinstance(x, str) else x["__key__"])
    return out


def plan_keys(ds: ShardDataset, shards, epoch: int) -> list[str]:
    """The keys of the rank's order in `epoch`, as the native plan states it."""
    by_uri = {u: shards.keys[n] for u, n in zip(shards.uris, shards.names)}
    return [by_uri[ds.shards[s].uri][i] for s, i in ds.plan(epoch).order()]


def loader_for(ds: ShardDataset, num_workers: int, **kw) -> s3stream.DataLoader:
    if num_workers:
        kw.setdefault("multiprocessing_context", "fork")
    return s3stream.DataLoader(ds, batch_size=ds.batch_size, num_workers=num_workers, collate_fn=collate_list, **kw)


def check_split(per_rank: list[list[str]], all_keys: list[str], remainder: str) -> None:
    """Every sample exactly once across ranks (drop: minus the remainder; pad: plus the padding),
    and every rank the same count."""
    world, n = len(per_rank), len(all_keys)
    share = n // world if remainder == "drop" else -(-n // world)
    assert [len(k) for k in per_rank] == [share] * world, "ranks got different counts"
    union = Counter(k for keys in per_rank for k in keys)
    assert set(union) <= set(all_keys), f"unknown keys: {sorted(set(union) - set(all_keys))[:5]}"
    if remainder == "drop":
        assert all(c == 1 for c in union.values()), f"repeated: {[k for k, c in union.items() if c > 1][:5]}"
        assert len(union) == n - n % world  # at most world-1 samples dropped
    else:
        assert set(union) == set(all_keys), f"missing: {sorted(set(all_keys) - set(union))[:5]}"
        assert sum(c - 1 for c in union.values()) == share * world - n  # duplicates only = padding


@pytest.fixture
def uneven(boto3_client, bucket):
    return upload(boto3_client, bucket, make_shards(UNEVEN))


def test_public_names():
    """The names the README and the brief use: s3stream.ShardDataset, s3stream.decode."""
    from s3stream import decoders, shard_dataset

    assert getattr(s3stream, "ShardDataset", None) is shard_dataset.ShardDataset
    assert getattr(s3stream, "decode", None) is decoders.decode
    assert {"ShardDataset", "decode"} <= set(s3stream.__all__)


# --- exactly once, equal counts -------------------------------------------------------------------------


@pytest.mark.timeout_s(180)
def test_torchrun_two_ranks_three_workers_exactly_once(s3_endpoint, boto3_client, bucket, tmp_path):
    uneven = upload(boto3_client, bucket, make_shards(UNEVEN), prefix="uneven/")
    few = upload(boto3_client, bucket, make_shards(FEW, first_shard=100), prefix="few/")
    scenarios = []
    for remainder in ("drop", "pad"):
        scenarios.append(dict(name=f"uneven-{remainder}", urls=s3_uri(bucket, "uneven/train-{000000..000004}.tar"),
                              batch_size=BATCH, remainder=remainder, seed=5))
        scenarios.append(dict(name=f"few-{remainder}", urls=s3_uri(bucket, "few/"), batch_size=2,
                              remainder=remainder, seed=5))
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, HERE, env.get("PYTHONPATH")) if p)
    env["S3STREAM_TEST_ENDPOINT"] = s3_endpoint
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        os.path.join(HERE, "torchrun_shard_worker.py"),
        "--scenarios", json.dumps(scenarios), "--out-dir", str(tmp_path),
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert elapsed < 90, f"the torchrun run took {elapsed:.0f} s"
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world_size"], r["dist_world_size"]) for r in results] == [(0, 2, 2), (1, 2, 2)]
    for sc in scenarios:
        shards = uneven if sc["name"].startswith("uneven") else few
        got = [r["scenarios"][sc["name"]] for r in results]
        per_rank = [g["keys"] for g in got]
        check_split(per_rank, shards.all_keys, sc["remainder"])
        share = len(per_rank[0])
        assert [g["len"] for g in got] == [share, share]
        assert got[0]["counts_all_ranks"] == got[1]["counts_all_ranks"] == [share, share]
        b = sc["batch_size"]
        for g in got:  # whole batches, only the last one short
            assert g["batches"] == [b] * (share // b) + ([share % b] if share % b else []), (sc["name"], g["batches"])


IN_PROCESS_MODES = {
    "workers0-drop": (dict(num_workers=0), "drop"),
    "fork1-pad": (dict(num_workers=1), "pad"),
    "fork3-drop": (dict(num_workers=3), "drop"),
    "fork3-pad": (dict(num_workers=3), "pad"),
    "spawn3-persistent-drop": (dict(num_workers=3, multiprocessing_context="spawn", persistent_workers=True), "drop"),
}


@pytest.mark.parametrize("mode", IN_PROCESS_MODES)
def test_two_ranks_in_process_every_sample_once_per_epoch(uneven, client, mode):
    loader_kw, remainder = IN_PROCESS_MODES[mode]
    datasets = [dataset(uneven.uris, client, rank=r, world_size=2, batch_size=BATCH, remainder=remainder, seed=3,
                        transform=checked_key) for r in range(2)]
    loaders = [loader_for(ds, **loader_kw) for ds in datasets]
    orders = []
    for epoch in range(3):  # s3stream.DataLoader advances the epoch by itself, in persistent workers too
        per_rank = [keys_of(loader) for loader in loaders]
        assert [ds.epoch for ds in datasets] == [epoch, epoch]
        check_split(per_rank, uneven.all_keys, remainder)
        for ds, keys in zip(datasets, per_rank):
            assert keys == plan_keys(ds, uneven, epoch)  # in the plan's order
        orders.append(per_rank[0])
    assert len({tuple(o) for o in orders}) == 3, "the order did not change between epochs"


def test_explicit_set_epoch_with_torch_dataloader(uneven, client):
    """Plain torch DataLoader: set_epoch each epoch, as with DistributedSampler."""
    ds = dataset(uneven.uris, client, batch_size=BATCH, seed=9, transform=checked_key)
    loader = TorchDataLoader(ds, batch_size=BATCH, num_workers=2, multiprocessing_context="fork",
                             persistent_workers=True, collate_fn=collate_list)
    for epoch in (4, 0, 4):
        ds.set_epoch(epoch)
        keys = keys_of(loader)
        assert sorted(keys) == sorted(uneven.all_keys)
        assert keys == plan_keys(ds, uneven, epoch)


# --- determinism and reshuffling --------------------------------------------------------------------------


def test_same_seed_same_sequence_new_order_each_epoch(uneven, client):
    a = dataset(uneven.uris, client, seed=17, batch_size=BATCH)
    b = dataset(uneven.uris, client, seed=17, batch_size=BATCH)
    other_seed = dataset(uneven.uris, client, seed=18, batch_size=BATCH)
    sequences = []
    for epoch in range(3):
        for ds in (a, b, other_seed):
            ds.set_epoch(epoch)
        seq = keys_of(a)
        assert a.epoch == epoch + 1  # a complete pass moves the dataset on to the next epoch by itself
        assert keys_of(b) == seq  # the same seed: the same sequence in another dataset
        a.set_epoch(epoch)
        assert keys_of(a) == seq  # and when the same epoch is read again
        assert sorted(seq) == sorted(uneven.all_keys)  # the same set, each once
        assert keys_of(other_seed) != seq
        sequences.append(seq)
    assert len({tuple(s) for s in sequences}) == 3, "epochs must differ in order"
    assert len({s[0][:4] for s in sequences} | {s[-1][:4] for s in sequences}) > 1, "the shard order never changed"


@pytest.mark.parametrize("chunk_bytes", [4 << 20, 1024], ids=["shards-within-a-chunk", "shards-over-many-chunks"])
def test_shuffle_false_keeps_shard_and_sample_order(uneven, client, chunk_bytes):
    """shuffle=False reads shards in the order given and each shard front to back, also when shards
    are larger than chunk_bytes (real shards of 100 MB-1 GB are, with the 4 MiB default)."""
    ds = dataset(uneven.uris, client, shuffle=False, batch_size=BATCH, chunk_bytes=chunk_bytes)
    samples = list(ds)
    assert [s["__key__"] for s in samples] == uneven.all_keys
    for s in samples:
        check_sample(s)
        name = s["__url__"].rsplit("/", 1)[-1]
        assert s["__key__"] in uneven.keys[name]  # __url__ names the sample's own shard
    assert [s["__index__"] for s in samples] == list(range(len(samples)))
    # Two ranks: each reads its turns of that order in order, and together the first 152 of it
    # (drop: the 153rd does not split evenly).
    ranks = [keys_of(dataset(uneven.uris, client, shuffle=False, rank=r, world_size=2, chunk_bytes=chunk_bytes))
             for r in range(2)]
    position = {k: i for i, k in enumerate(uneven.all_keys)}
    for keys in ranks:
        assert [position[k] for k in keys] == sorted(position[k] for k in keys)
    assert sorted(ranks[0] + ranks[1], key=position.get) == uneven.all_keys[:152]


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 1)])
def test_order_does_not_depend_on_num_workers(uneven, client, world_size, rank):
    sequences = {}
    for workers in (0, 1, 3):
        ds = dataset(uneven.uris, client, seed=23, batch_size=BATCH, rank=rank, world_size=world_size,
                     transform=checked_key)
        sequences[workers] = keys_of(loader_for(ds, workers))
    assert sequences[1] == sequences[0] and sequences[3] == sequences[0]
    assert sequences[0] == plan_keys(ds, uneven, 0)


def key_and_class(sample: dict) -> dict:
    """A transform whose output torch's default collation can batch."""
    check_sample(sample)
    return {"__key__": sample["__key__"], "cls": int(bytes(sample["cls"]))}


def test_dataloader_fills_in_the_batch_size(uneven, client):
    """Without batch_size, the dataset takes s3stream.DataLoader's: the order is the same with any
    num_workers, and the loader counts default-collated batches (dicts of columns) exactly."""
    reference = dataset(uneven.uris, client, seed=12, batch_size=BATCH)
    sequences, states = {}, {}
    for workers in (0, 3):
        ds = dataset(uneven.uris, client, seed=12, transform=key_and_class)
        kw = dict(multiprocessing_context="fork") if workers else {}
        loader = s3stream.DataLoader(ds, batch_size=BATCH, num_workers=workers, **kw)
        assert ds.batch_size == BATCH
        batches = list(loader)
        assert all(isinstance(b["cls"], torch.Tensor) for b in batches)
        sequences[workers] = [k for b in batches for k in b["__key__"]]
        it = iter(loader)
        next(it), next(it)
        states[workers] = loader.state_dict()
        del it
    assert sequences[0] == sequences[3] == plan_keys(reference, uneven, 0)
    assert states[0]["dataset"]["consumed"] == states[3]["dataset"]["consumed"] == 2 * BATCH
    assert states[0]["dataset"]["epoch"] == 1


# --- resume -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("before, after, k", [(0, 3, 1), (3, 0, 5), (1, 3, 9), (3, 1, 19)])
def test_resume_with_another_worker_count(uneven, s3_endpoint, before, after, k):
    reference_ds = dataset(uneven.uris, s3stream.Client(endpoint_url=s3_endpoint), seed=4, batch_size=BATCH)
    reference = {e: plan_keys(reference_ds, uneven, e) for e in (1, 2)}
    reference_ds.set_epoch(1)
    assert keys_of(reference_ds) == reference[1]  # what an uninterrupted epoch delivers

    ds = dataset(uneven.uris, s3stream.Client(endpoint_url=s3_endpoint), seed=4, batch_size=BATCH,
                 transform=checked_key)
    ds.set_epoch(1)
    first = loader_for(ds, before)
    it = iter(first)
    seen = keys_of(next(it) for _ in range(k))
    state = first.state_dict()
    json.dumps(state)  # plain data: fits in any checkpoint
    assert state["dataset"]["epoch"] == 1 and state["dataset"]["consumed"] == len(seen) == k * BATCH
    assert not state["epoch_complete"]
    del it, first

    clone = dataset(uneven.uris, s3stream.Client(endpoint_url=s3_endpoint), seed=4, batch_size=BATCH,
                    transform=checked_key)
    second = loader_for(clone, after)
    second.load_state_dict(state)
    rest = keys_of(second)
    assert seen + rest == reference[1], "replayed or skipped samples"
    assert keys_of(second) == reference[2]  # then the next epoch, whole


@pytest.mark.parametrize("k", [1, 50, 152])
def test_dataset_resume_without_workers(uneven, client, k):
    ds = dataset(uneven.uris, client, seed=8, batch_size=BATCH)
    reference = keys_of(ds)
    ds.set_epoch(0)  # the complete pass moved it on to epoch 1
    seen = keys_of(itertools.islice(iter(ds), k))
    state = ds.state_dict()
    assert state["consumed"] == k and state["epoch"] == 0
    clone = dataset(uneven.uris, client, seed=8, batch_size=BATCH)
    clone.load_state_dict(json.loads(json.dumps(state)))
    assert seen + keys_of(clone) == reference


@pytest.mark.parametrize("what", ["other shards", "other seed", "other chunking"])
def test_resume_refuses_a_state_from_elsewhere(boto3_client, bucket, uneven, client, what):
    ds = dataset(uneven.uris, client, seed=1, batch_size=BATCH)
    loader = loader_for(ds, 0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    kw = dict(seed=1, batch_size=BATCH)
    urls = uneven.uris
    if what == "other shards":
        urls = upload(boto3_client, bucket, make_shards(UNEVEN[:4]), prefix="other/").uris
    elif what == "other seed":
        kw["seed"] = 2
    else:
        kw["chunk_bytes"] = 1024  # another global sequence
    other = dataset(urls, client, **kw)
    field = {"other shards": "fingerprint", "other seed": "seed", "other chunking": "sequence"}[what]
    with pytest.raises(s3stream.InvalidArgumentError, match=field):
        loader_for(other, 0).load_state_dict(state)
    with pytest.raises(s3stream.InvalidArgumentError, match=field):
        other.load_state_dict(state["dataset"])


@pytest.mark.parametrize("new_world", [2, 3, 5])
@pytest.mark.parametrize("workers_before, workers_after", [(0, 2), (2, 0)])
def test_elastic_resume_at_another_world_size(uneven, client, new_world, workers_before, workers_after):
    """A state saved by rank 0 of 4 ranks resumes a job of 2, 3 or 5 ranks: every sample the saved
    run had not delivered comes exactly once, none it had delivered comes again (each rank a
    process of its own in a real job; here the ranks run one after another in this process)."""
    k = 2  # batches each rank received before the stop
    first_run, state = [], None
    for rank in range(4):
        ds = dataset(uneven.uris, client, seed=6, batch_size=BATCH, rank=rank, world_size=4)
        ds.set_epoch(3)
        loader = loader_for(ds, workers_before)
        it = iter(loader)
        first_run += keys_of(next(it) for _ in range(k))
        if rank == 0:
            state = json.loads(json.dumps(loader.state_dict()))
        del it, loader
    assert len(set(first_run)) == len(first_run) == 4 * k * BATCH
    second_run = []
    for rank in range(new_world):
        ds = dataset(uneven.uris, client, seed=6, batch_size=BATCH, rank=rank, world_size=new_world,
                     remainder="pad")
        loader = loader_for(ds, workers_after)
        loader.load_state_dict(state)
        keys = keys_of(loader)
        assert len(keys) == -(-(len(uneven.all_keys) - len(first_run)) // new_world)  # equal shares (pad)
        second_run += keys
        assert len(keys_of(loader)) == -(-len(uneven.all_keys) // new_world) and ds.epoch == 4  # then epoch 4, whole
    assert not set(first_run) & set(second_run), "replayed after the resume"
    assert set(first_run) | set(second_run) == set(uneven.all_keys), "lost in the resume"
    assert len(second_run) - len(set(second_run)) < new_world  # pad repeats at most one sample per rank


# --- indexes ---------------------------------------------------------------------------------------------------


def sidecar_keys(boto3_client, bucket: str, prefix: str = "") -> list[str]:
    listing = boto3_client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in listing if o["Key"].endswith(".idx.json"))


def test_sidecars_written_on_request_then_read_by_default(s3_endpoint, boto3_client, bucket, uneven, tmp_path, capsys):
    """write_index=True writes a sidecar beside each shard; a later default construction reads them
    and builds nothing, caches nothing and prints no hint."""
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        ds = dataset(uneven.uris, client, write_index=True)
        r = ds.index_report
        assert (r.built, r.reused, r.written_beside, r.written_to_cache, r.missing) == (5, 0, 5, 0, [])
        assert sidecar_keys(boto3_client, bucket) == [f"shards/{n}.idx.json" for n in uneven.names]
        for name in uneven.names:
            doc = json.loads(boto3_get(boto3_client, bucket, f"shards/{name}.idx.json"))
            assert doc["etag"] == boto3_etag(boto3_client, bucket, f"shards/{name}")
            assert doc["size"] == len(uneven.data[name]) and doc["samples"] == len(uneven.keys[name])
            assert doc["offsets"] == sample_offsets(uneven.data[name])
        assert [s.samples for s in ds.shards] == UNEVEN and ds.total_samples == sum(UNEVEN)

        before = len(proxy.requests)
        capsys.readouterr()
        again = dataset(uneven.uris, client, index_cache_dir=str(tmp_path / "cache"))
        r = again.index_report
        assert (r.built, r.reused, r.written_beside, r.written_to_cache) == (0, 5, 0, 0)
        assert not (tmp_path / "cache").exists() and capsys.readouterr().err == ""
        requests = proxy.requests[before:]
        assert Counter(q.method for q in requests) == Counter({"HEAD": 5, "GET": 5}), requests
        sidecars = sorted(f"shards/{n}.idx.json" for n in uneven.names)
        assert sorted(q.key for q in requests if q.method == "GET") == sidecars
        assert sorted(q.key for q in requests if q.method == "HEAD") == sorted(f"shards/{n}" for n in uneven.names)
        assert again.fingerprint() == ds.fingerprint()
        assert sorted(keys_of(again)) == sorted(uneven.all_keys)
        assert proxy.errors == []


def test_samples_stream_before_the_shards_are_downloaded(s3_endpoint, boto3_client, bucket, client):
    """The first sample comes after a few small ranged GETs, not after the shards' download, and
    a worker reads several shards at once (interleave)."""
    samples = [(f"big{s}/{i:04d}", {"bin": bytes([s]) * (64 << 10)}) for s in range(4) for i in range(64)]
    uris = []
    for s in range(4):
        boto3_client.put_object(Bucket=bucket, Key=f"big/{s}.tar", Body=samples_tar(samples[s * 64 : (s + 1) * 64]))
        uris.append(s3_uri(bucket, f"big/{s}.tar"))
    total = sum(len(f["bin"]) for _, f in samples)
    dataset(uris, client, write_index=True)  # builds the indexes (a full read), outside the recorded run
    with RecordingProxy(s3_endpoint) as proxy:
        ds = dataset(uris, s3stream.Client(endpoint_url=proxy.url), shuffle=True, batch_size=8,
                     chunk_bytes=256 << 10, max_bytes_ahead=2 << 20)
        before = len(proxy.requests)
        it = iter(ds)
        first_batch = [next(it) for _ in range(8)]
        ranges = [q.header("Range") for q in proxy.requests[before:] if q.method == "GET"]
        assert ranges and all(r and r.startswith("bytes=") for r in ranges), ranges  # only ranged reads
        fetched = sum(int(b) - int(a) + 1 for a, b in (r[len("bytes="):].split("-") for r in ranges))
        assert fetched < total / 4, f"{fetched} of {total} bytes fetched before the first samples"
        assert len({s["__url__"] for s in first_batch}) >= 2, "one batch should draw on several shards"
        assert sum(1 for _ in it) == len(samples) - 8


def cached_docs(directory) -> dict:
    """The local cache's index documents by shard name."""
    docs = [json.loads(p.read_bytes()) for p in directory.iterdir()]
    return {d["shard"]: d for d in docs}


@pytest.mark.parametrize("where", ["cache", "beside"])
def test_rewritten_shard_is_reindexed(boto3_client, bucket, uneven, client, tmp_path, where):
    """An index records its shard's ETag, in the local cache (the default) as in a sidecar: a shard
    replaced under the same name is indexed again, never read through the old index."""
    cache = tmp_path / "cache"
    kw = dict(index_cache_dir=str(cache), write_index=where == "beside")
    first = dataset(uneven.uris, client, **kw)
    assert first.index_report.built == 5
    old_etag = boto3_etag(boto3_client, bucket, "shards/train-000002.tar")
    replacement = make_shards([10], first_shard=50)  # other samples under the same name
    boto3_client.put_object(Bucket=bucket, Key="shards/train-000002.tar", Body=replacement.data["train-000050.tar"])
    new_etag = boto3_etag(boto3_client, bucket, "shards/train-000002.tar")
    assert new_etag != old_etag

    ds = dataset(uneven.uris, client, shuffle=False, **kw)
    r = ds.index_report
    if where == "beside":
        assert (r.built, r.reused, r.written_beside, r.written_to_cache) == (1, 4, 1, 0)
        doc = json.loads(boto3_get(boto3_client, bucket, "shards/train-000002.tar.idx.json"))
        assert not cache.exists()
    else:
        assert (r.built, r.reused, r.written_beside, r.written_to_cache) == (1, 4, 0, 1)
        assert sidecar_keys(boto3_client, bucket) == []
        docs = cached_docs(cache)
        assert sorted(docs) == uneven.names  # one file per shard: the new index replaced the old
        doc = docs["train-000002.tar"]
    assert doc["etag"] == new_etag and doc["samples"] == 10
    assert ds.fingerprint() != first.fingerprint()
    want = [k for n in uneven.names for k in (replacement.all_keys if n == "train-000002.tar" else uneven.keys[n])]
    assert keys_of(ds) == want


@pytest.mark.parametrize("tamper", ["negative offset", "past the end", "huge", "not a boundary", "descending",
                                    "wrong count", "not a list", "bool size", "deep nesting"])
def test_a_hostile_sidecar_is_rebuilt_not_trusted(boto3_client, bucket, uneven, client, tamper):
    """A sidecar is untrusted input: with the shard's own ETag and size it still must describe a
    possible index, or it is rebuilt (and the samples come out right)."""
    dataset(uneven.uris, client, write_index=True)  # writes the sidecars
    key = "shards/train-000001.tar.idx.json"
    doc = json.loads(boto3_get(boto3_client, bucket, key))
    offsets = doc["offsets"]
    if tamper == "negative offset":
        offsets[1] = -512
    elif tamper == "past the end":
        offsets[-1] = doc["size"] + 512
    elif tamper == "huge":
        offsets[1:] = [2**62 - 512 * (len(offsets) - i) for i in range(1, len(offsets))]
    elif tamper == "not a boundary":
        offsets[1] += 1
    elif tamper == "descending":
        offsets[1], offsets[2] = offsets[2], offsets[1]
    elif tamper == "wrong count":
        doc["samples"] += 1
    elif tamper == "not a list":
        doc["offsets"] = {"0": 0}
    elif tamper == "bool size":
        doc["size"] = True
    body = json.dumps(doc).encode()
    if tamper == "deep nesting":
        body = b'{"format": "s3stream.shard-index", "version": 1, "offsets": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    boto3_client.put_object(Bucket=bucket, Key=key, Body=body)

    ds = dataset(uneven.uris, client, shuffle=False)
    assert (ds.index_report.built, ds.index_report.reused) == (1, 4)
    assert keys_of(ds) == uneven.all_keys


def test_shard_replaced_after_construction_fails_loudly(boto3_client, bucket, uneven, client):
    ds = dataset(uneven.uris, client, shuffle=False)
    replacement = make_shards([37], first_shard=60).data["train-000060.tar"]  # same sample count, other bytes
    boto3_client.put_object(Bucket=bucket, Key="shards/train-000000.tar", Body=replacement)
    with pytest.raises(s3stream.ObjectChangedError) as excinfo:
        keys_of(ds)
    assert "train-000000.tar" in str(excinfo.value)


def test_read_only_bucket_keeps_indexes_in_the_local_cache(auth_server, tmp_path, capsys):
    """write_index=True where the credentials may only read: moto refuses the sidecars (403), the
    indexes go to the local cache with one warning, and the dataset works."""
    import boto3
    import requests
    from botocore.exceptions import ClientError

    # A user who may only read and list. The fixture's own user is allowed s3:* but no IAM actions,
    # so let moto take the next three IAM calls unauthenticated (its /moto-api/reset-auth, which also
    # re-arms enforcement after them), exactly as the fixture set up its own user.
    assert requests.post(f"{auth_server.url}/moto-api/reset-auth", data=b"3", timeout=10).ok
    iam = boto3.client("iam", endpoint_url=auth_server.url, region_name="us-east-1",
                       aws_access_key_id=auth_server.access_key_id, aws_secret_access_key=auth_server.secret_access_key)
    user = f"reader-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="read-only", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}],
    }))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    reader_b3 = make_boto3_client(auth_server.url, aws_access_key_id=key["AccessKeyId"],
                                  aws_secret_access_key=key["SecretAccessKey"])
    with pytest.raises(ClientError):  # authorization is enforced again, and this user cannot write
        reader_b3.put_object(Bucket=auth_server.bucket, Key="probe", Body=b"x")

    # Flat keys and a prefix without "/": moto's signature check mishandles an encoded "/" in a
    # query, so listing "ro-x/" fails there for boto3 as well.
    admin, bucket, prefix = auth_server.boto3_client, auth_server.bucket, f"ro-{uuid.uuid4().hex[:8]}-"
    shards = upload(admin, bucket, make_shards([6, 9, 4]), prefix=prefix)
    try:
        reader = s3stream.Client(endpoint_url=auth_server.url, access_key_id=key["AccessKeyId"],
                                 secret_access_key=key["SecretAccessKey"])
        capsys.readouterr()
        ds = dataset(s3_uri(bucket, prefix), reader, index_cache_dir=str(tmp_path), transform=checked_key,
                     write_index=True)
        r = ds.index_report
        assert (r.built, r.written_beside, r.written_to_cache) == (3, 0, 3)
        warnings_ = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
        assert len(warnings_) == 1, warnings_
        assert f"{bucket}/{prefix}" in warnings_[0] and "PermissionDeniedError" in warnings_[0], warnings_
        cached = sorted(p.name for p in tmp_path.iterdir())
        assert len(cached) == 3 and all(n.endswith(".idx.json") for n in cached), cached
        assert sidecar_keys(admin, bucket, prefix) == []  # nothing written to the bucket
        assert sorted(keys_of(ds)) == sorted(shards.all_keys)

        again = dataset(s3_uri(bucket, prefix), reader, index_cache_dir=str(tmp_path))
        assert (again.index_report.reused, again.index_report.built) == (3, 0)
    finally:
        for name in shards.names:
            admin.delete_object(Bucket=bucket, Key=prefix + name)


def index_command(endpoint: str, *args: str) -> subprocess.CompletedProcess:
    """`s3stream --endpoint-url ENDPOINT index ARGS...` in a child process."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "s3stream.cli", "--endpoint-url", endpoint, "index", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def listing(boto3_client, bucket: str) -> dict:
    """Every object in the bucket, with its ETag."""
    pages = boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def hints(err: str) -> list[str]:
    """The lines of stderr saying how to store indexes for every machine."""
    return [line for line in err.splitlines() if "write_index=True" in line]


def test_by_default_the_bucket_is_only_read(s3_endpoint, boto3_client, bucket, uneven, tmp_path, capsys):
    """A data loader does not modify the dataset it reads: the indexes it builds stay in the local
    cache, one line says how to store them for every machine, and the next construction reads the
    cache (one HEAD per shard, to check its ETag) instead of building again."""
    before = listing(boto3_client, bucket)
    cache = tmp_path / "cache"
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        capsys.readouterr()
        ds = dataset(uneven.uris, client, index_cache_dir=str(cache))
        assert {q.method for q in proxy.requests} <= {"HEAD", "GET"}, proxy.requests
        assert listing(boto3_client, bucket) == before
        r = ds.index_report
        assert (r.built, r.reused, r.written_beside, r.written_to_cache, r.failed_writes) == (5, 0, 0, 5, [])
        assert sorted(cached_docs(cache)) == uneven.names
        lines = hints(capsys.readouterr().err)
        assert len(lines) == 1, lines  # one line for the dataset, not one per shard
        assert f"run `s3stream --endpoint-url {proxy.url} index {uneven.uris[0]} " in lines[0], lines
        assert str(cache) in lines[0], lines

        start = len(proxy.requests)
        again = dataset(uneven.uris, client, index_cache_dir=str(cache), shuffle=False, transform=checked_key)
        r = again.index_report
        assert (r.built, r.reused, r.written_to_cache) == (0, 5, 0)
        assert sorted((q.method, q.key) for q in proxy.requests[start:]) == [("HEAD", f"shards/{n}") for n in uneven.names]
        assert hints(capsys.readouterr().err) == []  # nothing was built
        assert keys_of(again) == uneven.all_keys
        assert proxy.errors == []
    assert listing(boto3_client, bucket) == before


def test_the_hint_is_one_line_per_construction_that_built(uneven, client, tmp_path, capsys):
    """Once for each dataset that built indexes (not once per process); not where the caller chose
    where indexes go (write_index=False: this machine only)."""
    for run, (write_index, lines) in enumerate([(None, 1), (None, 1), (False, 0)]):
        capsys.readouterr()
        ds = dataset(uneven.uris, client, index_cache_dir=str(tmp_path / f"cache{run}"), write_index=write_index)
        assert (ds.index_report.built, ds.index_report.written_to_cache) == (5, 5)
        assert len(hints(capsys.readouterr().err)) == lines, run


@pytest.mark.parametrize("fault, shown", [(status(501, "NotImplemented"), "501"),
                                          (status(405, "MethodNotAllowed"), "405"),
                                          (status(403, "AccessDenied"), "PermissionDeniedError"),
                                          (reset_before_response(), "UnavailableError")],
                         ids=["501", "405", "403", "reset"])
def test_a_sidecar_that_cannot_be_written_goes_to_the_local_cache(s3_endpoint, boto3_client, bucket, uneven,
                                                                  tmp_path, capsys, fault, shown):
    """write_index=True on a server that will not store the sidecars (a read-only S3-compatible
    server answering 501, a 405, a refusal, the connection cut on every PUT): the dataset is built
    all the same, its indexes kept in the local cache, with one warning naming the sidecar and the
    error. Only reading the shards may fail a dataset."""
    cache = tmp_path / "cache"
    with FaultProxy(s3_endpoint) as proxy:
        rule = proxy.inject(fault, match=lambda q: q.method == "PUT" and q.key.endswith(".idx.json"), count=None)
        client = s3stream.Client(endpoint_url=proxy.url)
        capsys.readouterr()
        ds = dataset(uneven.uris, client, write_index=True, index_cache_dir=str(cache), shuffle=False,
                     transform=checked_key)
        err = capsys.readouterr().err
        warned = [line for line in err.splitlines() if "warning" in line]
        assert len(warned) == 1, err
        assert f"s3://{bucket}/shards/train-" in warned[0] and ".idx.json" in warned[0], warned
        assert shown in warned[0] and str(cache) in warned[0], warned
        r = ds.index_report
        assert (r.built, r.written_beside, r.written_to_cache) == (5, 0, 5)
        assert rule.injected >= 1 and 1 <= len(r.failed_writes) <= 5, (rule.injected, r.failed_writes)
        assert hints(err) == []  # sidecars were asked for: no hint
        assert sidecar_keys(boto3_client, bucket) == []
        assert sorted(cached_docs(cache)) == uneven.names
        assert keys_of(ds) == uneven.all_keys

        # The next construction reads the cache; only copying the indexes beside is tried again.
        r = dataset(uneven.uris, client, write_index=True, index_cache_dir=str(cache)).index_report
        assert (r.built, r.reused, r.written_beside, r.written_to_cache) == (0, 5, 0, 0)
        assert len([line for line in capsys.readouterr().err.splitlines() if "warning" in line]) == 1
        assert proxy.errors == []


def test_a_cache_that_cannot_be_written_costs_a_warning_not_the_dataset(boto3_client, bucket, uneven, client,
                                                                        tmp_path, capsys):
    (tmp_path / "file").write_bytes(b"not a directory")
    cache = tmp_path / "file" / "cache"
    capsys.readouterr()
    ds = dataset(uneven.uris, client, index_cache_dir=str(cache), shuffle=False)
    assert sidecar_keys(boto3_client, bucket) == []
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1 and str(cache) in warned[0] and "built again next time" in warned[0], err
    assert hints(err) == []  # nothing was kept
    r = ds.index_report
    assert (r.built, r.written_beside, r.written_to_cache, len(r.failed_writes)) == (5, 0, 0, 5)
    assert keys_of(ds) == uneven.all_keys


def test_index_command(s3_endpoint, boto3_client, bucket, uneven):
    def run(*urls: str) -> subprocess.CompletedProcess:
        return index_command(s3_endpoint, *urls)

    proc = run(s3_uri(bucket, "shards/"))
    assert proc.returncode == 0, proc.stderr
    assert "5 shards, 153 samples: 5 indexed now (5 written beside their shards, 0 to the local cache), " \
           "0 already indexed" in proc.stdout
    assert sidecar_keys(boto3_client, bucket) == [f"shards/{n}.idx.json" for n in uneven.names]
    proc = run(s3_uri(bucket, "shards/train-{000000..000004}.tar"))
    assert proc.returncode == 0, proc.stderr
    assert "5 shards, 153 samples: 0 indexed now" in proc.stdout and "5 already indexed" in proc.stdout
    assert dataset(uneven.uris, s3stream.Client(endpoint_url=s3_endpoint)).index_report.reused == 5

    proc = run(s3_uri(bucket, "shards/train-000009.tar"))
    assert proc.returncode == 1 and "train-000009.tar" in proc.stderr


def test_index_command_stores_the_cached_indexes_beside_the_shards(s3_endpoint, boto3_client, bucket, uneven,
                                                                   tmp_path):
    """The command the hint names, after a default construction: the indexes the local cache holds
    are written beside the shards as they are, not built again and not taken for done."""
    cache = tmp_path / "cache"
    dataset(uneven.uris, s3stream.Client(endpoint_url=s3_endpoint), index_cache_dir=str(cache))
    assert sidecar_keys(boto3_client, bucket) == []
    proc = index_command(s3_endpoint, "--cache-dir", str(cache), s3_uri(bucket, "shards/"))
    assert proc.returncode == 0, proc.stderr
    assert "5 shards, 153 samples: 0 indexed now (0 written beside their shards, 0 to the local cache), " \
           "5 already indexed (5 copied beside their shards from the local cache)" in proc.stdout, proc.stdout
    assert sidecar_keys(boto3_client, bucket) == [f"shards/{n}.idx.json" for n in uneven.names]
    for name, doc in cached_docs(cache).items():
        assert json.loads(boto3_get(boto3_client, bucket, f"shards/{name}.idx.json")) == doc


# --- URL forms ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["list", "brace", "alternatives", "prefix"])
def test_s3_url_forms(boto3_client, bucket, uneven, client, form):
    dataset(uneven.uris, client, write_index=True)  # sidecars now lie beside the shards: a prefix must ignore them
    boto3_client.put_object(Bucket=bucket, Key="shards/README.txt", Body=b"not a shard")
    boto3_client.put_object(Bucket=bucket, Key="shards/labels.json", Body=b"{}")
    urls = {
        "list": uneven.uris,
        "brace": s3_uri(bucket, "shards/train-{000000..000004}.tar"),
        "alternatives": [s3_uri(bucket, "shards/train-00000{0,1}.tar"),
                         s3_uri(bucket, "shards/train-{000002..000004}.tar")],
        "prefix": s3_uri(bucket, "shards/"),
    }[form]
    ds = dataset(urls, client, shuffle=False, transform=checked_key)
    assert [s.uri for s in ds.shards] == uneven.uris
    assert ds.index_report.reused == 5
    assert keys_of(ds) == uneven.all_keys


@pytest.mark.parametrize("form", ["paths", "file-uris", "brace-path", "directory", "directory-uri", "relative"])
def test_local_url_forms(tmp_path, monkeypatch, form):
    shards = write_local(str(tmp_path / "shards"), make_shards([5, 8, 3]))
    (tmp_path / "shards" / "notes.txt").write_text("not a shard")
    directory = str(tmp_path / "shards")
    urls = {
        "paths": [os.path.join(directory, n) for n in shards.names],
        "file-uris": shards.uris,
        "brace-path": os.path.join(directory, "train-{000000..000002}.tar"),
        "directory": directory + "/",
        "directory-uri": "file://" + directory + "/",
        "relative": [os.path.join("shards", n) for n in shards.names],
    }[form]
    monkeypatch.chdir(tmp_path)

    def sidecars() -> list[str]:
        return sorted(p.name for p in (tmp_path / "shards").iterdir() if p.name.endswith(".idx.json"))

    ds = dataset(urls, s3stream.Client(), shuffle=False, transform=checked_key)
    assert [s.uri for s in ds.shards] == shards.uris
    assert ds.index_report.built == 3 and ds.index_report.written_to_cache == 3
    assert sidecars() == []  # the default writes nothing beside the shards
    samples = list(dataset(urls, s3stream.Client(), shuffle=False))
    assert [s["__key__"] for s in samples] == shards.all_keys
    assert samples[0]["__url__"] == shards.uris[0]
    assert keys_of(loader_for(dataset(urls, s3stream.Client(), seed=1, batch_size=3, transform=checked_key), 2)) \
        == keys_of(dataset(urls, s3stream.Client(), seed=1, batch_size=3))
    assert dataset(urls, s3stream.Client()).index_report.reused == 3
    r = dataset(urls, s3stream.Client(), write_index=True).index_report
    assert (r.reused, r.built, r.written_beside, r.copied_beside) == (3, 0, 3, 3)
    assert sidecars() == [n + ".idx.json" for n in shards.names]


# --- WebDataset parity -------------------------------------------------------------------------------------------

WEBDATASET_SHARDS = ["compressed.tar", "mpdata.tar", "sample.tgz", "tendata.tar", "testgz.tar"]


def webdataset_samples(path: str) -> list[dict]:
    import webdataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(webdataset.WebDataset(path, shardshuffle=False))


def assert_same_samples(ours: list[dict], theirs: list[dict]) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a["__key__"] == b["__key__"], i
        fields_a = {k: bytes(v) for k, v in a.items() if not k.startswith("__")}
        fields_b = {k: v for k, v in b.items() if not k.startswith("__")}
        assert set(fields_a) == set(fields_b), (a["__key__"], sorted(fields_a), sorted(fields_b))
        for ext in fields_b:
            assert fields_a[ext] == fields_b[ext], (a["__key__"], ext)


@pytest.mark.parametrize("name", WEBDATASET_SHARDS)
def test_webdataset_parity(boto3_client, bucket, client, tmp_path, name):
    source = os.path.join(TESTDATA, "webdataset", name)
    assert os.path.exists(source), f"missing test data {source} (set S3STREAM_TESTDATA_DIR)"
    local = tmp_path / name
    shutil.copyfile(source, local)
    with open(source, "rb") as f:
        boto3_client.put_object(Bucket=bucket, Key=f"wds/{name}", Body=f.read())
    uri = s3_uri(bucket, f"wds/{name}")
    ours = list(dataset(uri, client, shuffle=False))
    assert ours and all(s["__url__"] == uri for s in ours)
    assert_same_samples(ours, webdataset_samples(str(local)))


def gnu_tar_tree(root) -> list[tuple[str, dict[str, bytes]]]:
    """Files with >100-character paths and unicode names, grouped as samples (in order)."""
    long_dir = "a-directory-name-long-enough/" * 4  # 116 characters
    samples = [
        (f"{long_dir}plain-{0:03d}", None),
        ("ünïcödé/日本語-サンプル-001", None),
        ("short-002", None),
        ("k" * 150, None),  # a 150-character basename
        (f"{long_dir}ünïcödé-{'é' * 60}-004", None),
    ]
    out = []
    for i, (key, _) in enumerate(samples):
        fields = {"txt": key.encode(), "bin": payload(key, 100 + 700 * i), "cls": str(i).encode()}
        for ext, data in fields.items():
            path = root / f"{key}.{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        out.append((key, fields))
    return out


@pytest.mark.parametrize("fmt", ["pax", "gnu"])
def test_gnu_tar_long_and_unicode_names_through_s3(boto3_client, bucket, client, tmp_path, fmt):
    root = tmp_path / "tree"
    samples = gnu_tar_tree(root)
    names = [f"{key}.{ext}" for key, fields in samples for ext in fields]
    assert max(len(n.encode()) for n in names) > 100
    archive = tmp_path / f"made-by-gnu-tar.{fmt}.tar"
    subprocess.run(["tar", f"--format={fmt}", "--no-recursion", "-cf", str(archive), "-C", str(root), *names],
                   check=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    boto3_client.put_object(Bucket=bucket, Key=f"gnu/{fmt}.tar", Body=archive.read_bytes())
    ours = list(dataset(s3_uri(bucket, f"gnu/{fmt}.tar"), client, shuffle=False, chunk_bytes=2048))
    assert [s["__key__"] for s in ours] == [key for key, _ in samples]
    for s, (key, fields) in zip(ours, samples):
        check_sample(s, fields)
    assert_same_samples(ours, webdataset_samples(str(archive)))


# --- zero copy and decoders ------------------------------------------------------------------------------------


def test_fields_are_zero_copy_buffers(uneven, client):
    ds = dataset(uneven.uris, client, shuffle=False)
    sample = next(iter(ds))
    assert all(isinstance(sample[ext], s3stream.Buffer) for ext in ("cls", "txt", "bin"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "The given buffer is not writable"
        t = torch.frombuffer(sample["bin"], dtype=torch.uint8)
    assert bytes(t.numpy()) == fields_of(sample["__key__"])["bin"]
    assert t.data_ptr() == np.frombuffer(sample["bin"], dtype=np.uint8).ctypes.data  # shares the memory
    # The members were not copied out of the response: they lie in it as in the tar, one 512-byte
    # header before each (cls: 1 byte, padded to 512; txt: 10 bytes, padded to 512).
    address = {ext: np.frombuffer(sample[ext], dtype=np.uint8).ctypes.data for ext in ("cls", "txt", "bin")}
    assert address["txt"] - address["cls"] == 1024 and address["bin"] - address["txt"] == 1024


def jpeg_bytes(width: int, height: int, seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = (rng.integers(0, 256, size=(height, width, 3))).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_decode_image_tensor_cls_json(boto3_client, bucket, client):
    from PIL import Image

    samples = []
    for i in range(4):
        meta = {"i": i, "tags": ["a", "b"][: i % 3]}
        samples.append((f"img{i:03d}", {
            "jpg": jpeg_bytes(24 + i, 16, seed=i),
            "cls": str(i * 3).encode(),
            "json": json.dumps(meta).encode(),
            "json.gz": gzip.compress(json.dumps(meta).encode(), mtime=0),
        }))
    boto3_client.put_object(Bucket=bucket, Key="img/images.tar", Body=samples_tar(samples))
    uri = s3_uri(bucket, "img/images.tar")

    decoded = list(dataset(uri, client, shuffle=False, transform=decode(image="tensor")))
    assert len(decoded) == 4
    for d, (key, fields) in zip(decoded, samples):
        assert d["__key__"] == key
        img = d["jpg"]
        assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8
        assert tuple(img.shape) == (3, 16, 24 + int(key[-1]))  # CHW
        reference = np.asarray(Image.open(io.BytesIO(fields["jpg"])).convert("RGB")).transpose(2, 0, 1)
        assert np.array_equal(img.numpy(), reference)
        assert d["cls"] == int(fields["cls"]) and isinstance(d["cls"], int)
        assert d["json"] == json.loads(fields["json"])
        assert isinstance(d["json.gz"], s3stream.Buffer) and bytes(d["json.gz"]) == fields["json.gz"]

    pil = next(iter(dataset(uri, client, shuffle=False, transform=decode())))
    assert isinstance(pil["jpg"], Image.Image) and pil["jpg"].size == (24, 16)
    # Through DataLoader workers with torch's default collation: a batch of CHW tensors.
    loader = TorchDataLoader(dataset(uri, client, shuffle=False, batch_size=2, transform=decode(image="tensor")),
                             batch_size=2, num_workers=2, multiprocessing_context="fork",
                             collate_fn=lambda b: [(s["__key__"], s["jpg"].shape) for s in b])
    assert [k for batch in loader for k, _ in batch] == [k for k, _ in samples]


def test_decode_works_on_map_samples_by_the_keys_extension():
    from s3stream.map_dataset import Sample

    jpg = jpeg_bytes(8, 6, seed=1)
    img = decode(image="tensor")(Sample("s3://b/images/0001.JPG", jpg, 1))
    assert isinstance(img, Sample) and img.key == "s3://b/images/0001.JPG" and img.index == 1
    assert isinstance(img.data, torch.Tensor) and tuple(img.data.shape) == (3, 6, 8)
    assert decode()(Sample("s3://b/labels/0001.cls", b" 7\n", 1)).data == 7
    raw = Sample("s3://b/blobs/noext", b"xyz", 2)
    assert decode()(raw) is raw  # no extension: nothing to decode by


def test_decode_image_tensor_emits_no_warning():
    """decode(image="tensor") must not make torch warn (it warns once per process: a fresh one)."""
    probe = (
        "import io, warnings, numpy as np\n"
        "from PIL import Image\n"
        "from s3stream.decoders import decode\n"
        "out = io.BytesIO(); Image.fromarray(np.zeros((4, 6, 3), np.uint8)).save(out, format='JPEG')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    t = decode(image='tensor')({'__key__': 'k', 'jpg': out.getvalue()})['jpg']\n"
        "assert tuple(t.shape) == (3, 4, 6), t.shape\n"
        "print([str(w.message)[:120] for w in caught])\n"
    )
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": package_root})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"decode(image='tensor') warned: {proc.stdout}"


# --- memory ----------------------------------------------------------------------------------------------------


def test_memory_flat_across_ten_epochs(boto3_client, bucket, client):
    sample_size, per_shard, shards = 100 * 1024, 50, 4  # 20 MB of samples
    uris = []
    for s in range(shards):
        members = []
        for i in range(per_shard):
            key = f"m{s}_{i:04d}"
            members += [(f"{key}.bin", payload(key, sample_size)), (f"{key}.cls", str(i).encode())]
        boto3_client.put_object(Bucket=bucket, Key=f"mem/{s}.tar", Body=tar_bytes(members))
        uris.append(s3_uri(bucket, f"mem/{s}.tar"))
    ds = dataset(uris, client, batch_size=16, transform=lambda s: torch.frombuffer(s["bin"], dtype=torch.uint8))
    loader = s3stream.DataLoader(ds, batch_size=16, num_workers=0, collate_fn=collate_list)

    def run_epoch(epoch):
        seen = 0
        for batch in loader:
            seen += len(batch)
            assert all(t.numel() == sample_size for t in batch)
        assert seen == shards * per_shard and ds.epoch == epoch

    growth = rss_growth_over_epochs(run_epoch)
    assert growth < 20 * (1 << 20), f"RSS grew by {growth / (1 << 20):.1f} MB over epochs 3-10"


# --- bad input -----------------------------------------------------------------------------------------------------


def test_missing_shard_is_an_error_naming_it(uneven, client, bucket):
    missing = s3_uri(bucket, "shards/train-000077.tar")
    with pytest.raises(s3stream.NotFoundError) as excinfo:
        dataset(uneven.uris[:2] + [missing] + uneven.uris[2:], client)
    assert missing in str(excinfo.value)
    assert isinstance(excinfo.value, FileNotFoundError)


def test_missing_shard_skipped_when_asked(uneven, client, bucket, capsys):
    missing = s3_uri(bucket, "shards/train-000077.tar")
    ds = dataset(uneven.uris[:2] + [missing] + uneven.uris[2:], client, missing="skip", shuffle=False,
                 transform=checked_key)
    assert ds.skipped_shards == [missing] and ds.index_report.missing == [missing]
    assert [s.uri for s in ds.shards] == uneven.uris
    assert keys_of(ds) == uneven.all_keys
    assert missing in capsys.readouterr().err


def test_truncated_tar(boto3_client, bucket, client):
    data = make_shards([6]).data["train-000000.tar"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.getmember("s000_00003.bin")
    cut = member.offset_data + member.size // 2  # in the middle of sample 3's last member
    boto3_client.put_object(Bucket=bucket, Key="bad/truncated.tar", Body=data[:cut])
    uri = s3_uri(bucket, "bad/truncated.tar")
    with pytest.raises(s3stream.CorruptDataError) as excinfo:
        dataset(uri, client)
    msg = str(excinfo.value)
    assert uri in msg and "truncated" in msg and f"offset {member.offset}" in msg, msg
    assert isinstance(excinfo.value, ValueError)


def test_corrupt_tar(boto3_client, bucket, client):
    data = bytearray(make_shards([6]).data["train-000000.tar"])
    header = sample_offsets(bytes(data))[4]  # the header of sample 4's first member
    data[header + 10 : header + 20] = b"##########"  # the name changes, the checksum no longer matches
    boto3_client.put_object(Bucket=bucket, Key="bad/corrupt.tar", Body=bytes(data))
    uri = s3_uri(bucket, "bad/corrupt.tar")
    with pytest.raises(s3stream.CorruptDataError) as excinfo:
        dataset(uri, client)
    msg = str(excinfo.value)
    assert uri in msg and f"offset {header}" in msg and "checksum" in msg, msg


def test_repeated_extension_in_a_sample(boto3_client, bucket, client):
    members = [("ok_0001.txt", b"a"), ("ok_0001.cls", b"1"), ("dup_0002.txt", b"first"), ("dup_0002.txt", b"second")]
    boto3_client.put_object(Bucket=bucket, Key="bad/dup.tar", Body=tar_bytes(members))
    uri = s3_uri(bucket, "bad/dup.tar")
    with pytest.raises(s3stream.CorruptDataError) as excinfo:
        dataset(uri, client)
    msg = str(excinfo.value)
    assert uri in msg and '"dup_0002"' in msg and '"txt"' in msg, msg


def test_shards_without_samples(boto3_client, bucket, client):
    boto3_client.put_object(Bucket=bucket, Key="empty/a.tar", Body=tar_bytes([]))
    boto3_client.put_object(Bucket=bucket, Key="empty/b.tar", Body=tar_bytes([("README", b"no extension: no sample")]))
    with pytest.raises(s3stream.InvalidArgumentError, match="empty"):
        dataset(s3_uri(bucket, "empty/"), client)


@pytest.mark.parametrize("content", [b"plain text, certainly not a tar archive\n" * 40, b"\xff\xd8\xff\xe0 JFIF", b""],
                         ids=["text", "short", "zero-bytes"])
def test_non_tar_object_as_shard(boto3_client, bucket, client, content):
    boto3_client.put_object(Bucket=bucket, Key="bad/notes.tar", Body=content)
    uri = s3_uri(bucket, "bad/notes.tar")
    with pytest.raises(s3stream.CorruptDataError, match="not a tar archive") as excinfo:
        dataset(uri, client)
    assert uri in str(excinfo.value)


@pytest.mark.parametrize("option, words", [
    (dict(remainder="x"), "remainder"), (dict(batch_size=0), "batch_size"), (dict(interleave=0), "interleave"),
    (dict(missing="maybe"), "missing"), (dict(rank=2, world_size=2), "rank"), (dict(world_size=0), "world_size"),
    (dict(piece_size=1), "piece_size"), (dict(seed=1.5), "seed"), (dict(seed="a"), "seed"),
    (dict(shuffle="no"), "shuffle"), (dict(chunk_bytes=-5), "chunk_bytes"), (dict(chunk_bytes="4MB"), "chunk_bytes")])
def test_bad_options(uneven, client, option, words):
    """Named in a typed error at construction (some failed only at iteration, in the bindings)."""
    with pytest.raises(s3stream.InvalidArgumentError, match=words):
        dataset(uneven.uris, client, **option)


@pytest.mark.parametrize("seed", [-1, 2**70])
def test_any_integer_seed_is_taken_modulo_2_to_the_64(uneven, client, seed):
    got = [s["__key__"] for s in dataset(uneven.uris, client, seed=seed)]
    assert got == [s["__key__"] for s in dataset(uneven.uris, client, seed=seed % 2**64)]
    assert sorted(got) == sorted(uneven.all_keys)


def test_prefix_without_shards(boto3_client, bucket, client):
    boto3_client.put_object(Bucket=bucket, Key="docs/readme.txt", Body=b"x")
    for prefix in ("docs/", "nothing-here/"):
        with pytest.raises(s3stream.InvalidArgumentError, match="no shards") as excinfo:
            dataset(s3_uri(bucket, prefix), client)
        assert s3_uri(bucket, prefix) in str(excinfo.value)
