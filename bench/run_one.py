"""One run of one cell, in its own process: ``python -m bench.run_one --json CONFIG``.

Builds the library's loader (runners.py), iterates it as an empty training loop that only checks
each batch, and prints one JSON line with the measurements (see metrics.py for their definitions).

CONFIG keys: library, scenario, workers, batch_size, endpoint, spec ({objects, object_size,
seed}), uris (objects or shards), keys (shard keys, for URL-based peers), shard_mb, seed, tmp,
max_seconds (a run stops after this long past the warm-up; the result is then marked incomplete).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional


def run(cfg: Dict[str, Any]) -> Dict[str, Any]:
    from . import runners
    from .data import Spec
    from .metrics import Checker, tree_cpu_seconds

    spec = Spec(**cfg["spec"])
    checker = Checker(spec)
    workers = int(cfg["workers"])
    expected_batches = -(-spec.objects // int(cfg["batch_size"]))
    warm_batches = max(1, min(max(1, workers), expected_batches // 4))
    max_seconds = float(cfg.get("max_seconds") or 0)

    runners.preload(cfg["library"])
    t0 = time.perf_counter()
    cpu0 = tree_cpu_seconds()
    loader = runners.build(cfg)
    it = iter(loader)
    batches = 0
    first_batch_s: Optional[float] = None
    mark: Optional[tuple] = None  # (time, cpu, samples, bytes) at the end of the warm-up
    complete = True
    for batch in it:
        checker.batch(batch)
        batches += 1
        if batches == 1:
            first_batch_s = time.perf_counter() - t0
        if batches == warm_batches:
            mark = (time.perf_counter(), tree_cpu_seconds(), checker.samples, checker.bytes)
        elif mark is not None and max_seconds and time.perf_counter() - mark[0] > max_seconds:
            complete = False
            break
    t_end = time.perf_counter()
    cpu_end = tree_cpu_seconds()
    if mark is None:  # fewer batches than the warm-up: measure from the start
        mark = (t0, cpu0, 0, 0)
    del it  # shuts down the workers
    teardown_s = time.perf_counter() - t_end

    verdict = checker.verdict(complete)
    window_s = t_end - mark[0]
    samples = checker.samples - mark[2]
    nbytes = checker.bytes - mark[3]
    return {
        "status": "ok" if verdict["ok"] else "check_failed",
        "samples_per_s": samples / window_s if window_s > 0 else None,
        "mb_per_s": nbytes / window_s / 1e6 if window_s > 0 else None,
        "cpu_s_per_gb": (cpu_end - mark[1]) / (nbytes / 1e9) if nbytes else None,
        "cpu_s": cpu_end - mark[1],
        "first_batch_s": first_batch_s,
        "epoch_samples_per_s": checker.samples / (t_end - t0) if t_end > t0 else None,
        "window_s": window_s,
        "warmup_batches": warm_batches,
        "batches": batches,
        "teardown_s": teardown_s,
        "check": verdict,
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run_one")
    ap.add_argument("--json", required=True, help="the run's configuration: a JSON object, or @FILE holding one")
    args = ap.parse_args(argv)
    if args.json.startswith("@"):
        with open(args.json[1:]) as f:
            cfg = json.load(f)
    else:
        cfg = json.loads(args.json)
    try:
        result = run(cfg)
    except ImportError as e:
        result = {"status": "skipped", "reason": f"not installed: {e}"}
    except BaseException as e:  # noqa: BLE001 - any failure is a result of the cell
        text = str(e).strip()
        last = text.splitlines()[-1] if text else ""
        result = {"status": "failed", "reason": f"{type(e).__name__}: {last}"[:500],
                  "detail": text[-4000:], "traceback": traceback.format_exc()[-4000:]}
    sys.stdout.flush()
    print("S3STREAM_BENCH_RESULT " + json.dumps(result), flush=True)
    # Skip interpreter teardown: some peers' native threads make exit slow, which is not the loop's time.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
