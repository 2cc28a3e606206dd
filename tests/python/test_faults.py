"""Faults between s3stream and the store (FaultProxy): connection resets mid-body and before the
response, 503 SlowDown, 500 InternalError and stalled transfers. Reads must come back byte-identical
to the source, writes must produce the right object, each fault must really have been injected, and
when retries run out or the object changes under a resumed read the right error must surface."""

from __future__ import annotations

import hashlib
import re
import time

import pytest

import s3stream
from helpers import MiB, boto3_get, object_exists, put_many, random_bytes, s3_uri
from proxies import FaultProxy, reset_before_response, reset_mid_body, stall, status

LOW_SPEED_TIME = 1.0  # the client gives up on a transfer that stalls this long
STALL = 30.0  # a stall lasts far longer: only the client's low-speed detection ends it quickly

FAULTS = {
    "reset_mid_body": lambda: reset_mid_body(0.5),
    "slowdown_503": lambda: status(503, "SlowDown", "Please reduce your request rate."),
    "internal_500": lambda: status(500, "InternalError", "We encountered an internal error. Please try again."),
    "stall": lambda: stall(STALL),
    "reset_before_response": lambda: reset_before_response(),
}


@pytest.fixture
def proxy(s3_endpoint):
    with FaultProxy(s3_endpoint) as p:
        yield p
        assert p.errors == [], p.errors


def _client(proxy, **kw) -> s3stream.Client:
    kw.setdefault("max_attempts", 5)
    return s3stream.Client(
        endpoint_url=proxy.url, low_speed_time=LOW_SPEED_TIME, retry_base_delay=0.01, connect_timeout=2.0, **kw
    )


@pytest.fixture
def source(boto3_client, bucket):
    data = random_bytes(24 * MiB + 7, seed=31)
    boto3_client.put_object(Bucket=bucket, Key="data.bin", Body=data)
    return s3_uri(bucket, "data.bin"), data


def _gets_of(key: str):
    return lambda r: r.method == "GET" and r.key == key


def _sha(b) -> str:
    return hashlib.sha256(b).hexdigest()


def _settle(rule, fault_name: str) -> None:
    """A stall ends when the client hangs up: wait for the proxy to see that."""
    if fault_name == "stall":
        deadline = time.monotonic() + 10
        while rule.client_hung_up < rule.injected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rule.client_hung_up == rule.injected, "the client never abandoned the stalled transfer"


def _count_for(fault_name: str) -> int:
    return 1 if fault_name == "stall" else 2


# --- reads ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault_name", FAULTS)
def test_get_whole_object(proxy, source, fault_name):
    uri, data = source
    rule = proxy.inject(FAULTS[fault_name], match=_gets_of("data.bin"), count=_count_for(fault_name))
    c = _client(proxy)
    t0 = time.monotonic()
    buf = c.get(uri)
    elapsed = time.monotonic() - t0
    assert len(buf) == len(data) and _sha(buf) == _sha(data)
    assert rule.injected == _count_for(fault_name)
    assert proxy.passed > 0
    assert elapsed < STALL / 2, f"took {elapsed:.1f}s: the stall was not detected by low_speed_time"
    _settle(rule, fault_name)


@pytest.mark.parametrize("fault_name", FAULTS)
def test_get_range(proxy, source, fault_name):
    uri, data = source
    start, end = 5 * MiB + 3, 17 * MiB - 5
    rule = proxy.inject(FAULTS[fault_name], match=_gets_of("data.bin"), count=_count_for(fault_name))
    c = _client(proxy)
    t0 = time.monotonic()
    buf = c.get(uri, start, end)
    assert time.monotonic() - t0 < STALL / 2
    assert _sha(buf) == _sha(data[start:end])
    assert rule.injected == _count_for(fault_name)
    _settle(rule, fault_name)


@pytest.mark.parametrize("fault_name", FAULTS)
def test_open_rb(proxy, source, fault_name):
    uri, data = source
    # the first GET and one later GET (a prefetch of a later chunk, or the retry)
    rule = proxy.inject(FAULTS[fault_name], match=_gets_of("data.bin"), count=_count_for(fault_name))
    c = _client(proxy)
    t0 = time.monotonic()
    h = hashlib.sha256()
    with s3stream.open(uri, "rb", client=c) as f:
        while chunk := f.read(MiB + 1):
            h.update(chunk)
        f.seek(3 * MiB)
        assert f.read(100) == data[3 * MiB : 3 * MiB + 100]
    assert h.hexdigest() == _sha(data)
    assert time.monotonic() - t0 < STALL / 2
    assert rule.injected == _count_for(fault_name)
    _settle(rule, fault_name)


def test_open_rb_fault_on_every_other_request(proxy, source):
    """Many faults spread over the whole read: nothing lost, duplicated or truncated."""
    uri, data = source
    seen = {"n": 0}

    def every_other(r):
        if r.method != "GET":
            return False
        seen["n"] += 1
        return seen["n"] % 2 == 1

    rule = proxy.inject(reset_mid_body(0.3), match=every_other, count=6)
    c = _client(proxy)
    with s3stream.open(uri, "rb", client=c) as f:
        assert _sha(f.read()) == _sha(data)
    assert rule.injected >= 2


def test_head_and_list_retry(proxy, boto3_client, bucket):
    put_many(boto3_client, bucket, {f"k/{i}": bytes(i) for i in range(10)})
    c = _client(proxy)
    head_rule = proxy.inject(status(503, "SlowDown"), match=lambda r: r.method == "HEAD", count=2)
    list_rule = proxy.inject(
        reset_mid_body(0.5), match=lambda r: r.method == "GET" and "list-type=2" in r.query, count=1
    )
    assert c.head(s3_uri(bucket, "k/7")).size == 7
    assert sorted(i.key for i in c.list(s3_uri(bucket, "k/"))) == sorted(f"k/{i}" for i in range(10))
    assert head_rule.injected == 2 and list_rule.injected == 1


@pytest.mark.slow
def test_list_page_retry_loses_and_duplicates_nothing(proxy, boto3_client, bucket):
    keys = {f"many/{i:05d}": b"" for i in range(1500)}
    put_many(boto3_client, bucket, keys)
    is_second_page = lambda r: r.method == "GET" and "continuation-token=" in r.query  # noqa: E731
    rules = [
        proxy.inject(status(503, "SlowDown"), match=is_second_page, count=1),
        proxy.inject(reset_mid_body(0.5), match=is_second_page, count=1),
    ]
    listed = [i.key for i in _client(proxy).list(s3_uri(bucket, "many/"))]
    assert len(listed) == len(keys) and set(listed) == set(keys)
    assert [r.injected for r in rules] == [1, 1]


# --- writes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault_name", ["slowdown_503", "internal_500", "reset_before_response"])
def test_put_retries(proxy, boto3_client, bucket, fault_name):
    data = random_bytes(MiB + 1, seed=32)
    rule = proxy.inject(FAULTS[fault_name], match=lambda r: r.method == "PUT", count=2)
    etag = _client(proxy).put(s3_uri(bucket, "p"), data)
    assert boto3_get(boto3_client, bucket, "p") == data
    assert etag == hashlib.md5(data).hexdigest()
    assert rule.injected == 2


def test_put_response_lost_after_the_server_stored_it(proxy, boto3_client, bucket):
    data = random_bytes(1000, seed=33)
    rule = proxy.inject(reset_before_response(forward=True), match=lambda r: r.method == "PUT", count=1)
    _client(proxy).put(s3_uri(bucket, "p"), data)
    assert boto3_get(boto3_client, bucket, "p") == data
    assert rule.injected == 1


@pytest.mark.timeout_s(300)
def test_multipart_under_503s(proxy, boto3_client, bucket):
    data = random_bytes(30 * MiB + 11, seed=34)
    rules = {
        "create": proxy.inject(
            status(503, "SlowDown"), match=lambda r: r.method == "POST" and "uploads" in dict(r.query_params), count=1
        ),
        "part": proxy.inject(
            status(503, "SlowDown"), match=lambda r: r.method == "PUT" and "partNumber" in dict(r.query_params), count=3
        ),
        "part_reset": proxy.inject(
            reset_before_response(forward=True),
            match=lambda r: r.method == "PUT" and "partNumber" in dict(r.query_params),
            count=1,
        ),
        "complete": proxy.inject(
            status(503, "SlowDown"), match=lambda r: r.method == "POST" and "uploadId" in dict(r.query_params), count=1
        ),
    }
    with s3stream.open(s3_uri(bucket, "mp.bin"), "wb", client=_client(proxy)) as f:
        for off in range(0, len(data), 4 * MiB):
            f.write(data[off : off + 4 * MiB])
    assert _sha(boto3_get(boto3_client, bucket, "mp.bin")) == _sha(data)
    assert {name: r.injected for name, r in rules.items()} == {"create": 1, "part": 3, "part_reset": 1, "complete": 1}
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# --- giving up ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault_name", ["slowdown_503", "internal_500", "reset_before_response", "reset_mid_body"]
)
def test_attempts_exhausted(proxy, source, fault_name):
    uri, _ = source
    rule = proxy.inject(FAULTS[fault_name], match=lambda r: r.method == "GET", count=None)
    c = _client(proxy, max_attempts=3)
    with pytest.raises(s3stream.UnavailableError) as excinfo:
        c.get(uri, 0, 1000)
    e = excinfo.value
    assert isinstance(e, ConnectionError) and isinstance(e, OSError) and isinstance(e, s3stream.S3StreamError)
    msg = str(e)
    assert uri in msg
    assert re.search(r"\b3\b", msg) and "attempt" in msg.lower(), f"message does not say it made 3 attempts: {msg!r}"
    assert rule.injected == 3, f"expected exactly max_attempts=3 requests, the proxy saw {rule.injected}"


def test_attempts_exhausted_on_put(proxy, boto3_client, bucket):
    rule = proxy.inject(status(503, "SlowDown"), count=None)
    c = _client(proxy, max_attempts=2)
    with pytest.raises(s3stream.UnavailableError) as excinfo:
        c.put(s3_uri(bucket, "never"), b"data")
    assert s3_uri(bucket, "never") in str(excinfo.value)
    assert rule.injected == 2
    assert not object_exists(boto3_client, bucket, "never")


@pytest.mark.timeout_s(120)
def test_stall_every_time_gives_up(proxy, source):
    uri, _ = source
    rule = proxy.inject(stall(STALL), match=lambda r: r.method == "GET", count=None)
    c = _client(proxy, max_attempts=2)
    t0 = time.monotonic()
    with pytest.raises(s3stream.UnavailableError) as excinfo:
        c.get(uri, 0, 100_000)
    assert time.monotonic() - t0 < STALL
    assert uri in str(excinfo.value)
    assert rule.injected == 2


# --- the object changes while a read is being resumed ---------------------------------------------------


def _replace_with(boto3_client, bucket, key, size):
    other = random_bytes(size, seed=99)  # same size, different bytes, different ETag
    return lambda req: boto3_client.put_object(Bucket=bucket, Key=key, Body=other)


def test_object_changed_during_get(proxy, boto3_client, bucket, source):
    uri, data = source
    rule = proxy.inject(
        reset_mid_body(0.5),
        match=_gets_of("data.bin"),
        count=1,
        hook=_replace_with(boto3_client, bucket, "data.bin", len(data)),
    )
    with pytest.raises(s3stream.ObjectChangedError) as excinfo:
        _client(proxy).get(uri)
    assert isinstance(excinfo.value, OSError) and isinstance(excinfo.value, s3stream.S3StreamError)
    assert uri in str(excinfo.value)
    assert rule.injected == 1 and rule.hook_errors == []


def test_object_changed_during_ranged_get(proxy, boto3_client, bucket, source):
    uri, data = source
    rule = proxy.inject(
        reset_mid_body(0.5),
        match=_gets_of("data.bin"),
        count=1,
        hook=_replace_with(boto3_client, bucket, "data.bin", len(data)),
    )
    with pytest.raises(s3stream.ObjectChangedError):
        _client(proxy).get(uri, MiB, 20 * MiB)
    assert rule.injected == 1


def test_object_changed_during_open_rb(proxy, boto3_client, bucket, source):
    uri, data = source
    rule = proxy.inject(
        reset_mid_body(0.5),
        match=_gets_of("data.bin"),
        count=1,
        hook=_replace_with(boto3_client, bucket, "data.bin", len(data)),
    )
    got = bytearray()
    with pytest.raises(s3stream.ObjectChangedError) as excinfo:
        with s3stream.open(uri, "rb", client=_client(proxy)) as f:
            while chunk := f.read(MiB):
                got += chunk
    assert uri in str(excinfo.value)
    assert rule.injected == 1
    assert data.startswith(bytes(got)), "bytes of the new version were mixed into the old one"


# --- stall_timeout: a stall cut short of libcurl's whole seconds -----------------------------------------


def test_stall_timeout_drops_a_stalled_get_in_a_fraction_of_a_second(proxy, boto3_client, bucket):
    """Small objects: a GET stalled mid-body costs stall_timeout, then a retry on a new connection,
    where low_speed_time (whole seconds, as libcurl checks it) would cost 1-2 s."""
    # 16 GETs and 0.4 s: on a loaded 2-core CI machine the Python proxy and moto answered 64 GETs at
    # once slowly enough for 0.2 s of silence to cut healthy requests until their retries ran out.
    items = {f"o{i}": random_bytes(700, seed=i) for i in range(16)}
    put_many(boto3_client, bucket, items)
    rule = proxy.inject(stall(seconds=STALL), match=lambda r: r.method == "GET", count=3)
    c = s3stream.Client(endpoint_url=proxy.url, stall_timeout=0.4, low_speed_time=20, retry_base_delay=0.01)
    t0 = time.monotonic()
    got = c.get_many([s3_uri(bucket, k) for k in items])
    elapsed = time.monotonic() - t0
    assert [bytes(b) for b in got] == list(items.values())
    assert rule.injected == 3
    assert elapsed < 1.5, f"took {elapsed:.2f} s: the stalls were not cut at stall_timeout"
    _settle(rule, "stall")


def test_stall_timeout_leaves_a_slow_but_moving_get_alone(proxy, source):
    """Only silence counts: a large object arriving steadily is never cut, however long it takes."""
    uri, data = source
    c = s3stream.Client(endpoint_url=proxy.url, stall_timeout=0.2)
    assert _sha(c.get(uri)) == _sha(data)
    assert len(proxy.requests) > 0 and all(r.fault is None for r in proxy.requests)


def test_a_stall_timeout_that_is_not_a_number_of_seconds_is_refused():
    with pytest.raises(s3stream.InvalidArgumentError, match="stall_timeout"):
        s3stream.Client(endpoint_url="http://127.0.0.1:1", stall_timeout=-1)
