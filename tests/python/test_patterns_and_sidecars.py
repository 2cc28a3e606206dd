"""Shard patterns and index sidecars as untrusted text: regressions found by the fuzz targets in
tests/fuzz/python (brace_fuzz.py, sidecar_fuzz.py). No server needed."""

from __future__ import annotations

import json

import pytest
from braceexpand import braceexpand

import s3stream
from s3stream.shard_index import ShardIndex
from s3stream.urls import MAX_EXPANSION, expand_braces


@pytest.mark.parametrize(
    "pattern",
    ["shard-{0..10}.tar", "shard-{000..012}.tar", "{-05..-3}", "{-3..03}", "{3..-1}", "x{a,{b,c}}{0..1}y"],
)
def test_ranges_are_padded_as_braceexpand_and_bash_pad_them(pattern):
    # {0..10} used to give 00..10: "0" alone is not a zero-padded bound.
    assert expand_braces(pattern) == list(braceexpand(pattern))


@pytest.mark.parametrize(
    "pattern",
    [
        "s3://b/{0..999}{0..999}{0..9}.tar",  # a product over the limit: refused before it is built
        "s3://b/{0..99999999999999}.tar",  # a range over the limit
        "{" + "9" * 5000 + "..1}",  # int() would raise ValueError past 4300 digits
        "{" * 600 + "}" * 600,  # nesting: RecursionError before
        "a}{b}",  # a stray '}' before a group went unnoticed
    ],
)
def test_a_bad_or_huge_pattern_is_an_invalid_argument(pattern):
    with pytest.raises(s3stream.InvalidArgumentError):
        expand_braces(pattern)


def test_only_ascii_digits_make_a_range():
    assert expand_braces("{1..2\n}") == ["1..2\n"]  # "$" matched before the newline, dropping it
    assert expand_braces("{\u0661..\u0663}") == ["\u0661..\u0663"]  # int() reads Arabic-Indic digits


def test_many_groups_expand_without_recursion():
    combos = ["aaa", "aab", "aba", "abb", "baa", "bab", "bba", "bbb"]
    assert expand_braces("{a,b}" * 3 + "{x}" * 2000) == [c + "x" * 2000 for c in combos]
    assert len(expand_braces("{0..999}{0..999}")) == MAX_EXPANSION


def test_a_sidecar_nested_past_the_stack_is_a_value_error():
    body = b'{"format": "s3stream.shard-index", "version": 1, "offsets": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ValueError):
        ShardIndex.from_json("s3://b/x.tar", body)


def test_a_valid_sidecar_reads_back():
    doc = {"format": "s3stream.shard-index", "version": 1, "size": 2048, "etag": "e", "gzip": False,
           "samples": 2, "offsets": [0, 1024, 2048]}
    index = ShardIndex.from_json("s3://b/x.tar", json.dumps(doc).encode())
    assert (index.samples, list(index.offsets)) == (2, [0, 1024, 2048])


@pytest.mark.parametrize("urls", [["s3://b/a.tar", "s3://b/a.tar"], "s3://b/{a,b,a}.tar", ["x/a.tar", "./x/a.tar"]])
def test_a_shard_named_twice_is_an_error_not_dropped(urls):
    """Reading it twice would duplicate its samples and silently keeping one hides the mistake."""
    from s3stream.urls import shard_uris

    with pytest.raises(s3stream.InvalidArgumentError, match="named more than once.*a.tar.*s3stream.Mix"):
        shard_uris(urls, client=None)
