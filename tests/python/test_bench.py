"""The peer-comparison harness (the repository's bench/, run by `make bench`) without the peers: its
S3 stand-in (nginx + Lua + moto), its sample checks, and a --quick smoke run for s3stream and boto3 on tiny data
that must produce the table, the JSON file and the plot with every sample verified.

The full benchmark (peers, 10,000 objects, shards) is not part of the test suite: see
bench/README.md and docs/benchmarks.md.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import s3stream

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)  # the harness is the repository's bench/, not part of the package

from bench import metrics, report  # noqa: E402
from bench.data import Spec, label  # noqa: E402
from bench.server import LocalS3, have_lua  # noqa: E402

needs_nginx = pytest.mark.skipif(shutil.which("nginx") is None or not have_lua(),
                                 reason="needs nginx with libnginx-mod-http-lua")

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(s3stream.__file__)))


# --- the server -----------------------------------------------------------------------------------------


@needs_nginx
@pytest.mark.timeout_s(120)
def test_server_serves_the_directory_with_ttfb_lists_it_and_proxies_writes_to_moto(tmp_path):
    import boto3
    from botocore.config import Config

    root = tmp_path / "root"
    (root / "data" / "d").mkdir(parents=True)
    blobs = {f"d/{i}.bin": os.urandom(1000 + i) for i in range(5)}
    for key, data in blobs.items():
        (root / "data" / key).write_bytes(data)
    (root / "data" / "top.txt").write_bytes(b"top")

    with LocalS3(str(root), ttfb_s=0.05, rate=10_000_000) as endpoint:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="y", config=Config(s3={"addressing_style": "path"}))
        t0 = time.perf_counter()
        body = s3.get_object(Bucket="data", Key="d/3.bin")
        assert body["Body"].read() == blobs["d/3.bin"]
        assert time.perf_counter() - t0 >= 0.05  # the time to first byte is applied

        part = s3.get_object(Bucket="data", Key="d/3.bin", Range="bytes=10-19", IfMatch=body["ETag"])
        assert part["Body"].read() == blobs["d/3.bin"][10:20]
        with pytest.raises(Exception, match="412|PreconditionFailed|Precondition"):
            s3.get_object(Bucket="data", Key="d/3.bin", Range="bytes=10-19", IfMatch='"other"')

        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="data", PaginationConfig={"PageSize": 2})
        listed = [(o["Key"], o["Size"], o["ETag"]) for page in pages for o in page.get("Contents", [])]
        assert [k for k, _, _ in listed] == sorted(list(blobs) + ["top.txt"])
        heads = {k: s3.head_object(Bucket="data", Key=k)["ETag"] for k, _, _ in listed}
        assert all(heads[k] == etag for k, _, etag in listed)  # LIST and HEAD agree
        top = s3.list_objects_v2(Bucket="data", Delimiter="/")
        assert [o["Key"] for o in top["Contents"]] == ["top.txt"]
        assert top["CommonPrefixes"] == [{"Prefix": "d/"}]

        # Writes (and reads of what was written) go to moto.
        s3.put_object(Bucket="data", Key="written/x.txt", Body=b"hello")
        assert s3.get_object(Bucket="data", Key="written/x.txt")["Body"].read() == b"hello"
        with pytest.raises(s3.exceptions.NoSuchKey):
            s3.get_object(Bucket="data", Key="missing.bin")

        # And s3stream sees the same store.
        client = s3stream.Client(endpoint_url=endpoint, access_key_id="x", secret_access_key="y")
        assert sorted(o.key for o in client.list("s3://data/d/")) == sorted(blobs)
        assert bytes(client.get("s3://data/d/1.bin")) == blobs["d/1.bin"]


@needs_nginx
@pytest.mark.timeout_s(60)
def test_server_counts_the_object_reads_in_flight_and_their_peak(tmp_path):
    import threading
    import urllib.error
    import urllib.request

    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "obj").write_bytes(os.urandom(100_000))
    server = LocalS3(str(tmp_path), ttfb_s=0.3, moto=False)

    def get(path: str) -> None:
        try:
            urllib.request.urlopen(endpoint + path, timeout=10).read()
        except urllib.error.HTTPError:
            pass  # the missing key: proxied to moto, which is not running here

    def now_in_flight() -> int:
        with urllib.request.urlopen(endpoint + "/__s3stream_bench/inflight", timeout=10) as r:
            return json.loads(r.read())["inflight"]

    with server as endpoint:
        assert server.inflight_peak() == 0
        threads = [threading.Thread(target=get, args=("/b/obj",)) for _ in range(5)]
        for t in threads:
            t.start()
        time.sleep(0.1)
        assert now_in_flight() == 5  # all five are waiting out the TTFB
        assert server.wait_idle(timeout_s=5)
        assert now_in_flight() == 0
        for t in threads:
            t.join()
        assert server.inflight_peak(reset=False) == 5
        assert server.inflight_peak() == 5  # ... and reading with reset starts a new count
        assert server.inflight_peak() == 0
        for _ in range(3):
            get("/b/obj")
        get("/b/missing")
        assert server.inflight_peak() == 1  # one after the other
        assert now_in_flight() == 0  # every request, the proxied one too, was counted out


@needs_nginx
@pytest.mark.timeout_s(180)
def test_synthetic_key_space_lists_as_its_model_and_as_boto3_sees_it(tmp_path, capsys):
    """The stand-in's synthetic LIST handler (bench/keyspace.py, for the listing benchmark) against
    the key space's Python model, through boto3: prefixes, pages, delimiters, start-after, V1
    markers; and s3stream's parallel listing of it equals boto3's."""
    import boto3
    from botocore.config import Config

    from bench import keyspace
    from bench import listing as listing_bench
    from bench.server import SYNTHETIC_BUCKET

    n = 1500
    server = LocalS3(str(tmp_path), ttfb_s=0.0, synthetic_keys=n, moto=False)
    with server as endpoint:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="y", config=Config(s3={"addressing_style": "path"}))

        def boto3_list(prefix, **kw):
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=SYNTHETIC_BUCKET, Prefix=prefix, **kw)
            return [(o["Key"], o["Size"], o["ETag"].strip('"')) for p in pages for o in p.get("Contents", [])]

        for prefix in ("", "flat/", "hex/", "tree/", "tree/0000", "tree/00001/", "flat/0000014", "nothing/"):
            assert boto3_list(prefix, PaginationConfig={"PageSize": 250}) == list(keyspace.objects(n, prefix)), prefix
        server.lists(reset=True)
        assert len(boto3_list("flat/", PaginationConfig={"PageSize": 100})) == n
        assert server.lists() == 15

        items = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=SYNTHETIC_BUCKET, Prefix="tree/", Delimiter="/",
                                                                 PaginationConfig={"PageSize": 1}):
            items += [c["Prefix"] for c in page.get("CommonPrefixes", [])] + [o["Key"] for o in page.get("Contents", [])]
        assert items == ["tree/00000/", "tree/00001/"]
        top = s3.list_objects_v2(Bucket=SYNTHETIC_BUCKET, Delimiter="/")
        assert [c["Prefix"] for c in top["CommonPrefixes"]] == ["flat/", "hex/", "tree/"] and "Contents" not in top
        after = s3.list_objects_v2(Bucket=SYNTHETIC_BUCKET, Prefix="flat/", StartAfter="flat/00000099.jpg", MaxKeys=2)
        assert [o["Key"] for o in after["Contents"]] == ["flat/00000100.jpg", "flat/00000101.jpg"] and after["IsTruncated"]
        beyond = s3.list_objects_v2(Bucket=SYNTHETIC_BUCKET, Prefix="tree/", StartAfter="tree/00000/x", Delimiter="/")
        assert [c["Prefix"] for c in beyond["CommonPrefixes"]] == ["tree/00001/"]  # items after start-after
        v1 = s3.list_objects(Bucket=SYNTHETIC_BUCKET, Prefix="hex/", Marker=keyspace.key(n + 10, n), MaxKeys=3)
        assert [o["Key"] for o in v1["Contents"]] == [keyspace.key(n + i, n) for i in (11, 12, 13)]
        assert s3.list_objects_v2(Bucket=SYNTHETIC_BUCKET, MaxKeys=0)["KeyCount"] == 0

        client = s3stream.Client(endpoint_url=endpoint, access_key_id="x", secret_access_key="y")
        for prefix in ("", "flat/", "hex/", "tree/"):
            expected = [k for k, _, _ in keyspace.objects(n, prefix)]
            assert [o.key for o in client.list(f"s3://{SYNTHETIC_BUCKET}/{prefix}", page_size=100, parallelism=16)] == \
                expected, prefix

    # The benchmark itself, tiny: every method checked against the key space, a table printed.
    assert listing_bench.main(["--keys", "2000", "--runs", "1", "--ttfb-ms", "0", "--prefixes", "flat/,tree/",
                               "--out", str(tmp_path / "listing.json")]) == 0
    table = capsys.readouterr().out
    assert table.count("| `flat/` |") == 3 and "s3stream-parallel" in table and "boto3" in table
    data = json.loads((tmp_path / "listing.json").read_text())
    assert len(data["results"]) == 6 and all(r["keys"] == 2000 for r in data["results"])


# --- sample checks ----------------------------------------------------------------------------------------


def test_checker_accepts_the_dataset_and_flags_wrong_samples():
    import torch

    spec = Spec(objects=20, object_size=200)
    good = metrics.Checker(spec)
    payloads = [spec.payload(i) for i in range(20)]
    good.batch((payloads[:10], torch.tensor([label(i) for i in range(10)])))
    good.batch((payloads[10:], torch.tensor([label(i) for i in range(10, 20)])))
    assert good.verdict(complete=True)["ok"]
    assert good.bytes == spec.total_bytes()

    bad = metrics.Checker(spec)
    bad.batch(([payloads[0], payloads[0]], torch.tensor([0, 0])))  # a duplicate
    bad.batch(([payloads[1][:-1]], torch.tensor([1])))  # truncated
    bad.batch(([payloads[2]], torch.tensor([7])))  # wrong label
    verdict = bad.verdict(complete=True)
    assert not verdict["ok"]
    text = " ".join(verdict["errors"])
    assert "twice" in text and "bytes, expected" in text and "label" in text and "complete pass" in text


def test_sizes_are_about_the_object_size_and_payloads_deterministic():
    spec = Spec(objects=1000, object_size=100_000)
    sizes = [spec.size(i) for i in range(1000)]
    assert min(sizes) >= 90_000 and max(sizes) < 110_000
    assert abs(sum(sizes) / 1000 - 100_000) < 2_000
    assert spec.payload(7) == spec.payload(7) and spec.payload(7)[:8] == (7).to_bytes(8, "little")


# --- the smoke run ------------------------------------------------------------------------------------------


@needs_nginx
@pytest.mark.timeout_s(240)
def test_quick_bench_of_s3stream_and_boto3_produces_table_json_and_plot(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, REPO, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "bench", "--quick", "--libraries", "s3stream,boto3",
           "--ttfb-ms", "5", "--objects", "300", "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
           "--no-progress"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=230)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert time.monotonic() - t0 < 180

    results = json.loads((out / "results.json").read_text())
    cells = results["cells"]
    assert {(c["library"], c["scenario"]) for c in cells} == {
        ("s3stream", "random"), ("boto3", "random"), ("s3stream", "shards")}
    for c in cells:
        assert c["status"] == "ok", c
        for run in c["runs"]:
            check = run["check"]
            assert check["ok"] and check["complete"], run
            assert check["samples"] == 300
            assert run["samples_per_s"] > 0 and run["cpu_s_per_gb"] >= 0 and run["peak_pss_mb"] > 0
            assert run["peak_requests"] >= 1  # the server counted the library's GETs in flight
    # CPU time comes in clock ticks: a window of a few ms (s3stream on 5 MB) may see none.
    assert any(run["cpu_s_per_gb"] > 0 for c in cells for run in c["runs"])
    if shutil.which("wrk"):
        assert all(c["status"] == "ok" and c["samples_per_s"] > 0 for c in results["ceilings"])
        # The ceiling runs as many connections as s3stream kept GETs in flight (one run each here).
        ours = {(c["panel"], c["workers"]): c["runs"][0]["peak_requests"] for c in cells if c["library"] == "s3stream"}
        for c in results["ceilings"]:
            assert c["connections"] == ours[(c["panel"], c["workers"])]
            assert c["connections_from"] == "s3stream's peak in flight"

    table = (out / "table.md").read_text()
    assert "| s3stream | 0 |" in table and "| boto3 | 2 |" in table and "ceiling" in table
    assert "| s3stream | 0 |" in proc.stdout  # the table is printed too
    png = (out / "samples_per_s.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_report_renders_skipped_and_failed_cells_on_one_line():
    results = {
        "config": {"objects": 10, "object_size": 1000, "ttfb_ms": 20, "mbps": 100, "runs": 1, "batch_size": 64},
        "cells": [
            {"panel": "random", "scenario": "random", "shard_mb": None, "workers": 0, "library": "s3stream",
             "status": "ok", "median": {"samples_per_s": 100.0}, "complete": True},
            {"panel": "random", "scenario": "random", "shard_mb": None, "workers": 0, "library": "boto3",
             "status": "failed", "reason": "RuntimeError: a | b\nsecond line"},
        ],
        "ceilings": [],
    }
    text = report.table(results)
    row = next(line for line in text.splitlines() if line.startswith("| boto3"))
    assert "failed" in row and "a / b second line" in row
    assert io.StringIO(text).read().count("\n") > 5
