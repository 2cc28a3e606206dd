"""Elastic resume under a real torchrun (gloo, CPU): a job of 4 ranks is stopped mid-epoch and rank 0
saves its s3stream.DataLoader state; jobs of 2 and of 3 ranks load that one state and finish the
epoch. What the 4 ranks received before the stop plus what the new ranks received after it must
be the epoch exactly (no sample twice, none lost), and the epoch after it a whole fresh one.
For ShardDataset and for MapDataset under EpochSampler (torchrun_elastic_worker.py), with and
without DataLoader workers.

The sizes divide evenly at 4, 2 and 3 ranks (remainder="drop" drops nothing), so the union of the
two jobs is exactly the epoch: 300 samples, 60 read before the stop (4 ranks x 3 batches of 5);
60 map objects, 36 before (4 x 3 x 3).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

import s3stream
from helpers import empty_bucket, make_client, put_many, s3_uri
from rank_jobs import rank_env, rank_results, torchrun
from shard_helpers import ShardDataset, make_shards, upload
from torchrun_elastic_worker import BATCH, SEEDS

SHARDS = [50] * 6
OBJECTS = 60
PREFIX = "elastic/"
BEFORE_BATCHES = 3
SAVED_WORLD = 4
JOB_TIMEOUT = 90

pytestmark = pytest.mark.timeout_s(300)


@pytest.fixture(scope="module")
def data(boto3_client):
    bucket = f"s3s-{uuid.uuid4().hex[:20]}"
    boto3_client.create_bucket(Bucket=bucket)
    shards = upload(boto3_client, bucket, make_shards(SHARDS))
    # MapDataset objects whose bytes start with their own name (torchrun_map_worker.key_of checks).
    names = [f"{i:04d}.bin" for i in range(OBJECTS)]
    put_many(boto3_client, bucket, {PREFIX + n: n.encode() * 8 for n in names})
    yield {"bucket": bucket, "shard": shards.all_keys, "shards": shards.uris,
           "map": [s3_uri(bucket, PREFIX + n) for n in names]}
    empty_bucket(boto3_client, bucket)
    boto3_client.delete_bucket(Bucket=bucket)


def job_args(data, phase: str, workers: int, state: str, out: str) -> list:
    return ["--phase", phase, "--shards", json.dumps(data["shards"]), "--prefix", s3_uri(data["bucket"], PREFIX),
            "--workers", str(workers), "--batches", str(BEFORE_BATCHES), "--state", state, "--out", out,
            "--timeout", str(JOB_TIMEOUT - 10)]


@pytest.fixture(scope="module")
def saved(data, s3_endpoint, tmp_path_factory):
    """The stopped job of 4 ranks (2 DataLoader workers each): what each rank received, and the
    path of rank 0's state."""
    root = tmp_path_factory.mktemp("elastic")
    state, out = str(root / "state.json"), str(root / "saved")
    torchrun(SAVED_WORLD, "torchrun_elastic_worker.py", job_args(data, "save", 2, state, out), rank_env(s3_endpoint),
             JOB_TIMEOUT)
    return rank_results(out, SAVED_WORLD), state


def reference_next_epoch(data, s3_endpoint, kind: str, rank: int, world: int) -> list:
    """What `rank` of `world` reads in epoch 1, uninterrupted."""
    if kind == "map":
        sampler = s3stream.EpochSampler(OBJECTS, seed=SEEDS["map"], rank=rank, world_size=world)
        sampler.set_epoch(1)
        return [data["map"][i] for i in sampler]
    ds = ShardDataset(data["shards"], client=make_client(s3_endpoint), seed=SEEDS["shard"], batch_size=BATCH["shard"],
                      rank=rank, world_size=world, progress=False)
    ds.set_epoch(1)
    return [s["__key__"] for s in ds]


@pytest.mark.parametrize("new_world,workers", [(2, 0), (3, 2)])
def test_state_saved_at_4_ranks_finishes_the_epoch_at_another_world_size(data, saved, s3_endpoint, tmp_path,
                                                                         new_world, workers):
    before, state = saved
    out = str(tmp_path / "resumed")
    torchrun(new_world, "torchrun_elastic_worker.py", job_args(data, "resume", workers, state, out),
             rank_env(s3_endpoint), JOB_TIMEOUT)
    after = rank_results(out, new_world)
    assert [r["world_size"] for r in before + after] == [SAVED_WORLD] * SAVED_WORLD + [new_world] * new_world
    for kind in ("shard", "map"):
        epoch = data[kind]
        got_before = [k for r in before for k in r[kind]["epoch"]]
        assert len(got_before) == SAVED_WORLD * BEFORE_BATCHES * BATCH[kind]
        got_after = [k for r in after for k in r[kind]["epoch"]]
        union = Counter(got_before + got_after)
        twice, lost = sorted(union - Counter(epoch)), sorted(Counter(epoch) - union)
        assert not twice, f"{kind}: {len(twice)} delivered twice, e.g. {twice[:5]}"
        assert not lost, f"{kind}: {len(lost)} lost, e.g. {lost[:5]}"
        # Equal shares of the rest, so DDP ranks run the same number of steps.
        assert [len(r[kind]["epoch"]) for r in after] == [(len(epoch) - len(got_before)) // new_world] * new_world
        for rank, r in enumerate(after):  # then the next epoch, whole, in its own order
            assert r[kind]["next"] == reference_next_epoch(data, s3_endpoint, kind, rank, new_world), (kind, rank)
        assert sorted(k for r in after for k in r[kind]["next"]) == sorted(epoch)
