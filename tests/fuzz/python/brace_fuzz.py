"""atheris target for s3stream.urls.expand_braces (shard patterns such as shard-{000..099}.tar).

Two kinds of input, chosen by the first byte:
- any text: expand_braces returns names without braces (the text itself when it has none), at most
  MAX_EXPANSION of them, or raises InvalidArgumentError; never another exception (RecursionError,
  ValueError from int(), MemoryError) and never an unbounded expansion;
- a pattern built from literals, numeric ranges and alternatives: the result is exactly what
  braceexpand (WebDataset's expander, the reference) gives, as many names as the product of the
  groups' sizes, or InvalidArgumentError when that product is over the limit.
MAX_EXPANSION is lowered to 2000 here, so the limit is reached in microseconds, not seconds.

Run: python tests/fuzz/python/brace_fuzz.py -runs=20000 (libFuzzer flags; see `make fuzz`).
"""

from __future__ import annotations

import math
import sys

import atheris
from braceexpand import braceexpand

with atheris.instrument_imports(include=["s3stream"]):
    from source_tree import import_s3stream

    s3stream = import_s3stream()
    import s3stream.urls as urls

urls.MAX_EXPANSION = 2000
LIMIT = urls.MAX_EXPANSION


def literal(fdp: atheris.FuzzedDataProvider, banned: str) -> str:
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 6))
    return "".join(c for c in text if c not in banned)


def bound(fdp: atheris.FuzzedDataProvider) -> str:
    value = fdp.ConsumeIntInRange(-30, 300)
    zeros = "0" * fdp.ConsumeIntInRange(0, 3) * fdp.ConsumeBool()
    return ("-" if value < 0 else "") + zeros + str(abs(value))


def structured(fdp: atheris.FuzzedDataProvider) -> None:
    pattern, count = "", 1
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        pattern += literal(fdp, "{},\\")
        if fdp.ConsumeBool():
            lo, hi = bound(fdp), bound(fdp)
            pattern += "{" + lo + ".." + hi + "}"
            count *= abs(int(hi) - int(lo)) + 1
        else:
            # At least two alternatives (braceexpand keeps "{a}" as it is); one may hold a range.
            alternatives = [literal(fdp, "{},\\.") for _ in range(fdp.ConsumeIntInRange(2, 4))]
            if fdp.ConsumeBool():
                lo, hi = bound(fdp), bound(fdp)
                alternatives[-1] += "{" + lo + ".." + hi + "}"
                count_last = abs(int(hi) - int(lo)) + 1
            else:
                count_last = 1
            pattern += "{" + ",".join(alternatives) + "}"
            count *= len(alternatives) - 1 + count_last
    pattern += literal(fdp, "{}\\")
    try:
        got = urls.expand_braces(pattern)
    except s3stream.InvalidArgumentError:
        assert count > LIMIT, f"{pattern!r} ({count} names) refused"
        return
    assert count <= LIMIT, f"{pattern!r} expanded to {len(got)} names, over the limit {LIMIT}"
    assert len(got) == count, f"{pattern!r}: {len(got)} names, the groups make {count}"
    want = list(braceexpand(pattern))
    assert got == want, f"{pattern!r}: {got[:5]}... differs from braceexpand's {want[:5]}..."


def any_text(text: str) -> None:
    try:
        got = urls.expand_braces(text)
    except s3stream.InvalidArgumentError:
        return
    assert 1 <= len(got) <= LIMIT, f"{text!r}: {len(got)} names"
    assert not any("{" in n or "}" in n for n in got), f"{text!r}: a brace left in {got[:5]}"
    if "{" not in text and "}" not in text:
        assert got == [text], f"{text!r} has no braces but became {got[:5]}"


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeBool():
        any_text(fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()))
    else:
        structured(fdp)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
