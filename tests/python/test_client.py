"""s3stream.Client against moto: every operation, awkward keys, empty objects, pagination, byte ranges,
a 100 MB round trip, and zero-copy buffers. boto3 (talking to moto directly) is the reference."""

from __future__ import annotations

import array
import datetime
import gc
import hashlib

import numpy as np
import pytest
import torch

import s3stream
from helpers import (
    TEST_SECRET_ACCESS_KEY,
    TRICKY_KEYS,
    MiB,
    boto3_etag,
    boto3_get,
    object_exists,
    put_many,
    random_bytes,
    s3_uri,
)
from proxies import RecordingProxy


def _timestamp(value) -> float:
    """ObjectInfo.last_modified (a timezone-aware UTC datetime) as POSIX seconds."""
    assert isinstance(value, datetime.datetime), f"last_modified is {type(value).__name__} {value!r}"
    assert value.utcoffset() == datetime.timedelta(0), f"last_modified is not UTC: {value!r}"
    return value.timestamp()


# --- every operation ----------------------------------------------------------------------------------


def test_put_get_head_delete(client, boto3_client, bucket):
    key = "dir/object.bin"
    uri = s3_uri(bucket, key)
    data = random_bytes(100_000, seed=1)

    etag = client.put(uri, data)
    assert isinstance(etag, str) and etag and '"' not in etag
    assert boto3_get(boto3_client, bucket, key) == data
    assert etag == boto3_etag(boto3_client, bucket, key)

    buf = client.get(uri)
    assert isinstance(buf, s3stream.Buffer)
    assert len(buf) == len(data)
    assert bytes(buf) == data

    info = client.head(uri)
    assert isinstance(info, s3stream.ObjectInfo)
    assert info.key == key
    assert info.size == len(data)
    assert info.etag == etag
    ref = boto3_client.head_object(Bucket=bucket, Key=key)["LastModified"].timestamp()
    assert abs(_timestamp(info.last_modified) - ref) <= 2

    client.delete(uri)
    assert not object_exists(boto3_client, bucket, key)
    with pytest.raises(s3stream.NotFoundError):
        client.get(uri)


def test_put_overwrites(client, boto3_client, bucket):
    uri = s3_uri(bucket, "k")
    client.put(uri, b"first version")
    etag = client.put(uri, b"second")
    assert bytes(client.get(uri)) == b"second"
    assert boto3_get(boto3_client, bucket, "k") == b"second"
    assert client.head(uri).etag == etag == boto3_etag(boto3_client, bucket, "k")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: d, id="bytes"),
        pytest.param(bytearray, id="bytearray"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(lambda d: memoryview(b"xx" + d + b"yy")[2:-2], id="memoryview-slice"),
        pytest.param(lambda d: array.array("I", d), id="array.array"),
        pytest.param(lambda d: np.frombuffer(d, dtype=np.uint8).copy(), id="numpy"),
        pytest.param(lambda d: torch.frombuffer(bytearray(d), dtype=torch.int32).numpy(), id="torch-numpy"),
    ],
)
def test_put_accepts_any_buffer(client, boto3_client, bucket, make):
    data = random_bytes(4096, seed=2)
    client.put(s3_uri(bucket, "buf"), make(data))
    assert boto3_get(boto3_client, bucket, "buf") == data


def test_delete_then_head_is_not_found(client, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="gone", Body=b"x")
    client.delete(s3_uri(bucket, "gone"))
    with pytest.raises(s3stream.NotFoundError):
        client.head(s3_uri(bucket, "gone"))


# --- keys that need encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", TRICKY_KEYS + ["q?x#y", "#hash", "percent%20literal", "~tilde start", " leading space"])
def test_tricky_keys(client, boto3_client, bucket, key):
    uri = s3_uri(bucket, key)
    data = f"content of {key}".encode()

    etag = client.put(uri, data)
    # the server stored it under exactly this key
    assert boto3_get(boto3_client, bucket, key) == data
    assert [o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket)["Contents"]] == [key]

    assert bytes(client.get(uri)) == data
    assert bytes(client.get(uri, 1, 5)) == data[1:5]
    info = client.head(uri)
    assert (info.key, info.size, info.etag) == (key, len(data), etag)
    listed = list(client.list(uri))
    assert [(i.key, i.size, i.etag) for i in listed] == [(key, len(data), etag)]

    client.delete(uri)
    assert not object_exists(boto3_client, bucket, key)


def test_tricky_keys_written_by_boto3(client, boto3_client, bucket):
    keys = TRICKY_KEYS + ["a b/ü+%=&~.bin.2"]
    put_many(boto3_client, bucket, {k: k.encode() for k in keys})
    for k in keys:
        assert bytes(client.get(s3_uri(bucket, k))) == k.encode()
    assert sorted(i.key for i in client.list(s3_uri(bucket, ""))) == sorted(keys)
    assert sorted(i.key for i in client.list(s3_uri(bucket, "a b/ü+"))) == ["a b/ü+%=&~.bin", "a b/ü+%=&~.bin.2"]


# --- empty objects ------------------------------------------------------------------------------------


def test_zero_byte_object(client, boto3_client, bucket):
    uri = s3_uri(bucket, "empty")
    etag = client.put(uri, b"")
    assert boto3_client.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0
    assert etag == boto3_etag(boto3_client, bucket, "empty")

    buf = client.get(uri)
    assert len(buf) == 0 and bytes(buf) == b""
    mv = memoryview(buf)
    assert mv.nbytes == 0 and mv.format == "B"
    assert client.head(uri).size == 0
    [info] = client.list(uri)
    assert (info.key, info.size) == ("empty", 0)
    with s3stream.open(uri, "rb", client=client) as f:
        assert f.read() == b""


def test_zero_byte_object_written_by_boto3(client, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert bytes(client.get(s3_uri(bucket, "empty"))) == b""


# --- listing ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_list_2500_keys_each_exactly_once(client, boto3_client, bucket):
    keys = {f"many/{i:05d}-{'x' * (i % 7)}.bin": bytes(i % 13) for i in range(2500)}
    decoys = {"many": b"1", "many0/x": b"2", "other/00001.bin": b"3", "man/y": b"4"}
    put_many(boto3_client, bucket, {**keys, **decoys})

    listed = list(client.list(s3_uri(bucket, "many/")))
    names = [i.key for i in listed]
    assert len(names) == len(set(names)), "some keys listed more than once"
    assert set(names) == set(keys)
    assert names == sorted(names), "ListObjectsV2 order (UTF-8 binary) is not kept"

    reference = {
        o["Key"]: o
        for page in boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="many/")
        for o in page["Contents"]
    }
    for info in listed:
        ref = reference[info.key]
        assert info.size == ref["Size"] == len(keys[info.key])
        assert info.etag == ref["ETag"].strip('"')

    everything = [i.key for i in client.list(s3_uri(bucket, ""))]
    assert len(everything) == len(keys) + len(decoys) and set(everything) == set(keys) | set(decoys)


def test_list_whole_bucket_without_slash(client, boto3_client, bucket):
    put_many(boto3_client, bucket, {"a": b"1", "b/c": b"22"})
    assert sorted((i.key, i.size) for i in client.list(f"s3://{bucket}")) == [("a", 1), ("b/c", 2)]


def test_list_sizes_and_etags_match_boto3(client, boto3_client, bucket):
    objects = {f"p/{n}": random_bytes(n, seed=n) for n in (0, 1, 1000, 5 * MiB + 3)}
    put_many(boto3_client, bucket, objects)
    listed = {i.key: i for i in client.list(s3_uri(bucket, "p/"))}
    assert set(listed) == set(objects)
    for key, data in objects.items():
        info = listed[key]
        assert info.size == len(data)
        assert info.etag == boto3_etag(boto3_client, bucket, key) == hashlib.md5(data).hexdigest()
        assert isinstance(info, s3stream.ObjectInfo)
        ref = boto3_client.head_object(Bucket=bucket, Key=key)["LastModified"].timestamp()
        assert abs(_timestamp(info.last_modified) - ref) <= 2


def test_list_multipart_etag(client, boto3_client, bucket):
    """Listed ETags of multipart objects (md5-of-md5s "-N") also come without quotes."""
    with s3stream.open(s3_uri(bucket, "mp"), "wb", client=client) as f:
        f.write(random_bytes(20 * MiB, seed=5))
    [info] = client.list(s3_uri(bucket, "mp"))
    assert info.etag == boto3_etag(boto3_client, bucket, "mp") and "-" in info.etag


def test_list_empty_prefix_yields_nothing(client, boto3_client, bucket):
    boto3_client.put_object(Bucket=bucket, Key="x/1", Body=b"1")
    assert list(client.list(s3_uri(bucket, "nothing/here/"))) == []


def test_list_prefix_is_a_string_prefix(client, boto3_client, bucket):
    put_many(boto3_client, bucket, {"ab": b"", "abc/d": b"", "a/b": b"", "b": b""})
    assert sorted(i.key for i in client.list(s3_uri(bucket, "ab"))) == ["ab", "abc/d"]


def test_list_delimiter_returns_direct_children(client, boto3_client, bucket):
    put_many(boto3_client, bucket, {"d/a": b"1", "d/b": b"22", "d/sub/c": b"3", "d/sub/deeper/e": b"4", "e": b"5"})
    listed = list(client.list(s3_uri(bucket, "d/"), delimiter="/"))
    objects = sorted((i.key, i.size) for i in listed if not i.key.endswith("/"))
    assert objects == [("d/a", 1), ("d/b", 2)]
    # common prefixes, if reported at all, are the sub-"directories" (behaviour still TBD)
    assert {i.key for i in listed if i.key.endswith("/")} <= {"d/sub/"}
    # delimiter "" (the default) lists everything under the prefix
    assert sorted(i.key for i in client.list(s3_uri(bucket, "d/"), delimiter="")) == [
        "d/a",
        "d/b",
        "d/sub/c",
        "d/sub/deeper/e",
    ]


# --- byte ranges ----------------------------------------------------------------------------------------

SIZE = 1000


@pytest.fixture
def thousand(client, boto3_client, bucket):
    data = random_bytes(SIZE, seed=7)
    boto3_client.put_object(Bucket=bucket, Key="r", Body=data)
    return s3_uri(bucket, "r"), data


@pytest.mark.parametrize(
    "start,end",
    [
        (0, 1),  # first byte
        (SIZE - 1, SIZE),  # last byte
        (0, SIZE),  # whole object
        (1, SIZE - 1),
        (0, 0),  # empty, at the start
        (500, 500),  # empty, inside
        (SIZE, SIZE),  # empty, at the end
    ],
)
def test_range(client, thousand, start, end):
    uri, data = thousand
    buf = client.get(uri, start, end)
    assert len(buf) == end - start
    assert bytes(buf) == data[start:end]


@pytest.mark.parametrize(
    "start,end",
    [
        (0, SIZE + 1),  # end beyond size
        (SIZE - 1, SIZE + 100),
        (SIZE, SIZE + 1),
        (SIZE + 1, SIZE + 2),  # start beyond size
        (SIZE + 1, SIZE + 1),
        (10**12, 10**12 + 1),
    ],
)
def test_range_out_of_bounds(client, thousand, start, end):
    uri, _ = thousand
    with pytest.raises(s3stream.OutOfRangeError) as e:
        client.get(uri, start, end)
    assert isinstance(e.value, ValueError) and isinstance(e.value, s3stream.S3StreamError)
    assert uri in str(e.value)


def test_range_reversed_is_an_error(client, thousand):
    uri, _ = thousand
    with pytest.raises(ValueError) as e:
        client.get(uri, 10, 5)
    assert isinstance(e.value, (s3stream.InvalidArgumentError, s3stream.OutOfRangeError))


def test_large_ranges_cross_chunk_boundaries(client, boto3_client, bucket):
    data = random_bytes(20 * MiB + 17, seed=8)
    boto3_client.put_object(Bucket=bucket, Key="big", Body=data)
    uri = s3_uri(bucket, "big")
    for start, end in [
        (0, len(data)),
        (MiB - 1, 9 * MiB + 1),
        (8 * MiB - 1, 8 * MiB + 1),
        (4 * MiB, 16 * MiB),
        (len(data) - 3 * MiB - 5, len(data)),
    ]:
        assert hashlib.sha256(client.get(uri, start, end)).digest() == hashlib.sha256(data[start:end]).digest(), (
            start,
            end,
        )


def test_large_get_is_parallel_ranged_gets_pinned_to_the_first_etag(s3_endpoint, boto3_client, bucket):
    data = random_bytes(20 * MiB + 17, seed=10)
    boto3_client.put_object(Bucket=bucket, Key="parts", Body=data)
    etag = boto3_client.head_object(Bucket=bucket, Key="parts")["ETag"].strip('"')
    with RecordingProxy(s3_endpoint) as proxy:
        got = s3stream.Client(endpoint_url=proxy.url).get(s3_uri(bucket, "parts"))
        gets = [r for r in proxy.requests if r.method == "GET"]
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    ranges = sorted(r.header("Range") for r in gets)
    assert ranges == sorted([f"bytes=0-{8 * MiB - 1}", f"bytes={8 * MiB}-{16 * MiB - 1}",
                             f"bytes={16 * MiB}-{len(data) - 1}"])
    first = next(r for r in gets if r.header("Range").startswith("bytes=0-"))
    assert first.header("If-Match") is None
    assert all(r.header("If-Match").strip('"') == etag for r in gets if r is not first)


def test_every_request_names_s3stream_and_its_version(s3_endpoint, boto3_client, bucket):
    """A store's access logs can tell s3stream's requests apart (and which release sent them)."""
    boto3_client.put_object(Bucket=bucket, Key="ua", Body=b"x")
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        client.get(s3_uri(bucket, "ua"))
        client.put(s3_uri(bucket, "ua2"), b"y")
        list(client.list(s3_uri(bucket, "")))
        agents = {r.header("User-Agent") for r in proxy.requests}
    assert len(agents) == 1 and agents.pop().startswith(f"s3stream/{s3stream.__version__} libcurl/")


# --- a 100 MB object ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout_s(600)
def test_100mb_roundtrip_sha256(client, boto3_client, bucket):
    size = 100 * 1000 * 1000
    data = random_bytes(size, seed=9)
    digest = hashlib.sha256(data).hexdigest()
    uri = s3_uri(bucket, "hundred.bin")

    with s3stream.open(uri, "wb", client=client) as f:
        step = 3 * MiB + 12345  # writes that never line up with part boundaries
        for off in range(0, size, step):
            f.write(memoryview(data)[off : off + step])
    head = boto3_client.head_object(Bucket=bucket, Key="hundred.bin")
    assert head["ContentLength"] == size
    assert hashlib.sha256(boto3_get(boto3_client, bucket, "hundred.bin")).hexdigest() == digest

    buf = client.get(uri)
    assert len(buf) == size
    assert hashlib.sha256(buf).hexdigest() == digest
    del buf

    h = hashlib.sha256()
    n = 0
    with s3stream.open(uri, "rb", client=client) as f:
        while chunk := f.read(4 * MiB + 1):
            h.update(chunk)
            n += len(chunk)
    assert n == size and h.hexdigest() == digest


# --- zero copy ------------------------------------------------------------------------------------------


def test_buffer_protocol(client, boto3_client, bucket):
    data = random_bytes(3 * MiB + 5, seed=10)
    boto3_client.put_object(Bucket=bucket, Key="z", Body=data)
    buf = client.get(s3_uri(bucket, "z"))
    mv = memoryview(buf)
    assert mv.format == "B" and mv.itemsize == 1 and mv.ndim == 1
    assert mv.shape == (len(data),) and mv.nbytes == len(data)
    assert mv.c_contiguous
    assert mv.tobytes() == data
    assert bytes(buf) == data
    assert bytes(mv[10:20]) == data[10:20]
    # Writable by design (torch.frombuffer warns on read-only memory): the bytes are the caller's,
    # and a write lands in the very memory the Buffer exposes, proving no copy sits in between.
    assert not mv.readonly
    mv[0] = (data[0] + 1) % 256
    assert bytes(buf)[0] == (data[0] + 1) % 256


@pytest.mark.filterwarnings("error:The given buffer is not writable")
def test_buffer_is_zero_copy_and_outlives_its_name(client, boto3_client, bucket):
    data = random_bytes(2 * MiB, seed=11)
    boto3_client.put_object(Bucket=bucket, Key="z", Body=data)
    buf = client.get(s3_uri(bucket, "z"))
    t = torch.frombuffer(buf, dtype=torch.uint8)
    assert t.dtype == torch.uint8 and t.shape == (len(data),)
    a1 = np.frombuffer(buf, dtype=np.uint8)
    a2 = np.frombuffer(memoryview(buf), dtype=np.uint8)
    # all views share the Buffer's memory: nothing was copied on the way to Python or torch
    assert t.data_ptr() == a1.ctypes.data == a2.ctypes.data
    # the views keep the memory alive after the Buffer's last name is gone
    del buf, a1, a2
    gc.collect()
    client.get(s3_uri(bucket, "z"))  # reuse pooled memory, if any, for something else
    assert t.numpy().tobytes() == data
    assert int(t[0]) == data[0] and int(t[-1]) == data[-1]


@pytest.mark.filterwarnings("error:The given buffer is not writable")
def test_ranged_buffer_to_torch(client, boto3_client, bucket):
    values = torch.arange(1000, dtype=torch.float32)
    boto3_client.put_object(Bucket=bucket, Key="f32", Body=values.numpy().tobytes())
    buf = client.get(s3_uri(bucket, "f32"), 400, 800)  # floats 100..199
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert torch.equal(t, values[100:200])


def test_error_messages_never_contain_the_secret(client, bucket):
    with pytest.raises(s3stream.NotFoundError) as e:
        client.get(s3_uri(bucket, "missing"))
    assert TEST_SECRET_ACCESS_KEY not in str(e.value)
