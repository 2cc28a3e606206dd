"""Helpers shared by the test modules and conftest.py (importable without s3stream built)."""

from __future__ import annotations

import gc
import os
import random
from concurrent.futures import ThreadPoolExecutor

from moto_server import MotoServer

TEST_ACCESS_KEY_ID = "AKIAS3STREAMTESTKEY1"
TEST_SECRET_ACCESS_KEY = "s3stream/test+SECRET=key/doNotLeak0123456789"
TEST_REGION = "us-east-1"

MiB = 1 << 20

# Keys that need percent-encoding in a URL path: spaces, unicode, and characters that mean
# something in URLs, queries or SigV4 canonicalisation.
TRICKY_KEYS = [
    "plain.bin",
    "with space.bin",
    "ünïcödé/日本語.txt",
    "plus+percent%equals=amp&tilde~.bin",
    "a b/ü+%=&~.bin",
    "a/b//c",
    "dir/sub dir/file (1).txt",
    "star*colon:at@comma,semi;dollar$bang!quote'paren().bin",
]

# Servers whose logs are attached to failure reports (see conftest.pytest_runtest_makereport).
servers: list[MotoServer] = []


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def random_bytes(n: int, seed: int = 0) -> bytes:
    """Deterministic incompressible bytes (fast even for hundreds of MB)."""
    return random.Random(seed).randbytes(n)


def make_boto3_client(endpoint_url: str, **kwargs):
    """boto3 S3 client, path style, test credentials unless given."""
    import boto3
    from botocore.config import Config

    kwargs.setdefault("aws_access_key_id", TEST_ACCESS_KEY_ID)
    kwargs.setdefault("aws_secret_access_key", TEST_SECRET_ACCESS_KEY)
    config = kwargs.pop(
        "config",
        Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=32,
        ),
    )
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=TEST_REGION, config=config, **kwargs)


def make_client(endpoint_url: str, **kwargs):
    """An s3stream.Client for `endpoint_url` (imports s3stream only when called)."""
    import s3stream

    return s3stream.Client(endpoint_url=endpoint_url, **kwargs)


def put_many(boto3_client, bucket: str, items: dict[str, bytes], workers: int = 32) -> None:
    """Upload many small objects in parallel with boto3."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda kv: boto3_client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), items.items()))


def boto3_etag(boto3_client, bucket: str, key: str) -> str:
    return boto3_client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')


def boto3_get(boto3_client, bucket: str, key: str) -> bytes:
    return boto3_client.get_object(Bucket=bucket, Key=key)["Body"].read()


def object_exists(boto3_client, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        boto3_client.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if e.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise


def empty_bucket(boto3_client, bucket: str) -> None:
    for up in boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        boto3_client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    keys = [
        o["Key"]
        for page in boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    for i in range(0, len(keys), 1000):
        boto3_client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
        )


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_growth_over_epochs(run_epoch, epochs: int = 10) -> int:
    """Runs ``run_epoch(epoch)`` for each epoch and returns how much RSS grew after the second
    (the first two warm up caches and allocator pools)."""
    after_two = 0
    for epoch in range(epochs):
        run_epoch(epoch)
        if epoch == 1:
            gc.collect()
            after_two = rss_bytes()
    gc.collect()
    return rss_bytes() - after_two
