"""Soak: 100k samples an epoch through a MapDataset and a ShardDataset, 20 epochs, under a mix of
faults, against a fault-free run of the same loader. Opt-in (`make soak`, or pytest --soak): ~20 min.

The server is the benchmark's S3 stand-in (nginx serving a directory: moto cannot serve 100k GETs
an epoch in useful time) behind the test FaultProxy, which breaks a share of the GETs:

    reset mid-body 5%, 503 SlowDown 2%, 500 InternalError 1%, stall (headers and half the body, then
    silence) STALL_SHARE

Two loops: an empty one (`for batch in loader: pass`), which measures the loader's capacity, and
a paced one, a training loop whose step (a sleep, the GPU's turn) asks 60% of that capacity. Each
runs fault-free, then under faults (the paced one for S3STREAM_SOAK_EPOCHS epochs). Every epoch
must deliver every sample exactly once with the right bytes; the paced loop under faults must keep
at least 80% of its fault-free rate; the loader's memory (the proportional set size of the loop
process and its DataLoader workers, after each epoch) must stay flat across the faulted epochs.
The empty loop's rate under faults is reported, not asserted: there every retry's wait shows.

Sizes: S3STREAM_SOAK_SAMPLES (default 100,000 objects; the shards hold 97 x 1,024 = 99,328 samples) and
S3STREAM_SOAK_EPOCHS (20). S3STREAM_SOAK_REPORT=FILE writes the figures as JSON.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository: bench.server

from proxies import FaultProxy, reset_mid_body, stall, status  # noqa: E402
from soak_loop import BATCH, object_bytes, object_key  # noqa: E402

pytestmark = [pytest.mark.soak, pytest.mark.timeout_s(3 * 3600)]

SAMPLES = int(os.environ.get("S3STREAM_SOAK_SAMPLES", "100000"))
EPOCHS = int(os.environ.get("S3STREAM_SOAK_EPOCHS", "20"))
PER_SHARD = 1024
WORKERS = {"map": 8, "shards": 2}
STALL_SHARE = {"map": 0.00002, "shards": 0.00015}  # one stall per ~15 s of loading in both
PACE = 0.6  # the paced loop's demand, as a share of the loader's fault-free capacity
MIN_RATE_RATIO = 0.8
PSS_SLACK = 32 << 20  # flat: after epoch 2, within 32 MiB of it


def fault_mix(proxy: FaultProxy, stall_share: float, seed: int = 0) -> dict:
    """Rules that break the given shares of GETs. Each GET gets one uniform draw, and each rule
    takes its own band of it, so the shares hold as written whatever the order rules are tried in."""
    rng = random.Random(seed)

    def draw(req) -> float:
        if not hasattr(req, "soak_draw"):
            req.soak_draw = rng.random()  # the proxy asks rules one at a time, under its lock
        return req.soak_draw

    def band(low: float, high: float):
        return lambda req: req.method == "GET" and low <= draw(req) < high

    rules, low = {}, 0.0
    for name, fault, share in (("reset mid-body", reset_mid_body(0.5, linger_s=0.005), 0.05),
                               ("503 SlowDown", status(503, "SlowDown"), 0.02),
                               ("500 InternalError", status(500, "InternalError"), 0.01),
                               ("stall", stall(seconds=5, fraction=0.5), stall_share)):
        rules[name] = proxy.inject(fault, match=band(low, low + share), count=None)
        low += share
    return rules


@pytest.fixture(scope="module")
def soak_server():
    from bench.server import LocalS3, have_lua

    if not have_lua():
        pytest.fail("the soak needs nginx with the Lua module (scripts/install_deps.sh installs them)")
    import shard_helpers

    root = tempfile.mkdtemp(prefix="s3stream-soak-")
    objects = os.path.join(root, "soak", "objects")
    os.makedirs(objects)
    for i in range(SAMPLES):
        with open(os.path.join(objects, object_key(i)), "wb") as f:
            f.write(object_bytes(i))
    shards = shard_helpers.make_shards([PER_SHARD] * (SAMPLES // PER_SHARD))
    shard_helpers.write_local(os.path.join(root, "soak", "shards"), shards)
    try:
        with LocalS3(root, ttfb_s=0, rate=0) as endpoint:
            yield endpoint, len(shards.names) * PER_SHARD, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_loop(kind: str, endpoint: str, samples: int, epochs: int, index_dir: str, step_ms: float = 0) -> list[dict]:
    uri = "s3://soak/objects/" if kind == "map" else "s3://soak/shards/"
    cmd = [sys.executable, os.path.join(HERE, "soak_loop.py"), kind, endpoint, uri, "--samples", str(samples),
           "--per-shard", str(PER_SHARD), "--epochs", str(epochs), "--workers", str(WORKERS[kind]),
           "--index-dir", index_dir, "--step-ms", str(step_ms)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3 * 3600)
    assert done.returncode == 0, f"soak loop failed ({done.returncode}):\n{done.stderr[-5000:]}"
    epochs_seen = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(epochs_seen) == epochs, done.stdout[-2000:]
    return epochs_seen


def rate(epochs: list[dict]) -> float:
    """Median samples/s of the epochs after the first (which warms connections and pools up)."""
    return statistics.median(e["samples"] / e["seconds"] for e in epochs[1:])


@pytest.mark.parametrize("kind", ["map", "shards"])
def test_soak_under_faults_loses_nothing_keeps_pace_and_memory_flat(soak_server, kind):
    endpoint, shard_samples, root = soak_server
    samples = SAMPLES if kind == "map" else shard_samples
    index_dir = os.path.join(root, "index-cache")

    with FaultProxy(endpoint, record=False) as proxy:
        # The loader's capacity: an empty loop takes batches as fast as they come.
        clean = run_loop(kind, proxy.url, samples, 3, index_dir)
        capacity = rate(clean)
        # A training loop asking PACE of that: its steps leave the loader room to absorb faults.
        step_ms = 1000 * BATCH / (PACE * capacity)
        clean_paced = run_loop(kind, proxy.url, samples, 2, index_dir, step_ms)
        rules = fault_mix(proxy, STALL_SHARE[kind])
        proxy.passed = 0
        faulted = run_loop(kind, proxy.url, samples, 3, index_dir)
        faulted_paced = run_loop(kind, proxy.url, samples, EPOCHS, index_dir, step_ms)
        injected = {name: rule.injected for name, rule in rules.items()}
        passed = proxy.passed

    pss = [e["pss_bytes"] for e in faulted_paced]
    settled = pss[min(2, len(pss) - 1)]
    growth = max(pss[2:] or pss) - settled
    figures = {
        "kind": kind, "samples_per_epoch": samples, "workers": WORKERS[kind], "faulted_epochs": EPOCHS,
        "requests_answered": passed, "faults": injected,
        "empty_loop_samples_per_s": {"fault_free": round(capacity), "faulted": round(rate(faulted)),
                                     "ratio": round(rate(faulted) / capacity, 3)},
        "paced_loop_samples_per_s": {"step_ms": round(step_ms, 2), "fault_free": round(rate(clean_paced)),
                                     "faulted": round(rate(faulted_paced)),
                                     "ratio": round(rate(faulted_paced) / rate(clean_paced), 3)},
        "pss_mib_by_faulted_epoch": [round(p / 2**20, 1) for p in pss],
        "pss_growth_mib_after_epoch_2": round(growth / 2**20, 1),
    }
    print(json.dumps(figures))
    report = os.environ.get("S3STREAM_SOAK_REPORT")
    if report:
        with open(f"{report}.{kind}.json", "w") as f:
            json.dump(figures, f, indent=1)

    for e in clean + clean_paced + faulted + faulted_paced:
        assert (e["samples"], e["lost"], e["duplicated"], e["corrupt"]) == (samples, 0, 0, 0), e
    assert all(n > 0 for n in injected.values()), f"a fault never fired: {injected}"
    assert rate(faulted_paced) >= MIN_RATE_RATIO * rate(clean_paced), figures
    assert growth <= PSS_SLACK, figures
