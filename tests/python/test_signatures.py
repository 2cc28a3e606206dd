"""SigV4: every request s3stream sends, recorded on the wire by RecordingProxy, must carry the signature
botocore computes independently for the same request (see sigv4check.py), and be encoded the way
SigV4 canonicalises it. moto itself does not check signatures unless auth is enabled, so this is the
test that keeps the signer honest for tricky keys, query strings and multipart uploads."""

from __future__ import annotations

from collections import Counter

import pytest

import s3stream
import sigv4check
from helpers import TEST_REGION, TRICKY_KEYS, MiB, boto3_get, put_many, random_bytes, s3_uri
from proxies import RecordingProxy

ACCESS_KEY = "AKIASIGNATURETEST001"
SECRET_KEY = "sig/v4+secret=with&odd~chars"
SIG_KEYS = TRICKY_KEYS + ["q?x#y", "question?", "#hash", "semi;colon", "percent%2Fliteral"]


@pytest.fixture
def recorder(s3_endpoint):
    with RecordingProxy(s3_endpoint) as proxy:
        yield proxy


def _client(proxy: RecordingProxy, **kw) -> s3stream.Client:
    return s3stream.Client(
        endpoint_url=proxy.url, region=TEST_REGION, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, **kw
    )


def _check_all(proxy: RecordingProxy, session_token: str | None = None) -> Counter:
    assert proxy.errors == []
    assert len(proxy.requests) > 0, "no request was recorded"
    failures = []
    for req in proxy.requests:
        res = sigv4check.verify(req, ACCESS_KEY, SECRET_KEY, TEST_REGION, session_token=session_token)
        if not res.ok:
            failures.append(f"{req!r}\n{res.explain()}")
    assert not failures, f"{len(failures)} of {len(proxy.requests)} requests fail the check:\n\n" + "\n\n".join(
        failures[:5]
    )
    return Counter(r.method for r in proxy.requests)


def test_object_operations_with_tricky_keys(recorder, boto3_client, bucket):
    c = _client(recorder)
    for i, key in enumerate(SIG_KEYS):
        uri = s3_uri(bucket, key)
        data = random_bytes(1000 + i, seed=i)
        c.put(uri, data)
        assert boto3_get(boto3_client, bucket, key) == data  # the server got the right key
        assert bytes(c.get(uri)) == data
        assert bytes(c.get(uri, 10, 20)) == data[10:20]
        assert c.head(uri).size == len(data)
        assert [i.key for i in c.list(uri)][:1] == [key]
    for key in SIG_KEYS:
        c.delete(s3_uri(bucket, key))
    assert boto3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    methods = _check_all(recorder)
    assert {"PUT", "GET", "HEAD", "DELETE"} <= set(methods)


def test_multipart_upload_and_abort(recorder, boto3_client, bucket):
    c = _client(recorder)
    data = random_bytes(17 * MiB, seed=1)
    key = "multi part/ü+%=&~ (1).bin"
    with s3stream.open(s3_uri(bucket, key), "wb", client=c) as f:
        f.write(data)
    assert boto3_get(boto3_client, bucket, key) == data
    with pytest.raises(RuntimeError):
        with s3stream.open(s3_uri(bucket, "aborted #?.bin"), "wb", client=c) as f:
            f.write(data)
            raise RuntimeError("abort")
    with s3stream.open(s3_uri(bucket, key), "rb", client=c) as f:
        f.seek(5 * MiB)
        assert f.read() == data[5 * MiB :]  # to the end: no read-ahead left in flight at close
    methods = _check_all(recorder)
    assert methods["POST"] >= 2  # create + complete
    assert any(r.method == "PUT" and "partNumber=" in r.query for r in recorder.requests)
    assert any(r.method == "DELETE" and "uploadId=" in r.query for r in recorder.requests)  # the abort


@pytest.mark.slow
def test_list_query_strings_and_continuation_tokens(recorder, boto3_client, bucket):
    prefix = "p q+ü=&%~/"
    keys = {f"{prefix}{i:04d} #?.bin": b"" for i in range(1100)}  # more than one 1000-key page
    keys["p q+ü=&%~x"] = b""
    put_many(boto3_client, bucket, keys)
    c = _client(recorder)
    listed = [i.key for i in c.list(s3_uri(bucket, prefix))]
    assert sorted(listed) == sorted(k for k in keys if k.startswith(prefix))
    children = [i.key for i in c.list(s3_uri(bucket, "p q+"), delimiter="/")]
    assert "p q+ü=&%~x" in children
    _check_all(recorder)
    lists = [r for r in recorder.requests if r.method == "GET" and "list-type=2" in r.query]
    assert len(lists) >= 3
    assert any(name == "continuation-token" for r in lists for name, _ in r.query_params)
    assert any(dict(r.query_params).get("prefix") == prefix for r in lists)
    assert any(dict(r.query_params).get("delimiter") == "/" for r in lists)


def test_session_token_is_sent_and_signed(recorder, bucket):
    token = "FwoGZXIvYXdzE+session/token=with&chars=="
    c = _client(recorder, session_token=token)
    c.put(s3_uri(bucket, "t k"), b"x")
    assert bytes(c.get(s3_uri(bucket, "t k"))) == b"x"
    list(c.list(s3_uri(bucket, "")))
    _check_all(recorder, session_token=token)


def test_credentials_from_environment(recorder, bucket, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    c = s3stream.Client(endpoint_url=recorder.url)
    c.put(s3_uri(bucket, "env key"), b"x")
    c.head(s3_uri(bucket, "env key"))
    _check_all(recorder)


def test_anonymous_requests_are_unsigned(recorder, bucket, boto3_client):
    boto3_client.put_object(Bucket=bucket, Key="pub", Body=b"public", ACL="public-read")
    c = s3stream.Client(endpoint_url=recorder.url, anonymous=True)
    assert bytes(c.get(s3_uri(bucket, "pub"))) == b"public"
    assert recorder.requests and all(r.header("Authorization") is None for r in recorder.requests)
