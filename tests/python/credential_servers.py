"""Credentials that really expire, and the machine endpoints that hand them out, for
test_credentials.py.

    issuer = Issuer(lifetime_s=25)              # every credential it issues: a new key, secret, token
    with IssuerProxy(moto_url, issuer) as proxy:  # the client's endpoint_url: refuses what the issuer
        ...                                       # did not issue, a bad signature, or an expired key
    with FakeImds(issuer) as imds:                # IMDSv2 (or v1 only) at imds.url
    with FakeContainerEndpoint(issuer, token="t") as ep:   # ECS / EKS Pod Identity at ep.url
    with FakeSts(issuer) as sts:                  # AssumeRole(WithWebIdentity) at sts.url

moto does not know these keys; the proxy checks each request's SigV4 signature (botocore, through
sigv4check) against the issued secret and its session token, and its time against the expiration,
and answers 403 ExpiredToken / SignatureDoesNotMatch itself. What passes goes on to moto.
"""

from __future__ import annotations

import datetime
import http.server
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field

from proxies import FaultProxy, status
from sigv4check import verify

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


@dataclass
class Issued:
    key: str
    secret: str
    token: str
    expires: float  # time.time()


@dataclass
class Issuer:
    lifetime_s: float = 3600.0
    region: str = "us-east-1"
    issued: dict = field(default_factory=dict)  # key -> Issued
    used: set = field(default_factory=set)  # keys that signed an accepted request
    refused: list = field(default_factory=list)  # why each refused request was refused
    _counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, lifetime_s: float | None = None) -> Issued:
        with self._lock:
            n = next(self._counter)
            creds = Issued(f"ASIATEST{n:08d}", f"secret-{n}-" + "x" * 20, f"token-{n}",
                           time.time() + (self.lifetime_s if lifetime_s is None else lifetime_s))
            self.issued[creds.key] = creds
            return creds

    def document(self, creds: Issued, token_field: str = "Token") -> dict:
        expiration = datetime.datetime.fromtimestamp(creds.expires, datetime.timezone.utc)
        return {"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": creds.key, "SecretAccessKey": creds.secret,
                token_field: creds.token, "Expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "LastUpdated": "2026-12-01T00:00:00Z"}

    def problem(self, request) -> str | None:
        """Why the proxy refuses `request` (None: it passes)."""
        authorization = request.header("Authorization") or ""
        m = _CREDENTIAL.search(authorization)
        creds = self.issued.get(m.group(1)) if m else None
        if creds is None:
            return f"not signed with an issued key: {authorization[:60]!r}"
        if time.time() >= creds.expires:
            return f"{creds.key} expired {time.time() - creds.expires:.1f} s ago"
        if request.header("X-Amz-Security-Token") != creds.token:
            return f"{creds.key} came without its session token"
        check = verify(request, creds.key, creds.secret, self.region, session_token=creds.token)
        if not check.ok:
            return f"{creds.key}: {check.explain()[:300]}"
        return None


class IssuerProxy(FaultProxy):
    """A FaultProxy in front of moto that lets through only what the issuer's credentials signed."""

    def __init__(self, upstream_url: str, issuer: Issuer) -> None:
        super().__init__(upstream_url, keep_bodies=True, record=False)  # the signature covers the body's hash
        self.issuer = issuer

        def refused(request) -> bool:
            why = issuer.problem(request)
            if why is None:
                issuer.used.add(_CREDENTIAL.search(request.header("Authorization")).group(1))
                return False
            issuer.refused.append(why)
            return True

        self.inject(status(403, "ExpiredToken", "refused by the test's credential check"), match=refused, count=None)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Endpoint:
    """A small HTTP server on 127.0.0.1 answering with self.answer(handler) -> (status, body)."""

    def __init__(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                with owner.lock:
                    owner.requests.append((self.command, self.path, dict(self.headers)))
                code, body = owner.answer(self)
                data = body if isinstance(body, bytes) else body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _serve

            def log_message(self, *args) -> None:  # quiet
                pass

        self.lock = threading.Lock()
        self.requests: list = []
        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, handler) -> tuple:
        raise NotImplementedError

    def count(self, method: str, path_prefix: str) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.requests if m == method and p.startswith(path_prefix))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeImds(_Endpoint):
    """EC2 instance metadata: IMDSv2 (a PUT for a session token, then GETs with it), or IMDSv1 only
    (v2=False: the token PUT is answered 405). `body` replaces the credentials document."""

    ROLE = "s3stream-test-role"

    def __init__(self, issuer: Issuer, v2: bool = True, body: str | None = None) -> None:
        super().__init__()
        self.issuer, self.v2, self.body = issuer, v2, body
        self.tokens: set = set()

    def answer(self, h) -> tuple:
        if h.command == "PUT" and h.path == "/latest/api/token":
            if not self.v2:
                return 405, ""
            if not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return 400, "missing TTL"
            token = f"imds-session-{len(self.tokens)}"
            self.tokens.add(token)
            return 200, token
        if self.v2 and h.headers.get("X-aws-ec2-metadata-token") not in self.tokens:
            return 401, ""
        base = "/latest/meta-data/iam/security-credentials/"
        if h.command == "GET" and h.path == base:
            return 200, self.ROLE
        if h.command == "GET" and h.path == base + self.ROLE:
            return 200, self.body if self.body is not None else json.dumps(self.issuer.document(self.issuer.issue()))
        return 404, ""


class FakeContainerEndpoint(_Endpoint):
    """The ECS / EKS Pod Identity credentials endpoint at url + "/creds"; requests must carry
    Authorization: <self.token> when a token is set."""

    def __init__(self, issuer: Issuer, token: str | None = None) -> None:
        super().__init__()
        self.issuer, self.token = issuer, token

    def answer(self, h) -> tuple:
        if h.path != "/creds":
            return 404, ""
        if self.token is not None and h.headers.get("Authorization") != self.token:
            return 403, json.dumps({"code": "AccessDeniedException", "message": "bad token"})
        return 200, json.dumps(self.issuer.document(self.issuer.issue()))


class FakeSts(_Endpoint):
    """STS AssumeRoleWithWebIdentity (unsigned) and AssumeRole (signed: the key that signed it, with
    its session token, is kept in `signers`; a signature the issuer did not issue is refused). Each
    call's form is kept in `calls`; `refuse` makes it answer 403 InvalidIdentityToken."""

    ACTIONS = ("AssumeRoleWithWebIdentity", "AssumeRole")

    def __init__(self, issuer: Issuer) -> None:
        super().__init__()
        self.issuer, self.calls, self.signers, self.refuse = issuer, [], [], False

    def answer(self, h) -> tuple:
        from urllib.parse import parse_qs

        form = {k: v[0] for k, v in parse_qs(h.body.decode()).items()}
        with self.lock:
            self.calls.append(form)
        action = form.get("Action")
        if h.command != "POST" or action not in self.ACTIONS:
            return 400, "<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>"
        if action == "AssumeRole":
            m = _CREDENTIAL.search(h.headers.get("Authorization") or "")
            signer = self.issuer.issued.get(m.group(1)) if m else None
            if signer is None or h.headers.get("X-Amz-Security-Token") != signer.token or \
                    "/sts/aws4_request" not in h.headers.get("Authorization", ""):
                return 403, ("<ErrorResponse><Error><Code>InvalidClientTokenId</Code><Message>The security token "
                             "included in the request is invalid</Message></Error></ErrorResponse>")
            with self.lock:
                self.signers.append(signer.key)
        if self.refuse:
            return 403, ("<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                         "<Message>Couldn't retrieve verification key from your identity provider</Message>"
                         "</Error></ErrorResponse>")
        d = self.issuer.document(self.issuer.issue())
        return 200, (f"<{action}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                     f"<{action}Result><Credentials>"
                     f"<AccessKeyId>{d['AccessKeyId']}</AccessKeyId><SecretAccessKey>{d['SecretAccessKey']}"
                     f"</SecretAccessKey><SessionToken>{d['Token']}</SessionToken>"
                     f"<Expiration>{d['Expiration']}</Expiration></Credentials>"
                     f"</{action}Result></{action}Response>")
