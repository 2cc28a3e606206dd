"""`s3stream bench URL`: the user's own measurement of a dataset at several num_workers, against moto.

Every pass here reads the whole epoch (--seconds 0), so the counts must be exact: the samples and the
payload bytes the dataset holds, at every num_workers.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from s3stream import cli  # noqa: E402
from s3stream.bench import BenchResult, RunResult, table  # noqa: E402
from shard_helpers import fields_of, make_shards, upload  # noqa: E402


def run_bench(capsys, endpoint, *args):
    code = cli.main(["--endpoint-url", endpoint, "bench", *args, "--no-progress"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.timeout_s(120)
def test_bench_of_shards_counts_every_sample_and_byte_at_each_num_workers(capsys, tmp_path, s3_endpoint, boto3_client, bucket):
    shards = upload(boto3_client, bucket, make_shards([30, 25, 40]))
    payload = sum(len(v) for name in shards.names for k in shards.keys[name]
                  for v in fields_of(k).values())
    report = tmp_path / "bench.json"
    code, out, err = run_bench(capsys, s3_endpoint, f"s3://{bucket}/shards/", "--workers", "0,2", "--seconds", "0",
                               "--batch-size", "8", "--json", str(report))
    assert code == 0, out + err
    result = json.loads(report.read_text())
    assert result["kind"] == "shards"
    assert [r["num_workers"] for r in result["runs"]] == [0, 2]
    for r in result["runs"]:
        assert r["complete"] and r["error"] is None
        assert r["samples"] == 95 and r["bytes"] == payload
        assert r["first_batch_s"] > 0 and r["pass_samples_per_s"] > 0
        # 95 small samples pass in far less than a second after the first batch: no steady rate.
        assert r["samples_per_s"] is None and r["mb_per_s"] is None
    assert "num_workers" in out and "fastest: num_workers=" in out and "over the whole pass" in out
    assert "too short for a steady rate" in out
    assert out.count("complete") == 2


@pytest.mark.timeout_s(120)
def test_bench_of_an_object_prefix_reads_one_object_per_sample(capsys, tmp_path, s3_endpoint, boto3_client, bucket):
    sizes = [1000 + 17 * i for i in range(50)]
    for i, n in enumerate(sizes):
        boto3_client.put_object(Bucket=bucket, Key=f"images/{i:03d}.bin", Body=bytes(n))
    report = tmp_path / "bench.json"
    code, out, err = run_bench(capsys, s3_endpoint, f"s3://{bucket}/images/", "--workers", "1", "--seconds", "0",
                               "--batch-size", "16", "--json", str(report))
    assert code == 0, out + err
    result = json.loads(report.read_text())
    assert result["kind"] == "objects"
    (run,) = result["runs"]
    assert run["complete"] and run["samples"] == 50 and run["bytes"] == sum(sizes)


def test_bench_of_a_missing_prefix_fails_with_the_prefix_named(capsys, s3_endpoint, bucket):
    code, out, err = run_bench(capsys, s3_endpoint, f"s3://{bucket}/nothing-here/", "--workers", "0")
    assert code == 1
    assert f"s3://{bucket}/nothing-here/" in err and "Traceback" not in err


@pytest.mark.parametrize("workers", ["two", "0,,1", "-1"])
def test_bench_rejects_bad_worker_lists(capsys, s3_endpoint, bucket, workers):
    with pytest.raises(SystemExit, match="--workers"):
        cli.main(["--endpoint-url", s3_endpoint, "bench", f"s3://{bucket}/x/", "--workers", workers])


def test_the_table_prefers_steady_rates_and_says_why_one_is_missing():
    steady = RunResult(4, samples=50_000, bytes=5 * 10**9, first_batch_s=0.3, samples_per_s=10_000.0,
                       mb_per_s=1_000.0, pass_samples_per_s=9_000.0, complete=True)
    short = RunResult(0, samples=500, bytes=5 * 10**7, first_batch_s=2.0, pass_samples_per_s=240.0, complete=True)
    failed = RunResult(8, error="OSError: too many open files")
    text = table(BenchResult(["s3://b/p/"], "shards", "ds", 0.1, 64, 20.0, [steady, failed]))
    assert "fastest: num_workers=4, 10,000 samples/s (1.00 GB/s)" in text
    assert "longer than 6.4 ms" in text  # 64 samples at 10,000/s
    assert "failed: OSError: too many open files" in text and "too short" not in text
    # One setting without a steady rate: compare whole passes, and say why a rate is missing.
    text = table(BenchResult(["s3://b/p/"], "shards", "ds", 0.1, 64, 20.0, [short, steady, failed]))
    assert "fastest: num_workers=4, 9,000 samples/s over the whole pass" in text
    assert "too short for a steady rate" in text


def test_bench_refuses_an_unwritable_report_before_measuring(capsys, s3_endpoint, bucket, tmp_path):
    with pytest.raises(SystemExit, match="cannot write --json"):
        cli.main(["--endpoint-url", s3_endpoint, "bench", f"s3://{bucket}/x/", "--json", str(tmp_path / "no" / "r.json")])
