"""The error contract: each failure maps to one s3stream exception that is also the matching Python
built-in, and its message names what failed (URI, bucket, endpoint, range) and how to fix it."""

from __future__ import annotations

import time

import pytest

import s3stream
from helpers import TEST_SECRET_ACCESS_KEY, random_bytes, s3_uri
from moto_server import free_port

HIERARCHY = {
    "InvalidArgumentError": ValueError,
    "NotFoundError": FileNotFoundError,
    "PermissionDeniedError": PermissionError,
    "OutOfRangeError": ValueError,
    "UnavailableError": ConnectionError,
    "ObjectChangedError": OSError,
    "CorruptDataError": ValueError,
    "TooLargeError": MemoryError,
}


@pytest.mark.parametrize("name,builtin", HIERARCHY.items())
def test_hierarchy(name, builtin):
    cls = getattr(s3stream, name)
    assert issubclass(cls, s3stream.S3StreamError)
    assert issubclass(cls, builtin)
    assert issubclass(s3stream.S3StreamError, Exception)


def _check(excinfo, cls, builtin, *must_contain: str) -> str:
    e = excinfo.value
    assert isinstance(e, cls) and isinstance(e, builtin) and isinstance(e, s3stream.S3StreamError)
    msg = str(e)
    for s in must_contain:
        assert s in msg, f"{s!r} not in the message {msg!r}"
    assert TEST_SECRET_ACCESS_KEY not in msg
    return msg


@pytest.fixture
def nowhere_client(tmp_path, monkeypatch):
    """A client whose endpoint refuses connections: an argument error must be raised before any I/O,
    so a test that sees UnavailableError instead has found validation done too late. Runs in an empty
    directory, so a URI wrongly taken for a local path cannot litter the checkout."""
    monkeypatch.chdir(tmp_path)
    return s3stream.Client(endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1, connect_timeout=1.0)


# --- malformed URIs and arguments ---------------------------------------------------------------------

BAD_URIS = ["s3:/b/k", "gs://bucket/key", "", "s3://", "s3:///key", "http://bucket/key"]


@pytest.mark.parametrize("uri", BAD_URIS)
@pytest.mark.parametrize("op", ["get", "head", "put", "delete", "open-rb", "open-wb"])
def test_malformed_uri(nowhere_client, uri, op):
    c = nowhere_client
    with pytest.raises(s3stream.InvalidArgumentError) as excinfo:
        if op == "get":
            c.get(uri)
        elif op == "head":
            c.head(uri)
        elif op == "put":
            c.put(uri, b"x")
        elif op == "delete":
            c.delete(uri)
        elif op == "open-rb":
            with s3stream.open(uri, "rb", client=c) as f:
                f.read()
        elif op == "open-wb":
            with s3stream.open(uri, "wb", client=c) as f:
                f.write(b"x")
    _check(excinfo, s3stream.InvalidArgumentError, ValueError)


@pytest.mark.parametrize("uri", ["s3:/b/k", "gs://bucket/key", "", "s3://", "s3:///prefix/"])
def test_malformed_uri_list(nowhere_client, uri):
    with pytest.raises(s3stream.InvalidArgumentError) as excinfo:
        list(nowhere_client.list(uri))
    _check(excinfo, s3stream.InvalidArgumentError, ValueError)


@pytest.mark.parametrize("uri", ["s3://bucket", "s3://bucket/"])
def test_object_uri_without_key(nowhere_client, uri):
    with pytest.raises(s3stream.InvalidArgumentError):
        nowhere_client.get(uri)


@pytest.mark.parametrize("mode", ["ab", "r+b", "w+b", "xb", "rw", "", "q", "r", "w"])
def test_bad_open_mode(nowhere_client, mode):
    with pytest.raises(ValueError):
        s3stream.open("s3://bucket/key", mode, client=nowhere_client)


def test_bad_addressing_style():
    with pytest.raises(ValueError):
        s3stream.Client(endpoint_url="http://127.0.0.1:1", addressing_style="sideways")


@pytest.mark.parametrize("name, value, says", [
    ("max_inflight", "many", "max_inflight must be an integer, got 'many'"),
    ("max_inflight", True, "max_inflight must be an integer, got True"),
    ("max_inflight", 10**12, "max_inflight is out of range"),
    ("max_inflight", 0, "max_inflight must be >= 1, got 0"),
    ("connect_timeout", "soon", "connect_timeout must be a number of seconds"),
    ("connect_timeout", -1, "connect_timeout must be > 0, got -1"),
    ("verify_tls", "yes", "verify_tls must be True or False"),
    ("region", 5, "region must be a string, got 5"),
])
def test_a_bad_setting_names_itself_as_the_caller_wrote_it(name, value, says):
    with pytest.raises(s3stream.InvalidArgumentError) as excinfo:
        s3stream.Client(endpoint_url="http://127.0.0.1:1", **{name: value})
    assert says in str(excinfo.value)


def test_unset_settings_take_the_engines_defaults():
    from s3stream import _core
    from s3stream.client import SETTINGS

    defaults = s3stream.Client.defaults()
    assert set(defaults) == set(SETTINGS)
    native = _core.ClientConfig()
    assert defaults["max_inflight"] == native.max_inflight and defaults["max_attempts"] == native.max_attempts
    assert defaults["addressing_style"] == "auto" and defaults["endpoint_url"] is None


# --- not found ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["get", "range", "head", "list", "put", "open-rb"])
def test_missing_bucket(client, op):
    bucket = "s3stream-no-such-bucket-4711"
    uri = s3_uri(bucket, "some/key")
    with pytest.raises(s3stream.NotFoundError) as excinfo:
        if op == "get":
            client.get(uri)
        elif op == "range":
            client.get(uri, 0, 10)
        elif op == "head":
            client.head(uri)
        elif op == "list":
            list(client.list(s3_uri(bucket, "")))
        elif op == "put":
            client.put(uri, b"x")
        elif op == "open-rb":
            with s3stream.open(uri, "rb", client=client) as f:
                f.read()
    _check(excinfo, s3stream.NotFoundError, FileNotFoundError, bucket)


def test_a_server_error_carries_its_status_and_code(client, bucket):
    with pytest.raises(s3stream.NotFoundError) as excinfo:
        client.head(s3_uri(bucket, "absent"))
    assert excinfo.value.http_status == 404
    with pytest.raises(s3stream.NotFoundError) as excinfo:
        client.get(s3_uri(bucket, "absent"))
    assert excinfo.value.http_status == 404
    assert excinfo.value.error_code == "NoSuchKey"
    assert excinfo.value.s3_code == "NoSuchKey"  # the former name


@pytest.mark.parametrize("op", ["get", "range", "head", "open-rb"])
def test_missing_key(client, bucket, op):
    uri = s3_uri(bucket, "missing dir/missing key ü.bin")
    with pytest.raises(s3stream.NotFoundError) as excinfo:
        if op == "get":
            client.get(uri)
        elif op == "range":
            client.get(uri, 5, 10)
        elif op == "head":
            client.head(uri)
        elif op == "open-rb":
            with s3stream.open(uri, "rb", client=client) as f:
                f.read()
    _check(excinfo, s3stream.NotFoundError, FileNotFoundError, uri)


# --- out of range ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("start,end", [(0, 101), (100, 101), (101, 102), (5000, 6000)])
def test_out_of_range(client, boto3_client, bucket, start, end):
    boto3_client.put_object(Bucket=bucket, Key="hundred", Body=random_bytes(100))
    uri = s3_uri(bucket, "hundred")
    with pytest.raises(s3stream.OutOfRangeError) as excinfo:
        client.get(uri, start, end)
    msg = _check(excinfo, s3stream.OutOfRangeError, ValueError, uri)
    assert str(end) in msg or str(start) in msg, f"the message does not name the range: {msg!r}"


# --- unreachable endpoint -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["get", "head", "list", "put"])
def test_unreachable_endpoint(op):
    port = free_port()  # nothing listens there: connections are refused
    endpoint = f"127.0.0.1:{port}"
    c = s3stream.Client(
        endpoint_url=f"http://{endpoint}", max_attempts=2, retry_base_delay=0.01, connect_timeout=2.0
    )
    t0 = time.monotonic()
    with pytest.raises(s3stream.UnavailableError) as excinfo:
        if op == "get":
            c.get("s3://bucket/key")
        elif op == "head":
            c.head("s3://bucket/key")
        elif op == "list":
            list(c.list("s3://bucket/"))
        elif op == "put":
            c.put("s3://bucket/key", b"x")
    assert time.monotonic() - t0 < 15
    _check(excinfo, s3stream.UnavailableError, ConnectionError, endpoint)


# --- missing credentials --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["get", "head"])
def test_no_credentials(auth_server, monkeypatch, op):
    """No credentials anywhere, a request that needs them: PermissionDeniedError telling how to set
    credentials (moto-auth answers unsigned GET/HEAD of a private object with 403)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    c = s3stream.Client(endpoint_url=auth_server.url, max_attempts=2, retry_base_delay=0.01)
    with pytest.raises(s3stream.PermissionDeniedError) as excinfo:
        if op == "get":
            c.get(auth_server.uri)
        else:
            c.head(auth_server.uri)
    msg = _check(excinfo, s3stream.PermissionDeniedError, PermissionError, auth_server.bucket)
    assert "credential" in msg.lower(), msg
    assert any(hint in msg for hint in ("AWS_ACCESS_KEY_ID", "access_key_id", "AWS_PROFILE", "profile")), (
        f"the message does not say how to configure credentials: {msg!r}"
    )
