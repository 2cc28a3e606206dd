"""`s3stream uploads`, Client.list_uploads and Client.abort_upload: finding and aborting the multipart
uploads a killed writer leaves behind, against moto, the file driver and misbehaving servers."""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import s3stream
from s3stream import cli
from s3stream.uploads import age_text, duration
from hostile_server import HostileServer, response


def killed_writer(uri: str, endpoint: str = "") -> None:
    """Starts a writer of `uri` in a child process, lets it upload a first part, and SIGKILLs it: its
    multipart upload stays behind, as a crashed training job's checkpoint upload would."""
    script = textwrap.dedent(f"""
        import sys, time, s3stream
        client = s3stream.Client(endpoint_url={endpoint!r} or None)
        f = client.open({uri!r}, "wb", part_size=5 << 20)
        f.write(b"x" * ((5 << 20) + 1))  # one whole part: the upload has begun
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def uploads_cli(capsys, endpoint, *args):
    code = cli.main(["uploads", *args] + (["--endpoint-url", endpoint] if endpoint else []))
    out = capsys.readouterr()
    return code, out.out, out.err


def aborted(out):
    """(upload id, key) of each "aborted" line of the command's output."""
    return [tuple(line.split(None, 4)[3:]) for line in out.splitlines() if line.startswith("aborted  ")]


def upload_ids(boto3_client, bucket):
    return sorted(u["UploadId"] for u in boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))


# --- against moto ----------------------------------------------------------------------------------------


def test_a_killed_writers_upload_is_found_and_aborted(capsys, s3_endpoint, boto3_client, bucket):
    killed_writer(f"s3://{bucket}/ckpt/model.pt", s3_endpoint)
    [left] = boto3_client.list_multipart_uploads(Bucket=bucket)["Uploads"]

    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/ckpt/")
    assert code == 0, err
    assert left["UploadId"] in out and "ckpt/model.pt" in out
    assert f"1 incomplete upload under s3://{bucket}/ckpt/ (a dry run" in out
    assert upload_ids(boto3_client, bucket) == [left["UploadId"]], "a dry run aborts nothing"

    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/ckpt/", "--abort")
    assert code == 0, err
    assert aborted(out) == [(left["UploadId"], "ckpt/model.pt")]
    assert "aborted 1 of 1 incomplete upload under" in out
    assert upload_ids(boto3_client, bucket) == []
    assert "Contents" not in boto3_client.list_objects_v2(Bucket=bucket)  # nothing was completed either


def test_list_uploads_sees_only_the_prefix(client, boto3_client, bucket):
    made = {key: boto3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            for key in ["run/a.pt", "run/sub/b.pt", "runs/c.pt", "other/d.pt"]}
    listed = client.list_uploads(f"s3://{bucket}/run/")
    assert sorted((u.key, u.upload_id) for u in listed) == [("run/a.pt", made["run/a.pt"]),
                                                            ("run/sub/b.pt", made["run/sub/b.pt"])]
    for u in listed:
        assert u.uri == f"s3://{bucket}/{u.key}"
        assert u.initiated.tzinfo is not None and u.initiated < datetime.datetime.now(datetime.timezone.utc)
    assert len(client.list_uploads(f"s3://{bucket}/run")) == 3
    assert len(client.list_uploads(f"s3://{bucket}")) == 4

    client.abort_upload(listed[0].uri, listed[0].upload_id)
    assert listed[0].upload_id not in upload_ids(boto3_client, bucket)
    with pytest.raises(s3stream.NotFoundError):  # aborted already
        client.abort_upload(listed[0].uri, listed[0].upload_id)
    with pytest.raises(s3stream.InvalidArgumentError):
        client.list_uploads(f"s3://{bucket}/", page_size=0)


def test_older_than_picks_uploads_by_age(capsys, s3_endpoint, boto3_client, bucket):
    # moto dates every upload 2010-11-10: older than a day, younger than 100,000 days.
    for key in ["old/a", "old/b"]:
        boto3_client.create_multipart_upload(Bucket=bucket, Key=key)
    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/old/", "--older-than", "100000d", "--abort")
    assert code == 0, err
    assert "aborted 0 of 0" in out and len(upload_ids(boto3_client, bucket)) == 2

    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/old/", "--older-than", "1d")
    assert code == 0 and f"2 incomplete uploads under s3://{bucket}/old/ older than 1d" in out
    assert len(upload_ids(boto3_client, bucket)) == 2, "without --abort, --older-than only lists"

    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/old/", "--older-than", "1d12h", "--abort")
    assert code == 0, err
    assert "aborted 2 of 2" in out and upload_ids(boto3_client, bucket) == []


def test_an_abort_that_fails_is_named_and_fails_the_command(capsys, monkeypatch, s3_endpoint, boto3_client, bucket):
    ids = {key: boto3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"] for key in ["p/a", "p/b"]}
    real_abort = s3stream.Client.abort_upload

    def abort_racing_another_cleaner(self, uri, upload_id):
        # Someone else aborts p/b between our listing and our abort: S3 answers NoSuchUpload.
        if uri.endswith("/p/b"):
            boto3_client.abort_multipart_upload(Bucket=bucket, Key="p/b", UploadId=upload_id)
        return real_abort(self, uri, upload_id)

    monkeypatch.setattr(s3stream.Client, "abort_upload", abort_racing_another_cleaner)
    code, out, err = uploads_cli(capsys, s3_endpoint, f"s3://{bucket}/p/", "--abort")
    assert code == 1
    assert aborted(out) == [(ids["p/a"], "p/a")] and "aborted 1 of 2" in out
    assert f"could not abort upload {ids['p/b']} of s3://{bucket}/p/b" in err
    assert f"1 not aborted: s3://{bucket}/p/b" in err


# --- the file driver -------------------------------------------------------------------------------------


@pytest.mark.timeout_s(120)
def test_file_uploads_are_listed_by_page_and_by_age(capsys, tmp_path):
    for name in ["a.pt", "b.pt", "c.pt"]:
        killed_writer(f"file://{tmp_path}/ckpt/{name}")
    client = s3stream.Client()
    listed = client.list_uploads(f"file://{tmp_path}/ckpt/", page_size=1)
    assert [u.uri for u in listed] == [f"file://{tmp_path}/ckpt/{n}" for n in ["a.pt", "b.pt", "c.pt"]]
    assert client.list_uploads(f"{tmp_path}/ckpt/b") == listed[1:2]  # a plain path works too

    # Age one upload by two days (the file driver's initiation time is its staging key file's mtime).
    old = listed[0]
    key_file = tmp_path / "ckpt" / ".s3stream-multipart" / old.upload_id / "key"
    two_days_ago = time.time() - 2 * 86400
    os.utime(key_file, (two_days_ago, two_days_ago))
    code, out, err = uploads_cli(capsys, "", f"file://{tmp_path}/ckpt/", "--older-than", "1d", "--abort")
    assert code == 0, err
    assert aborted(out) == [(old.upload_id, old.key)] and "aborted 1 of 1" in out
    assert [u.upload_id for u in client.list_uploads(f"file://{tmp_path}/")] == [u.upload_id for u in listed[1:]]
    assert not (tmp_path / "ckpt" / "a.pt").exists()


# --- misbehaving servers ------------------------------------------------------------------------------


def uploads_page(keys, next_key="", next_id=""):
    more = (f"<IsTruncated>true</IsTruncated><NextKeyMarker>{next_key}</NextKeyMarker>"
            f"<NextUploadIdMarker>{next_id}</NextUploadIdMarker>") if next_key else "<IsTruncated>false</IsTruncated>"
    items = "".join(f"<Upload><Key>{k}</Key><UploadId>id-{k}</UploadId><Initiated>2026-01-01T00:00:00.000Z</Initiated>"
                    "</Upload>" for k in keys)
    body = f'<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult>{more}{items}</ListMultipartUploadsResult>'
    return response(200, body.encode(), {"Content-Type": "application/xml"})


def test_uploads_are_paged_by_their_markers():
    def handler(req):
        assert "uploads" in req.target and "max-uploads=2" in req.target, req.target
        if "key-marker" not in req.target:
            return uploads_page(["p/a", "p/b"], "p/b", "id-p/b")
        assert "key-marker=p%2Fb" in req.target and "upload-id-marker=id-p%2Fb" in req.target, req.target
        return uploads_page(["p/c"])

    with HostileServer(handler) as url:
        listed = s3stream.Client(endpoint_url=url, max_attempts=1).list_uploads("s3://bucket/p/", page_size=2)
    assert [(u.key, u.upload_id) for u in listed] == [("p/a", "id-p/a"), ("p/b", "id-p/b"), ("p/c", "id-p/c")]


@pytest.mark.parametrize("markers", [["k1", "k1"], ["k1", "k2", "k1"]])
def test_uploads_whose_markers_come_back_are_refused_not_endless(capsys, markers):
    served = {"n": 0}

    def handler(req):
        marker = markers[min(served["n"], len(markers) - 1)]
        served["n"] += 1
        return uploads_page([marker], marker, "id")

    with HostileServer(handler) as url:
        with pytest.raises(s3stream.CorruptDataError, match="a second time"):
            s3stream.Client(endpoint_url=url, max_attempts=1).list_uploads("s3://bucket/")
        assert served["n"] == len(markers)  # stopped at the first repeat
        code, out, err = uploads_cli(capsys, url, "s3://bucket/", "--abort")
    assert code == 1 and "a second time" in err and "aborted" not in out


def test_an_initiation_time_that_is_not_a_time_is_refused():
    def handler(req):
        body = (b"<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>k</Key>"
                b"<UploadId>i</UploadId><Initiated>yesterday-ish</Initiated></Upload></ListMultipartUploadsResult>")
        return response(200, body)

    with HostileServer(handler) as url:
        with pytest.raises(s3stream.CorruptDataError, match="yesterday-ish"):
            s3stream.Client(endpoint_url=url, max_attempts=1).list_uploads("s3://bucket/")


# --- durations ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [("1d", 86400), ("12h", 43200), ("30m", 1800), ("45s", 45),
                                           ("1d12h", 129600), ("2h30m", 9000), ("0m", 0)])
def test_durations(text, seconds):
    assert duration(text) == datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1", "d", "1x", "1.5h", "-1d", "1h1d", "1d1d", " 1d", "1D", "1 d", "10" * 20 + "d"])
def test_a_duration_that_is_not_one_is_refused(capsys, text):
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["uploads", "s3://bucket/", f"--older-than={text}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --older-than: must be a duration such as 1d" in err or "argument --older-than: is too long" in err


def test_ages_are_shown_in_their_two_largest_units():
    assert age_text(datetime.timedelta(days=3, hours=4, minutes=5)) == "3d4h"
    assert age_text(datetime.timedelta(minutes=12, seconds=5)) == "12m5s"
    assert age_text(datetime.timedelta(days=1)) == "1d"
    assert age_text(datetime.timedelta(seconds=-30)) == "0s"  # the store's clock is ahead of ours
