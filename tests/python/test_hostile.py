"""What a server (or the user's own data) may send that S3 would not: absurd sizes, missing or wrong
lengths, ignored preconditions, keys that look like paths. Each case must end in a clear, typed
error or in exactly the right bytes; never an abort, a hang, silent short data or another object.

The cases that once crashed or hung the process run in a child process, so a regression fails the
test instead of taking the whole run down.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import pytest

import s3stream
from helpers import random_bytes, s3_uri
from hostile_server import HostileServer, response


def client_for(url: str, **options) -> s3stream.Client:
    options.setdefault("max_attempts", 1)
    return s3stream.Client(endpoint_url=url, **options)


def run_isolated(url: str, code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Runs `code` (with `client` bound to a Client for `url`) in a child process."""
    script = f"import s3stream\nclient = s3stream.Client(endpoint_url={url!r}, max_attempts=1)\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


# --- sizes from the server ----------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {"Content-Length": str(10**12)},  # a whole-object answer of 1 TB
    {"Content-Length": str(2**63)},   # past what any size may be
])
def test_an_absurd_content_length_is_a_clear_error_not_an_abort(headers):
    def handler(req):
        return response(200, b"", {**headers, "ETag": '"e"', "Connection": "close"}, length=False)

    with HostileServer(handler) as url:
        proc = run_isolated(url, """
            try:
                client.get_many(["s3://bucket/huge"])
            except s3stream.S3StreamError as e:
                print(type(e).__name__, e)
        """)
    assert proc.returncode == 0, proc.stderr  # a crash (SIGABRT) has a negative code
    assert proc.stdout.startswith(("TooLargeError", "InternalError")), proc.stdout + proc.stderr
    assert "s3://bucket/huge" in proc.stdout


def test_a_huge_object_for_get_says_to_stream_it_before_allocating():
    size = 50 * 10**9  # a legitimate 50 GB object

    def handler(req):
        first, last = req.byte_range()
        last = min(last, size - 1)
        return response(206, b"", {"Content-Range": f"bytes {first}-{last}/{size}", "ETag": '"e"',
                                   "Content-Length": str(last - first + 1), "Connection": "close"}, length=False)

    with HostileServer(handler) as url:
        proc = run_isolated(url, """
            try:
                client.get("s3://bucket/big")
            except s3stream.TooLargeError as e:
                print("TooLargeError", e)
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("TooLargeError"), proc.stdout + proc.stderr
    assert "s3stream.open(uri, 'rb')" in proc.stdout and "50.0 GB" in proc.stdout


def test_max_get_bytes_refuses_a_real_object_and_open_still_streams_it(boto3_client, bucket, s3_endpoint):
    data = random_bytes(3 << 20, seed=5)
    boto3_client.put_object(Bucket=bucket, Key="big.bin", Body=data)
    small = s3stream.Client(endpoint_url=s3_endpoint, max_get_bytes=1 << 20)
    with pytest.raises(s3stream.TooLargeError, match="max_get_bytes"):
        small.get(s3_uri(bucket, "big.bin"))
    with pytest.raises(MemoryError):
        small.get_many([s3_uri(bucket, "big.bin")])
    assert bytes(small.get(s3_uri(bucket, "big.bin"), 0, 1 << 20)) == data[: 1 << 20]  # a range that fits
    with s3stream.open(s3_uri(bucket, "big.bin"), "rb", client=small) as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()


def test_a_content_range_total_of_2_to_the_64_neither_hangs_the_client_nor_passes():
    def handler(req):
        if req.key == "fine":
            return response(200, b"fine", {"ETag": '"f"'})
        return response(206, b"x" * 100, {"Content-Range": "bytes 0-99/18446744073709551615", "ETag": '"e"'})

    with HostileServer(handler) as url:
        proc = run_isolated(url, """
            try:
                client.get("s3://bucket/evil")
            except s3stream.S3StreamError as e:
                print(type(e).__name__, e)
            print(bytes(client.get("s3://bucket/fine")))  # the client still works
        """, timeout=20)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("InternalError") and "Content-Range" in lines[0], proc.stdout
    assert lines[1] == "b'fine'"


@pytest.mark.parametrize("body_framing", ["close-delimited", "chunked"])
def test_a_body_without_content_length_is_refused_not_returned_empty(body_framing):
    data = b"0123456789" * 100

    def handler(req):
        if body_framing == "chunked":
            body = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"
            return response(200, body, {"Transfer-Encoding": "chunked", "ETag": '"e"'}, length=False)
        return response(200, data, {"ETag": '"e"', "Connection": "close"}, length=False)

    with HostileServer(handler) as url:
        client = client_for(url)
        for fetch in (lambda: client.get("s3://bucket/k"), lambda: client.get_many(["s3://bucket/k"])):
            with pytest.raises(s3stream.InternalError, match="no Content-Length"):
                fetch()


@pytest.mark.parametrize("value", ["12abc", "-5", "", "99999999999999999999999"])
def test_an_invalid_length_is_refused(value):
    def handler(req):
        return response(200, b"" if req.method == "HEAD" else b"abc",
                        {"Content-Length": value, "ETag": '"e"', "Connection": "close"}, length=False)

    with HostileServer(handler) as url:
        client = client_for(url)
        # Ours, or libcurl's own refusal (reported as a failed transfer): named either way.
        with pytest.raises((s3stream.InternalError, s3stream.UnavailableError), match="Content-Length"):
            client.head("s3://bucket/k")
        with pytest.raises((s3stream.InternalError, s3stream.UnavailableError), match="Content-Length"):
            client.get_many(["s3://bucket/k"])


# --- versions ---------------------------------------------------------------------------------------------


def test_a_server_that_ignores_if_match_cannot_mix_two_versions():
    size = 20 << 20
    version = {"n": 0}

    def handler(req):
        version["n"] += 1
        etag = '"v1"' if version["n"] == 1 else '"v2"'  # replaced after the first piece; If-Match ignored
        first, last = req.byte_range()
        last = min(last, size - 1)
        return response(206, bytes(last - first + 1), {"Content-Range": f"bytes {first}-{last}/{size}", "ETag": etag})

    with HostileServer(handler) as url:
        with pytest.raises(s3stream.ObjectChangedError, match="v2"):
            client_for(url).get("s3://bucket/k")


def test_a_server_that_ignores_range_gets_the_wanted_bytes_and_is_cut_off():
    data = random_bytes(12 << 20, seed=8)

    def handler(req):
        return response(200, data, {"ETag": '"e"'})  # always the whole object

    with HostileServer(handler) as url:
        client = client_for(url)
        assert bytes(client.get("s3://bucket/k", 5 << 20, (5 << 20) + 100)) == data[5 << 20:(5 << 20) + 100]
        assert bytes(client.get("s3://bucket/k")) == data  # pieces of 8 MiB, each from a whole answer


# --- keys that look like paths ------------------------------------------------------------------------------


KEYS = ["dots/a/../b.txt", "dots/./c.txt", "dots/../escape.txt", "dots//double.txt", "dots/..", "dots/."]


def test_dot_segments_are_part_of_the_key_not_a_path(boto3_client, bucket, client):
    for i, key in enumerate(KEYS):
        boto3_client.put_object(Bucket=bucket, Key=key, Body=f"object {i}".encode())
    boto3_client.put_object(Bucket=bucket, Key="dots/b.txt", Body=b"the other object")
    for i, key in enumerate(KEYS):
        uri = s3_uri(bucket, key)
        assert bytes(client.get(uri)) == f"object {i}".encode(), key
        assert client.head(uri).size == len(f"object {i}"), key
        with s3stream.open(uri, "rb", client=client) as f:
            assert f.read() == f"object {i}".encode()
    client.put(s3_uri(bucket, "up/x/../y.txt"), b"written")
    keys = [o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket, Prefix="up/")["Contents"]]
    assert keys == ["up/x/../y.txt"]  # not "up/y.txt"


def test_a_listed_key_cannot_send_a_dataset_to_another_bucket(boto3_client, bucket, client):
    """A key such as shards/../../other-bucket/evil.tar stays a key of this bucket."""
    key = "shards/../../other-bucket/evil.tar"
    boto3_client.put_object(Bucket=bucket, Key=key, Body=b"not a tar at all, but this bucket's own object")
    assert bytes(client.get(s3_uri(bucket, key))).startswith(b"not a tar")
    with pytest.raises(s3stream.NotFoundError):  # and not "other-bucket/evil.tar" anywhere else
        client.get(f"s3://{bucket}/other-bucket/evil.tar")


# --- listings ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [["same", "same"], ["a", "b", "a"]])
def test_a_listing_whose_token_comes_back_is_refused_not_endless(tokens):
    """A server repeating a continuation token (or cycling through some) once made Client.list,
    MapDataset.from_prefix and `s3stream ls` loop forever."""
    served = {"n": 0}

    def handler(req):
        n = served["n"]
        served["n"] += 1
        token = tokens[min(n, len(tokens) - 1)]
        body = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bucket</Name>'
                f"<Contents><Key>k{n}</Key><Size>1</Size><ETag>&quot;e&quot;</ETag></Contents>"
                f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
                f"</ListBucketResult>").encode()
        return response(200, body, {"Content-Type": "application/xml"})

    with HostileServer(handler) as url:
        client = client_for(url)
        seen = []
        with pytest.raises(s3stream.CorruptDataError, match="a second time"):
            for info in client.list("s3://bucket/"):
                seen.append(info.key)
                assert len(seen) < 100, "the listing did not stop"
        assert served["n"] == len(tokens)  # stopped at the first repeat
        with pytest.raises(s3stream.CorruptDataError):
            s3stream.MapDataset.from_prefix("s3://bucket/", client=client)


# --- Ctrl-C and deadlines -------------------------------------------------------------------------------------


def stalled(req):
    """Answers HEAD and LIST at once; every GET and PUT stalls (headers never come)."""
    if req.method == "HEAD":
        return response(200, b"", {"Content-Length": str(64 << 20), "ETag": '"e"'}, length=False)
    if req.method == "GET" and "list-type" in req.target:
        import time

        time.sleep(60)
    if req.method in ("GET", "PUT"):
        import time

        time.sleep(60)
    return None


INTERRUPTIBLE = {
    "get": "client.get('s3://bucket/k')",
    "get range": "client.get('s3://bucket/k', 0, 100)",
    "get_many": "client.get_many([f's3://bucket/k{i}' for i in range(200)])",
    "open rb": "s3stream.open('s3://bucket/k', 'rb', client=client).read()",
    "list": "list(client.list('s3://bucket/'))",
    "put": "client.put('s3://bucket/k', b'x' * 1000)",
    "map dataset": "ds.__getitems__(list(range(64)))",
}
# What a call needs made before it starts (here, not in the call: importing torch takes seconds on a
# busy machine, and a Ctrl-C sent then would time the import, not the blocked call).
SETUP = {
    "map dataset": "ds = s3stream.MapDataset.from_objects([f's3://bucket/k{i}' for i in range(64)], client=client)",
}


@pytest.mark.parametrize("call", sorted(INTERRUPTIBLE))
@pytest.mark.timeout_s(60)
def test_ctrl_c_interrupts_a_blocked_call_within_a_second(call):
    import signal
    import time

    with HostileServer(stalled) as url:
        # The child notes when KeyboardInterrupt reached it: the time to exit after that (an
        # interpreter with torch loaded, on a busy machine) is not what is measured.
        # SIGINT gets Python's own handler whatever the child inherits: a shell that runs the
        # suite in the background (nohup, `&`) passes SIGINT on as ignored, and Python keeps it so.
        code = (f"import signal, sys, time, s3stream\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                f"client = s3stream.Client(endpoint_url={url!r})\n{SETUP.get(call, '')}\n"
                f"import faulthandler; faulthandler.dump_traceback_later(8, exit=True)\n"  # a hang shows where
                f"print('ready', flush=True)\ntry:\n    {INTERRUPTIBLE[call]}\nexcept KeyboardInterrupt:\n"
                f"    print('interrupted at', time.monotonic(), file=sys.stderr, flush=True)\n    raise\n")
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.7)  # blocked in the call by now
        assert child.poll() is None, child.stderr.read()
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=10)  # the child's faulthandler ends a hang at 8 s with its stacks
        finally:
            child.kill()
        err = child.stderr.read()
    assert "KeyboardInterrupt" in err and "interrupted at" in err, err
    took = float(err.split("interrupted at", 1)[1].split()[0]) - sent  # CLOCK_MONOTONIC: one clock for all
    assert took < 1.5, f"{call}: {took:.2f} s from Ctrl-C to KeyboardInterrupt"


def test_stall_timeout_ends_a_wait_for_the_first_byte():
    """A server that takes a request and says nothing: with stall_timeout the GET is dropped after
    it and retried, and the second try's answer is the one returned."""
    import time

    answered = {"n": 0}

    def handler(req):
        answered["n"] += 1
        if answered["n"] == 1:
            time.sleep(5)  # no status line, no header, nothing
        return response(200, b"the object", {"ETag": '"e"'})

    with HostileServer(handler) as url:
        client = client_for(url, stall_timeout=0.3, low_speed_time=20, max_attempts=3)
        t0 = time.monotonic()
        assert bytes(client.get("s3://bucket/k")) == b"the object"
        assert time.monotonic() - t0 < 2
    assert answered["n"] == 2


def test_request_timeout_bounds_a_trickling_server():
    """One byte every 0.4 s keeps a transfer clear of the stall detector for long; the deadline
    ends it (retries included) and says which setting to raise."""
    import time

    with HostileServer(lambda req: _slow_response(req, 1 << 20)) as url:
        client = s3stream.Client(endpoint_url=url, request_timeout=1.5, max_attempts=3)
        t0 = time.monotonic()
        with pytest.raises(s3stream.UnavailableError, match="request_timeout"):
            client.get("s3://bucket/k", 0, 1000)
        assert time.monotonic() - t0 < 3


def _slow_response(req, size):
    """A generator of response pieces: the headers, then one byte every 0.4 s."""
    import time

    first, last = req.byte_range() or (0, size - 1)
    last = min(last, size - 1)
    yield response(206, b"", {"Content-Range": f"bytes {first}-{last}/{size}", "ETag": '"e"',
                              "Content-Length": str(last - first + 1)}, length=False)
    for _ in range(last - first + 1):
        time.sleep(0.4)
        yield b"x"


# --- TLS ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    """A certificate for 127.0.0.1 signed by nobody the system trusts, and a server context."""
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificate (scripts/install_deps.sh installs it)")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(d / "cert.pem", d / "key.pem")
    return str(d / "cert.pem"), context


def test_an_untrusted_certificate_is_refused_at_once_and_says_how_to_trust_it(self_signed):
    cert, context = self_signed
    server = HostileServer(lambda req: response(200, b"secret", {"ETag": '"e"'}), tls=context)
    with server as url:
        client = s3stream.Client(endpoint_url=url, max_attempts=5)
        with pytest.raises(s3stream.PermissionDeniedError, match="ca_bundle=") as excinfo:
            client.get("s3://bucket/k")
        assert "gave up after" not in str(excinfo.value)  # permanent: not retried
        assert len(server.requests) == 0
        trusted = s3stream.Client(endpoint_url=url, ca_bundle=cert)
        assert bytes(trusted.get("s3://bucket/k")) == b"secret"


def test_a_redirect_is_not_followed_and_takes_no_credentials_elsewhere():
    elsewhere = HostileServer(lambda req: response(200, b"stolen", {"ETag": '"e"'}))
    with elsewhere as other_url:
        redirect = HostileServer(lambda req: response(307, b"", {"Location": other_url + req.target}))
        with redirect as url:
            with pytest.raises(s3stream.S3StreamError):
                client_for(url).get("s3://bucket/k")
    assert len(redirect.requests) == 1 and "authorization" in redirect.requests[0].headers
    assert elsewhere.requests == []


def test_xml_entities_are_not_expanded():
    body = (b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY secret SYSTEM "file:///etc/hostname">'
            b'<!ENTITY big "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">]>'
            b"<ListBucketResult><Name>bucket</Name><Contents><Key>k&secret;&big;</Key><Size>1</Size>"
            b"<ETag>&quot;e&quot;</ETag></Contents><IsTruncated>false</IsTruncated></ListBucketResult>")
    with HostileServer(lambda req: response(200, body, {"Content-Type": "application/xml"})) as url:
        keys = [o.key for o in client_for(url).list("s3://bucket/")]
    with open("/etc/hostname") as f:
        hostname = f.read().strip()
    assert all(hostname not in k and "aaaa" not in k for k in keys), keys
