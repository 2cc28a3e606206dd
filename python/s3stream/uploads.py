"""``s3stream uploads``: list the incomplete multipart uploads under a prefix and, with ``--abort``,
abort them. A writer killed mid-upload (SIGKILL, a lost node) cannot abort its own upload, and its
parts stay stored and billed until something does (docs/reliability.md)."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from typing import Any, List

from .errors import S3StreamError

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
# Whole numbers with units, largest first, each unit at most once: 1d, 12h, 30m, 1d12h.
_DURATION = re.compile("".join(rf"(?:(\d+){unit})?" for unit, _ in _UNITS))


def duration(text: str) -> datetime.timedelta:
    """``--older-than``'s argument: ``1d``, ``12h``, ``30m``, ``45s`` or a combination such as
    ``1d12h``; anything else is refused rather than guessed at."""
    match = _DURATION.fullmatch(text)
    if not text or not match:
        raise argparse.ArgumentTypeError(
            f"must be a duration such as 1d, 12h, 30m or 1d12h (d, h, m, s, largest first), got {text!r}")
    seconds = sum(int(n) * size for n, (_, size) in zip(match.groups(), _UNITS) if n)
    try:
        return datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"is too long ({text!r})") from None


def age_text(age: datetime.timedelta) -> str:
    """The two largest units of an age (``3d4h``, ``12m5s``); ``0s`` for one in the future (the
    store's clock is ahead of ours)."""
    seconds = max(0, int(age.total_seconds()))
    parts = []
    for unit, size in _UNITS:
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("uri", help="a bucket or prefix: s3://bucket/prefix")
    ap.add_argument("--abort", action="store_true",
                    help="abort the uploads listed (without it nothing is changed: a dry run)")
    ap.add_argument("--older-than", type=duration, default=None, metavar="DURATION",
                    help="only uploads initiated longer ago than this (1d, 12h, 30m, 1d12h), by this machine's clock")


def _row(upload: Any, now: datetime.datetime) -> str:
    return f"{upload.initiated:%Y-%m-%dT%H:%M:%SZ}  {age_text(now - upload.initiated):>6}  {upload.upload_id}  {upload.key}"


def run(args: argparse.Namespace, client: Any) -> int:
    now = datetime.datetime.now(datetime.timezone.utc)
    uploads = client.list_uploads(args.uri)
    if args.older_than is not None:
        uploads = [u for u in uploads if now - u.initiated > args.older_than]
    which = (f"incomplete upload{'' if len(uploads) == 1 else 's'} under {args.uri}" +
             (f" older than {age_text(args.older_than)}" if args.older_than is not None else ""))
    if not args.abort:
        for u in uploads:
            print(_row(u, now))
        print(f"{len(uploads)} {which}" + (" (a dry run: --abort aborts them)" if uploads else ""))
        return 0
    failed: List[str] = []
    for u in uploads:
        try:
            client.abort_upload(u.uri, u.upload_id)
        except S3StreamError as e:
            failed.append(u.uri)
            print(f"s3stream: could not abort upload {u.upload_id} of {u.uri}: {e}", file=sys.stderr)
        else:
            print(f"aborted  {_row(u, now)}")
    print(f"aborted {len(uploads) - len(failed)} of {len(uploads)} {which}")
    if failed:
        print(f"s3stream: {len(failed)} not aborted: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
