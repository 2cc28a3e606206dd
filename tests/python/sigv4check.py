"""Independent checks of recorded SigV4-signed S3 requests.

verify(request, ...) re-signs a request recorded by proxies.RecordingProxy with botocore's own
S3SigV4Auth (same credentials, region and X-Amz-Date, the headers the client listed as signed, the
body bytes that went over the wire) and compares the result with what the client sent.

botocore canonicalises S3 requests by taking the URL path verbatim and the query string split on
'&'/'=' without re-encoding, so feeding it the raw request-target makes its canonical request use
exactly the bytes on the wire. That alone would accept a client that signs whatever malformed
encoding it sends, so `canonical_encoding_problems` separately checks the wire encoding is the one
SigV4 prescribes (every byte but A-Z a-z 0-9 - _ . ~ percent-encoded with upper-case hex, '/' kept
in paths), which is what S3 itself recomputes from the decoded request.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import dataclass
from unittest import mock
from urllib.parse import quote, unquote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<cred>[^,\s]+),\s*SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<sig>[0-9a-f]{64})$"
)


@dataclass
class SigCheck:
    ok: bool
    problems: list[str]
    canonical_request: str = ""

    def explain(self) -> str:
        return "\n".join(self.problems) + (f"\n--- botocore canonical request ---\n{self.canonical_request}" if self.canonical_request else "")


def _canonical(s: str, safe: str) -> bool:
    return s == quote(unquote(s, errors="strict"), safe=safe)


def canonical_encoding_problems(target: str) -> list[str]:
    """Where the request-target's encoding differs from SigV4's canonical URI encoding."""
    problems = []
    path, _, query = target.partition("?")
    if not _canonical(path, "/~"):
        problems.append(f"path {path!r} is not canonically encoded (expected {quote(unquote(path), safe='/~')!r})")
    if "#" in target:
        problems.append(f"raw '#' in the request target {target!r}")
    if query:
        for pair in query.split("&"):
            k, _, v = pair.partition("=")
            for part in (k, v):
                if not _canonical(part, "-_.~"):
                    problems.append(
                        f"query component {part!r} is not canonically encoded "
                        f"(expected {quote(unquote(part), safe='-_.~')!r})"
                    )
    return problems


def verify(req, access_key: str, secret_key: str, region: str, session_token: str | None = None) -> SigCheck:
    """Re-sign `req` (a proxies.RecordedRequest) with botocore and compare."""
    problems: list[str] = []
    authz = req.header("Authorization")
    if authz is None:
        return SigCheck(False, [f"{req!r}: no Authorization header"])
    m = _AUTH_RE.match(authz)
    if not m:
        return SigCheck(False, [f"{req!r}: malformed Authorization header {authz!r}"])
    cred = m["cred"].split("/")
    signed = m["signed"].split(";")
    amz_date = req.header("X-Amz-Date")
    if amz_date is None:
        return SigCheck(False, [f"{req!r}: no X-Amz-Date header"])
    if cred != [access_key, amz_date[:8], region, "s3", "aws4_request"]:
        problems.append(f"credential scope {m['cred']!r} != {access_key}/{amz_date[:8]}/{region}/s3/aws4_request")
    if signed != sorted(signed):
        problems.append(f"SignedHeaders not sorted: {signed}")
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed:
            problems.append(f"{required} is not signed (SignedHeaders={m['signed']})")
    if session_token is not None:
        if req.header("X-Amz-Security-Token") != session_token:
            problems.append("X-Amz-Security-Token missing or wrong")
        if "x-amz-security-token" not in signed:
            problems.append("x-amz-security-token is not signed")
    for name, _ in req.headers:
        if name.lower().startswith("x-amz-") and name.lower() not in signed:
            problems.append(f"header {name} is sent but not signed")
    content_sha = req.header("X-Amz-Content-SHA256")
    if req.body is None:
        problems.append("the proxy kept no body: cannot check")
    elif content_sha not in ("UNSIGNED-PAYLOAD", None):
        actual = hashlib.sha256(req.body).hexdigest()
        if content_sha != actual:
            problems.append(f"X-Amz-Content-SHA256 {content_sha} != sha256(body) {actual}")
    problems += canonical_encoding_problems(req.target)

    # Re-sign with botocore: only the headers the client says it signed, the raw target, the body.
    headers = {}
    for name, value in req.headers:
        if name.lower() in signed:
            if name.lower() in (h.lower() for h in headers):
                problems.append(f"header {name} sent more than once")
            headers[name] = value
    missing = [h for h in signed if h not in (n.lower() for n in headers)]
    if missing:
        problems.append(f"signed headers not sent: {missing}")
    aws_req = AWSRequest(method=req.method, url=f"http://{req.header('Host')}{req.target}", headers=headers, data=req.body or b"")
    if content_sha == "UNSIGNED-PAYLOAD":
        aws_req.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    creds = Credentials(access_key, secret_key, session_token)
    signer = S3SigV4Auth(creds, "s3", region)
    try:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
    except ValueError:
        return SigCheck(False, problems + [f"X-Amz-Date {amz_date!r} is not YYYYMMDDTHHMMSSZ"])
    captured = []  # the canonical request botocore signs, for the failure message
    original = signer.canonical_request
    signer.canonical_request = lambda r: captured.append(original(r)) or captured[-1]
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        signer.add_auth(aws_req)
    canonical_request = captured[0]
    m2 = _AUTH_RE.match(aws_req.headers["Authorization"])
    assert m2, aws_req.headers["Authorization"]
    if m2["signed"] != m["signed"]:
        problems.append(f"SignedHeaders: client {m['signed']!r}, botocore {m2['signed']!r}")
    if m2["sig"] != m["sig"]:
        problems.append(f"{req!r}: signature {m['sig']} != botocore's {m2['sig']}")
    return SigCheck(not problems, problems, canonical_request if problems else "")
