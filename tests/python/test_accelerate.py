"""ShardDataset inside Hugging Face Accelerate, as a user's script runs it: torchrun starts two
processes on gloo, Accelerator(cpu=True).prepare() wraps the loader (torch's or s3stream's), and the
loop reads two epochs (accelerate_worker.py). Accelerate splits what it iterates between processes
itself (process 0 reads and dispatches batches by default for an iterable dataset; with
dispatch_batches=False every process keeps its slice of each group of batches), on top of the
dataset's own split by rank: whatever the mode, every sample must arrive exactly once per epoch."""

from __future__ import annotations

import json

import pytest

from rank_jobs import rank_env, torchrun
from shard_helpers import make_shards, upload

pytest.importorskip("accelerate", reason="accelerate is in tests/requirements.txt")

SHARDS = [50] * 6  # 300 samples
WORLD = 2


@pytest.fixture
def shards(boto3_client, bucket):
    return upload(boto3_client, bucket, make_shards(SHARDS))


def all_ids(shards) -> list:
    return sorted(int(k[1:4]) * 100000 + int(k[5:]) for keys in shards.keys.values() for k in keys)


def run_accelerate(s3_endpoint, shards, tmp_path, **options) -> list:
    args = ["--urls", shards.uris[0].rsplit("/", 1)[0] + "/", "--out-dir", str(tmp_path)]
    for name, value in options.items():  # value "": a flag
        args += [f"--{name.replace('_', '-')}"] + ([str(value)] if value != "" else [])
    torchrun(WORLD, "accelerate_worker.py", args, rank_env(s3_endpoint), timeout=150)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


def check_epochs(results, shards) -> None:
    """Each epoch: every sample exactly once over both processes, equal counts, a new order."""
    expected = all_ids(shards)
    assert [r["rank"] for r in results] == list(range(WORLD)) and {r["world"] for r in results} == {WORLD}
    orders = []
    for epoch in sorted(results[0]["epochs"], key=int):
        per_rank = [r["epochs"][epoch] for r in results]
        assert sorted(i for ids in per_rank for i in ids) == expected, f"epoch {epoch}: lost or repeated samples"
        assert len({len(ids) for ids in per_rank}) == 1, f"epoch {epoch}: unequal counts {[len(i) for i in per_rank]}"
        orders.append(per_rank)
    assert orders[0] != orders[1], "the second epoch repeated the first one's order"
    for r in results:
        assert r["batch_types"] == ["Tensor"], r["batch_types"]


@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("loader", ["torch", "s3stream"])
@pytest.mark.parametrize("dispatch", ["default", "false"])
def test_accelerate_prepared_loader_delivers_every_sample_once(s3_endpoint, shards, tmp_path, loader, dispatch):
    results = run_accelerate(s3_endpoint, shards, tmp_path, loader=loader, dispatch=dispatch, num_workers=2)
    check_epochs(results, shards)


@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("loader", ["torch", "s3stream"])
def test_accelerate_prepared_mix_delivers_every_sample_once(s3_endpoint, shards, tmp_path, loader):
    """A Mix of two ShardDatasets (each read once per epoch) in Accelerate's default dispatch mode."""
    results = run_accelerate(s3_endpoint, shards, tmp_path, loader=loader, dataset="mix", num_workers=2)
    check_epochs(results, shards)


@pytest.mark.timeout_s(420)
@pytest.mark.parametrize("dataset, loader, save_at", [
    ("shards", "torch", "1:7"), ("shards", "s3stream", "1:7"), ("mix", "torch", "1:7"), ("shards", "torch", "0:30")])
def test_accelerate_save_state_resumes_exactly(s3_endpoint, shards, tmp_path, dataset, loader, save_at):
    """use_stateful_dataloader=True and dispatch_batches=False: accelerator.save_state after 7
    batches of epoch 1 (or after the last of epoch 0), a new job's load_state, and the loop (calling
    set_epoch each epoch, as the Hugging Face Trainer does) receives on each process exactly what the
    uninterrupted job received after that point, nothing replayed, nothing skipped."""
    common = dict(loader=loader, dispatch="false", dataset=dataset, num_workers=2, stateful="",
                  ckpt=str(tmp_path / "ckpt"))
    epoch, batches = map(int, save_at.split(":"))
    runs = {}
    for name, extra in (("whole", {}), ("stopped", {"save_at": save_at}),
                        ("resumed", {"resume": "", "start_epoch": 1})):
        out = tmp_path / name
        out.mkdir()
        runs[name] = run_accelerate(s3_endpoint, shards, out, **common, **extra)
    check_epochs(runs["whole"], shards)
    for rank in range(WORLD):
        whole, stopped, resumed = (runs[n][rank]["epochs"] for n in ("whole", "stopped", "resumed"))
        before = stopped[str(epoch)]
        assert len(before) == batches * 5
        if epoch == 1:
            assert before + resumed["1"] == whole["1"], f"rank {rank}: replayed or skipped samples"
        else:  # the whole of epoch 0, then the next epoch whole, in its own order
            assert before == whole["0"] and resumed["1"] == whole["1"], f"rank {rank}: epoch 1 differs"


@pytest.mark.timeout_s(180)
def test_accelerate_without_dispatch_passes_strings_through(s3_endpoint, shards, tmp_path):
    """Process 0 cannot broadcast strings (dispatch mode); without dispatch they arrive as they are."""
    results = run_accelerate(s3_endpoint, shards, tmp_path, loader="torch", dispatch="false", num_workers=0,
                             strings="")
    check_epochs(results, shards)

