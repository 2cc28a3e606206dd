"""The ceiling: the same GETs from a native HTTP load generator (wrk) at the same concurrency.

No data loader can deliver more than the server gives a C client that does nothing with the bytes,
so the ceiling says how much of what is achievable a library reaches. wrk keeps ``connections``
requests in flight for ``seconds`` and reports requests/s and bytes/s (wrk shares the CPU with the
server, as the loaders do). The harness passes as many connections as s3stream had GETs in flight
at its peak in the same run (counted by the server: LocalS3.inflight_peak).

* random: whole-object GETs of the dataset's objects in a shuffled order;
* shards: ranged GETs of 64 consecutive samples (one batch; the ranges s3stream's shard reader
  requests when it does not shuffle) across the shards in order.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional, Tuple

_SCRIPT = r"""
local paths = {}
local ranges = {}
local counter = 1
local threads = {}
local nthreads = 0

function setup(thread)
  nthreads = nthreads + 1
  thread:set("tid", nthreads)
  table.insert(threads, thread)
end

function init(args)
  local f = io.open("__LIST__", "r")
  for line in f:lines() do
    local p, r = line:match("^([^\t]+)\t?(.*)$")
    paths[#paths + 1] = p
    ranges[#ranges + 1] = r
  end
  f:close()
  counter = ((tid or 1) - 1) * math.floor(#paths / __THREADS__) + 1
end

function request()
  local i = counter
  counter = counter % #paths + 1
  if ranges[i] ~= "" then
    return wrk.format("GET", paths[i], {["Range"] = "bytes=" .. ranges[i]})
  end
  return wrk.format("GET", paths[i])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_RESULT {"requests": %d, "bytes": %d, "duration_us": %d, "connect_errors": %d, ' ..
    '"read_errors": %d, "write_errors": %d, "status_errors": %d, "timeouts": %d, "latency_p50_us": %d, ' ..
    '"latency_p99_us": %d}\n', summary.requests, summary.bytes, summary.duration, e.connect, e.read,
    e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def object_targets(keys: List[str], bucket: str, seed: int = 0) -> List[Tuple[str, str]]:
    order = list(keys)
    random.Random(seed).shuffle(order)
    return [(f"/{bucket}/{k}", "") for k in order]


def shard_targets(shard_keys: List[str], offsets: Dict[str, List[int]], bucket: str,
                  batch: int = 64) -> List[Tuple[str, str]]:
    out = []
    for key in shard_keys:
        off = offsets[key]
        for s in range(0, len(off) - 1, batch):
            e = min(s + batch, len(off) - 1)
            out.append((f"/{bucket}/{key}", f"{off[s]}-{off[e] - 1}"))
    return out


def run_wrk(endpoint: str, targets: List[Tuple[str, str]], connections: int, seconds: float,
            threads: Optional[int] = None) -> Dict[str, object]:
    """wrk against ``endpoint`` cycling through ``targets`` ((path, "start-end" or "")); returns
    requests/s, MB/s (10^6 bytes; response bodies and headers, as wrk counts them) and errors."""
    if not have_wrk():
        return {"status": "skipped", "reason": "wrk is not installed (apt-get install wrk)"}
    threads = max(1, min(threads or 2, connections))
    with tempfile.TemporaryDirectory(prefix="s3stream-wrk-") as tmp:
        listing = os.path.join(tmp, "targets.tsv")
        with open(listing, "w") as f:
            for path, rng in targets:
                f.write(f"{path}\t{rng}\n")
        script = os.path.join(tmp, "ceiling.lua")
        with open(script, "w") as f:
            f.write(_SCRIPT.replace("__LIST__", listing).replace("__THREADS__", str(threads)))
        cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
               "--timeout", "30s", "-s", script, endpoint]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    for line in proc.stdout.splitlines():
        if line.startswith("WRK_RESULT "):
            r = json.loads(line[len("WRK_RESULT "):])
            secs = r["duration_us"] / 1e6
            errors = sum(r[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
            return {
                "status": "ok" if errors == 0 else "errors",
                "requests_per_s": r["requests"] / secs,
                "mb_per_s": r["bytes"] / secs / 1e6,
                "connections": connections,
                "threads": threads,
                "seconds": secs,
                "errors": errors,
                "latency_p50_ms": r["latency_p50_us"] / 1000,
                "latency_p99_ms": r["latency_p99_us"] / 1000,
                "command": " ".join(cmd),
            }
    return {"status": "failed", "reason": (proc.stderr or proc.stdout)[-2000:], "command": " ".join(cmd)}
