"""Manifests: `s3stream ls --manifest` writes what boto3 lists (one JSON object per line), and
MapDataset.from_manifest reads it back from a path, an s3:// or a file:// URI, as JSON lines or
Parquet, with labels as targets; every malformed line is refused with a ManifestError naming the
manifest, the line and the fix. Against the moto server of conftest.py."""

from __future__ import annotations

import json
import os
import pickle
import sys

import pytest
import torch

import s3stream
from s3stream import cli
from s3stream.errors import ManifestError, MissingDependencyError
from helpers import put_many, s3_uri

PREFIX = "train/"


def content(i: int) -> bytes:
    return f"object {i}|".encode() * (1 + i % 5)


@pytest.fixture
def objects(boto3_client, bucket):
    """12 objects under train/ (two "directories"), a directory marker, and a key outside."""
    items = {f"{PREFIX}{'a' if i % 2 else 'b'}/{i:03d}.bin": content(i) for i in range(12)}
    items[f"{PREFIX}a/"] = b""
    items["other/x.bin"] = b"x"
    put_many(boto3_client, bucket, items)
    return items


def listed(boto3_client, bucket, prefix=PREFIX):
    return boto3_client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]


def ls_manifest(capsys, endpoint, out, uri, *extra):
    code = cli.main(["ls", "--manifest", str(out), uri, "--endpoint-url", endpoint, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ls_writes_what_boto3_lists_and_from_manifest_reads_it(s3_endpoint, boto3_client, bucket, objects, tmp_path,
                                                               capsys, client):
    out = tmp_path / "train.jsonl"
    code, stdout, err = ls_manifest(capsys, s3_endpoint, out, s3_uri(bucket, PREFIX), "--parallelism", "4")
    assert code == 0 and stdout == ""
    expected = [o for o in listed(boto3_client, bucket) if not o["Key"].endswith("/")]
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"uri": s3_uri(bucket, o["Key"]), "size": o["Size"], "etag": o["ETag"].strip('"')} for o in expected
    ]
    assert f"wrote 12 objects ({sum(o['Size'] for o in expected):,} bytes) to {out}" in err
    assert "1 directory markers left out" in err

    ds = s3stream.MapDataset.from_manifest(str(out), client=client)
    assert len(ds) == 12 and ds.source == str(out)
    assert [ds.uri(i) for i in range(12)] == [s3_uri(bucket, o["Key"]) for o in expected]
    assert [ds.size(i) for i in range(12)] == [o["Size"] for o in expected]
    for i, sample in enumerate(ds.__getitems__(list(range(12)))):
        assert bytes(sample.data) == objects[expected[i]["Key"]] and sample.index == i
    # The same dataset as listing the prefix: the same URIs in the same order.
    assert ds.fingerprint() == s3stream.MapDataset.from_prefix(s3_uri(bucket, PREFIX), client=client).fingerprint()
    # os.PathLike works too, and nothing is listed: a manifest is read, not checked against the store.
    assert len(s3stream.MapDataset.from_manifest(out, client=client)) == 12


def test_manifest_on_s3_and_file_uris(s3_endpoint, bucket, objects, tmp_path, capsys, client):
    target = s3_uri(bucket, "manifests/train.jsonl")
    code, _, err = ls_manifest(capsys, s3_endpoint, target, s3_uri(bucket, PREFIX), "--suffix", ".bin")
    assert code == 0 and f"to {target}" in err
    from_s3 = s3stream.MapDataset.from_manifest(target, client=client)
    assert len(from_s3) == 12

    local = tmp_path / "m.jsonl"
    local.write_bytes(bytes(client.get(target)))
    from_file = s3stream.MapDataset.from_manifest(f"file://{local}", client=client)
    assert from_file.fingerprint() == from_s3.fingerprint()


def test_ls_suffix_filter_and_nothing_to_write(s3_endpoint, bucket, objects, tmp_path, capsys):
    out = tmp_path / "odd.jsonl"
    code, _, err = ls_manifest(capsys, s3_endpoint, out, s3_uri(bucket, PREFIX), "--suffix", "1.bin", "--suffix", "3.bin")
    assert code == 0 and "wrote 3 objects" in err and "9 keys with other suffixes left out" in err
    assert [json.loads(line)["uri"].rsplit("/", 1)[1] for line in out.read_text().splitlines()] == \
        ["001.bin", "003.bin", "011.bin"]

    empty = tmp_path / "none.jsonl"
    code, _, err = ls_manifest(capsys, s3_endpoint, empty, s3_uri(bucket, "nothing/"))
    assert code == 1 and "no objects under" in err and "nothing written" in err
    assert not empty.exists() and os.listdir(tmp_path) == ["odd.jsonl"]

    code, _, err = ls_manifest(capsys, s3_endpoint, tmp_path / "no" / "dir.jsonl", s3_uri(bucket, PREFIX))
    assert code == 1 and "cannot write the manifest" in err and "No such file or directory" in err
    assert os.listdir(tmp_path) == ["odd.jsonl"]


def test_keys_with_a_base_labels_and_targets(bucket, objects, tmp_path, client):
    manifest = tmp_path / "labeled.jsonl"
    keys = sorted(k for k in objects if k.startswith(PREFIX) and not k.endswith("/"))
    manifest.write_text("".join(json.dumps({"key": k[len(PREFIX):], "size": len(objects[k]), "label": i % 3,
                                            "note": "ignored"}) + "\n" for i, k in enumerate(keys)) + "\n\n")
    ds = s3stream.MapDataset.from_manifest(manifest, client=client, base=s3_uri(bucket, PREFIX), label_field="label",
                                           transform=lambda s: bytes(s.data))
    assert len(ds) == 12 and ds.label(4) == 1
    data, target = ds[4]
    assert data == objects[keys[4]] and target == 1
    batch = ds.__getitems__([0, 5])
    assert [t for _, t in batch] == [0, 2]
    assert isinstance(ds._labels, __import__("array").array)  # integer labels: one compact array

    doubled = s3stream.MapDataset.from_manifest(manifest, client=client, base=s3_uri(bucket, PREFIX),
                                                label_field="label", target_transform=lambda t: t * 2)
    assert doubled[5][1] == 4
    copy = pickle.loads(pickle.dumps(ds.__class__.from_manifest(manifest, client=client, base=s3_uri(bucket, PREFIX),
                                                                label_field="label")))
    assert copy.label(11) == 11 % 3 and bytes(copy[11][0].data) == objects[keys[11]]

    loader = torch.utils.data.DataLoader(
        s3stream.MapDataset.from_manifest(manifest, client=client, base=s3_uri(bucket, PREFIX), label_field="label"),
        batch_size=4, num_workers=1, multiprocessing_context="fork", collate_fn=lambda b: [t for _, t in b])
    assert [t for batch in loader for t in batch] == [i % 3 for i in range(12)]

    strings = tmp_path / "strings.jsonl"
    strings.write_text(json.dumps({"uri": s3_uri(bucket, keys[0]), "size": 1, "label": "cat"}) + "\n")
    assert s3stream.MapDataset.from_manifest(strings, client=client, label_field="label").label(0) == "cat"
    with pytest.raises(s3stream.InvalidArgumentError, match="no labels"):
        s3stream.MapDataset.from_manifest(strings, client=client).label(0)
    with pytest.raises(s3stream.InvalidArgumentError, match="needs label_field"):
        s3stream.MapDataset.from_manifest(strings, client=client, target_transform=str)


def test_sizes_are_optional_and_a_stale_size_is_caught(bucket, objects, tmp_path, client):
    """The README's own manifest (a key and a label per object, no size) reads; where a size is
    given, an object of another size raises ObjectChangedError naming it and the manifest, instead
    of training on data the manifest did not describe."""
    keys = sorted(k for k in objects if k.startswith(PREFIX) and not k.endswith("/"))
    bare = tmp_path / "labels.jsonl"
    bare.write_text("".join(json.dumps({"key": k[len(PREFIX):], "label": i}) + "\n" for i, k in enumerate(keys)))
    ds = s3stream.MapDataset.from_manifest(bare, client=client, base=s3_uri(bucket, PREFIX), label_field="label")
    assert ds.size(3) is None
    assert [(bytes(s.data), t) for s, t in ds.__getitems__([2, 3])] == [(objects[keys[2]], 2), (objects[keys[3]], 3)]

    stale = tmp_path / "stale.jsonl"
    sizes = [len(objects[k]) + (7 if i == 5 else 0) for i, k in enumerate(keys)]
    stale.write_text("".join(json.dumps({"uri": s3_uri(bucket, k), "size": n}) + "\n" for k, n in zip(keys, sizes)))
    ds = s3stream.MapDataset.from_manifest(stale, client=client)
    assert bytes(ds[4].data) == objects[keys[4]] and ds.size(5) == sizes[5]
    words = f"{s3_uri(bucket, keys[5])} is {len(objects[keys[5]])} bytes, but the manifest .*stale.jsonl says {sizes[5]}"
    with pytest.raises(s3stream.ObjectChangedError, match=words):
        ds[5]
    with pytest.raises(s3stream.ObjectChangedError, match=words):
        ds.__getitems__([4, 5, 6])
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="fork",
                                         collate_fn=list)
    with pytest.raises(s3stream.ObjectChangedError, match="write the manifest again"):
        list(loader)


GOOD = '{"uri": "s3://b/k0", "size": 1}'


@pytest.mark.parametrize("line, message", [
    ('{"uri": "s3://b/k1", "size": 1', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"size": 5, "etag": "x"}', "names no object (fields: etag, size)"),
    ('{"uri": "s3://b/k1", "key": "k1", "size": 1}', 'both "uri" and "key"'),
    ('{"key": "k1", "size": 1}', "no base URI was given"),
    ('{"uri": "", "size": 1}', "must be a non-empty string"),
    ('{"uri": 7, "size": 1}', "must be a non-empty string"),
    ('{"uri": "http://b/k1", "size": 1}', "not an s3:// or file:// URI"),
    ('{"uri": "s3://bucket-only", "size": 1}', "names no object"),
    ('{"uri": "s3://b/k1", "size": -3}', "is negative"),
    ('{"uri": "s3://b/k1", "size": 12.5}', "whole number of bytes"),
    ('{"uri": "s3://b/k1", "size": "12"}', "whole number of bytes"),
    ('{"uri": "s3://b/k1", "size": true}', "whole number of bytes"),
    ('{"uri": "s3://b/k1", "size": 4611686018427387905}', "larger than any object"),
    ('{"uri": "s3://b/k1", "size": 1, "etag": 5}', "etag of s3://b/k1 must be a string"),
    ('{"uri": "s3://b/k0", "size": 1}', "s3://b/k0 is listed again (first on line 1)"),
    ("\xff\xfe", "not UTF-8"),
    ("[" * 100000 + "]" * 100000, "nests too deeply"),
])
def test_every_bad_line_is_refused_with_its_number(tmp_path, client, line, message):
    path = tmp_path / "bad.jsonl"
    raw = b"\xff\xfe" if line == "\xff\xfe" else line.encode()
    path.write_bytes((GOOD + "\n\n").encode() + raw + b"\n")
    with pytest.raises(ManifestError) as caught:
        s3stream.MapDataset.from_manifest(path, client=client)
    error = caught.value
    assert isinstance(error, s3stream.CorruptDataError) and isinstance(error, ValueError)
    assert error.line == 3 and error.source == str(path)
    assert str(error).startswith(f"{path}, line 3: ") and message in str(error), str(error)


def test_whole_manifest_problems(tmp_path, client):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(ManifestError, match="lists no objects; write one with: s3stream ls --manifest"):
        s3stream.MapDataset.from_manifest(empty, client=client)
    labeled = tmp_path / "labels.jsonl"
    labeled.write_text(GOOD[:-1] + ', "label": 1}\n{"uri": "s3://b/k1", "size": 2}\n')
    with pytest.raises(ManifestError, match=r"line 2: s3://b/k1 has no 'label' \(label_field='label'\)"):
        s3stream.MapDataset.from_manifest(labeled, client=client, label_field="label")
    with pytest.raises(FileNotFoundError):
        s3stream.MapDataset.from_manifest(tmp_path / "missing.jsonl", client=client)
    with pytest.raises(s3stream.InvalidArgumentError, match="format must be one of jsonl, parquet"):
        s3stream.MapDataset.from_manifest(labeled, client=client, format="csv")
    for bad in (None, "", 5):
        with pytest.raises(s3stream.InvalidArgumentError):
            s3stream.MapDataset.from_manifest(bad, client=client)


def test_a_missing_manifest_on_s3_is_not_found(bucket, client):
    with pytest.raises(s3stream.NotFoundError):
        s3stream.MapDataset.from_manifest(s3_uri(bucket, "no/such.jsonl"), client=client)


def test_duplicates_found_without_torch_too(tmp_path, client, monkeypatch):
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps({"uri": f"s3://b/k{i % 7}", "size": i}) + "\n" for i in range(9)))
    with pytest.raises(ManifestError, match=r"line 8: s3://b/k0 is listed again \(first on line 1\)"):
        s3stream.MapDataset.from_manifest(path, client=client)
    monkeypatch.setitem(sys.modules, "torch", None)  # the fallback: a dict of hashes
    from s3stream.manifest import read_manifest

    with pytest.raises(ManifestError, match=r"line 8: s3://b/k0 is listed again \(first on line 1\)"):
        read_manifest(path, client)


# --- Parquet ---------------------------------------------------------------------------------------------


def test_parquet_manifest(bucket, objects, tmp_path, client):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: the Parquet manifest tests need it "
                                                "(pip install -r tests/requirements.txt)")
    import pyarrow.parquet as pq

    keys = sorted(k for k in objects if k.startswith(PREFIX) and not k.endswith("/"))
    table = pa.table({"uri": [s3_uri(bucket, k) for k in keys], "size": [len(objects[k]) for k in keys],
                      "class": [i % 4 for i in range(len(keys))]})
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    ds = s3stream.MapDataset.from_manifest(path, client=client, label_field="class")
    assert [ds.uri(i) for i in range(len(ds))] == [s3_uri(bucket, k) for k in keys]
    assert ds.label(7) == 3 and bytes(ds[7][0].data) == objects[keys[7]]

    remote = s3_uri(bucket, "manifests/train.parquet")
    client.put(remote, path.read_bytes())
    assert s3stream.MapDataset.from_manifest(remote, client=client).fingerprint() == ds.fingerprint()

    bad = pa.table({"uri": ["s3://b/a", "s3://b/b", "s3://b/c"], "size": [1, 2.5, 3]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ManifestError, match="bad.parquet, row 2: size of s3://b/b must be a whole number") as caught:
        s3stream.MapDataset.from_manifest(tmp_path / "bad.parquet", client=client)
    assert caught.value.line == 2
    pq.write_table(pa.table({"uri": ["s3://b/a", "s3://b/b"], "size": [1.0, -2.0]}), tmp_path / "neg.parquet")
    with pytest.raises(ManifestError, match="row 2: size of s3://b/b is negative"):
        s3stream.MapDataset.from_manifest(tmp_path / "neg.parquet", client=client)
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ManifestError, match="is not a readable Parquet file"):
        s3stream.MapDataset.from_manifest(tmp_path / "junk.parquet", client=client)
    # The format follows the name unless given.
    os.replace(path, tmp_path / "train.data")
    assert len(s3stream.MapDataset.from_manifest(tmp_path / "train.data", client=client, format="parquet")) == 12


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, client, monkeypatch):
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match="needs pyarrow: pip install pyarrow") as caught:
        s3stream.MapDataset.from_manifest(path, client=client)
    assert isinstance(caught.value, ImportError)


def test_uris_from_several_buckets(tmp_path, client):
    path = tmp_path / "two.jsonl"
    uris = ["s3://one/a", "s3://one/b", "s3://two/c", "file:///tmp/d", "/tmp/e"]
    path.write_text("".join(json.dumps({"uri": u, "size": 1}) + "\n" for u in uris))
    ds = s3stream.MapDataset.from_manifest(path, client=client)
    assert [ds.uri(i) for i in range(len(ds))] == uris
    assert ds.fingerprint() == s3stream.MapDataset.from_objects(uris, client=client).fingerprint()
