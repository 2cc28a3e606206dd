"""The datasets inside the loaders frameworks build: a plain torch DataLoader stopped after
len(loader) batches (what Lightning does), and torchdata's StatefulDataLoader, which checkpoints
each worker on its own and never calls set_epoch. Against moto, through the real S3 path."""

from __future__ import annotations

import json

import pytest
import torch.utils.data

import s3stream
from shard_helpers import ShardDataset, collate_list, make_shards, upload

torchdata = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is in tests/requirements.txt")

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS = [50] * 6  # 300 samples
BATCH = 10


@pytest.fixture
def shards(boto3_client, bucket):
    return upload(boto3_client, bucket, make_shards(SHARDS))


def dataset(shards, client, **kw) -> ShardDataset:
    return ShardDataset(shards.uris, client=client, seed=3, progress=False, **kw)


def keys(batches) -> list[str]:
    return [s["__key__"] for b in batches for s in b]


def take_len(loader) -> list:
    """Lightning's way: exactly len(loader) batches, never asking for the end of the pass."""
    it = iter(loader)
    out = [next(it) for _ in range(len(loader))]
    del it
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_plain_loader_stopped_after_len_batches_moves_to_the_next_epoch(shards, client, workers):
    ds = dataset(shards, client)
    kw = dict(multiprocessing_context="fork") if workers else {}
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=collate_list, **kw)
    assert len(loader) == 300 // BATCH
    epochs = [keys(take_len(loader)) for _ in range(3)]
    for got in epochs:
        assert sorted(got) == sorted(set(got)) and len(got) == 300  # each sample once per epoch
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0], "epochs repeated their order"
    assert ds.epoch == 3
    # The batch size came from the loader, though the dataset was never told: the sequence is the
    # plan's for batches of BATCH whatever the number of workers.
    reference = dataset(shards, client, batch_size=BATCH)
    reference.set_epoch(0)
    assert epochs[0] == [s["__key__"] for s in reference]


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_without_replay_and_moves_on(shards, client, workers):
    """Each worker's own position comes back to that worker: nothing replayed, nothing skipped
    (at num_workers=2 the old state replayed 40 samples), and epochs advance though torchdata
    never calls set_epoch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    kw = dict(multiprocessing_context="fork") if workers else {}

    def make():
        return StatefulDataLoader(dataset(shards, client), batch_size=BATCH, num_workers=workers,
                                  collate_fn=collate_list, **kw)

    whole = make()
    reference = [keys(take_len(whole)) for _ in range(2)]
    assert reference[0] != reference[1]

    first = make()
    it = iter(first)
    seen = keys(next(it) for _ in range(7))
    state = first.state_dict()
    del it, first
    second = make()
    second.load_state_dict(json.loads(json.dumps(state, default=list)) if workers == 0 else state)
    rest = keys(second)
    assert seen + rest == reference[0], "replayed or skipped samples"
    assert keys(take_len(second)) == reference[1]  # then the next epoch


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("ending", ["exhausted", "after_len"])
def test_stateful_dataloader_saved_at_the_end_of_an_epoch_resumes_with_the_next(shards, client, workers, ending):
    """The state saved once the epoch's last batch was received, after the loop ran to its end or
    after len(loader) batches: the resumed run reads epoch 1 next (at num_workers=2 it read epoch 0
    again). With workers and len(loader) batches torchdata continues the saved iteration, of which
    nothing is left, so one empty pass comes first (as for a map-style dataset)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    kw = dict(multiprocessing_context="fork") if workers else {}

    def make():
        return StatefulDataLoader(dataset(shards, client), batch_size=BATCH, num_workers=workers,
                                  collate_fn=collate_list, **kw)

    reference = dataset(shards, client, batch_size=BATCH)
    epochs = [[s["__key__"] for s in reference] for _ in range(2)]
    first = make()
    assert (keys(first) if ending == "exhausted" else keys(take_len(first))) == epochs[0]
    state = first.state_dict()
    del first
    second = make()
    second.load_state_dict(state)
    got = keys(second)
    if workers and ending == "after_len":
        assert got == []  # the rest of the saved iteration
        got = keys(second)
    assert got == epochs[1], "the resumed run repeated an epoch"


def test_a_position_loaded_in_one_worker_stays_in_that_worker(shards, client):
    """A rank's position loaded inside worker 0 (a worker_init_fn here) moves only worker 0: the
    others, and the main process, keep reading the epoch from its start."""
    donor = dataset(shards, client, batch_size=BATCH)
    it = iter(donor)
    for _ in range(3 * BATCH):
        next(it)
    state = donor.state_dict()
    del it

    def init(worker_id: int) -> None:
        if worker_id == 0:
            torch.utils.data.get_worker_info().dataset.load_state_dict(state)

    ds = dataset(shards, client)
    ds.auto_epoch = False  # keep the epoch where it is: the check below reads the shared position
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2, collate_fn=collate_list,
                                         worker_init_fn=init, multiprocessing_context="fork")
    got = keys(loader)
    whole = [s["__key__"] for s in dataset(shards, client, batch_size=BATCH)]
    assert got[:BATCH] == whole[3 * BATCH:4 * BATCH]  # worker 0 continues the loaded position
    assert got[BATCH:2 * BATCH] == whole[BATCH:2 * BATCH]  # worker 1 reads its share from the start
    assert ds.pass_length() == len(ds) == 300  # the shared position (main process) is untouched


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_on_the_loaders_sampler_before_the_first_batch_chooses_the_epoch(shards, client, workers):
    """Lightning's order in the first epoch of a resumed run: iter(loader), then
    loader.sampler.set_epoch(e), then the first batch. s3stream.DataLoader's sampler passes the epoch
    to the dataset, and the iteration (its workers too) begins at the first batch, so it reads
    epoch e (the dataset alone cannot know it: it was built at epoch 0)."""
    kw = dict(multiprocessing_context="fork") if workers else {}
    ds = dataset(shards, client)
    loader = s3stream.DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=collate_list, **kw)
    it = iter(loader)
    loader.sampler.set_epoch(2)
    got = keys(it)
    reference = dataset(shards, client, batch_size=BATCH)
    reference.set_epoch(2)
    assert got == [s["__key__"] for s in reference]
    next(iter(loader))  # the next iteration continues from the epoch chosen: 3
    assert ds.epoch == 3
