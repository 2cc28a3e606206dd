"""One soak run (test_soak.py starts it as a subprocess): epochs of a MapDataset or a ShardDataset
through a DataLoader with persistent workers, every sample checked, one JSON line per epoch:

    {"epoch": 3, "samples": 100000, "lost": 0, "duplicated": 0, "corrupt": 0, "seconds": 31.2,
     "pss_bytes": 412000000}

Its own process, so the memory measured (the proportional set size of this process and its
DataLoader workers, after each epoch) is the loader's alone, not the test's proxy's.

    python soak_loop.py map    ENDPOINT s3://bucket/objects/ --samples N --epochs E [--workers W] [--step-ms MS]
    python soak_loop.py shards ENDPOINT s3://bucket/shards/  --samples N --epochs E [--workers W] --index-dir D
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import s3stream  # noqa: E402
from shard_helpers import fields_of  # noqa: E402

BATCH = 64


def object_bytes(i: int) -> bytes:
    """The content of MapDataset object i: 200-999 bytes that only object i has."""
    seed = hashlib.sha256(b"soak-object-%d" % i).digest()
    size = 200 + (i * 7919) % 800
    return (seed * (size // len(seed) + 1))[:size]


def object_key(i: int) -> str:
    return f"{i:07d}.bin"


# Transforms run in the workers and return (sample number, None or what was wrong): the loop counts
# every number it receives, so a lost or repeated sample shows as well as a corrupt one.


def check_object(sample) -> tuple[int, str | None]:
    i = int(sample.key.rsplit("/", 1)[1].split(".")[0])
    got = bytes(sample.data)
    return i, None if got == object_bytes(i) else f"{sample.key}: {len(got)} bytes differ from the expected"


def check_shard_sample(sample: dict) -> tuple[str, str | None]:
    key = sample["__key__"]
    want = fields_of(key)
    got = {k: bytes(v) for k, v in sample.items() if not k.startswith("__")}
    return key, None if got == want else f"{key}: fields differ from the expected"


def collate_list(batch):
    return list(batch)


def tree_pss() -> int:
    """Proportional set size of this process and its children (the DataLoader's workers): shared
    pages counted once in all, so forked workers are not charged for what they share."""
    total = 0
    pids = [os.getpid()]
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass  # a worker that just exited
    return total


def make_loader(args: argparse.Namespace, client: s3stream.Client):
    if args.kind == "map":
        ds = s3stream.MapDataset.from_prefix(args.uri, transform=check_object, client=client, progress=False)
        sampler = s3stream.EpochSampler(ds, shuffle=True, seed=0)
        return s3stream.DataLoader(ds, batch_size=BATCH, num_workers=args.workers, sampler=sampler,
                                   collate_fn=collate_list, persistent_workers=True)
    # Small pieces, so that an epoch of a few hundred MB is a few thousand requests for faults to hit.
    ds = s3stream.ShardDataset(args.uri, client=client, transform=check_shard_sample, batch_size=BATCH,
                               shuffle=True, seed=0, remainder="drop", piece_size=256 << 10, chunk_bytes=1 << 20,
                               write_index=False, index_cache_dir=args.index_dir, progress=False)
    return s3stream.DataLoader(ds, batch_size=BATCH, num_workers=args.workers, collate_fn=collate_list,
                               persistent_workers=True)


def number_of(args: argparse.Namespace, name) -> int:
    if args.kind == "map":
        return name
    shard, i = name[1:].split("_")
    return int(shard) * args.per_shard + int(i)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["map", "shards"])
    p.add_argument("endpoint")
    p.add_argument("uri")
    p.add_argument("--samples", type=int, required=True)
    p.add_argument("--per-shard", type=int, default=1000)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--index-dir")
    p.add_argument("--step-ms", type=float, default=0.0, help="a training step's time per batch (0: an empty loop)")
    args = p.parse_args()

    # A store that fails often: more attempts (a sample lost to 5 failed tries in a row would fail
    # the run, correctly), a silent GET dropped after 0.25 s (stall_timeout) and a trickling one
    # after 1 s rather than 20.
    client = s3stream.Client(endpoint_url=args.endpoint, max_attempts=10, low_speed_time=1, stall_timeout=0.25)
    loader = make_loader(args, client)
    expected = args.samples if args.kind == "map" else args.samples // BATCH * BATCH
    for epoch in range(args.epochs):
        counts = bytearray(args.samples)
        corrupt, problems = 0, []
        start = time.perf_counter()
        for batch in loader:
            for name, problem in batch:
                n = number_of(args, name)
                counts[n] = min(255, counts[n] + 1)
                if problem:
                    corrupt += 1
                    problems.append(problem)
            if args.step_ms:
                time.sleep(args.step_ms / 1000)  # the GPU's turn: the loader keeps fetching meanwhile
        seconds = time.perf_counter() - start
        gc.collect()
        received = sum(counts)
        print(json.dumps({
            "epoch": epoch,
            "samples": received,
            "expected": expected,
            "lost": expected - sum(1 for c in counts if c),
            "duplicated": sum(c - 1 for c in counts if c > 1),
            "corrupt": corrupt,
            "problems": problems[:5],
            "seconds": round(seconds, 3),
            "pss_bytes": tree_pss(),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
