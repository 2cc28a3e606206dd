"""The ``s3stream`` command line: ``cat``, ``ls``, ``index``, ``bench`` and ``demo``."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .client import Client
from .errors import S3StreamError


def _cat(client: Client, args: argparse.Namespace) -> None:
    out = sys.stdout.buffer
    with client.open(args.uri, "rb") as f:
        while True:
            chunk = f.read1(8 << 20)
            if not chunk:
                break
            out.write(chunk)
    out.flush()


def _ls(client: Client, args: argparse.Namespace) -> None:
    for info in client.list(args.uri, delimiter="" if args.recursive else "/"):
        if info.key.endswith("/") and info.size == 0 and not info.etag:
            print(f"{'PRE':>12}  {info.key}")
        else:
            print(f"{info.size:>12}  {info.key}")


def _index(client: Client, args: argparse.Namespace) -> None:
    from .shard_index import load_indexes
    from .urls import shard_uris

    uris = shard_uris(args.urls, client)
    indexes, report = load_indexes(uris, client, write=not args.no_write, missing=args.missing,
                                   local_cache=args.cache_dir, parallelism=args.parallelism)
    samples = sum(i.samples for i in indexes.values())
    print(f"{len(indexes)} shards, {samples} samples: {report.built} indexed now "
          f"({report.written_beside} written beside their shards, {report.written_to_cache} to the local cache), "
          f"{report.reused} already indexed" + (f", {len(report.missing)} missing" if report.missing else ""))
    for uri in report.missing:
        print(f"missing: {uri}", file=sys.stderr)


def _command_position(args: Sequence[str]) -> Optional[int]:
    """Index of the subcommand in ``args`` (after the global options), or None."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--endpoint-url", "--region"):
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return i
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command_at = _command_position(args_list)
    if command_at is not None and args_list[command_at] == "bench":
        # The benchmark has its own options (s3stream bench --help) and starts its own server.
        from .bench import main as bench_main

        return bench_main(args_list[command_at + 1 :])
    parser = argparse.ArgumentParser(prog="s3stream", description=__doc__)
    parser.add_argument("--endpoint-url", default=None, help="S3-compatible endpoint (default: AWS or $AWS_ENDPOINT_URL)")
    parser.add_argument("--region", default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    cat = sub.add_parser("cat", help="stream an object to stdout (works with pipe: URLs and FIFOs)")
    cat.add_argument("uri")
    ls = sub.add_parser("ls", help="list objects under a prefix")
    ls.add_argument("uri")
    ls.add_argument("-r", "--recursive", action="store_true")
    index = sub.add_parser("index", help="build the sample index of tar shards (one streaming pass, all in parallel)")
    index.add_argument("urls", nargs="+", help="shard URIs, brace patterns ({000000..000127}) or prefixes")
    index.add_argument("--no-write", action="store_true", help="build and check only; write no sidecars")
    index.add_argument("--missing", choices=("error", "skip"), default="error", help="what a missing shard does")
    index.add_argument("--cache-dir", default=None, help="where indexes go when the bucket is read-only")
    index.add_argument("--parallelism", type=int, default=16, help="shards indexed at once")
    sub.add_parser("bench", add_help=False,
                   help="benchmark data loaders against a realistic local S3 (options: s3stream bench --help)")
    demo = sub.add_parser("demo", help="train a small CNN from a local S3 stand-in with s3stream and with boto3, "
                                       "and compare the time spent waiting for data")
    from .demo import add_arguments as _demo_arguments

    _demo_arguments(demo)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run as _demo

        return _demo(args)
    try:
        client = Client(endpoint_url=args.endpoint_url, region=args.region)
        {"cat": _cat, "ls": _ls, "index": _index}[args.command](client, args)
    except BrokenPipeError:
        return 0
    except S3StreamError as e:
        print(f"s3stream: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
