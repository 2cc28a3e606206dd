"""What both torchrun workers (torchrun_map_worker.py, torchrun_shard_worker.py) do with gloo."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist


def counts_on_all_ranks(count: int, world: int) -> list:
    """Every rank's sample count: they must be equal, or DDP would hang."""
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([count], dtype=torch.int64))
    return [int(c.item()) for c in counts]


def write_result_and_leave(out_dir: str, rank: int, result: dict) -> int:
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
