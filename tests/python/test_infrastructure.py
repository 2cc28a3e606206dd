"""The test harness itself, checked with boto3 (no s3stream needed): the moto server, both proxies
and the independent SigV4 checker. If these fail, the s3stream tests prove nothing."""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

import sigv4check
from helpers import (
    TEST_ACCESS_KEY_ID,
    TEST_REGION,
    TEST_SECRET_ACCESS_KEY,
    TRICKY_KEYS,
    MiB,
    boto3_get,
    make_boto3_client,
    random_bytes,
)
from proxies import FaultProxy, RecordingProxy, reset_before_response, reset_mid_body, stall, status


def _no_retry(endpoint, **kw):
    return make_boto3_client(
        endpoint,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1, "mode": "standard"}, **kw),
    )


def test_recording_proxy_forwards_and_records_exactly(s3_endpoint, boto3_client, bucket):
    data = random_bytes(6 * MiB, seed=1)
    with RecordingProxy(s3_endpoint) as proxy:
        b3 = make_boto3_client(proxy.url)
        for key in TRICKY_KEYS:
            b3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        for key in TRICKY_KEYS:
            assert boto3_get(b3, bucket, key) == key.encode()
            assert b3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(key.encode())
        listed = [o["Key"] for o in b3.list_objects_v2(Bucket=bucket, Prefix="a b/")["Contents"]]
        assert listed == ["a b/ü+%=&~.bin"]
        # multipart (two parts) through the proxy
        up = b3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
        parts = []
        for n, chunk in enumerate([data[: 5 * MiB], data[5 * MiB :]], start=1):
            etag = b3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=chunk)["ETag"]
            parts.append({"PartNumber": n, "ETag": etag})
        b3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
        assert boto3_get(boto3_client, bucket, "mp") == data
        b3.delete_object(Bucket=bucket, Key="plain.bin")

    reqs = proxy.requests
    methods = {r.method for r in reqs}
    assert {"PUT", "GET", "HEAD", "POST", "DELETE"} <= methods
    assert all(r.status is not None and r.status < 300 for r in reqs), reqs
    # bodies are recorded exactly
    part_bodies = [r.body for r in reqs if r.method == "PUT" and "partNumber=" in r.query]
    assert hashlib.sha256(b"".join(part_bodies)).digest() == hashlib.sha256(data).digest()
    # targets are recorded as sent: percent-encoded
    targets = {r.key: r.target for r in reqs if r.method == "PUT" and not r.query}
    assert targets["with space.bin"] == f"/{bucket}/with%20space.bin"
    assert set(TRICKY_KEYS) <= set(targets)
    # headers in order, names as sent
    first = reqs[0]
    assert [k.lower() for k, _ in first.headers].count("host") == 1
    assert first.header("host") == f"127.0.0.1:{proxy.port}"
    assert proxy.passed == len(reqs)
    assert proxy.errors == []


def test_sigv4_checker_accepts_boto3_requests(s3_endpoint, bucket):
    token = "session/token+with=odd&chars"
    with RecordingProxy(s3_endpoint) as proxy:
        b3 = make_boto3_client(proxy.url, aws_session_token=token)
        for key in TRICKY_KEYS:
            b3.put_object(Bucket=bucket, Key=key, Body=b"x" * 3)
            b3.get_object(Bucket=bucket, Key=key, Range="bytes=0-1")["Body"].read()
        b3.list_objects_v2(Bucket=bucket, Prefix="a b/ü+%=&~", Delimiter="/")
        for page in b3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2}):
            pass
    checked = 0
    for r in proxy.requests:
        res = sigv4check.verify(r, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_REGION, session_token=token)
        assert res.ok, res.explain()
        checked += 1
    assert checked == len(proxy.requests) > 2 * len(TRICKY_KEYS)
    assert any("continuation-token=" in r.query for r in proxy.requests)


def test_sigv4_checker_rejects_tampering(s3_endpoint, bucket):
    with RecordingProxy(s3_endpoint) as proxy:
        b3 = make_boto3_client(proxy.url)
        b3.put_object(Bucket=bucket, Key="a b+c", Body=b"hello")
        b3.list_objects_v2(Bucket=bucket, Prefix="a b")
    put, lst = proxy.requests
    assert sigv4check.verify(put, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_REGION).ok
    assert not sigv4check.verify(put, TEST_ACCESS_KEY_ID, "wrong", TEST_REGION).ok
    assert not sigv4check.verify(put, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, "eu-west-1").ok
    import dataclasses

    for changed in (
        dataclasses.replace(put, body=b"hellO"),
        dataclasses.replace(put, target=put.target.replace("%20", "+")),
        dataclasses.replace(put, method="POST"),
        dataclasses.replace(lst, target=lst.target.replace("prefix=a%20b", "prefix=a+b")),
        dataclasses.replace(put, headers=[(k, v + "x" if k.lower() == "x-amz-date" else v) for k, v in put.headers]),
    ):
        res = sigv4check.verify(changed, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_REGION)
        assert not res.ok, changed
    assert sigv4check.canonical_encoding_problems("/b/a%2fb")  # lower-case hex
    assert sigv4check.canonical_encoding_problems("/b/a%7Eb")  # '~' must not be encoded
    assert sigv4check.canonical_encoding_problems("/b/a+b?prefix=x")
    assert sigv4check.canonical_encoding_problems("/b?prefix=a/b")
    assert not sigv4check.canonical_encoding_problems("/b/a%20b/%C3%BC%2B%25%3D%26~.bin?list-type=2&prefix=a%2Fb")


def test_fault_status_then_pass(s3_endpoint, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="k", Body=b"payload")
    with FaultProxy(s3_endpoint) as proxy:
        b3 = _no_retry(proxy.url)
        slow = proxy.inject(status(503, "SlowDown"), match=lambda r: r.method == "GET", count=1)
        with pytest.raises(ClientError) as e:
            b3.get_object(Bucket=bucket, Key="k")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        with pytest.raises(ClientError) as e:  # HEAD gets no body, but the status
            proxy.inject(status(500, "InternalError"), match=lambda r: r.method == "HEAD", count=1)
            b3.head_object(Bucket=bucket, Key="k")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert boto3_get(b3, bucket, "k") == b"payload"  # same connection, kept alive
        assert b3.head_object(Bucket=bucket, Key="k")["ContentLength"] == 7
        assert slow.injected == 1 and proxy.injected == 2 and proxy.passed == 2
        assert [r.fault for r in proxy.requests] == ["status(503, SlowDown)", "status(500, InternalError)", None, None]


def _raw_get(port: int, bucket: str, key: str, timeout: float = 10) -> tuple[bytes, bool]:
    """A presigned GET over a raw socket; (bytes received, whether the connection ended with a reset).
    (moto refuses unsigned GETs of private objects.)"""
    url = make_boto3_client(f"http://127.0.0.1:{port}").generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}
    )
    path = url.split(str(port), 1)[1]
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = bytearray()
    reset = False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except ConnectionResetError:
        reset = True
    finally:
        s.close()
    return bytes(got), reset


def test_fault_reset_mid_body(s3_endpoint, boto3_client, bucket):
    data = random_bytes(4 * MiB, seed=2)
    boto3_client.put_object(Bucket=bucket, Key="big", Body=data)
    with FaultProxy(s3_endpoint) as proxy:
        rule = proxy.inject(reset_mid_body(), count=1)
        got, reset = _raw_get(proxy.port, bucket, "big")
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and reset
        assert 0 < len(body) <= rule.body_bytes_sent[0] and data.startswith(body)
        assert rule.body_bytes_sent == [len(data) // 2]
        assert rule.injected == 1
        b3 = _no_retry(proxy.url)
        proxy.inject(reset_mid_body(), count=1)
        with pytest.raises(Exception) as e:
            b3.get_object(Bucket=bucket, Key="big")["Body"].read()
        assert not isinstance(e.value, ClientError)
        assert boto3_get(b3, bucket, "big") == data
        assert proxy.injected == 2


def test_fault_reset_before_response_and_hook(s3_endpoint, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="k", Body=b"old")
    with FaultProxy(s3_endpoint) as proxy:
        rule = proxy.inject(
            reset_before_response(),
            match=lambda r: r.method == "GET" and r.key == "k",
            hook=lambda r: boto3_client.put_object(Bucket=bucket, Key="k", Body=b"new"),
        )
        got, reset = _raw_get(proxy.port, bucket, "k")
        assert got == b"" and reset
        assert rule.injected == 1 and rule.hook_errors == []
        b3 = make_boto3_client(proxy.url)  # boto3 retries the reset
        proxy.inject(reset_before_response(), count=2)
        assert boto3_get(b3, bucket, "k") == b"new"
        assert proxy.injected == 3


def test_fault_stall(s3_endpoint, boto3_client, bucket):
    data = random_bytes(2 * MiB, seed=3)
    boto3_client.put_object(Bucket=bucket, Key="big", Body=data)
    with FaultProxy(s3_endpoint) as proxy:
        rule = proxy.inject(stall(seconds=30), count=1)
        b3 = make_boto3_client(proxy.url, config=Config(s3={"addressing_style": "path"}, read_timeout=1, retries={"total_max_attempts": 1}))
        t0 = time.monotonic()
        with pytest.raises((ReadTimeoutError, ConnectionClosedError, Exception)):
            b3.get_object(Bucket=bucket, Key="big")["Body"].read()
        b3.close()
        deadline = time.monotonic() + 5
        while rule.client_hung_up == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() - t0 < 10
        assert rule.injected == 1 and rule.client_hung_up == 1


def test_proxy_many_concurrent_connections(s3_endpoint, boto3_client, bucket):
    keys = [f"k{i}" for i in range(64)]
    for k in keys:
        boto3_client.put_object(Bucket=bucket, Key=k, Body=k.encode() * 1000)
    with RecordingProxy(s3_endpoint) as proxy:
        b3 = make_boto3_client(proxy.url, config=Config(s3={"addressing_style": "path"}, max_pool_connections=64))
        results = {}

        def fetch(k):
            results[k] = boto3_get(b3, bucket, k)

        threads = [threading.Thread(target=fetch, args=(k,)) for k in keys for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {k: k.encode() * 1000 for k in keys}
    assert len(proxy.requests) == 3 * len(keys) and proxy.errors == []


def test_chunked_request_body(s3_endpoint, boto3_client, bucket):
    """A chunked upload (as some clients send) passes the proxy, recorded de-chunked."""
    with RecordingProxy(s3_endpoint) as proxy:
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        s.sendall(
            f"PUT /{bucket}/chunked HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            "Expect: 100-continue\r\n\r\n".encode() + body
        )
        got = b""
        while b"\r\n\r\n" not in got.split(b"100 Continue\r\n\r\n", 1)[-1]:
            got += s.recv(65536)
        s.close()
    assert b"HTTP/1.1 200" in got
    assert proxy.requests[0].body == b"hello world" and proxy.requests[0].chunked
    assert boto3_get(boto3_client, bucket, "chunked") == b"hello world"
