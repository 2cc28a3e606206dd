"""One rank of the torchrun test in test_shard_dataset.py (run by `torchrun --nproc_per_node 2`).

Joins the gloo process group and, for each scenario in --scenarios (a JSON list of
{"name", "urls", "batch_size", "remainder", "seed"}), builds a ShardDataset (rank and world size from
torch.distributed) under an s3stream.DataLoader with 3 forked workers and the same batch size, reads
one epoch (every sample's bytes checked in the worker that read it) and writes what it saw to
<out_dir>/rank<r>.json:

    {"rank", "world_size", "scenarios": {name: {"keys": [...], "batches": [sizes...], "len": len(ds),
                                                "counts_all_ranks": [per-rank counts over gloo]}}}

The moto endpoint comes from $S3STREAM_TEST_ENDPOINT, credentials from the usual AWS variables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch.distributed as dist
from torchrun_common import counts_on_all_ranks, write_result_and_leave


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", required=True)
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()

    import s3stream
    from shard_helpers import ShardDataset, checked_key, collate_list

    dist.init_process_group("gloo")
    rank, world = s3stream.rank_and_world()
    client = s3stream.Client(endpoint_url=os.environ["S3STREAM_TEST_ENDPOINT"])
    result = {"rank": rank, "world_size": world, "dist_world_size": dist.get_world_size(), "scenarios": {}}
    for sc in json.loads(args.scenarios):
        ds = ShardDataset(sc["urls"], client=client, transform=checked_key, seed=sc["seed"],
                          batch_size=sc["batch_size"], remainder=sc["remainder"], progress=False)
        loader = s3stream.DataLoader(ds, batch_size=sc["batch_size"], num_workers=3, collate_fn=collate_list,
                                     multiprocessing_context="fork")
        batches = [batch for batch in loader]
        keys = [k for b in batches for k in b]
        result["scenarios"][sc["name"]] = {
            "keys": keys,
            "batches": [len(b) for b in batches],
            "len": len(ds),
            "counts_all_ranks": counts_on_all_ranks(len(keys), world),
        }
    return write_result_and_leave(args.out_dir, rank, result)


if __name__ == "__main__":
    sys.exit(main())
