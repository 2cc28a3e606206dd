"""One rank of the elastic-resume test in test_elastic_torchrun.py (torchrun, gloo).

Reads the same epoch of two datasets through s3stream.DataLoader: a ShardDataset (--shards, a JSON
list of URIs) and a MapDataset under an EpochSampler (--prefix). Rank and world size come from
torch.distributed.

--phase save: reads --batches batches of each and stops, as a job that is stopped; rank 0 writes
both loaders' state_dict() to --state (JSON: rank 0's checkpoint is all the next job gets).
--phase resume: loads that state, reads the rest of the epoch, then the whole next epoch.

Each rank writes <out>.rank<r>.json: {"rank", "world_size",
"shard"/"map": {"epoch": [keys received], "next": [keys of the next epoch] (resume only)}}.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys

import torch.distributed as dist
from torchrun_map_worker import collate_keys, key_of

BATCH = {"shard": 5, "map": 3}
SEEDS = {"shard": 6, "map": 5}


def loaders(args, client) -> dict:
    import s3stream
    from shard_helpers import ShardDataset, checked_key

    shard_ds = ShardDataset(json.loads(args.shards), client=client, transform=checked_key, seed=SEEDS["shard"],
                            progress=False)
    map_ds = s3stream.MapDataset.from_prefix(args.prefix, transform=key_of, client=client)
    sampler = s3stream.EpochSampler(map_ds, seed=SEEDS["map"])
    kw = dict(num_workers=args.workers, collate_fn=collate_keys)
    if args.workers:
        kw["multiprocessing_context"] = "fork"
    return {"shard": s3stream.DataLoader(shard_ds, batch_size=BATCH["shard"], **kw),
            "map": s3stream.DataLoader(map_ds, batch_size=BATCH["map"], sampler=sampler, **kw)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=("save", "resume"), required=True)
    parser.add_argument("--shards", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batches", type=int, default=0, help="save: batches each rank reads before the stop")
    parser.add_argument("--state", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.timeout, exit=True)  # a hung rank says where

    import s3stream

    dist.init_process_group("gloo")
    rank, world = s3stream.rank_and_world()
    client = s3stream.Client(endpoint_url=os.environ["S3STREAM_TEST_ENDPOINT"])
    result = {"rank": rank, "world_size": world}
    states = {}
    for name, loader in loaders(args, client).items():
        if args.phase == "save":
            it = iter(loader)
            got = [k for _ in range(args.batches) for k in next(it)]
            states[name] = loader.state_dict()
            del it  # the job stops here: what its workers fetched ahead was never received
            result[name] = {"epoch": got}
        else:
            with open(args.state) as f:
                loader.load_state_dict(json.load(f)[name])
            result[name] = {"epoch": [k for b in loader for k in b], "next": [k for b in loader for k in b]}
    if args.phase == "save" and rank == 0:
        with open(args.state, "w") as f:
            json.dump(states, f)
    with open(f"{args.out}.rank{rank}.json", "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
