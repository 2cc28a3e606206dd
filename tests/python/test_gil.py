"""Every wait on the network happens without the GIL.

The RecordingProxy relaying these requests runs in Python threads of this very process: if an
s3stream call held the GIL while it waited, the proxy could not forward a byte and the call would
hang until a timeout. Each operation must therefore finish quickly and correctly through it, and a
Python thread must keep running while it does.
"""

from __future__ import annotations

import threading
import time

import pytest

import s3stream
from helpers import MiB, random_bytes, s3_uri
from proxies import RecordingProxy

DATA = random_bytes(3 * MiB, seed=21)


def _ops(bucket: str):
    obj = s3_uri(bucket, "gil/obj.bin")

    def read_file(c):
        with s3stream.open(obj, "rb", client=c, chunk_size=MiB) as f:
            assert f.read() == DATA

    def write_file(c):
        with s3stream.open(s3_uri(bucket, "gil/written.bin"), "wb", client=c, part_size=5 * MiB) as f:
            f.write(DATA * 3)  # two parts: multipart create, parts, complete

    return {
        "get": lambda c: bytes(c.get(obj)) == DATA or pytest.fail("get returned wrong bytes"),
        "get_range": lambda c: bytes(c.get(obj, 10, 20)) == DATA[10:20] or pytest.fail("wrong range"),
        "get_many": lambda c: [bytes(b) for b in c.get_many([obj] * 8)] == [DATA] * 8 or pytest.fail("get_many"),
        "head": lambda c: c.head(obj).size == len(DATA) or pytest.fail("head"),
        "list": lambda c: [i.key for i in c.list(s3_uri(bucket, "gil/"))] or pytest.fail("list"),
        "put": lambda c: c.put(s3_uri(bucket, "gil/put.bin"), DATA),
        "delete": lambda c: c.delete(s3_uri(bucket, "gil/put.bin")),
        "open_rb": read_file,
        "open_wb": write_file,
    }


@pytest.mark.parametrize("op", ["get", "get_range", "get_many", "head", "list", "put", "delete", "open_rb", "open_wb"])
def test_waits_release_the_gil(s3_endpoint, boto3_client, bucket, op):
    boto3_client.put_object(Bucket=bucket, Key="gil/obj.bin", Body=DATA)
    with RecordingProxy(s3_endpoint) as proxy:
        c = s3stream.Client(endpoint_url=proxy.url, connect_timeout=30, low_speed_time=30, max_attempts=1)
        ticks = [0]
        stop = threading.Event()

        def ticker():
            while not stop.wait(0.001):
                ticks[0] += 1

        t = threading.Thread(target=ticker)
        t.start()
        t0 = time.monotonic()
        try:
            _ops(bucket)[op](c)
        finally:
            elapsed = time.monotonic() - t0
            stop.set()
            t.join()
        assert elapsed < 10, f"{op} took {elapsed:.1f}s through an in-process proxy: the GIL was held"
        assert proxy.requests, "the operation never reached the proxy"
        assert ticks[0] > 0, f"a Python thread never ran during {op}"
