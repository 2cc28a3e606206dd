"""The ``s3stream`` command line: ``cat`` and ``ls`` (more commands arrive with their issues)."""

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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="s3stream", description=__doc__)
    parser.add_argument("--endpoint-url", default=None, help="S3-compatible endpoint (default: AWS or $AWS_ENDPOINT_URL)")
    parser.add_argument("--region", default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    cat = sub.add_parser("cat", help="stream an object to stdout (works with pipe: URLs and FIFOs)")
    cat.add_argument("uri")
    ls = sub.add_parser("ls", help="list objects under a prefix")
    ls.add_argument("uri")
    ls.add_argument("-r", "--recursive", action="store_true")
    args = parser.parse_args(argv)
    try:
        client = Client(endpoint_url=args.endpoint_url, region=args.region)
        {"cat": _cat, "ls": _ls}[args.command](client, args)
    except BrokenPipeError:
        return 0
    except S3StreamError as e:
        print(f"s3stream: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
