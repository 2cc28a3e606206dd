"""Fork safety: a Client used in the parent keeps working in a child made by os.fork(), by
multiprocessing's "fork" context and by torch DataLoader workers, and the parent's client keeps
working too. A child that hangs (e.g. waiting on a native thread that did not survive the fork) is
killed and reported."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import sys
import time
import traceback

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import s3stream
from helpers import MiB, boto3_get, put_many, random_bytes, s3_uri

CHILD_TIMEOUT = 60


def _wait(pid: int, timeout: float = CHILD_TIMEOUT) -> int:
    """The child's exit status; kill it and fail if it does not finish in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child {pid} hung for {timeout}s (deadlock after fork?)")


def _run_in_child(fn) -> int:
    """fork(); run fn() in the child; exit 0 if it returns True, 1 if False, 2 if it raises."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if fn() else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    return _wait(pid)


@pytest.fixture
def objects(boto3_client, bucket):
    objs = {f"obj/{i:03d}.bin": random_bytes(50_000 + i, seed=i) for i in range(16)}
    objs["obj/big.bin"] = random_bytes(9 * MiB, seed=100)
    put_many(boto3_client, bucket, objs)
    return {s3_uri(bucket, k): v for k, v in objs.items()}


def test_os_fork_child_uses_parents_client(client, objects, boto3_client, bucket):
    uris = sorted(objects)
    assert bytes(client.get(uris[0])) == objects[uris[0]]  # the client is warm: threads, connections

    def child():
        ok = all(bytes(client.get(u)) == objects[u] for u in uris)
        ok &= bytes(client.get(uris[1], 10, 20)) == objects[uris[1]][10:20]
        client.put(s3_uri(bucket, "from-child"), b"written by the child")
        with s3stream.open(s3_uri(bucket, "from-child-stream"), "wb", client=client) as f:
            f.write(random_bytes(10 * MiB, seed=7))
        ok &= client.head(uris[2]).size == len(objects[uris[2]])
        ok &= len(list(client.list(s3_uri(bucket, "obj/")))) == len(objects)
        return ok

    assert _run_in_child(child) == 0
    assert boto3_get(boto3_client, bucket, "from-child") == b"written by the child"
    assert boto3_get(boto3_client, bucket, "from-child-stream") == random_bytes(10 * MiB, seed=7)
    # the parent's client still works after the fork
    assert all(bytes(client.get(u)) == objects[u] for u in uris)


def test_fork_while_a_reader_is_open(client, objects, bucket):
    uri = s3_uri(bucket, "obj/big.bin")
    data = objects[uri]
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.read(MiB) == data[:MiB]  # prefetching the rest in the background now

        def child():
            with s3stream.open(uri, "rb", client=client) as g:
                return g.read() == data

        assert _run_in_child(child) == 0
        assert f.read() == data[MiB:]


def test_fork_twice_and_grandchild(client, objects):
    uris = sorted(objects)
    client.get(uris[0])

    def child():
        if bytes(client.get(uris[3])) != objects[uris[3]]:
            return False
        return _run_in_child(lambda: bytes(client.get(uris[4])) == objects[uris[4]]) == 0

    assert _run_in_child(child) == 0
    assert _run_in_child(child) == 0


def test_parent_keeps_working_while_child_runs(client, objects):
    uris = sorted(objects)
    client.get(uris[0])
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if all(bytes(client.get(u)) == objects[u] for u in uris * 3) else 1
        finally:
            os._exit(code)
    try:
        for u in uris * 3:  # concurrently with the child
            assert bytes(client.get(u)) == objects[u]
    finally:
        assert _wait(pid) == 0


# --- multiprocessing ------------------------------------------------------------------------------------

_CLIENT: s3stream.Client | None = None


def _digest(uri: str) -> tuple[str, str]:
    return uri, hashlib.sha256(_CLIENT.get(uri)).hexdigest()


def test_multiprocessing_fork_pool(client, objects):
    global _CLIENT
    _CLIENT = client
    uris = sorted(objects)
    client.get(uris[0])
    ctx = multiprocessing.get_context("fork")
    try:
        with ctx.Pool(2) as pool:
            result = pool.map_async(_digest, uris * 2, chunksize=1)
            got = result.get(timeout=CHILD_TIMEOUT)
    finally:
        _CLIENT = None
    assert got == [(u, hashlib.sha256(objects[u]).hexdigest()) for u in uris * 2]


def _process_main(uri: str, expected: str, q) -> None:
    q.put(hashlib.sha256(_CLIENT.get(uri)).hexdigest() == expected)


def test_multiprocessing_fork_process(client, objects):
    global _CLIENT
    _CLIENT = client
    uri = sorted(objects)[5]
    client.get(uri)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    try:
        p = ctx.Process(target=_process_main, args=(uri, hashlib.sha256(objects[uri]).hexdigest(), q))
        p.start()
        p.join(CHILD_TIMEOUT)
        if p.is_alive():
            p.kill()
            pytest.fail("multiprocessing child hung")
    finally:
        _CLIENT = None
    assert p.exitcode == 0
    assert q.get(timeout=5) is True


# --- torch DataLoader -----------------------------------------------------------------------------------


class _ObjectDataset(Dataset):
    def __init__(self, client: s3stream.Client, uris: list[str]) -> None:
        self.client = client
        self.uris = uris

    def __len__(self) -> int:
        return len(self.uris)

    def __getitem__(self, i: int):
        buf = self.client.get(self.uris[i])
        return i, torch.frombuffer(bytearray(buf), dtype=torch.uint8)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_dataloader_fork_workers(client, objects):
    uris = sorted(objects)
    ds = _ObjectDataset(client, uris)
    i0, t0 = ds[0]  # the parent uses the client before the workers fork
    assert bytes(t0.numpy()) == objects[uris[0]]
    loader = DataLoader(ds, batch_size=None, shuffle=True, num_workers=2, multiprocessing_context="fork", timeout=CHILD_TIMEOUT)
    seen = []
    for epoch in range(2):
        for i, t in loader:
            assert bytes(t.numpy()) == objects[uris[i]], uris[i]
            seen.append(int(i))
    assert sorted(seen) == sorted(list(range(len(uris))) * 2)
    assert bytes(client.get(uris[1])) == objects[uris[1]]  # and the parent's client still works


@pytest.mark.timeout_s(120)
def test_spawned_workers_exit_without_leak_reports(tmp_path):
    """Native objects held by a dataset or client are let go at interpreter exit: a spawned
    DataLoader worker (which exits through the interpreter, unlike a forked one) once printed
    nanobind's "leaked instances" report for them."""
    import io
    import subprocess
    import tarfile

    (tmp_path / "shards").mkdir()
    for s in range(2):
        with tarfile.open(tmp_path / "shards" / f"s{s}.tar", "w") as t:
            for i in range(20):
                data = bytes([i]) * 1000
                info = tarfile.TarInfo(f"{s}_{i:03d}.bin")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    script = (
        "import s3stream\n"
        "if __name__ == '__main__':\n"
        f"    ds = s3stream.ShardDataset({str(tmp_path / 'shards') + '/'!r}, shuffle=False)\n"
        "    loader = s3stream.DataLoader(ds, batch_size=8, num_workers=1, multiprocessing_context='spawn')\n"
        "    print(sum(len(b['bin']) for b in loader))\n"
    )
    (tmp_path / "run.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, timeout=100,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "40"
    assert "leaked" not in proc.stderr, proc.stderr[-2000:]


def test_a_closed_client_reopens_and_a_with_block_closes_it(client, objects):
    uri, data = next(iter(objects.items()))
    with s3stream.Client(endpoint_url=client._options["endpoint_url"]) as c:
        assert bytes(c.get(uri)) == data
        assert c._native is not None
    assert c._native is None  # closed at the end of the block
    assert bytes(c.get(uri)) == data  # and built again on use
