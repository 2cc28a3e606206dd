"""s3stream.open: the "rb" reader (read, readinto, readline, seek/tell, prefetch chunk boundaries, EOF)
and the "wb" writer (single PUT, multipart, abort on exception), and torch.save/torch.load through both."""

from __future__ import annotations

import io
import os
import random
import threading
import time

import pytest
import torch

import s3stream
from helpers import MiB, boto3_get, object_exists, random_bytes, s3_uri
from proxies import RecordingProxy


@pytest.fixture
def text_object(boto3_client, bucket):
    lines = [b"first line\n", b"\n", b"third: caf\xc3\xa9 \xe2\x82\xac\n", b"x" * 100_000 + b"\n", b"last line, no newline"]
    boto3_client.put_object(Bucket=bucket, Key="text.txt", Body=b"".join(lines))
    return s3_uri(bucket, "text.txt"), lines


@pytest.fixture
def big_object(boto3_client, bucket):
    """Several MiB: spans several prefetch chunks whatever their size within reason."""
    data = random_bytes(21 * MiB + 12345, seed=21)
    boto3_client.put_object(Bucket=bucket, Key="big.bin", Body=data)
    return s3_uri(bucket, "big.bin"), data


# --- reading --------------------------------------------------------------------------------------------


def test_read_all(client, big_object):
    uri, data = big_object
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.readable() and f.seekable()
        assert f.read() == data
        assert f.read() == b""
        assert f.tell() == len(data)
    assert f.closed


def test_read_n(client, big_object):
    uri, data = big_object
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.read(0) == b""
        assert f.read(1) == data[:1]
        pos = 1
        for n in (10, 1000, MiB - 1, 8 * MiB + 3, 3):
            assert f.read(n) == data[pos : pos + n]
            pos += n
            assert f.tell() == pos
        assert f.read(-1) == data[pos:]
        assert f.read(10) == b""


def test_sequential_odd_sized_reads(client, big_object):
    uri, data = big_object
    out = bytearray()
    with s3stream.open(uri, "rb", client=client) as f:
        while chunk := f.read(1_000_003):
            assert len(chunk) <= 1_000_003
            out += chunk
    assert out == data


def test_readinto(client, big_object):
    uri, data = big_object
    with s3stream.open(uri, "rb", client=client) as f:
        b = bytearray(3 * MiB + 1)
        assert f.readinto(b) == len(b)
        assert b == data[: len(b)]
        m = memoryview(bytearray(10))
        assert f.readinto(m[2:7]) == 5
        assert m[2:7].tobytes() == data[len(b) : len(b) + 5]
        f.seek(len(data) - 4)
        b = bytearray(100)
        assert f.readinto(b) == 4
        assert b[:4] == data[-4:]
        assert f.readinto(b) == 0


def test_readline(client, text_object):
    uri, lines = text_object
    with s3stream.open(uri, "rb", client=client) as f:
        for line in lines:
            assert f.readline() == line
        assert f.readline() == b""


def test_readline_with_limit_and_iteration(client, text_object):
    uri, lines = text_object
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.readline(5) == lines[0][:5]
        assert f.readline() == lines[0][5:]
    with s3stream.open(uri, "rb", client=client) as f:
        assert list(f) == lines
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.readlines() == lines


def test_text_wrapper(client, text_object):
    uri, lines = text_object
    with s3stream.open(uri, "rb", client=client) as f:
        text = io.TextIOWrapper(f, encoding="utf-8")
        assert text.read() == b"".join(lines).decode("utf-8")


def test_seek_and_tell(client, big_object):
    uri, data = big_object
    n = len(data)
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.tell() == 0
        assert f.seek(100) == 100 and f.tell() == 100
        assert f.read(10) == data[100:110]
        assert f.seek(-5, io.SEEK_CUR) == 105
        assert f.read(5) == data[105:110]
        assert f.seek(12 * MiB, io.SEEK_CUR) == 110 + 12 * MiB
        assert f.read(7) == data[110 + 12 * MiB : 117 + 12 * MiB]
        assert f.seek(-10, io.SEEK_END) == n - 10
        assert f.read() == data[-10:]
        assert f.seek(0, io.SEEK_END) == n
        assert f.read(1) == b""
        assert f.seek(0) == 0
        assert f.read(4) == data[:4]
        # backwards across chunks, after reading ahead
        assert f.seek(n - MiB) == n - MiB
        assert f.read(MiB) == data[-MiB:]
        assert f.seek(3) == 3
        assert f.read(8 * MiB) == data[3 : 3 + 8 * MiB]


def test_seek_past_eof_reads_nothing(client, big_object):
    uri, data = big_object
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.seek(len(data) + 1000) == len(data) + 1000
        assert f.read() == b""
        assert f.read(5) == b""
        assert f.readinto(bytearray(5)) == 0
        f.seek(len(data) - 2)
        assert f.read(10) == data[-2:]
        assert f.read(10) == b""


def test_negative_seek_is_an_error(client, big_object):
    uri, data = big_object
    with s3stream.open(uri, "rb", client=client) as f:
        with pytest.raises((ValueError, OSError)):
            f.seek(-1)
        with pytest.raises((ValueError, OSError)):
            f.seek(-len(data) - 1, io.SEEK_END)


def test_random_seeks_across_chunk_boundaries(client, big_object):
    uri, data = big_object
    rng = random.Random(1234)
    n = len(data)
    boundaries = [k * MiB for k in range(1, n // MiB + 1)]
    with s3stream.open(uri, "rb", client=client) as f:
        for i in range(150):
            if i % 3 == 0:  # straddle a MiB boundary (where chunk edges are likely to be)
                b = rng.choice(boundaries)
                start = max(0, b - rng.randint(1, 4096))
            else:
                start = rng.randrange(n)
            length = rng.choice([1, 2, 100, 4096, 65537, MiB, 3 * MiB + 7, 9 * MiB])
            whence = rng.choice([io.SEEK_SET, io.SEEK_CUR, io.SEEK_END])
            offset = {io.SEEK_SET: start, io.SEEK_CUR: start - f.tell(), io.SEEK_END: start - n}[whence]
            assert f.seek(offset, whence) == start
            assert f.tell() == start
            got = f.read(length)
            assert got == data[start : start + length], (i, start, length)
            assert f.tell() == start + len(got)


def test_close_with_prefetch_in_flight_is_prompt(s3_endpoint, big_object):
    """close() while read-ahead GETs are still in flight must cancel (or finish) them without holding
    the GIL. The proxy relaying those GETs runs in Python threads of this process: a close() that
    blocks with the GIL held stalls the very transfers it waits for, until low_speed_time kills them."""
    uri, data = big_object
    with RecordingProxy(s3_endpoint) as proxy:
        c = s3stream.Client(endpoint_url=proxy.url, low_speed_time=2.0)
        for attempt in range(5):
            f = s3stream.open(uri, "rb", client=c)
            f.seek(5 * MiB)
            assert f.read(MiB) == data[5 * MiB : 6 * MiB]
            ticks = [0]
            stop = threading.Event()

            def ticker():
                while not stop.wait(0.01):
                    ticks[0] += 1

            t = threading.Thread(target=ticker)
            t.start()
            t0 = time.monotonic()
            f.close()
            elapsed = time.monotonic() - t0
            stop.set()
            t.join()
            assert elapsed < 5, (
                f"close() took {elapsed:.1f}s (attempt {attempt}); a Python thread ticked {ticks[0]} times "
                f"meanwhile (~{int(elapsed / 0.01)} if the GIL had been released)"
            )


def test_closed_file_refuses_reads(client, big_object):
    uri, _ = big_object
    f = s3stream.open(uri, "rb", client=client)
    f.read(10)
    f.close()
    assert f.closed
    with pytest.raises(ValueError):
        f.read(1)
    f.close()  # closing twice is fine


def test_open_missing_object(client, bucket):
    with pytest.raises(s3stream.NotFoundError) as e:
        with s3stream.open(s3_uri(bucket, "nope"), "rb", client=client) as f:
            f.read()
    assert s3_uri(bucket, "nope") in str(e.value)


def test_default_client_from_environment(boto3_client, bucket, s3_endpoint, monkeypatch):
    """client=None: a client configured from the AWS environment variables (AWS_ENDPOINT_URL...)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setattr(s3stream.client, "_default", None)  # one an earlier test made without the variable
    boto3_client.put_object(Bucket=bucket, Key="env", Body=b"from the environment")
    with s3stream.open(s3_uri(bucket, "env"), "rb") as f:
        assert f.read() == b"from the environment"
    with s3stream.open(s3_uri(bucket, "env2"), "wb") as f:
        f.write(b"written with the default client")
    assert boto3_get(boto3_client, bucket, "env2") == b"written with the default client"


# --- writing --------------------------------------------------------------------------------------------


def test_write_small_object_is_one_put(s3_endpoint, boto3_client, bucket):
    with RecordingProxy(s3_endpoint) as proxy:
        c = s3stream.Client(endpoint_url=proxy.url)
        with s3stream.open(s3_uri(bucket, "small"), "wb", client=c) as f:
            assert f.writable()
            assert f.write(b"hello ") == 6
            assert f.write(bytearray(b"world")) == 5
            assert f.write(memoryview(b"!!")) == 2
        assert f.closed
    assert boto3_get(boto3_client, bucket, "small") == b"hello world!!"
    writes = [r for r in proxy.requests if r.method in ("PUT", "POST")]
    assert len(writes) == 1, writes
    assert writes[0].method == "PUT" and writes[0].query == "" and writes[0].body == b"hello world!!"


def test_write_empty_object(client, boto3_client, bucket):
    with s3stream.open(s3_uri(bucket, "empty"), "wb", client=client):
        pass
    assert boto3_get(boto3_client, bucket, "empty") == b""


@pytest.mark.timeout_s(300)
def test_write_multipart(s3_endpoint, boto3_client, bucket):
    data = random_bytes(27 * MiB + 123, seed=22)
    with RecordingProxy(s3_endpoint) as proxy:
        c = s3stream.Client(endpoint_url=proxy.url)
        with s3stream.open(s3_uri(bucket, "mp.bin"), "wb", client=c) as f:
            rng = random.Random(5)
            pos = 0
            while pos < len(data):
                n = rng.choice([1, 1000, 65536, MiB + 7, 5 * MiB])
                assert f.write(data[pos : pos + n]) == len(data[pos : pos + n])
                pos += n
    assert boto3_get(boto3_client, bucket, "mp.bin") == data
    etag = boto3_client.head_object(Bucket=bucket, Key="mp.bin")["ETag"].strip('"')
    parts = int(etag.rsplit("-", 1)[1]) if "-" in etag else 1
    assert parts >= 3, f"27 MiB in one PUT or too few parts (ETag {etag})"
    part_puts = [r for r in proxy.requests if r.method == "PUT" and "partNumber=" in r.query]
    assert len(part_puts) == parts
    assert all(r.body_length >= 5 * MiB for r in sorted(part_puts, key=lambda r: r.body_length)[1:])
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_write_accepts_any_buffer(client, boto3_client, bucket):
    import numpy as np

    with s3stream.open(s3_uri(bucket, "bufs"), "wb", client=client) as f:
        f.write(b"ab")
        f.write(bytearray(b"cd"))
        f.write(np.frombuffer(b"ef", dtype=np.uint8))
        f.write(memoryview(b"--gh--")[2:4])
    assert boto3_get(boto3_client, bucket, "bufs") == b"abcdefgh"


@pytest.mark.parametrize("size", [10, 20 * MiB], ids=["small", "multipart"])
def test_exception_in_with_aborts(client, boto3_client, bucket, size):
    uri = s3_uri(bucket, "aborted")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with s3stream.open(uri, "wb", client=client) as f:
            f.write(random_bytes(size, seed=23))
            raise Boom()
    assert not object_exists(boto3_client, bucket, "aborted")
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_exception_in_with_keeps_previous_version(client, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="k", Body=b"old")
    with pytest.raises(KeyError):
        with s3stream.open(s3_uri(bucket, "k"), "wb", client=client) as f:
            f.write(random_bytes(12 * MiB, seed=24))
            raise KeyError("x")
    assert boto3_get(boto3_client, bucket, "k") == b"old"
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_nothing_visible_before_close(client, boto3_client, bucket):
    with s3stream.open(s3_uri(bucket, "later"), "wb", client=client) as f:
        f.write(random_bytes(18 * MiB, seed=25))
        assert not object_exists(boto3_client, bucket, "later")
    assert object_exists(boto3_client, bucket, "later")


def test_write_after_close_is_an_error(client, bucket):
    f = s3stream.open(s3_uri(bucket, "w"), "wb", client=client)
    f.write(b"x")
    f.close()
    with pytest.raises(ValueError):
        f.write(b"y")


def test_write_then_read_back(client, bucket):
    data = random_bytes(9 * MiB + 1, seed=26)
    uri = s3_uri(bucket, "rw")
    with s3stream.open(uri, "wb", client=client) as f:
        f.write(data)
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.read() == data


# --- torch ----------------------------------------------------------------------------------------------


def test_torch_save_load(client, bucket):
    g = torch.Generator().manual_seed(0)
    state = {
        "weight": torch.randn(1024, 3072, generator=g),  # 12 MiB: more than one part
        "bias": torch.randn(1024, generator=g, dtype=torch.float64),
        "step": torch.tensor(12345, dtype=torch.int64),
        "mask": torch.rand(333, generator=g) > 0.5,
        "half": torch.randn(7, 11, generator=g).to(torch.bfloat16),
        "empty": torch.empty(0, 4),
        "nested": {"ids": torch.arange(10, dtype=torch.int32), "name": "layer.0"},
    }
    uri = s3_uri(bucket, "ckpt/model.pt")
    with s3stream.open(uri, "wb", client=client) as f:
        torch.save(state, f)
    with s3stream.open(uri, "rb", client=client) as f:
        loaded = torch.load(f, map_location="cpu", weights_only=True)
    assert loaded.keys() == state.keys()
    for name in ("weight", "bias", "step", "mask", "half", "empty"):
        assert loaded[name].dtype == state[name].dtype and torch.equal(loaded[name], state[name]), name
    assert torch.equal(loaded["nested"]["ids"], state["nested"]["ids"])
    assert loaded["nested"]["name"] == "layer.0"


def test_torch_load_of_boto3_written_checkpoint(client, boto3_client, bucket):
    state = {"w": torch.arange(100_000, dtype=torch.float32).reshape(100, 1000)}
    buf = io.BytesIO()
    torch.save(state, buf)
    boto3_client.put_object(Bucket=bucket, Key="ckpt.pt", Body=buf.getvalue())
    with s3stream.open(s3_uri(bucket, "ckpt.pt"), "rb", client=client) as f:
        assert torch.equal(torch.load(f, weights_only=True)["w"], state["w"])


@pytest.mark.timeout_s(120)
def test_memory_of_dropped_readers_goes_back_to_the_system(boto3_client, bucket, s3_endpoint):
    """100 readers each holding their first chunks: once dropped, their memory leaves the process
    (the block cache is set to keep nothing here, so what stays is the allocator's doing)."""
    import subprocess
    import sys

    boto3_client.put_object(Bucket=bucket, Key="obj.bin", Body=random_bytes(8 << 20, seed=3))
    script = f"""
import gc, s3stream
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
client = s3stream.Client(endpoint_url={s3_endpoint!r})
base = rss_mb()
for _ in range(3):  # after the first round glibc's malloc would serve such blocks from its heap
    readers = [s3stream.open("s3://{bucket}/obj.bin", "rb", client=client, chunk_size=1 << 20) for _ in range(100)]
    for r in readers:
        r.read(1)  # two chunks in flight or held: the initial window
    held = rss_mb()
    del readers, r
    gc.collect()
print(round(base), round(held), round(rss_mb()))
"""
    env = dict(os.environ, S3STREAM_BUFFER_CACHE_BYTES="0")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100, env=env)
    assert proc.returncode == 0, proc.stderr
    base, held, after = map(int, proc.stdout.split())
    assert held - base > 150, (base, held, after)  # the readers did hold their window
    assert after - base < 60, f"{after - base} MB still held after every reader was dropped ({base}, {held}, {after})"
