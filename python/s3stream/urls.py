"""Turning what users write into a list of shard URIs.

Accepted: a list of URIs; brace patterns as WebDataset and the shell write them
(``s3://b/train-{000000..000127}.tar``, ``s3://b/{train,val}-0.tar``); a prefix (``s3://b/shards/``,
or any URI that is not itself a shard), listed once for the shard suffixes; ``file://`` URIs and
plain paths the same way.
"""

from __future__ import annotations

import collections
import os
import re
from typing import Iterable, List, Sequence, Union

from .client import Client
from .errors import InvalidArgumentError

SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz")

# ASCII digits only: int() would also read other scripts' digits ("{٠..٣}"). Used with fullmatch:
# "$" would also match before a final newline, dropping it.
_RANGE = re.compile(r"(-?[0-9]+)\.\.(-?[0-9]+)")

# Bounds on what one pattern may ask for, so a typo or a hostile string cannot exhaust memory or the
# stack: a million shard URIs (or 256 MiB of them) is far beyond any dataset, and shard names do not
# nest braces deeply.
MAX_EXPANSION = 1_000_000
_MAX_CHARS = 1 << 28
_MAX_NESTING = 32
_MAX_BOUND_DIGITS = 64


def expand_braces(pattern: str) -> List[str]:
    """``a{0..2}b`` -> ``a0b a1b a2b``; ``{x,y}`` alternatives; zero padding follows the bounds as
    in bash and braceexpand (``{00..10}`` pads, ``{0..10}`` does not). More than MAX_EXPANSION
    results, or unbalanced braces, raise InvalidArgumentError."""
    return _expand(pattern, pattern, 0)


def _expand(pattern: str, whole: str, depth: int) -> List[str]:
    if depth > _MAX_NESTING:
        raise InvalidArgumentError(f"braces nested more than {_MAX_NESTING} deep in {whole[:200]!r}")
    # Left to right, one brace group at a time (a loop, not recursion, however many groups there are).
    results, rest = [""], pattern
    while True:
        start = rest.find("{")
        head = rest if start < 0 else rest[:start]
        if "}" in head:
            raise InvalidArgumentError(f"unbalanced '}}' in {whole[:200]!r}")
        if start < 0:
            return _product(results, head, [""], whole)
        end = _closing(rest, start)
        if end < 0:
            raise InvalidArgumentError(f"unbalanced '{{' in {whole[:200]!r}")
        results = _product(results, head, _choices(rest[start + 1 : end], whole, depth), whole)
        rest = rest[end + 1 :]


def _product(results: List[str], head: str, choices: List[str], whole: str) -> List[str]:
    """Every result followed by `head` and each choice, once its size is known to be within bounds."""
    chars = len(choices) * (sum(map(len, results)) + len(results) * len(head)) + len(results) * sum(map(len, choices))
    _check_size(len(results) * len(choices), chars, whole)
    return [r + head + c for r in results for c in choices]


def _check_size(count: int, chars: int, whole: str) -> None:
    if count > MAX_EXPANSION or chars > _MAX_CHARS:
        raise InvalidArgumentError(
            f"{whole[:200]!r} expands to more than {MAX_EXPANSION} names or {_MAX_CHARS >> 20} MiB of them"
        )


def _closing(s: str, start: int) -> int:
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _choices(body: str, whole: str, depth: int) -> List[str]:
    m = _RANGE.fullmatch(body)
    if m:
        a, b = m.group(1), m.group(2)
        if max(len(a), len(b)) > _MAX_BOUND_DIGITS:
            raise InvalidArgumentError(f"a range bound in {whole[:200]!r} has more than {_MAX_BOUND_DIGITS} digits")
        lo, hi = int(a), int(b)
        _check_size(abs(hi - lo) + 1, 0, whole)
        # A bound written with a leading zero ("007", "-01"; not "0" itself) pads every number to
        # the longer bound's width.
        padded = any(s.lstrip("-").startswith("0") and s.lstrip("-") != "0" for s in (a, b))
        width = max(len(a), len(b)) if padded else 0
        step = 1 if hi >= lo else -1
        return [str(v).zfill(width) for v in range(lo, hi + step, step)]
    choices: List[str] = []
    chars = 0
    for part in _split_top_level(body):
        more = _expand(part, whole, depth + 1)
        chars += sum(map(len, more))
        choices.extend(more)
        _check_size(len(choices), chars, whole)
    return choices


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
    """Expands patterns and lists prefixes; returns shard URIs in a stable order. A shard named twice
    is an error (reading it twice an epoch would duplicate its samples; leaving one out would hide the
    mistake)."""
    items: Iterable[str] = [urls] if isinstance(urls, str) else list(urls)
    out: List[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise InvalidArgumentError(f"shard URLs must be non-empty strings, got {item!r}")
        for uri in map(canonical, expand_braces(item)):
            out.extend([uri] if is_shard(uri) else _list_shards(uri, client))
    if not out:
        raise InvalidArgumentError(f"no shards found for {urls!r}: expected .tar, .tgz or .tar.gz objects")
    twice = [u for u, n in collections.Counter(out).items() if n > 1]
    if twice:
        raise InvalidArgumentError(
            f"{len(twice)} shard{'s are' if len(twice) > 1 else ' is'} named more than once in {urls!r:.200} (first: "
            f"{twice[0]}): each shard is read once per epoch; name it once, or read it more often with "
            "s3stream.Mix and a weight")
    return out


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


__all__ = ["MAX_EXPANSION", "expand_braces", "is_shard", "shard_uris", "store_root", "SHARD_SUFFIXES"]
