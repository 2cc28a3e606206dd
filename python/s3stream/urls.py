"""Turning what users write into a list of shard URIs.

Accepted: a list of URIs; brace patterns as WebDataset and the shell write them
(``s3://b/train-{000000..000127}.tar``, ``s3://b/{train,val}-0.tar``); a prefix (``s3://b/shards/``,
or any URI that is not itself a shard), listed once for the shard suffixes; ``file://`` URIs and
plain paths the same way.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, List, Sequence, Union

from .client import Client
from .errors import InvalidArgumentError

SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz")

_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def expand_braces(pattern: str) -> List[str]:
    """``a{0..2}b`` -> ``a0b a1b a2b``; ``{x,y}`` alternatives; zero padding follows the bounds."""
    start = pattern.find("{")
    if start < 0:
        if "}" in pattern:
            raise InvalidArgumentError(f"unbalanced '}}' in {pattern!r}")
        return [pattern]
    depth, end = 0, -1
    for i in range(start, len(pattern)):
        if pattern[i] == "{":
            depth += 1
        elif pattern[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end < 0:
        raise InvalidArgumentError(f"unbalanced '{{' in {pattern!r}")
    body, head, tail = pattern[start + 1 : end], pattern[:start], pattern[end + 1 :]
    m = _RANGE.match(body)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        width = max(len(m.group(1)), len(m.group(2))) if m.group(1).startswith("0") or m.group(2).startswith("0") else 0
        step = 1 if hi >= lo else -1
        choices = [str(v).zfill(width) for v in range(lo, hi + step, step)]
    else:
        choices = _split_top_level(body)
    tails = expand_braces(tail)
    return [head + middle + end for choice in choices for middle in expand_braces(choice) for end in tails]


def _split_top_level(body: str) -> List[str]:
    parts, depth, current = [], 0, []
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current.append(ch)
    parts.append("".join(current))
    return parts


def canonical(uri: str) -> str:
    """One spelling per object: local paths become ``file:///abs/path``."""
    if "://" in uri:
        return uri
    return "file://" + os.path.abspath(uri) + ("/" if uri.endswith("/") else "")


def is_shard(uri: str) -> bool:
    return uri.lower().endswith(SHARD_SUFFIXES)


def shard_uris(urls: Union[str, Sequence[str]], client: Client) -> List[str]:
    """Expands patterns and lists prefixes; returns shard URIs in a stable order, no duplicates."""
    items: Iterable[str] = [urls] if isinstance(urls, str) else list(urls)
    out: List[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise InvalidArgumentError(f"shard URLs must be non-empty strings, got {item!r}")
        for uri in map(canonical, expand_braces(item)):
            out.extend([uri] if is_shard(uri) else _list_shards(uri, client))
    if not out:
        raise InvalidArgumentError(f"no shards found for {urls!r}: expected .tar, .tgz or .tar.gz objects")
    seen = set()
    return [u for u in out if not (u in seen or seen.add(u))]


def _list_shards(prefix: str, client: Client) -> List[str]:
    root = store_root(prefix)
    found = [root + info.key for info in client.list(prefix) if is_shard(info.key)]
    if not found:
        raise InvalidArgumentError(
            f"no shards under {prefix}: it lists no objects ending in {', '.join(SHARD_SUFFIXES)}"
        )
    return found


def store_root(uri: str) -> str:
    """What listed keys are relative to: ``s3://bucket/``, or ``file:///`` for local paths."""
    if uri.startswith("s3://"):
        return "s3://" + uri[len("s3://") :].split("/", 1)[0] + "/"
    return "file:///"


__all__ = ["expand_braces", "is_shard", "shard_uris", "store_root", "SHARD_SUFFIXES"]
