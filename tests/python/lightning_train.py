"""The training script of test_lightning.py: Lightning builds the loop as a user's script would.

Run as a script because Lightning's "ddp" strategy launches the other ranks by running this same
command line again (with LOCAL_RANK set). Trains a tiny model for --max-epochs on a
ShardDataset (rank and world size from the process group Lightning sets up) under a plain
torch DataLoader or s3stream.DataLoader (--loader), with a ModelCheckpoint that keeps a checkpoint
every --every-steps steps and at the end of every epoch (--ckpt-dir), optionally resuming from
--resume. Each rank writes what its training_step received to <out>.rank<r>.json:

    {"rank", "world_size", "epochs": {"0": [keys in the order received], "1": [...]}}

The moto endpoint comes from $S3STREAM_TEST_ENDPOINT, credentials from the usual AWS variables.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys

import lightning as L
import torch
import torch.utils.data

import s3stream
from shard_helpers import ShardDataset, checked_key, collate_list

BATCH = 10


class Recorder(L.LightningModule):
    """Records the sample keys of every batch it trains on, per epoch."""

    def __init__(self, urls: list, loader: str, workers: int) -> None:
        super().__init__()
        self.urls, self.loader, self.workers = urls, loader, workers
        self.layer = torch.nn.Linear(4, 1)
        self.seen: dict = {}

    def train_dataloader(self):
        # Built here, as Lightning's docs show: after the process group exists, so the dataset
        # takes its rank and world size from it.
        client = s3stream.Client(endpoint_url=os.environ["S3STREAM_TEST_ENDPOINT"])
        ds = ShardDataset(self.urls, client=client, seed=3, transform=checked_key, progress=False)
        make = s3stream.DataLoader if self.loader == "s3stream" else torch.utils.data.DataLoader
        kw = dict(multiprocessing_context="fork") if self.workers else {}
        return make(ds, batch_size=BATCH, num_workers=self.workers, collate_fn=collate_list, **kw)

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(str(self.current_epoch), []).extend(batch)
        return self.layer(torch.ones(len(batch), 4)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", required=True, help="JSON list of shard URIs")
    parser.add_argument("--loader", choices=("torch", "s3stream"), required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--max-epochs", type=int, required=True)
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--every-steps", type=int, default=4)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    # A hung rank must say where it hangs, before the test gives up on it.
    faulthandler.dump_traceback_later(args.timeout, exit=True)

    model = Recorder(json.loads(args.urls), args.loader, args.workers)
    # What a user keeps: a checkpoint every few steps, and one at each epoch's end (Lightning takes
    # the two triggers only from two callbacks). Files: epoch=E-step=S.ckpt.
    checkpoints = [L.pytorch.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, filename="{epoch}-{step}",
                                                       save_top_k=-1, **trigger)
                   for trigger in (dict(every_n_train_steps=args.every_steps), dict(every_n_epochs=1))]
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.max_epochs,
                        callbacks=checkpoints, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, ckpt_path=args.resume)
    with open(f"{args.out}.rank{trainer.global_rank}.json", "w") as f:
        json.dump({"rank": trainer.global_rank, "world_size": trainer.world_size, "epochs": model.seen}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
