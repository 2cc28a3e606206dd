"""Listing benchmark (``make bench-list``): how fast every key under a prefix reaches Python, from
s3stream's parallel listing, s3stream's sequential one, and boto3's paginator, against the same
server: the stand-in (bench/server.py) listing a synthetic key space (bench/keyspace.py) of
``--keys`` keys per layout with a time to first byte per LIST request.

    python -m bench.listing                                   # 1 M keys per layout, 20 ms, 3 runs
    python -m bench.listing --keys 100000 --runs 1 --prefixes flat/

Every run is its own process (``--one``): the clock runs from the first call to the last key
consumed, as a list of keys in Python (imports and interpreter start excluded), and the keys are
checked against the key space (count and a SHA-256 of them all, in order). The server counts the
LIST requests each run sent. Results: a table on stdout and JSON (``--out``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

METHODS = ("s3stream-parallel", "s3stream-sequential", "boto3")


def _digest(keys: List[str]) -> str:
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def run_one(method: str, endpoint: str, bucket: str, prefix: str, parallelism: int) -> Dict[str, object]:
    """One listing in this process: {"keys", "seconds", "digest"}."""
    if method == "boto3":
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                          aws_secret_access_key="bench", config=Config(s3={"addressing_style": "path"}))
        t0 = time.perf_counter()
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    else:
        import s3stream

        client = s3stream.Client(endpoint_url=endpoint, access_key_id="bench", secret_access_key="bench",
                                 region="us-east-1")
        uri = f"s3://{bucket}/{prefix}"
        t0 = time.perf_counter()
        keys = [o.key for o in client.list(uri, parallelism=parallelism if method == "s3stream-parallel" else 1)]
    seconds = time.perf_counter() - t0
    return {"keys": len(keys), "seconds": seconds, "digest": _digest(keys)}


def _child(method: str, endpoint: str, bucket: str, prefix: str, parallelism: int) -> Dict[str, object]:
    cmd = [sys.executable, "-m", "bench.listing", "--one", method, "--endpoint", endpoint, "--bucket", bucket,
           "--prefix", prefix, "--parallelism", str(parallelism)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys per layout (default 1,000,000)")
    ap.add_argument("--prefixes", default="flat/,hex/,tree/", help="what to list (layouts of bench/keyspace.py)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--ttfb-ms", type=float, default=20.0, help="the server's time to first byte per LIST")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell; the median is reported")
    ap.add_argument("--parallelism", type=int, default=32, help="s3stream's LIST requests in flight")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--bucket", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.endpoint, args.bucket, args.prefix, args.parallelism)))
        return 0

    from . import keyspace
    from .server import SYNTHETIC_BUCKET, LocalS3

    prefixes = [p for p in args.prefixes.split(",") if p]
    methods = [m for m in args.methods.split(",") if m]
    expected = {}
    for prefix in prefixes:
        keys = [k for k, _, _ in keyspace.objects(args.keys, prefix)]
        expected[prefix] = (len(keys), _digest(keys))
    results = []
    with tempfile.TemporaryDirectory(prefix="s3stream-bench-list-") as root:
        server = LocalS3(root, ttfb_s=args.ttfb_ms / 1000, synthetic_keys=args.keys, moto=False)
        with server as endpoint:
            for prefix in prefixes:
                for method in methods:
                    for run in range(args.runs):
                        server.lists(reset=True)
                        r = _child(method, endpoint, SYNTHETIC_BUCKET, prefix, args.parallelism)
                        r["requests"] = server.lists()
                        if (r["keys"], r["digest"]) != expected[prefix]:
                            raise SystemExit(f"{method} listed {r['keys']} keys under {prefix}, not the "
                                             f"{expected[prefix][0]} expected (or in another order)")
                        r.update(prefix=prefix, method=method, run=run)
                        results.append(r)
                        print(f"{prefix:<6} {method:<20} run {run + 1}: {r['keys']:,} keys in {r['seconds']:.2f} s "
                              f"({r['keys'] / r['seconds']:,.0f} keys/s, {r['requests']} LIST requests)",
                              file=sys.stderr, flush=True)
    table = summarize(results, prefixes, methods)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"keys_per_layout": args.keys, "ttfb_ms": args.ttfb_ms, "parallelism": args.parallelism,
                       "runs": args.runs, "server": "bench/server.py LocalS3 (nginx + Lua, synthetic key space)",
                       "results": results}, f, indent=1)
    return 0


def summarize(results: List[dict], prefixes: List[str], methods: List[str]) -> str:
    """A markdown table: median seconds, keys/s and LIST requests per cell, and each method's
    speed relative to boto3 and to the sequential listing."""
    lines = ["| prefix | method | keys | median s | keys/s | LIST requests | vs boto3 | vs sequential |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for prefix in prefixes:
        median = {}
        for method in methods:
            cell = [r for r in results if r["prefix"] == prefix and r["method"] == method]
            if cell:
                median[method] = (statistics.median(r["seconds"] for r in cell), cell[0]["keys"],
                                  statistics.median(r["requests"] for r in cell))
        for method, (seconds, keys, requests) in median.items():
            ratio = lambda other: f"{median[other][0] / seconds:.1f}x" if other in median else "-"  # noqa: E731
            lines.append(f"| `{prefix}` | {method} | {keys:,} | {seconds:.2f} | {keys / seconds:,.0f} | "
                         f"{requests:,.0f} | {ratio('boto3')} | {ratio('s3stream-sequential')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
