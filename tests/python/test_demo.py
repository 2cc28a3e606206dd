"""`make demo` (examples/demo.py) end to end at a tiny size: the nginx stand-in starts, the dataset is written as
objects and shards, both libraries train one epoch, and the side-by-side summary comes out."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

s3stream = pytest.importorskip("s3stream")
pytest.importorskip("torch")
pytest.importorskip("PIL")
pytest.importorskip("boto3")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(
    shutil.which("nginx") is None or not os.path.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so"),
    reason="the demo's S3 stand-in needs nginx and libnginx-mod-http-lua (./scripts/install_deps.sh installs them)",
)


@pytest.mark.timeout_s(120)
def test_demo_runs_end_to_end(tmp_path):
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "examples", "demo.py"), "--images", "256", "--ttfb-ms", "5", "--workers", "1",
           "--batch-size", "32", "--no-progress", "--out", str(out)]
    try:
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        pytest.fail(f"the demo did not finish in 60 s:\n{text[-8000:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    stdout = proc.stdout

    for step in range(1, 6):
        assert f"[{step}/5]" in stdout, stdout
    header = next(line for line in stdout.splitlines() if "s3stream/boto3" in line)
    assert "s3stream" in header and "boto3" in header
    rate = re.search(r"^samples/s\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)x$", stdout, re.M)
    assert rate, stdout
    assert float(rate.group(1)) > 0 and float(rate.group(2)) > 0
    wait = re.search(r"^waiting for data \(% of step time\)\s+(\d+(?:\.\d+)?) %\s+(\d+(?:\.\d+)?) %$", stdout, re.M)
    assert wait, stdout
    assert all(0 <= float(w) <= 100 for w in wait.groups())
    assert "training loss" in stdout and "training accuracy" in stdout

    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["library"] for r in results] == ["s3stream", "boto3"]
    for r in results:
        assert r["samples"] == 256, r  # every image trained on exactly once
        assert r["steps"] == 8
        assert r["samples_per_s"] > 0
        assert 0 <= r["wait_share_pct"] <= 100
        assert r["loss_last"] == r["loss_last"]  # not NaN
    # The dataset was kept: the objects and the shards with their index sidecars.
    assert len(list((out / "demo" / "images").rglob("*.jpg"))) == 256
    assert list((out / "demo" / "shards").glob("train-*.tar.idx.json"))


def test_demo_cleans_up_its_temporary_directories():
    """Without --out nothing is left behind: the served directory and nginx's are temporary."""
    # Not pytest's tmp_path: its parents are private to this user, and nginx's workers may run as
    # another one (nobody, when started as root).
    tmp = tempfile.mkdtemp(prefix="s3stream-demo-test-")
    try:
        os.chmod(tmp, 0o755)
        env = dict(os.environ)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env["TMPDIR"] = tmp
        cmd = [sys.executable, os.path.join(REPO, "examples", "demo.py"), "--images", "40", "--classes", "4", "--ttfb-ms", "1",
               "--workers", "0", "--batch-size", "16", "--no-progress"]
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
        assert [name for name in os.listdir(tmp) if name.startswith("s3stream")] == []  # (torch leaves its own)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
