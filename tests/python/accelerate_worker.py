"""One process of the Accelerate tests in test_frameworks.py (run by `torchrun --nproc_per_node 2`).

Builds a ShardDataset, a DataLoader (torch's or s3stream's) over it, lets Accelerate prepare the
loader as a user's script would (Accelerator(cpu=True) joins the gloo group torchrun set up), reads
--epochs epochs and writes what this process received to <out_dir>/rank<r>.json:

    {"rank", "world", "epochs": [[sample ids in the order received], ...], "batch_types": [...]}

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
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()

    from accelerate import Accelerator, DataLoaderConfiguration

    import s3stream

    dispatch = {"default": None, "true": True, "false": False}[args.dispatch]
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
    client = s3stream.Client(endpoint_url=os.environ["S3STREAM_TEST_ENDPOINT"])
    ds = s3stream.ShardDataset(args.urls, client=client, transform=sample_id, seed=3, progress=False)
    make = s3stream.DataLoader if args.loader == "s3stream" else torch.utils.data.DataLoader
    collate = collate_ids_and_names if args.strings else collate_ids
    loader = accelerator.prepare(make(ds, batch_size=args.batch_size, num_workers=args.num_workers,
                                      collate_fn=collate))
    epochs, types = [], set()
    for _ in range(args.epochs):
        seen = []
        for batch in loader:
            if args.strings:
                assert batch["name"] == [f"sample-{i}" for i in batch["id"].tolist()], batch
                batch = batch["id"]
            types.add(type(batch).__name__)
            seen += batch.tolist()
        epochs.append(seen)
    rank = accelerator.process_index
    with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": accelerator.num_processes, "epochs": epochs,
                   "batch_types": sorted(types)}, f)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
