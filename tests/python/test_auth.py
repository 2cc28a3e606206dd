"""Authentication against a moto server that checks every signature (the `auth_server` fixture in
conftest.py): the right key works for every operation; a wrong secret or an unknown key id is a
PermissionDeniedError (a PermissionError) that never shows the secret. Plain keys only: moto's own
verifier mishandles percent-encoded paths (test_signatures.py covers those)."""

from __future__ import annotations

import pytest

import s3stream
from helpers import MiB, boto3_get, object_exists, random_bytes


def _client(auth_server, access_key_id, secret_access_key, **kw) -> s3stream.Client:
    return s3stream.Client(
        endpoint_url=auth_server.url,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        max_attempts=2,
        retry_base_delay=0.01,
        **kw,
    )


def test_correct_key_every_operation(auth_server):
    c = _client(auth_server, auth_server.access_key_id, auth_server.secret_access_key)
    b3, bucket = auth_server.boto3_client, auth_server.bucket

    assert bytes(c.get(auth_server.uri)) == auth_server.data
    assert bytes(c.get(auth_server.uri, 3, 9)) == auth_server.data[3:9]
    assert c.head(auth_server.uri).size == len(auth_server.data)
    assert auth_server.key in [i.key for i in c.list(f"s3://{bucket}/")]

    etag = c.put(f"s3://{bucket}/small.bin", b"small")
    assert boto3_get(b3, bucket, "small.bin") == b"small"
    assert etag == b3.head_object(Bucket=bucket, Key="small.bin")["ETag"].strip('"')

    data = random_bytes(12 * MiB, seed=3)
    with s3stream.open(f"s3://{bucket}/multipart.bin", "wb", client=c) as f:
        f.write(data)
    assert boto3_get(b3, bucket, "multipart.bin") == data
    with s3stream.open(f"s3://{bucket}/multipart.bin", "rb", client=c) as f:
        f.seek(MiB)
        assert f.read(2 * MiB) == data[MiB : 3 * MiB]

    c.delete(f"s3://{bucket}/small.bin")
    c.delete(f"s3://{bucket}/multipart.bin")
    assert not object_exists(b3, bucket, "small.bin")
    assert not object_exists(b3, bucket, "multipart.bin")


def _assert_denied(excinfo, *secrets: str) -> str:
    e = excinfo.value
    assert isinstance(e, s3stream.PermissionDeniedError)
    assert isinstance(e, PermissionError) and isinstance(e, s3stream.S3StreamError)
    msg = str(e)
    for s in secrets:
        assert s not in msg, f"the secret appears in the message: {msg!r}"
        assert s not in repr(e)
    return msg


WRONG_SECRET = "Wr0ngSecretValue/ThatMustNeverBeShown+xyz"


@pytest.mark.parametrize("op", ["get", "range", "head", "list", "put", "delete", "open-rb", "open-wb"])
def test_wrong_secret_is_permission_denied(auth_server, op):
    c = _client(auth_server, auth_server.access_key_id, WRONG_SECRET)
    uri = auth_server.uri
    bucket = auth_server.bucket
    with pytest.raises(s3stream.PermissionDeniedError) as excinfo:
        if op == "get":
            c.get(uri)
        elif op == "range":
            c.get(uri, 0, 10)
        elif op == "head":
            c.head(uri)
        elif op == "list":
            list(c.list(f"s3://{bucket}/"))
        elif op == "put":
            c.put(f"s3://{bucket}/denied.bin", b"x")
        elif op == "delete":
            c.delete(uri)
        elif op == "open-rb":
            with s3stream.open(uri, "rb", client=c) as f:
                f.read()
        elif op == "open-wb":
            with s3stream.open(f"s3://{bucket}/denied.bin", "wb", client=c) as f:
                f.write(b"x" * (10 * MiB))
    msg = _assert_denied(excinfo, WRONG_SECRET, auth_server.secret_access_key)
    assert bucket in msg
    if op in ("get", "range", "head", "open-rb"):
        assert uri in msg
    # nothing changed on the server
    assert object_exists(auth_server.boto3_client, bucket, auth_server.key)
    assert not object_exists(auth_server.boto3_client, bucket, "denied.bin")


@pytest.mark.parametrize("op", ["get", "head", "list", "put"])
def test_unknown_key_id_is_permission_denied(auth_server, op):
    c = _client(auth_server, "AKIAUNKNOWNKEY000000", WRONG_SECRET)
    with pytest.raises(s3stream.PermissionDeniedError) as excinfo:
        if op == "get":
            c.get(auth_server.uri)
        elif op == "head":
            c.head(auth_server.uri)
        elif op == "list":
            list(c.list(f"s3://{auth_server.bucket}/"))
        elif op == "put":
            c.put(f"s3://{auth_server.bucket}/denied.bin", b"x")
    msg = _assert_denied(excinfo, WRONG_SECRET, auth_server.secret_access_key)
    assert auth_server.bucket in msg


def test_denied_is_not_retried_into_unavailable(auth_server):
    """403 is final: with max_attempts=5 it must still surface as PermissionDeniedError."""
    c = s3stream.Client(
        endpoint_url=auth_server.url,
        access_key_id=auth_server.access_key_id,
        secret_access_key=WRONG_SECRET,
        max_attempts=5,
    )
    with pytest.raises(s3stream.PermissionDeniedError):
        c.get(auth_server.uri)


def test_anonymous_client_is_denied_private_object(auth_server):
    c = s3stream.Client(endpoint_url=auth_server.url, anonymous=True, max_attempts=2, retry_base_delay=0.01)
    with pytest.raises(s3stream.PermissionDeniedError) as excinfo:
        c.get(auth_server.uri)
    assert auth_server.uri in str(excinfo.value)
