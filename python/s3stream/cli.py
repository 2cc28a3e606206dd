"""The ``s3stream`` command line: ``cat``, ``ls``, ``index``, ``uploads`` and ``bench``."""

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
    if args.manifest:
        return _ls_manifest(client, args)
    if args.recursive:
        from .listing import list_objects

        # Keys stream to stdout in order; a progress bar on the same terminal would garble them.
        progress = args.progress if args.progress is not None else (False if sys.stdout.isatty() else None)
        listing = list_objects(client, args.uri, parallelism=args.parallelism, progress=progress)
    else:
        listing = client.list(args.uri, delimiter="/")
    for info in listing:
        if info.key.endswith("/") and info.size == 0 and not info.etag:
            print(f"{'PRE':>12}  {info.key}")
        else:
            print(f"{info.size:>12}  {info.key}")


def _ls_manifest(client: Client, args: argparse.Namespace) -> None:
    """Every object under the prefix (recursive, directory markers left out) as JSON lines."""
    from .errors import InvalidArgumentError
    from .listing import list_objects, uri_base
    from .manifest import write_manifest

    suffixes = tuple(args.suffix) if args.suffix else None
    skipped = {"markers": 0, "suffix": 0}

    def kept():
        for info in list_objects(client, args.uri, parallelism=args.parallelism, progress=args.progress):
            if info.key.endswith("/"):
                skipped["markers"] += 1
            elif suffixes is not None and not info.key.endswith(suffixes):
                skipped["suffix"] += 1
            else:
                yield info

    objects = kept()
    first = next(objects, None)
    if first is None:
        detail = f"{skipped['markers']:,} directory markers, {skipped['suffix']:,} keys with other suffixes"
        raise InvalidArgumentError(f"no objects under {args.uri} ({detail}); nothing written to {args.manifest}")

    def everything():
        yield first
        yield from objects

    try:
        count, total = write_manifest(everything(), args.manifest, client, uri_base(args.uri))
    except OSError as e:  # a local path that cannot be written (an S3 failure is an S3StreamError)
        if isinstance(e, S3StreamError):
            raise
        raise InvalidArgumentError(f"cannot write the manifest {args.manifest}: {e.strerror or e}") from None
    notes = [f"{n:,} {what} left out" for what, n in (("directory markers", skipped["markers"]),
                                                       ("keys with other suffixes", skipped["suffix"])) if n]
    print(f"s3stream: wrote {count:,} objects ({total:,} bytes) to {args.manifest}"
          + (f" ({'; '.join(notes)})" if notes else ""), file=sys.stderr)


def _index(client: Client, args: argparse.Namespace) -> None:
    from .shard_index import load_indexes
    from .urls import shard_uris

    uris = shard_uris(args.urls, client)
    # Sidecars beside the shards, for every machine: the one place s3stream writes them unasked.
    indexes, report = load_indexes(uris, client, write="none" if args.no_write else "beside", missing=args.missing,
                                   local_cache=args.cache_dir, parallelism=args.parallelism)
    samples = sum(i.samples for i in indexes.values())
    built_beside = report.written_beside - report.copied_beside
    print(f"{len(indexes)} shards, {samples} samples: {report.built} indexed now "
          f"({built_beside} written beside their shards, {report.written_to_cache} to the local cache), "
          f"{report.reused} already indexed"
          + (f" ({report.copied_beside} copied beside their shards from the local cache)" if report.copied_beside else "")
          + (f", {len(report.missing)} missing" if report.missing else ""))
    for uri in report.missing:
        print(f"missing: {uri}", file=sys.stderr)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    # The connection options are accepted before or after the command (s3stream ls URI --region x).
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--endpoint-url", default=argparse.SUPPRESS,
                            help="S3-compatible endpoint (default: AWS or $AWS_ENDPOINT_URL)")
    connection.add_argument("--region", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="s3stream", description=__doc__, parents=[connection])
    sub = parser.add_subparsers(dest="command", required=True)
    cat = sub.add_parser("cat", parents=[connection], help="stream an object to stdout")
    cat.add_argument("uri")
    ls = sub.add_parser("ls", parents=[connection], help="list objects under a prefix; --manifest writes them as JSON lines",
                        description="List the objects under a prefix: one level (-r: every object, with parallel "
                                    "LIST requests), or, with --manifest, every object as one JSON line "
                                    '{"uri", "size", "etag"} for MapDataset.from_manifest.')
    ls.add_argument("uri")
    ls.add_argument("-r", "--recursive", action="store_true")
    ls.add_argument("--manifest", metavar="OUT", default=None,
                    help="write every object under the prefix (recursive, directory markers left out) to OUT, "
                         "a path or an s3:// / file:// URI, as JSON lines")
    ls.add_argument("--suffix", action="append", default=None,
                    help="with --manifest: keep only keys ending with this (repeatable: --suffix .jpg --suffix .png)")
    ls.add_argument("--parallelism", type=_positive, default=32,
                    help="LIST requests in flight for -r and --manifest (default 32; 1: sequential)")
    ls.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="a count of the objects listed on stderr (default: when stderr is a terminal)")
    index = sub.add_parser("index", parents=[connection],
                           help="build the sample indexes of tar shards (one streaming pass, all in parallel) and "
                                "write them beside the shards (.idx.json sidecars) for every machine")
    index.add_argument("urls", nargs="+", help="shard URIs, brace patterns ({000000..000127}) or prefixes")
    index.add_argument("--no-write", action="store_true",
                       help="build and check only; write no sidecars and nothing to the local cache")
    index.add_argument("--missing", choices=("error", "skip"), default="error", help="what a missing shard does")
    index.add_argument("--cache-dir", default=None,
                       help="the local cache: read, and where indexes go when a sidecar cannot be written "
                            "(default: $S3STREAM_CACHE_DIR or ~/.cache/s3stream/index)")
    index.add_argument("--parallelism", type=_positive, default=16, help="shards indexed at once (default 16)")
    uploads = sub.add_parser("uploads", parents=[connection],
                             help="list incomplete multipart uploads under a prefix; --abort aborts them",
                             description="List the multipart uploads under a prefix that were neither completed "
                                         "nor aborted (a writer killed mid-upload leaves one; its parts are billed "
                                         "until aborted). Nothing is aborted without --abort.")
    from .uploads import add_arguments as _uploads_arguments

    _uploads_arguments(uploads)
    bench = sub.add_parser("bench", parents=[connection],
                           help="measure how fast a dataset reaches a training loop at several num_workers",
                           description="Measure samples/s, MB/s and the time to the first batch of a dataset "
                                       "through s3stream.DataLoader at several num_workers (needs torch).")
    from .bench import add_arguments as _bench_arguments

    _bench_arguments(bench)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        client = Client(endpoint_url=getattr(args, "endpoint_url", None), region=getattr(args, "region", None))
        if args.command == "bench":
            from .bench import run as _bench

            return _bench(args, client)
        if args.command == "uploads":
            from .uploads import run as _uploads

            return _uploads(args, client)
        {"cat": _cat, "ls": _ls, "index": _index}[args.command](client, args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("s3stream: interrupted", file=sys.stderr)
        return 130
    except S3StreamError as e:
        print(f"s3stream: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
