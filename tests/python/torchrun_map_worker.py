"""One rank of the torchrun test in test_map_dataset.py (run by `torchrun --nproc_per_node 2`).

Joins the gloo process group, builds a MapDataset over the prefix and, for each remainder option,
an EpochSampler (rank and world size from torch.distributed) under an s3stream.DataLoader with 3
workers; reads 2 epochs and writes what it saw to <out_dir>/rank<r>.json:

    {"rank", "world_size", "dist_world_size",
     "drop": {"0": [keys...], "1": [...]}, "pad": {...},
     "counts_all_ranks": {"drop": [per-rank counts gathered over gloo], "pad": [...]}}
"""

from __future__ import annotations

import argparse
import faulthandler
import sys

import torch.distributed as dist
from torchrun_common import counts_on_all_ranks, write_result_and_leave


def key_of(sample) -> str:
    # Also check the bytes arrived intact: every object holds its own key.
    data = bytes(sample.data)
    if not data.startswith(sample.key.rsplit("/", 1)[-1].encode()):
        raise AssertionError(f"{sample.key}: unexpected content {data[:40]!r}")
    return sample.key


def collate_keys(batch):
    return list(batch)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    # A hung rank must say where it hangs, well before the test gives up on it.
    faulthandler.dump_traceback_later(args.timeout, exit=True)

    import s3stream

    dist.init_process_group("gloo")
    rank, world = s3stream.rank_and_world()
    client = s3stream.Client(endpoint_url=args.endpoint)
    dataset = s3stream.MapDataset.from_prefix(args.prefix, transform=key_of, client=client)
    result = {"rank": rank, "world_size": world, "dist_world_size": dist.get_world_size(), "counts_all_ranks": {}}
    for remainder in ("drop", "pad"):
        sampler = s3stream.EpochSampler(dataset, seed=5, remainder=remainder)
        loader = s3stream.DataLoader(
            dataset, batch_size=4, sampler=sampler, num_workers=3, collate_fn=collate_keys,
            multiprocessing_context="fork",
        )
        per_epoch = {}
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            keys = [k for batch in loader for k in batch]
            per_epoch[str(epoch)] = keys
            result["counts_all_ranks"].setdefault(remainder, []).append(counts_on_all_ranks(len(keys), world))
        result[remainder] = per_epoch
    return write_result_and_leave(args.out_dir, rank, result)


if __name__ == "__main__":
    sys.exit(main())
