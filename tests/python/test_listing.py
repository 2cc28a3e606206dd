"""The parallel lister through s3stream's real HTTP/SigV4 path against moto: a few thousand keys in
several "directories" and a flat run list exactly as boto3's paginator lists them (complete, each
once, in order), with several LIST requests in flight; the same through Client.list, `s3stream ls
-r` and MapDataset.from_prefix; progress on stderr; bad arguments."""

from __future__ import annotations

import time
import uuid

import pytest

import s3stream
from s3stream import cli
from s3stream import listing as listing_module
from helpers import put_many, s3_uri
from proxies import RecordingProxy

PAGE = 50  # keys per LIST request: many pages from few keys, so the ranges split


def is_list_request(r) -> bool:
    return r.method == "GET" and ("list-type", "2") in r.query_params


@pytest.fixture(scope="module")
def keyspace(boto3_client):
    """A bucket with 2,600 keys: a tree (train/<class>/...), a flat run of unpadded names, hashed
    names, keys with spaces and non-ASCII characters, a directory marker, and keys just outside
    the prefix."""
    name = f"s3s-list-{uuid.uuid4().hex[:12]}"
    boto3_client.create_bucket(Bucket=name)
    keys = [f"data/train/class{c:02d}/{i:05d}.jpg" for c in range(8) for i in range(c * 100, c * 100 + 120)]
    keys += [f"data/flat/img_{i}.png" for i in range(900)]
    keys += [f"data/hash/{uuid.UUID(int=(i * 2654435761) % (1 << 128)).hex}" for i in range(600)]
    keys += [f"data/caf\u00e9 {i % 5}/\u65e5{i:04d}" for i in range(140)]
    keys += ["data/", "data/train/", "data", "data-outside/x", "datb"]
    put_many(boto3_client, name, {k: b"x" * (len(k) % 7) for k in keys})
    yield name
    from helpers import empty_bucket

    empty_bucket(boto3_client, name)
    boto3_client.delete_bucket(Bucket=name)


def boto3_keys(boto3_client, bucket: str, prefix: str) -> list[str]:
    pages = boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.mark.parametrize("prefix", ["data/", "data/flat/", "data/train/class0", "data/hash/", "", "data/none/"])
def test_parallel_listing_equals_boto3s(s3_endpoint, boto3_client, keyspace, prefix):
    expected = boto3_keys(boto3_client, keyspace, prefix)
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        infos = list(listing_module.list_objects(client, s3_uri(keyspace, prefix), parallelism=16, page_size=PAGE,
                                                 progress=False))
        lists = [r for r in proxy.requests if is_list_request(r)]
    keys = [o.key for o in infos]
    assert len(keys) == len(expected) and keys == expected  # complete, each once, in order
    sizes = {o["Key"]: o["Size"] for o in boto3_client.list_objects_v2(Bucket=keyspace, Prefix=prefix).get("Contents", [])}
    assert all(o.size == sizes[o.key] for o in infos if o.key in sizes)
    pages = max(1, -(-len(expected) // PAGE))
    assert len(lists) >= pages
    if pages >= 12:
        # Splits that land where no key is cost a request each (an empty one): a few for keys of
        # one shape; more where clusters of different shapes ("data/") or long runs shared by
        # every key (the hashed names here start with 22 zeros) leave gaps in the key space.
        assert len(lists) <= pages * 5 + 10, f"{len(lists)} requests for {pages} pages"
        assert any(("start-after" in dict(r.query_params)) for r in lists), "never split"
    assert proxy.errors == []


def test_requests_are_in_flight_together(s3_endpoint, boto3_client, keyspace):
    """With a delay on every LIST, a parallel listing of 900 keys in pages of 50 takes far fewer
    round trips than the 18 a sequential one needs."""
    from test_map_dataset import DelayProxy

    expected = boto3_keys(boto3_client, keyspace, "data/flat/")
    with DelayProxy(s3_endpoint, 0.1, is_list_request) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        uri = s3_uri(keyspace, "data/flat/")
        t0 = time.monotonic()
        keys = [o.key for o in client.list(uri, page_size=PAGE, parallelism=16)]
        elapsed = time.monotonic() - t0
        assert keys == expected
        assert proxy.max_inflight >= 8
        # Against the sequential listing in the same run, not a fixed time: on a loaded CI machine
        # moto itself took most of a second for these pages (1.36 s against a fixed 1.35 s).
        t0 = time.monotonic()
        assert [o.key for o in client.list(uri, page_size=PAGE)] == expected
        sequential = time.monotonic() - t0
    assert elapsed < sequential * 0.75, f"{elapsed:.2f}s parallel, {sequential:.2f}s sequential: not parallel"


def test_client_list_parallelism_and_its_arguments(client, keyspace):
    uri = s3_uri(keyspace, "data/flat/")
    sequential = [o.key for o in client.list(uri, page_size=PAGE)]
    assert [o.key for o in client.list(uri, page_size=PAGE, parallelism=8)] == sequential
    with pytest.raises(s3stream.InvalidArgumentError, match="recursive"):
        list(client.list(uri, delimiter="/", parallelism=8))
    for bad in (0, -1, True, 2.5):
        with pytest.raises(s3stream.InvalidArgumentError, match="parallelism"):
            list(listing_module.list_objects(client, uri, parallelism=bad))
    with pytest.raises(s3stream.InvalidArgumentError, match="page_size"):
        list(listing_module.list_objects(client, uri, page_size=1001))
    with pytest.raises(s3stream.NotFoundError):
        list(client.list(s3_uri(f"s3s-missing-{uuid.uuid4().hex[:8]}", "x/"), parallelism=4))


def test_stopping_early_leaves_nothing_running(s3_endpoint, keyspace):
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        it = client.list(s3_uri(keyspace, "data/"), page_size=PAGE, parallelism=8)
        first = [next(it) for _ in range(3)]
        it.close()
        time.sleep(0.5)
        sent = len(proxy.requests)
        time.sleep(0.5)
        assert len(proxy.requests) == sent
    assert [o.key for o in first] == ["data/", "data/caf\u00e9 0/\u65e50000", "data/caf\u00e9 0/\u65e50005"]


def test_progress_on_stderr(client, keyspace, capsys, monkeypatch):
    uri = s3_uri(keyspace, "data/")
    monkeypatch.setattr(listing_module, "_POLL_S", 0.01)
    list(listing_module.list_objects(client, uri, page_size=PAGE, progress=False))
    assert capsys.readouterr().err == ""
    list(listing_module.list_objects(client, uri, page_size=PAGE))  # not a terminal: nothing by default
    assert capsys.readouterr().err == ""

    monkeypatch.setattr(listing_module, "_PROGRESS_AFTER_S", 0)  # this listing is quick
    n = len(list(listing_module.list_objects(client, uri, page_size=PAGE, progress=True)))
    err = capsys.readouterr().err
    assert f"listing {uri}" in err and "objects" in err, err
    assert f"{n:,} objects in" in err or str(n) in err, err


def test_ls_recursive_lists_in_parallel(s3_endpoint, boto3_client, keyspace, capsys):
    expected = boto3_keys(boto3_client, keyspace, "data/train/")
    code = cli.main(["ls", "-r", s3_uri(keyspace, "data/train/"), "--endpoint-url", s3_endpoint, "--parallelism", "4"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split(None, 1)[1] for line in out] == expected
    sizes = {o["Key"]: o["Size"] for o in boto3_client.list_objects_v2(Bucket=keyspace, Prefix="data/train/")["Contents"]}
    assert all(int(line.split()[0]) == sizes[line.split(None, 1)[1]] for line in out)


def test_map_dataset_from_prefix_lists_in_parallel(s3_endpoint, boto3_client, keyspace, monkeypatch):
    from s3stream import map_dataset as map_dataset_module

    monkeypatch.setattr(map_dataset_module, "_LIST_PAGE_SIZE", PAGE)
    expected = [s3_uri(keyspace, k) for k in boto3_keys(boto3_client, keyspace, "data/") if not k.endswith("/")]
    with RecordingProxy(s3_endpoint) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url)
        ds = s3stream.MapDataset.from_prefix(s3_uri(keyspace, "data/"), client=client, parallelism=16)
        starts = [r for r in proxy.requests if is_list_request(r) and "start-after" in dict(r.query_params)]
    assert [ds.uri(i) for i in range(len(ds))] == expected
    assert starts, "from_prefix listed sequentially"
    one = s3stream.MapDataset.from_prefix(s3_uri(keyspace, "data/"), client=s3stream.Client(endpoint_url=s3_endpoint),
                                          parallelism=1)
    assert one.fingerprint() == ds.fingerprint()


def test_progress_without_tqdm_is_a_line(capsys, monkeypatch):
    import sys

    from s3stream import progress as progress_module

    monkeypatch.setitem(sys.modules, "tqdm", None)
    counter = progress_module.Counter("s3stream: listing s3://b/p/", "objects", True, delay_s=0, every_s=0)
    counter.set(5)
    counter.set(1200)
    counter.close("1,200 objects in 3 requests")
    lines = capsys.readouterr().err.splitlines()  # stderr is not a terminal here: one line each
    assert lines == ["s3stream: listing s3://b/p/: 5 objects ...", "s3stream: listing s3://b/p/: 1,200 objects ...",
                     "s3stream: listing s3://b/p/: 1,200 objects in 3 requests"]
    quiet = progress_module.Counter("x", "objects", False, delay_s=0, every_s=0)
    quiet.set(5)
    quiet.close("done")
    assert capsys.readouterr().err == ""
    assert progress_module.wanted(True) and not progress_module.wanted(False)
    assert not progress_module.wanted(None)  # captured stderr is not a terminal
