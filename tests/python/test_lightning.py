"""ShardDataset inside Lightning, as a user runs it: Trainer(devices=2, strategy="ddp") on gloo
builds the loop (lightning_train.py, run as a script because the ddp launcher runs it again for
rank 1), over 6 shards x 50 samples on moto, with a plain torch DataLoader and s3stream.DataLoader.

Lightning stops each epoch after len(loader) batches without asking for the end of the pass, calls
set_epoch on samplers only, and checkpoints a loader only if the loader itself has
state_dict/load_state_dict (its fit loop saves them as "combined_loader" and loads them back when
it restarts mid-epoch). What training_step received is compared with the dataset's own order for
each rank and epoch, read here in the test process.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from helpers import empty_bucket, make_client
from rank_jobs import rank_env, rank_results, run_job
from shard_helpers import HERE, ShardDataset, make_shards, upload

pytest.importorskip("lightning", reason="lightning is in tests/requirements.txt")

SHARDS = [50] * 6  # 300 samples: 150 per rank, 15 batches of BATCH
BATCH = 10  # lightning_train.BATCH
EVERY = 4  # checkpoint every EVERY steps: the one at step 4 is mid-epoch 0
WORLD = 2
JOB_TIMEOUT = 150
LOADERS = ["torch", "s3stream"]

pytestmark = pytest.mark.timeout_s(600)


@pytest.fixture(scope="module")
def shards(boto3_client):
    bucket = f"s3s-{uuid.uuid4().hex[:20]}"
    boto3_client.create_bucket(Bucket=bucket)
    yield upload(boto3_client, bucket, make_shards(SHARDS))
    empty_bucket(boto3_client, bucket)
    boto3_client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def reference(shards, s3_endpoint):
    """reference(rank, epoch): the keys that rank reads in that epoch, uninterrupted."""
    client = make_client(s3_endpoint)
    cache = {}

    def keys(rank: int, epoch: int) -> list:
        if (rank, epoch) not in cache:
            ds = ShardDataset(shards.uris, client=client, seed=3, batch_size=BATCH, rank=rank, world_size=WORLD,
                              progress=False)
            ds.set_epoch(epoch)
            cache[rank, epoch] = [s["__key__"] for s in ds]
        return cache[rank, epoch]

    return keys


class Trainings:
    """Runs lightning_train.py once per (loader, name) and keeps what every rank received."""

    def __init__(self, shards, s3_endpoint: str, root) -> None:
        self.shards, self.env, self.root = shards, rank_env(s3_endpoint), root
        self.done: dict = {}
        self.stderr: dict = {}  # (loader, name): what the job printed there

    def ckpt_dir(self, loader: str, name: str) -> str:
        return str(self.root / f"{loader}-{name}-ckpt")

    def run(self, loader: str, name: str, max_epochs: int, resume: str = None, workers: int = 2) -> list:
        """Per rank: {epoch (int): [keys in the order training_step received them]}."""
        if (loader, name) not in self.done:
            out = str(self.root / f"{loader}-{name}")
            cmd = [sys.executable, os.path.join(HERE, "lightning_train.py"), "--urls", json.dumps(self.shards.uris),
                   "--loader", loader, "--workers", str(workers), "--max-epochs", str(max_epochs),
                   "--ckpt-dir", self.ckpt_dir(loader, name), "--every-steps", str(EVERY), "--out", out,
                   "--timeout", str(JOB_TIMEOUT - 10)]
            if resume:
                cmd += ["--resume", resume]
            self.stderr[loader, name] = run_job(cmd, self.env, JOB_TIMEOUT)
            results = rank_results(out, WORLD)
            assert [(r["rank"], r["world_size"]) for r in results] == [(0, WORLD), (1, WORLD)]
            self.done[loader, name] = [{int(e): keys for e, keys in r["epochs"].items()} for r in results]
        return self.done[loader, name]

    def whole(self, loader: str) -> list:
        """Two epochs uninterrupted, keeping checkpoints at steps 4, 8, 12 and each epoch's end."""
        return self.run(loader, "whole", max_epochs=2)

    def checkpoint(self, loader: str, step: int) -> str:
        self.whole(loader)
        path = os.path.join(self.ckpt_dir(loader, "whole"), f"epoch=0-step={step}.ckpt")
        assert os.path.exists(path), sorted(os.listdir(self.ckpt_dir(loader, "whole")))
        return path


@pytest.fixture(scope="module")
def trainings(shards, s3_endpoint, tmp_path_factory):
    return Trainings(shards, s3_endpoint, tmp_path_factory.mktemp("lightning"))


def assert_exactly_once(per_rank: list, shards) -> None:
    got = [k for keys in per_rank for k in keys]
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} samples delivered twice"
    assert sorted(got) == sorted(shards.all_keys), f"{len(set(shards.all_keys) - set(got))} samples lost"


@pytest.mark.parametrize("loader", LOADERS)
def test_each_epoch_is_split_exactly_once_across_the_ranks(trainings, shards, loader):
    """Lightning neither wraps the loader in a DistributedSampler nor splits it again: the two
    ranks together receive the dataset once per epoch, each its own half."""
    runs = trainings.whole(loader)
    for epoch in (0, 1):
        assert_exactly_once([r[epoch] for r in runs], shards)
        assert [len(r[epoch]) for r in runs] == [150, 150]


@pytest.mark.parametrize("loader", LOADERS)
def test_epochs_advance_in_the_plans_order(trainings, reference, loader):
    """Lightning never tells an iterable dataset the epoch: the dataset advances by itself, so
    epoch 1 is epoch 1's order, not epoch 0's again."""
    runs = trainings.whole(loader)
    for rank, r in enumerate(runs):
        assert r[0] == reference(rank, 0)
        assert r[1] == reference(rank, 1) != reference(rank, 0)


def test_mid_epoch_resume_delivers_the_rest_once_then_a_fresh_epoch(trainings, shards, reference):
    """Resumed from the checkpoint at step 4 of epoch 0 (s3stream.DataLoader has state_dict, so
    Lightning saved and restores it): each rank receives exactly what the uninterrupted run received
    after step 4, and then the whole of epoch 1 in epoch 1's order. (A plain torch DataLoader has
    no state for Lightning to restore: Lightning warns that it is not resumable.)"""
    whole = trainings.whole("s3stream")
    resumed = trainings.run("s3stream", "resumed-mid", max_epochs=2, resume=trainings.checkpoint("s3stream", EVERY))
    before = [r[0][:EVERY * BATCH] for r in whole]
    after = [r[0] for r in resumed]
    assert_exactly_once([b + a for b, a in zip(before, after)], shards)
    for rank in range(WORLD):
        assert before[rank] + after[rank] == reference(rank, 0)  # nothing replayed, nothing skipped
        assert resumed[rank][1] == reference(rank, 1)
    assert sorted(resumed[0]) == [0, 1]


@pytest.mark.parametrize("loader", ["s3stream"])
def test_resumed_from_an_end_of_epoch_checkpoint_reads_the_next_epoch(trainings, shards, reference, loader):
    """The checkpoint a max_epochs=1 run ends with (saved at the end of epoch 0), resumed with
    max_epochs=2: the run trains epoch 1, in epoch 1's order, not epoch 0's again. Lightning does
    not restore a loader's state after a complete epoch; it calls set_epoch on the loader's sampler,
    which s3stream.DataLoader passes to the dataset before the iteration begins. (A plain torch
    DataLoader makes its own sampler, so nothing tells its dataset the epoch: it repeats epoch 0;
    README.)"""
    end_of_epoch0 = trainings.checkpoint(loader, len(shards.all_keys) // WORLD // BATCH)
    resumed = trainings.run(loader, "resumed-end", max_epochs=2, resume=end_of_epoch0)
    assert [sorted(r) for r in resumed] == [[1], [1]]
    assert_exactly_once([r[1] for r in resumed], shards)
    for rank in range(WORLD):
        assert resumed[rank][1] == reference(rank, 1) != reference(rank, 0)


def test_a_plain_loader_resumed_says_that_it_starts_over(trainings, shards, reference):
    """Lightning neither checkpoints a plain torch DataLoader nor tells its iterable dataset the
    epoch, so a run resumed from the end of epoch 0 reads epoch 0's order again. Nothing in the
    dataset can know better; it says so, naming the fix (s3stream.DataLoader)."""
    end_of_epoch0 = trainings.checkpoint("torch", len(shards.all_keys) // WORLD // BATCH)
    resumed = trainings.run("torch", "resumed-end", max_epochs=2, resume=end_of_epoch0)
    assert [r[1] for r in resumed] == [reference(rank, 0) for rank in range(WORLD)]
    said = trainings.stderr["torch", "resumed-end"]
    assert "Lightning is resuming this run from a checkpoint, but it cannot checkpoint a plain torch DataLoader" in said
    assert "Return s3stream.DataLoader(...) from train_dataloader()" in said
    assert "Lightning is resuming" not in trainings.stderr["torch", "whole"]
