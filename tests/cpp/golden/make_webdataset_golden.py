#!/usr/bin/env python3
"""Writes the golden sample listings that tests/cpp/webdataset_test.cc compares SampleGrouper with.

For each WebDataset test shard in $S3STREAM_TESTDATA_DIR/webdataset (default ../shared/testdata/...)
it runs the real webdataset package's own tar iteration (tar_file_expander + group_by_keys, no
decoding) and writes <shard>.json: the samples in order, each with its key and, per field, the
extension, byte length and SHA-256. One sample per line keeps diffs readable.

Usage: pip install webdataset && python3 tests/cpp/golden/make_webdataset_golden.py
"""
import hashlib
import json
import os
import pathlib
import sys

import webdataset
from webdataset import tariterators

HERE = pathlib.Path(__file__).resolve().parent
SHARDS = ["compressed.tar", "mpdata.tar", "sample.tgz", "tendata.tar", "testgz.tar"]


def testdata_dir() -> pathlib.Path:
    env = os.environ.get("S3STREAM_TESTDATA_DIR")
    root = pathlib.Path(env) if env else HERE.parents[3] / "shared" / "testdata"
    return root / "webdataset"


def samples(path: pathlib.Path):
    with open(path, "rb") as stream:
        files = tariterators.tar_file_expander([{"url": str(path), "stream": stream}])
        for sample in tariterators.group_by_keys(files):
            fields = {k: v for k, v in sample.items() if not k.startswith("__")}
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
    for name in SHARDS:
        listing = list(samples(src / name))
        lines = [json.dumps(s, ensure_ascii=True, sort_keys=True) for s in listing]
        header = json.dumps({"shard": name, "generator": f"webdataset {webdataset.__version__}"})
        text = header[:-1] + ', "samples": [\n' + ",\n".join(lines) + "\n]}\n"
        json.loads(text)  # the file must stay valid JSON
        (HERE / f"{name}.json").write_text(text)
        print(f"{name}: {len(listing)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
