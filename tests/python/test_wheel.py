"""The wheel `make wheel` builds is self-contained: installed into a clean venv and run with the
system's libcurl, OpenSSL and pugixml hidden, it imports and streams from a real S3 server
(moto) through the copies of those libraries it carries.

The libraries are hidden in a private mount namespace (`unshare --mount`): each one's file is
bind-mounted over by an empty file, so loading the system's copy fails ("file too short") instead of
silently succeeding. The child also reports which shared objects it has mapped, so the test sees
that the wheel's own copies are the ones in use.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import random_bytes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The sonames the extension links against beyond the manylinux baseline (glibc, libstdc++, libgcc_s
# and zlib, which the manylinux policy lets a wheel take from the system).
HIDDEN_SONAMES = ("libcurl.so.4", "libssl.so.3", "libcrypto.so.3", "libpugixml.so.1")

CHECK = r"""
import hashlib, json, os, sys
import s3stream

endpoint, bucket, want = sys.argv[1], sys.argv[2], sys.argv[3]
client = s3stream.Client(endpoint_url=endpoint)
got = client.get(f"s3://{bucket}/big.bin")                  # parallel ranged GETs over TLS-capable libcurl
with s3stream.open(f"s3://{bucket}/copy.bin", "wb", client=client) as f:   # multipart upload
    f.write(got)
with s3stream.open(f"s3://{bucket}/copy.bin", "rb", client=client) as f:
    again = f.read()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line.split()[-1]})
print(json.dumps({
    "sha_get": hashlib.sha256(memoryview(got)).hexdigest(),
    "sha_roundtrip": hashlib.sha256(again).hexdigest(),
    "keys": sorted(o.key for o in client.list(f"s3://{bucket}/")),
    "package": os.path.dirname(s3stream.__file__),
    "maps": maps,
}))
"""


@pytest.fixture(scope="module")
def wheel() -> str:
    found = sorted(glob.glob(os.path.join(REPO, "dist", "s3stream-*-manylinux_*.whl")))
    if not found:
        if os.environ.get("S3STREAM_REQUIRE_WHEEL"):
            pytest.fail("no manylinux wheel in dist/: `make wheel` should have made one")
        pytest.skip("no manylinux wheel in dist/: run `make wheel` first")
    return found[-1]


def system_library_files() -> list:
    """The files the dynamic loader would open for HIDDEN_SONAMES (symlinks resolved)."""
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    files = set()
    for soname in HIDDEN_SONAMES:
        for m in re.finditer(rf"^\s*{re.escape(soname)} \(([^)]*)\) => (\S+)$", listing, re.M):
            if "x86-64" in m.group(1) or "64bit" in m.group(1) or "x86_64" in m.group(2):
                files.add(os.path.realpath(m.group(2)))
    return sorted(files)


def can_unshare_mounts() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.timeout_s(180)
def test_wheel_installs_into_a_clean_venv_and_streams_with_the_system_libraries_hidden(
        wheel, tmp_path, s3_endpoint, boto3_client, bucket):
    if not can_unshare_mounts():
        pytest.skip("needs `unshare --mount` (root or CAP_SYS_ADMIN) to hide the system libraries")
    hidden = system_library_files()
    assert len(hidden) >= len(HIDDEN_SONAMES), f"expected the system's {HIDDEN_SONAMES}, ldconfig lists {hidden}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # no system site-packages
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--disable-pip-version-check", wheel], check=True)

    data = random_bytes(24 << 20, seed=9)  # > one 8 MiB part: exercises the parallel paths
    boto3_client.put_object(Bucket=bucket, Key="big.bin", Body=data)
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    mounts = " && ".join(f"mount --bind {empty} {lib}" for lib in hidden)
    env = dict(os.environ, PYTHONPATH="", PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f'{mounts} && exec "$0" "$@"', python, str(script), s3_endpoint, bucket,
         hashlib.sha256(data).hexdigest()],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    assert report["sha_get"] == report["sha_roundtrip"] == hashlib.sha256(data).hexdigest()
    assert report["keys"] == ["big.bin", "copy.bin"]
    assert report["package"].startswith(str(venv)), report["package"]  # the installed wheel, not the tree
    maps = report["maps"]
    assert not set(maps) & set(hidden), f"a hidden system library was loaded: {set(maps) & set(hidden)}"
    carried = [m for m in maps if "/s3stream.libs/" in m]
    for name in ("libcurl", "libssl", "libcrypto", "libpugixml"):
        assert any(os.path.basename(m).startswith(name + "-") for m in carried), (name, carried)


def test_the_hidden_libraries_really_are_hidden(tmp_path):
    """The control: with the same mounts, a program linked against the system's libcurl (curl itself)
    cannot start, so the test above would fail for a wheel that did not carry its libraries."""
    if not can_unshare_mounts():
        pytest.skip("needs `unshare --mount` (root or CAP_SYS_ADMIN) to hide the system libraries")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    mounts = " && ".join(f"mount --bind {empty} {lib}" for lib in system_library_files())
    curl = shutil.which("curl")
    assert curl, "curl links libcurl.so.4: it is the control here"
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", f"{mounts} && exec {curl} --version"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "libcurl.so.4" in proc.stderr, proc.stdout + proc.stderr
