"""Launching a multi-rank training job from a test (torchrun, Lightning's ddp launcher) and
reading back what each rank wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List, Sequence

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def rank_env(s3_endpoint: str) -> dict:
    """This test run's environment for the job: the s3stream it tests, these helpers, the moto
    endpoint, and none of a launcher's variables (the job's own launcher sets them)."""
    import s3stream

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, HERE, env.get("PYTHONPATH")) if p)
    env["S3STREAM_TEST_ENDPOINT"] = s3_endpoint
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    return env


def run_job(cmd: Sequence[str], env: dict, timeout: float) -> str:
    """Runs the job to its end; fails the test with its output if it fails or outlives `timeout`.
    Returns its stderr."""
    try:
        proc = subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        pytest.fail(f"{' '.join(cmd[:2])} ... did not finish in {timeout:.0f} s:\n{out[-12000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd[:2])} ... exited with {proc.returncode}:\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-12000:]}")
    return proc.stderr


def torchrun(nproc: int, script: str, args: Sequence[str], env: dict, timeout: float) -> str:
    """`torchrun --standalone --nproc_per_node nproc script args...` with this Python."""
    return run_job([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                    os.path.join(HERE, script), *args], env, timeout)


def rank_results(prefix: str, world: int) -> List[dict]:
    """What each rank wrote to <prefix>.rank<r>.json, rank 0 first."""
    out = []
    for rank in range(world):
        with open(f"{prefix}.rank{rank}.json") as f:
            out.append(json.load(f))
    return out
