"""atheris target for ShardIndex.from_json, which reads shard index sidecars: untrusted JSON that
anyone who can write the bucket may have written.

Property: from_json either raises ValueError (the one error load_indexes treats as "rebuild this
index"; json's JSONDecodeError and UnicodeDecodeError are ValueErrors) or returns an index that a
reader can trust: a size of at most 2^62, samples + 1 offsets, strictly ascending multiples of 512,
none past the shard's end for a plain tar; a string ETag; and to_json() reads back the same.
Never another exception (RecursionError, OverflowError, KeyError, TypeError, MemoryError).

Half the inputs are raw bytes; the other half a well-formed sidecar whose fields the input then
changes (types, values, nesting), so the checks past the JSON parser are reached every time.

Run: python tests/fuzz/python/sidecar_fuzz.py -runs=20000 (libFuzzer flags; see `make fuzz`).
"""

from __future__ import annotations

import json
import sys

import atheris

with atheris.instrument_imports(include=["s3stream"]):
    from source_tree import import_s3stream

    import_s3stream()
    from s3stream.shard_index import FORMAT, TAR_BLOCK, VERSION, ShardIndex

URI = "s3://bucket/train-000000.tar"
MAX = 1 << 62


def a_value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    """Any JSON value, biased towards the numbers near the limits that the checks are about."""
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return fdp.ConsumeIntInRange(-1, 4096) * TAR_BLOCK
    if kind == 1:
        return MAX + fdp.ConsumeIntInRange(-2 * TAR_BLOCK, 2 * TAR_BLOCK)
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 12))
    if kind == 3:
        return fdp.ConsumeRegularFloat()
    if kind == 4:
        return fdp.ConsumeBool()
    if kind == 5:
        return None
    if kind == 6:
        return fdp.ConsumeUnicodeNoSurrogates(8)
    if kind == 7 and depth < 3:
        return [a_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if kind == 8 and depth < 3:
        return {fdp.ConsumeUnicodeNoSurrogates(4): a_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}
    return fdp.ConsumeIntInRange(0, 64)


def a_sidecar(fdp: atheris.FuzzedDataProvider) -> bytes:
    samples = fdp.ConsumeIntInRange(0, 20)
    offsets, at = [], 0
    for _ in range(samples + 1):
        offsets.append(at)
        at += TAR_BLOCK * fdp.ConsumeIntInRange(1, 1 << 20)
    doc = {"format": FORMAT, "version": VERSION, "shard": "train-000000.tar", "size": at, "etag": "abc",
           "gzip": fdp.ConsumeBool(), "samples": samples, "offsets": offsets}
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        field = fdp.PickValueInList(["format", "version", "size", "etag", "gzip", "samples", "offsets", "offsets[]"])
        if field == "offsets[]":
            if offsets:
                offsets[fdp.ConsumeIntInRange(0, len(offsets) - 1)] = a_value(fdp)
        elif fdp.ConsumeBool():
            doc[field] = a_value(fdp)
        else:
            doc.pop(field, None)
    text = json.dumps(doc)
    if fdp.ConsumeBool():
        depth = fdp.ConsumeIntInRange(0, 200_000)  # nesting deeper than the interpreter's stack
        text = text[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    return text.encode()


def check(data: bytes) -> None:
    try:
        index = ShardIndex.from_json(URI, data)
    except ValueError:
        return
    offsets = list(index.offsets)
    assert 0 <= index.size <= MAX, index.size
    assert index.samples == len(offsets) - 1 >= 0, (index.samples, len(offsets))
    assert all(o % TAR_BLOCK == 0 for o in offsets), offsets[:8]
    assert all(a < b for a, b in zip(offsets, offsets[1:])), offsets[:8]
    assert index.gzip or all(o <= index.size for o in offsets), (index.size, offsets[-1:])
    assert isinstance(index.etag, str) and isinstance(index.gzip, bool)
    again = ShardIndex.from_json(URI, index.to_json())
    assert (again.size, again.etag, again.gzip, list(again.offsets)) == (index.size, index.etag, index.gzip, offsets)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    check(a_sidecar(fdp) if fdp.ConsumeBool() else fdp.ConsumeBytes(fdp.remaining_bytes()))


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
