"""One process of the Accelerate tests in test_frameworks.py (run by `torchrun --nproc_per_node 2`).

Builds a ShardDataset (or a Mix of two, --dataset mix), a DataLoader (torch's or s3stream's) over
it, lets Accelerate prepare the loader as a user's script would (Accelerator(cpu=True) joins the gloo
group torchrun set up), reads --epochs epochs and writes what this process received to
<out_dir>/rank<r>.json:

    {"rank", "world", "epochs": {"<epoch>": [sample ids in the order received], ...}, "batch_types": [...]}

With --stateful, Accelerate builds torchdata's StatefulDataLoader and saves its state with
save_state: --save-at E:K stops after K batches of epoch E with accelerator.save_state(--ckpt), and
--resume continues from accelerator.load_state(--ckpt) at epoch --start-epoch, calling the loader's
set_epoch each epoch as the Hugging Face Trainer does.

A sample id is shard * 100000 + index (the key "s002_00017" is 200017): the batch is a tensor, which
Accelerate's dispatch mode can broadcast (it cannot send strings).
The moto endpoint comes from $S3STREAM_TEST_ENDPOINT, credentials from the usual AWS variables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch


def sample_id(sample: dict) -> int:
    from shard_helpers import check_sample

    check_sample(sample)
    shard, index = sample["__key__"][1:].split("_")
    return int(shard) * 100000 + int(index)


def collate_ids(batch: list) -> torch.Tensor:
    return torch.tensor(batch, dtype=torch.int64)


def collate_ids_and_names(batch: list) -> dict:
    """A batch with strings beside the tensor (Accelerate can pass these only without dispatch)."""
    return {"id": collate_ids(batch), "name": [f"sample-{i}" for i in batch]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", required=True)
    parser.add_argument("--loader", choices=["torch", "s3stream"], required=True)
    parser.add_argument("--dispatch", choices=["default", "true", "false"], default="default")
    parser.add_argument("--batch-size", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--strings", action="store_true", help="batches carry a list of strings too")
    parser.add_argument("--dataset", choices=["shards", "mix"], default="shards")
    parser.add_argument("--stateful", action="store_true", help="use_stateful_dataloader=True")
    parser.add_argument("--ckpt", help="the directory of accelerator.save_state / load_state")
    parser.add_argument("--save-at", help="E:K: save_state after K batches of epoch E, then stop")
    parser.add_argument("--resume", action="store_true", help="load_state(--ckpt) first")
    parser.add_argument("--start-epoch", type=int, default=0)
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()

    from accelerate import Accelerator, DataLoaderConfiguration

    import s3stream

    dispatch = {"default": None, "true": True, "false": False}[args.dispatch]
    config = DataLoaderConfiguration(dispatch_batches=dispatch, use_stateful_dataloader=args.stateful)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    client = s3stream.Client(endpoint_url=os.environ["S3STREAM_TEST_ENDPOINT"])
    ds = s3stream.ShardDataset(args.urls, client=client, transform=sample_id, seed=3, progress=False)
    if args.dataset == "mix":  # the same shards as two sources, each read once per epoch
        uris = [s.uri for s in ds.shards]
        halves = [s3stream.ShardDataset(part, client=client, transform=sample_id, seed=seed, progress=False)
                  for part, seed in ((uris[:len(uris) // 2], 4), (uris[len(uris) // 2:], 5))]
        ds = s3stream.Mix(halves, seed=6)
    make = s3stream.DataLoader if args.loader == "s3stream" else torch.utils.data.DataLoader
    collate = collate_ids_and_names if args.strings else collate_ids
    loader = accelerator.prepare(make(ds, batch_size=args.batch_size, num_workers=args.num_workers,
                                      collate_fn=collate))
    if args.resume:
        accelerator.load_state(args.ckpt)
    save_epoch, save_batches = map(int, args.save_at.split(":")) if args.save_at else (-1, -1)
    epochs, types = {}, set()
    for epoch in range(args.start_epoch, args.epochs):
        if args.stateful:
            loader.set_epoch(epoch)
        seen = epochs[epoch] = []
        for k, batch in enumerate(loader):
            if args.strings:
                assert batch["name"] == [f"sample-{i}" for i in batch["id"].tolist()], batch
                batch = batch["id"]
            types.add(type(batch).__name__)
            seen += batch.tolist()
            if (epoch, k + 1) == (save_epoch, save_batches):
                accelerator.save_state(args.ckpt)
                break
        if epoch == save_epoch:
            break
    rank = accelerator.process_index
    with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": accelerator.num_processes, "epochs": epochs,
                   "batch_types": sorted(types)}, f)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
