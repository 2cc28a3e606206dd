#!/usr/bin/env python3
"""Writes the golden sample listings that tests/cpp/webdataset_test.cc compares SampleGrouper with.

For each WebDataset test shard in $S3STREAM_TESTDATA_DIR/webdataset (default tests/data/webdataset)
it runs the real webdataset package's own tar iteration (tar_file_expander + group_by_keys, no
decoding) and writes <shard>.json: the samples in order, each with its key and, per field, the
extension, byte length and SHA-256. One sample per line keeps diffs readable.

It also writes tricky.tar (made here with Python's tarfile, deterministic) whose names exercise
webdataset's corner cases (meta names, no extension, dotted directories, upper-case extensions,
"__bad__", links, long and non-ASCII names), and its listing tricky.tar.json.

Usage: pip install webdataset && python3 tests/cpp/golden/make_webdataset_golden.py
"""
import hashlib
import io
import json
import os
import pathlib
import sys

import tarfile

import webdataset
from webdataset import tariterators

HERE = pathlib.Path(__file__).resolve().parent
SHARDS = ["compressed.tar", "mpdata.tar", "sample.tgz", "tendata.tar", "testgz.tar"]


def testdata_dir() -> pathlib.Path:
    env = os.environ.get("S3STREAM_TESTDATA_DIR")
    root = pathlib.Path(env) if env else HERE.parents[1] / "data"
    return root / "webdataset"


# (name, data) in archive order; None data makes a directory, ("->", target) a symlink, ("=>",
# target) a hard link.
TRICKY = [
    ("dir/", None),
    ("dir/a.jpg", b"jpeg a"),
    ("dir/a.CLS", b"1"),
    ("dir/a.seg.png", b"png a"),
    ("dir/README", b"no extension: skipped, sample a goes on"),
    ("dir/a.json", b"{}"),
    ("__meta__", b"skipped"),
    ("__meta__/x.jpg", b"skipped"),
    ("__x__.jpg", b"not meta: key __x__"),
    ("sub/__x__.jpg", b"not meta either"),
    ("___", b"skipped: starts and ends with __"),
    (".hidden", b"no key: skipped"),
    ("d/.x.y", b"key d/, extension x.y"),
    ("d/.z.w", b"same key d/"),
    ("a.b/c.d", b"key a.b/c"),
    ("a.b/.f.jpg", b"no split: skipped"),
    ("trail.", b"empty extension"),
    ("multi..dot", b"extension .dot"),
    ("bad.jpg", b"dropped with its sample"),
    ("bad.__bad__", b"x"),
    ("notbad.jpg", b"kept"),
    ("notbad.__bad__", b""),
    ("k1.txt", b"first run of k1"),
    ("k2.txt", b"k2"),
    ("k1.json", b"second run of k1: a second sample"),
    ("link.txt", ("->", "k2.txt")),
    ("hard.txt", ("=>", "k2.txt")),
    ("empty.bin", b""),
    ("block.bin", bytes(range(256)) * 2),
    ("block1.bin", bytes(range(256)) * 2 + b"!"),
    ("x" * 120 + ".long", b"pax path"),
    ("p" * 60 + "/" + "q" * 80 + ".split", b"ustar prefix"),
    ("ünïcødé/日本語.TXT", "utf-8 name".encode()),
    ("tail.jpg", b"last"),
]


def make_tricky(path: pathlib.Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in TRICKY:
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = 0
            info.mode = 0o644
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif isinstance(data, tuple):
                info.type = tarfile.SYMTYPE if data[0] == "->" else tarfile.LNKTYPE
                info.linkname = data[1]
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path.write_bytes(out.getvalue())


def samples(path: pathlib.Path):
    with open(path, "rb") as stream:
        files = tariterators.tar_file_expander([{"url": str(path), "stream": stream}])
        for sample in tariterators.group_by_keys(files):
            fields = {k: v for k, v in sample.items() if k not in ("__key__", "__url__", "__local_path__")}
            yield {
                "key": sample["__key__"],
                "extensions": sorted(fields),
                "fields": [
                    {"ext": ext, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                    for ext, data in sorted(fields.items())
                ],
            }


def main() -> int:
    src = testdata_dir()
    make_tricky(HERE / "tricky.tar")
    for name in SHARDS + ["tricky.tar"]:
        listing = list(samples(HERE / name if name == "tricky.tar" else src / name))
        lines = [json.dumps(s, ensure_ascii=True, sort_keys=True) for s in listing]
        header = json.dumps({"shard": name, "generator": f"webdataset {webdataset.__version__}"})
        text = header[:-1] + ', "samples": [\n' + ",\n".join(lines) + "\n]}\n"
        json.loads(text)  # the file must stay valid JSON
        (HERE / f"{name}.json").write_text(text)
        print(f"{name}: {len(listing)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
