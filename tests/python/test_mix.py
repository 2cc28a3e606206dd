"""s3stream.Mix end to end: ShardDatasets and MapDatasets in the moto bucket mixed by weight.

Exact counts per source per epoch for each length policy, exactly once within each source epoch
(across ranks x workers, and across the source epochs an upsampled source runs through),
determinism per (seed, epoch) and a new order each epoch, independence from num_workers and the
world size, exact resume (same world size and elastic), plain torch and s3stream DataLoaders,
automatic epochs, and the errors bad input must produce (docs/epoch_plan.md, "Mixing").

Samples are identified by content: shard samples by key (sNNN_xxxxx, shards 0.. for one source, 10..
for the other: keys never collide), map samples by object URI.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import s3stream
from s3stream import mix_plan
from helpers import put_many
from shard_helpers import ShardDataset, check_sample, collate_list, make_shards, upload

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

A_SHARDS = [23, 17, 20]  # 60 samples
B_SHARDS = [9, 6]  # 15 samples
N_MAP = 24
BATCH = 4


def ident(sample) -> str:
    """A transform-free sample's identity: a shard sample's key (bytes checked), a map sample's URI."""
    if isinstance(sample, dict):
        check_sample({k: v for k, v in sample.items() if k != "__source__"})
        return sample["__key__"]
    assert bytes(sample.data) == f"map object {sample.key.split('/', 3)[3]}".encode(), sample.key
    return sample.key


def idents(iterable) -> list:
    out = []
    for item in iterable:
        out += [ident(x) for x in (item if isinstance(item, list) else [item])]
    return out


@pytest.fixture
def shards(boto3_client, bucket):
    a = upload(boto3_client, bucket, make_shards(A_SHARDS), prefix="a/")
    b = upload(boto3_client, bucket, make_shards(B_SHARDS, first_shard=10), prefix="b/")
    return a, b


@pytest.fixture
def map_uris(boto3_client, bucket):
    keys = [f"m/{i:04d}.bin" for i in range(N_MAP)]
    put_many(boto3_client, bucket, {k: f"map object {k}".encode() for k in keys})
    return [f"s3://{bucket}/{k}" for k in keys]


def sources(shards, client, **kw):
    a, b = shards
    return (ShardDataset(a.uris, client=client, progress=False, seed=1, **kw),
            ShardDataset(b.uris, client=client, progress=False, seed=2, **kw))


def source_of(key: str, shards) -> int:
    a, _ = shards
    return 0 if key in set(a.all_keys) else 1


def loader(mix, workers: int, plain: bool = False, context: str = "fork"):
    kw = dict(multiprocessing_context=context) if workers else {}
    cls = TorchDataLoader if plain else s3stream.DataLoader
    return cls(mix, batch_size=BATCH, num_workers=workers, collate_fn=collate_list, **kw)


def check_exactly_once_per_source_epoch(stream: list, universe: set) -> None:
    """A source's stream across mix epochs: each whole source epoch (len(universe) consecutive
    draws) holds every sample once; the part of an epoch at the end holds no sample twice."""
    n = len(universe)
    for lo in range(0, len(stream), n):
        chunk = stream[lo: lo + n]
        assert len(set(chunk)) == len(chunk), f"a sample twice within one source epoch at {lo}"
        assert set(chunk) <= universe
        if len(chunk) == n:
            assert set(chunk) == universe


# --- the arithmetic -------------------------------------------------------------------------------------


def test_apportion_is_largest_remainder():
    w = mix_plan.parse_weights([1, 1, 1], [10, 10, 10])
    assert mix_plan.apportion(10, w) == [4, 3, 3]  # three equal remainders of 1/3: the earliest first
    w = mix_plan.parse_weights([0.5, 0.3, 0.2], [1, 1, 1])
    assert mix_plan.apportion(7, w) == [4, 2, 1]  # quotas 3.5, 2.1, 1.4: floors 3, 2, 1, one left -> .5
    assert mix_plan.apportion(100, mix_plan.parse_weights([0, 2, 1], [5, 5, 5])) == [0, 67, 33]


@pytest.mark.parametrize("length, total, counts", [
    ("longest", 120, [60, 60]),  # B (15) at half the weight needs 30 draws to be read once, A needs 120
    ("shortest", 30, [15, 15]),  # B runs out first: 15 draws of B at half = 30
    (45, 45, [23, 22]),  # explicit: quotas 22.5 / 22.5, the tie to the first
])
def test_counts_per_policy(shards, client, length, total, counts):
    mix = s3stream.Mix(sources(shards, client), [1, 1], length=length)
    assert (mix.total, mix.counts, len(mix)) == (total, counts, total)


def test_default_weights_read_every_source_once(shards, client):
    mix = s3stream.Mix(sources(shards, client))
    assert mix.counts == [60, 15]
    keys = idents(mix)
    assert sorted(keys) == sorted(shards[0].all_keys + shards[1].all_keys)


# --- exact counts, exactly once, even spread ---------------------------------------------------------------


@pytest.mark.parametrize("length", ["longest", "shortest", 50])
def test_exact_counts_and_exactly_once_within_each_source(shards, client, length):
    a, b = shards
    mix = s3stream.Mix(sources(shards, client), [2, 1], length=length)
    streams = {0: [], 1: []}
    for epoch in range(3):
        keys = idents(mix)
        assert mix.epoch == epoch + 1  # a complete pass moves on by itself
        per_source = Counter(source_of(k, shards) for k in keys)
        assert [per_source[0], per_source[1]] == mix.counts, f"epoch {epoch}"
        for k in keys:
            streams[source_of(k, shards)].append(k)
    check_exactly_once_per_source_epoch(streams[0], set(a.all_keys))
    check_exactly_once_per_source_epoch(streams[1], set(b.all_keys))
    if length == "longest":  # B upsampled: 2 whole epochs of its own per mix epoch, each in its own order
        assert mix.counts == [60, 2 * len(b.all_keys)]
        own = [(1, e, p) for e in range(6) for p in range(15)]
        assert streams[1] == _keys_of_order(own, mix, shards)
    if length == "shortest":  # A downsampled: the next epoch continues where this one stopped
        assert mix.counts == [30, 15] and len(set(streams[0][:60])) == 60


def test_sources_are_spread_evenly_not_in_blocks(shards, client):
    mix = s3stream.Mix(sources(shards, client), [2, 1], length="shortest")  # 30 of A, 15 of B
    order = [source_of(k, shards) for k in idents(mix)]
    assert order == [0, 1, 0] * 15 or order == [0, 0, 1] * 15 or order == [1, 0, 0] * 15


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_map_and_shard_sources_mixed(shards, client, map_uris, context):
    a, _ = shards
    maps = s3stream.MapDataset(map_uris, client=client)
    mix = s3stream.Mix([sources(shards, client)[0], maps], [1, 1], length="longest", seed=5)
    assert mix.counts == [60, 60]
    keys = idents(loader(mix, 2, context=context))
    assert Counter(k.startswith("s3://") for k in keys) == {False: 60, True: 60}
    check_exactly_once_per_source_epoch([k for k in keys if k.startswith("s3://")], set(map_uris))
    assert sorted(k for k in keys if not k.startswith("s3://")) == sorted(a.all_keys)


# --- determinism, epochs, workers, ranks ---------------------------------------------------------------------


def test_same_seed_same_sequence_new_order_each_epoch(shards, client, map_uris):
    def make(seed):
        maps = s3stream.MapDataset(map_uris, client=client)
        return s3stream.Mix([*sources(shards, client), maps], [1, 1, 1], length=40, seed=seed)

    a, b, other = make(3), make(3), make(4)
    sequences = []
    for epoch in (0, 1, 2):
        for m in (a, b, other):
            m.set_epoch(epoch)
        seq = idents(a)
        assert idents(b) == seq
        a.set_epoch(epoch)
        assert idents(a) == seq  # the same epoch read again
        assert [x for x in idents(other) if x.startswith("s3://")] != [x for x in seq if x.startswith("s3://")]
        sequences.append(seq)
    assert len({tuple(s) for s in sequences}) == 3, "epochs must differ in order"


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 1)])
def test_order_does_not_depend_on_num_workers_or_the_loader(shards, client, world_size, rank):
    runs = {}
    for workers, plain in ((0, False), (2, False), (2, True), (0, True)):
        mix = s3stream.Mix(sources(shards, client), [1, 1], length=50, rank=rank, world_size=world_size,
                           batch_size=BATCH)
        runs[workers, plain] = idents(loader(mix, workers, plain))
    assert len(set(map(tuple, runs.values()))) == 1
    whole = s3stream.Mix(sources(shards, client), [1, 1], length=50)
    expected = _keys_of_order(whole.order(0, rank=rank, world_size=world_size), whole, shards)
    assert runs[0, False] == expected


def _keys_of_order(order, mix, shards):
    """The keys of Mix.order()'s triples, from each source's own plan of that source epoch."""
    out = []
    plans = {}
    for s, source_epoch, position in order:
        ds = mix.sources[s]
        if (s, source_epoch) not in plans:
            by_uri = {u: shards[s].keys[n] for u, n in zip(shards[s].uris, shards[s].names)}
            plans[s, source_epoch] = [by_uri[ds.shards[i].uri][j] for i, j in ds.plan(source_epoch).order()]
        out.append(plans[s, source_epoch][position])
    return out


@pytest.mark.parametrize("remainder", ["drop", "pad"])
@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_split_the_global_sequence_exactly_once(shards, client, remainder, workers):
    """Ranks x workers take the one global sequence between them: every position once (drop: less
    the tail; pad: plus repeats from the start), equal counts per rank."""
    length = 52  # not a multiple of 3 ranks
    whole = idents(s3stream.Mix(sources(shards, client), [1, 1], length=length))
    per_rank = []
    for rank in range(3):
        mix = s3stream.Mix(sources(shards, client), [1, 1], length=length, rank=rank, world_size=3,
                           remainder=remainder, batch_size=BATCH)
        keys = idents(loader(mix, workers))
        assert len(keys) == len(mix)
        per_rank.append(keys)
    # Positions of the global sequence are not keys (a source repeats within 51 draws), so compare
    # multisets: what the ranks read together is the whole epoch (drop: less at most 2 samples).
    union = Counter(k for keys in per_rank for k in keys)
    if remainder == "drop":
        assert not union - Counter(whole) and sum((Counter(whole) - union).values()) == length % 3
    else:
        assert not Counter(whole) - union and sum((union - Counter(whole)).values()) == 3 - length % 3
    assert len({len(k) for k in per_rank}) == 1


# --- loaders and epochs ----------------------------------------------------------------------------------------


def test_plain_dataloader_advances_epochs_by_itself(shards, client):
    """A plain DataLoader with workers never calls set_epoch: the worker that reads the pass's last
    sample moves the shared epoch on, also in persistent workers."""
    mix = s3stream.Mix(sources(shards, client), [1, 1], length=30, batch_size=BATCH)
    reference = s3stream.Mix(sources(shards, client), [1, 1], length=30)
    expected = []
    for epoch in range(3):
        reference.set_epoch(epoch)
        expected.append(idents(reference))
    plain = TorchDataLoader(mix, batch_size=BATCH, num_workers=2, multiprocessing_context="fork",
                            persistent_workers=True, collate_fn=collate_list)
    got = [idents(plain) for _ in range(3)]
    assert got == expected and mix.epoch == 3


def test_s3stream_dataloader_advances_after_len_batches(shards, client):
    """s3stream.DataLoader counts what the loop received: a loop that stops after len(loader) batches
    (as Lightning does) completes the epoch."""
    mix = s3stream.Mix(sources(shards, client), [1, 1], length=32)
    dl = loader(mix, 2)
    assert mix.auto_epoch is False and mix.batch_size == BATCH
    first, second = [], []
    it = iter(dl)
    for _ in range(len(dl)):
        first += idents([next(it)])
    del it
    second = idents(dl)
    assert mix.epoch == 1 and first != second
    reference = s3stream.Mix(sources(shards, client), [1, 1], length=32)
    reference.set_epoch(1)
    assert second == idents(reference)


# --- resume ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("before, after, k", [(0, 2, 1), (2, 0, 3), (2, 2, 7)])
def test_resume_mid_epoch_is_exact(shards, client, map_uris, before, after, k):
    def make():
        maps = s3stream.MapDataset(map_uris, client=client)
        return s3stream.Mix([*sources(shards, client), maps], [3, 1, 2], length="longest", seed=7)

    reference = make()
    reference.set_epoch(2)
    uninterrupted = idents(reference)
    mix = make()
    mix.set_epoch(2)
    dl = loader(mix, before)
    it = iter(dl)
    seen = idents(next(it) for _ in range(k))
    state = json.loads(json.dumps(dl.state_dict()))
    assert state["dataset"]["consumed"] == k * BATCH and state["dataset"]["epoch"] == 2
    del it, dl
    clone = make()
    dl = loader(clone, after)
    dl.load_state_dict(state)
    rest = idents(dl)
    assert seen + rest == uninterrupted, "replayed or skipped samples"
    assert Counter(seen) + Counter(rest) == Counter(uninterrupted)
    reference.set_epoch(3)
    assert idents(dl) == idents(reference)  # then the next epoch, whole


@pytest.mark.parametrize("workers, k", [(0, 5), (2, 5), (2, 6), (3, 4)])
def test_stateful_dataloader_resumes_a_mix_exactly(shards, client, map_uris, workers, k):
    """torchdata's StatefulDataLoader saves each worker's own position (it used to raise in a
    worker) and restores it into the same worker: with shard and map sources, after k batches, the
    rest of the epoch comes once, nothing replayed, then the next epoch whole, though torchdata
    never calls set_epoch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        maps = s3stream.MapDataset(map_uris, client=client)
        mix = s3stream.Mix([*sources(shards, client), maps], [3, 1, 2], length="longest", seed=7)
        kw = dict(multiprocessing_context="fork") if workers else {}
        return mix, StatefulDataLoader(mix, batch_size=BATCH, num_workers=workers, collate_fn=collate_list, **kw)

    reference, _ = make()
    epochs = [idents(reference), idents(reference)]
    assert epochs[0] != epochs[1]
    mix, dl = make()
    it = iter(dl)
    seen = idents(next(it) for _ in range(k))
    state = dl.state_dict()
    del it, dl
    clone, dl = make()
    dl.load_state_dict(json.loads(json.dumps(state, default=list)))
    rest = idents(dl)
    assert seen + rest == epochs[0], "replayed or skipped samples"
    assert idents(dl) == epochs[1] and clone.epoch == 2  # then the next epoch, whole


def test_stateful_dataloader_saved_at_the_end_of_an_epoch_resumes_with_the_next(shards, client):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        mix = s3stream.Mix(sources(shards, client), [1, 1], length=30)
        return StatefulDataLoader(mix, batch_size=BATCH, num_workers=2, collate_fn=collate_list,
                                  multiprocessing_context="fork")

    reference = s3stream.Mix(sources(shards, client), [1, 1], length=30)
    epochs = [idents(reference), idents(reference)]
    first = make()
    assert idents(first) == epochs[0]
    state = first.state_dict()
    second = make()
    second.load_state_dict(state)
    assert idents(second) == epochs[1], "the resumed run repeated an epoch"


def test_resume_without_a_loader(shards, client):
    mix = s3stream.Mix(sources(shards, client), [1, 2], length="shortest")
    whole = idents(mix)
    mix.set_epoch(0)
    it = iter(mix)
    seen = [ident(next(it)) for _ in range(11)]
    state = mix.state_dict()
    assert state["consumed"] == 11
    clone = s3stream.Mix(sources(shards, client), [1, 2], length="shortest")
    clone.load_state_dict(state)
    assert seen + idents(clone) == whole


@pytest.mark.parametrize("new_world", [2, 3, 5])
@pytest.mark.parametrize("workers_before, workers_after", [(0, 2), (2, 0)])
def test_elastic_resume_at_another_world_size(shards, client, new_world, workers_before, workers_after):
    """A state saved by rank 0 of 4 resumes a job of 2, 3 or 5 ranks: what the saved run had not
    delivered comes exactly once, nothing it delivered comes again (compared as multisets of the
    epoch, since an upsampled source repeats samples within one mix epoch)."""
    length, k = 70, 2  # 70 positions: 4 ranks x 17 with drop
    whole = Counter(idents(_mix4(shards, client, 1, 0, length, epoch=3)))
    first_run, state = Counter(), None
    for rank in range(4):
        mix = _mix4(shards, client, 4, rank, length, epoch=3)
        dl = loader(mix, workers_before)
        it = iter(dl)
        first_run.update(idents(next(it) for _ in range(k)))
        if rank == 0:
            state = json.loads(json.dumps(dl.state_dict()))
        del it, dl
    assert sum(first_run.values()) == 4 * k * BATCH
    second_run = Counter()
    for rank in range(new_world):
        mix = _mix4(shards, client, new_world, rank, length, remainder="pad")
        dl = loader(mix, workers_after)
        dl.load_state_dict(state)
        keys = idents(dl)
        assert len(keys) == -(-(length - 4 * k * BATCH) // new_world)  # equal shares (pad)
        second_run.update(keys)
        assert len(idents(dl)) == len(mix) and mix.epoch == 4  # then epoch 4, whole
    # Together: the whole epoch, plus at most new_world - 1 pad repeats.
    assert not whole - (first_run + second_run), "lost in the resume"
    extra = (first_run + second_run) - whole
    assert sum(extra.values()) == -(-(length - 32) // new_world) * new_world - (length - 32)


def _mix4(shards, client, world, rank, length, epoch=None, remainder="drop"):
    mix = s3stream.Mix(sources(shards, client), [1, 1], length=length, rank=rank, world_size=world,
                       remainder=remainder, batch_size=BATCH)
    if epoch is not None:
        mix.set_epoch(epoch)
    return mix


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights, words", [
    ([1, -1], "weights\\[1\\] is -1"),
    ([0, 0], "add up to 0"),
    ([1], "weights has 1 entries but the mix has 2 sources"),
    ([1, float("nan")], "finite number"),
    ("ab", "list of numbers"),
])
def test_bad_weights(shards, client, weights, words):
    with pytest.raises(s3stream.InvalidArgumentError, match=words):
        s3stream.Mix(sources(shards, client), weights)


@pytest.mark.parametrize("source, words", [
    (list(range(5)), "sources\\[1\\] is a list"),
    (torch.utils.data.TensorDataset(torch.zeros(3)), "sources\\[1\\] is a TensorDataset.*build that source as"),
])
def test_a_source_that_is_not_a_dataset(shards, client, source, words):
    with pytest.raises(s3stream.InvalidArgumentError, match=words):
        s3stream.Mix([sources(shards, client)[0], source])


@pytest.mark.parametrize("option, words", [
    (dict(length="sometimes"), "length must be"),
    (dict(length=0), "1 to 2\\^48"),
    (dict(remainder="x"), "remainder"),
    (dict(batch_size=0), "batch_size"),
    (dict(length=2, world_size=3, rank=0), "use remainder='pad'"),
])
def test_bad_options(shards, client, option, words):
    with pytest.raises(s3stream.InvalidArgumentError, match=words):
        s3stream.Mix(sources(shards, client), [1, 1], **option)


def test_no_sources():
    with pytest.raises(s3stream.InvalidArgumentError, match="at least one dataset"):
        s3stream.Mix([])


def test_resume_refuses_a_state_from_another_mix(shards, client):
    mix = s3stream.Mix(sources(shards, client), [1, 1], length=40)
    next(iter(mix))
    state = mix.state_dict()
    with pytest.raises(s3stream.InvalidArgumentError, match="counts=\\[20, 20\\] but this Mix has \\[27, 13\\]"):
        s3stream.Mix(sources(shards, client), [2, 1], length=40).load_state_dict(state)
    a, b = sources(shards, client)
    other_seed = ShardDataset(shards[1].uris, client=client, progress=False, seed=99)
    with pytest.raises(s3stream.InvalidArgumentError, match="source1=.*seed=2.*but this Mix has.*seed=99"):
        s3stream.Mix([a, other_seed], [1, 1], length=40).load_state_dict(state)
    with pytest.raises(s3stream.InvalidArgumentError, match="counts=None"):
        s3stream.Mix([a, b], [1, 1], length=40).load_state_dict(a.state_dict())  # a dataset's, not a mix's
