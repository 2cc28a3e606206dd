"""Raw client throughput against a local server: many ~100 KB GETs and one large object.

    python -m bench.client_throughput [--objects 4000] [--large-mb 1024] [--ttfb 0] [--rate 0]

Compares s3stream with boto3 (64-connection pool, a thread per in-flight request) in one run on the
same data and server (nginx, bench.server). Prints objects/s, MB/s and CPU seconds per GB.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import resource
import sys
import tempfile
import time

from bench.server import LocalS3

BUCKET = "bench"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(label: str, nbytes: int, fn) -> dict:
    t0, c0 = time.perf_counter(), cpu_seconds()
    count = fn()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    gb = nbytes / 1e9
    row = dict(label=label, seconds=wall, per_s=count / wall, mb_s=nbytes / wall / 1e6, cpu_s_per_gb=cpu / gb)
    print(f"{label:<34} {row['per_s']:>10.0f}/s {row['mb_s']:>9.1f} MB/s {row['cpu_s_per_gb']:>7.2f} CPU s/GB", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=4000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--large-mb", type=int, default=1024)
    ap.add_argument("--ttfb", type=float, default=0.0)
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--inflight", type=int, default=64)
    args = ap.parse_args()

    import boto3
    import botocore.config

    import s3stream

    with tempfile.TemporaryDirectory() as root:
        os.chmod(root, 0o755)  # nginx workers run as an unprivileged user
        os.makedirs(os.path.join(root, BUCKET, "small"))
        payload = os.urandom(args.size)
        for i in range(args.objects):
            with open(os.path.join(root, BUCKET, "small", f"{i:06d}.bin"), "wb") as f:
                f.write(payload)
        with open(os.path.join(root, BUCKET, "large.bin"), "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(args.large_mb):
                f.write(block)
        keys = [f"small/{i:06d}.bin" for i in range(args.objects)]
        small_bytes = args.objects * args.size
        large_bytes = args.large_mb << 20

        with LocalS3(root, ttfb_s=args.ttfb, rate=args.rate, moto=False) as endpoint:
            print(f"server {endpoint}, ttfb {args.ttfb * 1000:.0f} ms, {args.objects} x {args.size} B, "
                  f"large {args.large_mb} MiB, {args.inflight} in flight")
            client = s3stream.Client(endpoint_url=endpoint, max_inflight=args.inflight,
                                     access_key_id="x", secret_access_key="y")
            boto = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                                region_name="us-east-1",
                                config=botocore.config.Config(max_pool_connections=args.inflight))

            def s3stream_small():
                n = 0
                for i in range(0, len(keys), 256):
                    bufs = client.get_many([f"s3://{BUCKET}/{k}" for k in keys[i:i + 256]])
                    n += sum(len(b) == args.size for b in bufs)
                assert n == len(keys)
                return n

            def boto3_small():
                def one(k):
                    return len(boto.get_object(Bucket=BUCKET, Key=k)["Body"].read())
                with cf.ThreadPoolExecutor(args.inflight) as pool:
                    sizes = list(pool.map(one, keys))
                assert all(s == args.size for s in sizes)
                return len(sizes)

            def s3stream_large_open():
                with client.open(f"s3://{BUCKET}/large.bin", "rb") as f:
                    total = 0
                    while chunk := f.read(8 << 20):
                        total += len(chunk)
                assert total == large_bytes
                return 1

            def s3stream_large_get():
                assert len(client.get(f"s3://{BUCKET}/large.bin")) == large_bytes
                return 1

            def boto3_large():
                body = boto.get_object(Bucket=BUCKET, Key="large.bin")["Body"]
                total = 0
                while chunk := body.read(8 << 20):
                    total += len(chunk)
                assert total == large_bytes
                return 1

            s3stream_small(), boto3_small()  # warm up connections and page cache
            measure("s3stream get_many 100 KB", small_bytes, s3stream_small)
            measure("boto3 get_object x64 threads", small_bytes, boto3_small)
            measure("s3stream open().read large", large_bytes, s3stream_large_open)
            measure("s3stream get large", large_bytes, s3stream_large_get)
            measure("boto3 get_object large", large_bytes, boto3_large)


if __name__ == "__main__":
    main()
