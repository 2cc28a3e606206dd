"""Standard-library HTTP/1.1 reverse proxies that sit between the client under test and moto.

Both proxies listen on 127.0.0.1 (a free port), serve every client connection in its own thread and
forward each request, byte for byte, over a kept-alive upstream connection of their own:

    with RecordingProxy(moto_url) as proxy:        # proxy.url is the endpoint_url for the client
        ...                                       # proxy.requests: every request exactly as received

    with FaultProxy(moto_url) as proxy:
        rule = proxy.inject(reset_mid_body(), match=lambda r: r.method == "GET", count=1)
        ...
        assert rule.injected == 1 and proxy.passed > 0

Faults (each a function returning a Fault):
    reset_mid_body(fraction=0.5, linger_s=0.1)  status line, headers and `fraction` of the body, then
                                     (after linger_s, for the client to read them) a TCP RST
    status(503, "SlowDown")          an S3 XML error response instead of forwarding (connection kept)
    stall(seconds=30, fraction=0.5)  headers and `fraction` of the body, then silence for `seconds`
                                     (or until the client hangs up), then a TCP RST
    reset_before_response(forward=False)  read the request (optionally forward it and drop the
                                     answer), then a TCP RST without a byte of response

`record=False` (either proxy) counts requests without keeping them: for soaks of millions.

`inject(..., hook=fn)` calls fn(request) when the fault fires, before the connection is cut, so a
test can change the world (e.g. replace the object) between a failed attempt and its retry.

Requests are framed per RFC 9112: Content-Length or chunked request bodies, `Expect: 100-continue`
(answered by the proxy), HEAD/1xx/204/304 responses without a body, chunked or close-delimited
response bodies, keep-alive on both sides.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = [
    "Fault",
    "FaultProxy",
    "FaultRule",
    "RecordedRequest",
    "RecordingProxy",
    "reset_before_response",
    "reset_mid_body",
    "stall",
    "status",
]

_MAX_HEAD = 256 * 1024
_RELAY_CHUNK = 256 * 1024


class _ConnectionClosed(Exception):
    """The peer closed the connection (cleanly or not)."""


class _Reader:
    """Buffered reads from a socket: heads, lines, exact byte counts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(_RELAY_CHUNK)
        except OSError:
            data = b""
        if not data:
            return False
        self.buf += data
        return True

    def read_head(self) -> bytes | None:
        """Bytes up to and including the blank line; None on EOF before any byte."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = bytes(self.buf[: i + 4])
                del self.buf[: i + 4]
                return head
            if len(self.buf) > _MAX_HEAD:
                raise _ConnectionClosed("header section too large")
            if not self._fill():
                if self.buf:
                    raise _ConnectionClosed("EOF inside a header section")
                return None

    def read_line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[: i + 2])
                del self.buf[: i + 2]
                return line
            if not self._fill():
                raise _ConnectionClosed("EOF inside a line")

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise _ConnectionClosed(f"EOF with {n - len(self.buf)} bytes missing")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_some(self, limit: int) -> bytes:
        """At most `limit` bytes, at least one; b"" at EOF."""
        if not self.buf and not self._fill():
            return b""
        data = bytes(self.buf[:limit])
        del self.buf[:limit]
        return data


def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
    return lines[0].decode("latin-1"), headers


def _get(headers: list[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _has_token(headers: list[tuple[str, str]], name: str, token: str) -> bool:
    name = name.lower()
    for k, v in headers:
        if k.lower() == name and token in [t.strip().lower() for t in v.split(",")]:
            return True
    return False


def _read_chunked(reader: _Reader) -> tuple[bytes, bytes]:
    """(raw bytes as framed on the wire, decoded body) of a chunked message body."""
    raw = bytearray()
    body = bytearray()
    while True:
        line = reader.read_line()
        raw += line
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailer section, ends with an empty line
                t = reader.read_line()
                raw += t
                if t == b"\r\n":
                    return bytes(raw), bytes(body)
        data = reader.read_exact(size + 2)
        raw += data
        body += data[:-2]


def _abort(sock: socket.socket | None) -> None:
    """Close with SO_LINGER 0: the peer sees a TCP RST, not an orderly FIN."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.close()
    except OSError:
        pass


@dataclass
class RecordedRequest:
    """One request as the proxy received it."""

    method: str
    target: str  # the request-target exactly as sent: "/bucket/a%20b?list-type=2&prefix=..."
    version: str  # "HTTP/1.1"
    headers: list[tuple[str, str]]  # in order, names as sent
    body: bytes | None  # de-chunked; None when the proxy does not keep bodies
    body_length: int  # length of the de-chunked body
    chunked: bool
    received_at: float = field(default_factory=time.time)
    status: int | None = None  # the status the client was sent (None: no response, e.g. a reset)
    fault: str | None = None  # the name of the fault injected into this request, if any

    def header(self, name: str, default: str | None = None) -> str | None:
        v = _get(self.headers, name)
        return default if v is None else v

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    @property
    def query_params(self) -> list[tuple[str, str]]:
        """Decoded query parameters in order ('+' is taken literally, as S3 clients send %2B)."""
        out = []
        for pair in self.query.split("&") if self.query else []:
            k, _, v = pair.partition("=")
            out.append((unquote(k), unquote(v)))
        return out

    @property
    def bucket(self) -> str:
        """The bucket of a path-style request ("" for the service root)."""
        return unquote(self.path).lstrip("/").split("/", 1)[0]

    @property
    def key(self) -> str:
        """The decoded key of a path-style request ("" for bucket-level requests)."""
        parts = self.path.split("/", 2)  # ["", bucket, key...]
        return unquote(parts[2]) if len(parts) > 2 else ""

    def __repr__(self) -> str:  # short: tests print many of these
        return f"<{self.method} {self.target} status={self.status} fault={self.fault}>"


@dataclass
class Fault:
    """What to do to a matched request. Build with the functions below."""

    kind: str
    fraction: float = 0.5
    seconds: float = 0.0
    code: int = 0
    s3_code: str = ""
    message: str = ""
    forward: bool = False

    @property
    def name(self) -> str:
        if self.kind == "status":
            return f"status({self.code}, {self.s3_code})"
        return self.kind


def reset_mid_body(fraction: float = 0.5, linger_s: float = 0.1) -> Fault:
    return Fault("reset_mid_body", fraction=fraction, seconds=linger_s)


def status(code: int, s3_code: str, message: str | None = None) -> Fault:
    return Fault("status", code=code, s3_code=s3_code, message=message or f"Injected {s3_code} by the test proxy")


def stall(seconds: float = 30.0, fraction: float = 0.5) -> Fault:
    return Fault("stall", seconds=seconds, fraction=fraction)


def reset_before_response(forward: bool = False) -> Fault:
    return Fault("reset_before_response", forward=forward)


@dataclass
class FaultRule:
    fault: Fault
    match: Callable[[RecordedRequest], bool]
    count: int | None  # None: every matching request
    hook: Callable[[RecordedRequest], None] | None = None
    injected: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)  # the requests it hit
    client_hung_up: int = 0  # stalls the client abandoned before the stall ended
    body_bytes_sent: list[int] = field(default_factory=list)  # per cut-short response
    hook_errors: list[BaseException] = field(default_factory=list)

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.injected >= self.count


class _Proxy:
    """The forwarding machinery shared by both proxies."""

    def __init__(self, upstream_url: str, keep_bodies: bool = True, record: bool = True) -> None:
        u = urlsplit(upstream_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {upstream_url!r}")
        self.upstream = (u.hostname, u.port or 80)
        self.keep_bodies = keep_bodies
        self.record = record  # False: requests are counted, not kept (a soak sends millions)
        self.requests: list[RecordedRequest] = []
        self.passed = 0  # requests forwarded and answered without interference
        self.errors: list[str] = []  # proxy-side trouble (upstream unreachable, bad framing)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(512)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.passed = 0
            self.errors.clear()

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _close(self._listener)
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------------------------

    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.add(s)

    def _untrack(self, s: socket.socket | None) -> None:
        if s is not None:
            with self._lock:
                self._sockets.discard(s)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self._stop.is_set():
                _close(conn)
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._track(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up = _Upstream(self)
        try:
            reader = _Reader(client)
            while not self._stop.is_set():
                head = reader.read_head()
                if head is None:
                    return
                request_line, headers = _parse_head(head)
                method, target, version = request_line.split(" ", 2)
                chunked = _has_token(headers, "Transfer-Encoding", "chunked")
                length = _get(headers, "Content-Length")
                if _has_token(headers, "Expect", "100-continue") and (chunked or int(length or 0) > 0):
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if chunked:
                    raw_body, body = _read_chunked(reader)
                elif length is not None:
                    raw_body = body = reader.read_exact(int(length))
                else:
                    raw_body = body = b""
                req = RecordedRequest(
                    method=method,
                    target=target,
                    version=version,
                    headers=headers,
                    body=body if self.keep_bodies else None,
                    body_length=len(body),
                    chunked=chunked,
                )
                if self.record:
                    with self._lock:
                        self.requests.append(req)
                client_wants_close = _has_token(headers, "Connection", "close") or version == "HTTP/1.0"
                keep = self._handle(client, up, req, head + raw_body)
                if not keep or client_wants_close:
                    return
        except (_ConnectionClosed, OSError, ValueError) as e:
            if not self._stop.is_set() and not isinstance(e, (_ConnectionClosed, ConnectionError)):
                with self._lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            up.close()
            self._untrack(client)
            _close(client)

    def _handle(self, client: socket.socket, up: "_Upstream", req: RecordedRequest, raw: bytes) -> bool:
        """Serve one request; return whether the client connection stays open."""
        resp = up.exchange(raw, req.method)
        req.status = resp.status
        with self._lock:  # counted before the client can see the response
            self.passed += 1
        return resp.relay(client)


class _Response:
    """An upstream response whose head has been read and whose body is still on the socket."""

    def __init__(self, up: "_Upstream", head: bytes, method: str) -> None:
        self.up = up
        self.head = head
        status_line, self.headers = _parse_head(head)
        self.status = int(status_line.split(" ", 2)[1])
        no_body = method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200
        self.chunked = not no_body and _has_token(self.headers, "Transfer-Encoding", "chunked")
        cl = _get(self.headers, "Content-Length")
        if no_body:
            self.length: int | None = 0
        elif self.chunked:
            self.length = None
        elif cl is not None:
            self.length = int(cl)
        else:
            self.length = None  # delimited by the upstream closing the connection
        self.close_delimited = not no_body and not self.chunked and cl is None
        self.upstream_closes = self.close_delimited or _has_token(self.headers, "Connection", "close")

    def body_pieces(self):
        """The body as it is framed on the wire, in pieces."""
        r = self.up.reader
        if self.chunked:
            while True:
                line = r.read_line()
                yield line
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:
                        t = r.read_line()
                        yield t
                        if t == b"\r\n":
                            return
                left = size + 2
                while left:
                    piece = r.read_some(min(left, _RELAY_CHUNK))
                    if not piece:
                        raise _ConnectionClosed("upstream EOF inside a chunk")
                    left -= len(piece)
                    yield piece
        elif self.length is not None:
            left = self.length
            while left:
                piece = r.read_some(min(left, _RELAY_CHUNK))
                if not piece:
                    raise _ConnectionClosed("upstream EOF inside a body")
                left -= len(piece)
                yield piece
        else:
            while True:
                piece = r.read_some(_RELAY_CHUNK)
                if not piece:
                    return
                yield piece

    def relay(self, client: socket.socket) -> bool:
        """Send the whole response to the client; return whether both sides stay open."""
        client.sendall(self.head)
        for piece in self.body_pieces():
            client.sendall(piece)
        if self.upstream_closes:
            self.up.close()
        return not self.close_delimited and not _has_token(self.headers, "Connection", "close")

    def relay_part(self, client: socket.socket, fraction: float) -> int:
        """Send the head and about `fraction` of the body; return the body bytes sent."""
        client.sendall(self.head)
        budget = int(self.length * fraction) if self.length else None
        sent = 0
        for piece in self.body_pieces():
            if budget is not None:
                piece = piece[: budget - sent]
            if piece:
                client.sendall(piece)
                sent += len(piece)
            if budget is None or sent >= budget:
                break  # without a known length: cut after the first piece
        self.up.close()  # the rest of this response is abandoned
        return sent


class _Upstream:
    """The proxy's kept-alive connection to the upstream server, on behalf of one client connection."""

    def __init__(self, proxy: _Proxy) -> None:
        self.proxy = proxy
        self.sock: socket.socket | None = None
        self.reader: _Reader | None = None
        self.used = False

    def _connect(self) -> None:
        self.sock = socket.create_connection(self.proxy.upstream, timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.proxy._track(self.sock)
        self.reader = _Reader(self.sock)
        self.used = False

    def close(self) -> None:
        self.proxy._untrack(self.sock)
        _close(self.sock)
        self.sock = None
        self.reader = None

    def exchange(self, raw: bytes, method: str) -> _Response:
        """Send a request, return its (final, non-1xx) response with the body still unread."""
        for attempt in range(2):
            if self.sock is None:
                self._connect()
            reused = self.used
            self.used = True
            try:
                self.sock.sendall(raw)
                while True:
                    head = self.reader.read_head()
                    if head is None:
                        raise _ConnectionClosed("upstream closed before responding")
                    resp = _Response(self, head, method)
                    if not 100 <= resp.status < 200:
                        return resp
            except (_ConnectionClosed, OSError):
                self.close()
                if not reused or attempt == 1:  # a fresh connection failed: a real upstream failure
                    raise
        raise AssertionError("unreachable")


class RecordingProxy(_Proxy):
    """Forwards every request unchanged; `requests` holds them exactly as received, with bodies."""

    def __init__(self, upstream_url: str) -> None:
        super().__init__(upstream_url, keep_bodies=True)


class FaultProxy(_Proxy):
    """Forwards requests, except those matched by an injected rule, which get that rule's fault."""

    def __init__(self, upstream_url: str, keep_bodies: bool = False, record: bool = True) -> None:
        super().__init__(upstream_url, keep_bodies=keep_bodies, record=record)
        self.rules: list[FaultRule] = []

    def inject(
        self,
        fault: Fault | Callable[[], Fault],
        match: Callable[[RecordedRequest], bool] = lambda req: True,
        count: int | None = 1,
        hook: Callable[[RecordedRequest], None] | None = None,
    ) -> FaultRule:
        """Apply `fault` to the next `count` requests for which match(request) is true (count=None:
        all of them). Rules are tried in the order they were added; the first that applies wins."""
        if not isinstance(fault, Fault):
            fault = fault()
        rule = FaultRule(fault=fault, match=match, count=count, hook=hook)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear_faults(self) -> None:
        with self._lock:
            self.rules.clear()

    @property
    def injected(self) -> int:
        with self._lock:
            return sum(r.injected for r in self.rules)

    def _pick(self, req: RecordedRequest) -> FaultRule | None:
        with self._lock:
            for rule in self.rules:
                if rule.exhausted:
                    continue
                try:
                    hit = rule.match(req)
                except Exception as e:  # a broken predicate must not look like a passing test
                    self.errors.append(f"match raised {type(e).__name__}: {e}")
                    hit = False
                if hit:
                    rule.injected += 1
                    if self.record:
                        rule.requests.append(req)
                    req.fault = rule.fault.name
                    return rule
        return None

    def _run_hook(self, rule: FaultRule, req: RecordedRequest) -> None:
        if rule.hook is None:
            return
        try:
            rule.hook(req)
        except BaseException as e:
            rule.hook_errors.append(e)
            with self._lock:
                self.errors.append(f"hook raised {type(e).__name__}: {e}")

    def _handle(self, client: socket.socket, up: _Upstream, req: RecordedRequest, raw: bytes) -> bool:
        rule = self._pick(req)
        if rule is None:
            return super()._handle(client, up, req, raw)
        f = rule.fault

        if f.kind == "status":
            self._run_hook(rule, req)
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{f.s3_code}</Code><Message>{f.message}</Message>"
                f"<Resource>{req.path}</Resource><RequestId>FAULTPROXY{rule.injected:06d}</RequestId></Error>"
            ).encode()
            reason = {500: "Internal Server Error", 503: "Service Unavailable"}.get(f.code, "Error")
            head = (
                f"HTTP/1.1 {f.code} {reason}\r\n"
                "Content-Type: application/xml\r\n"
                f"Content-Length: {0 if req.method == 'HEAD' else len(body)}\r\n"
                "x-amz-request-id: FAULTPROXY\r\n"
                "\r\n"
            ).encode()
            client.sendall(head if req.method == "HEAD" else head + body)
            req.status = f.code
            return True

        if f.kind == "reset_before_response":
            if f.forward:
                resp = up.exchange(raw, req.method)
                for _ in resp.body_pieces():
                    pass
                if resp.upstream_closes:
                    up.close()
            self._run_hook(rule, req)
            self._untrack(client)
            _abort(client)
            return False

        # reset_mid_body and stall: a real response, cut short.
        resp = up.exchange(raw, req.method)
        req.status = resp.status
        sent = resp.relay_part(client, f.fraction)
        with self._lock:
            rule.body_bytes_sent.append(sent)
        self._run_hook(rule, req)
        if f.kind == "reset_mid_body":
            # Give the client a moment to take in what was sent: a RST discards data still queued,
            # and the point of this fault is a transfer broken off after part of the body arrived.
            self._stop.wait(f.seconds)
        if f.kind == "stall":
            deadline = time.monotonic() + f.seconds
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                readable, _, _ = select.select([client], [], [], min(left, 0.2))
                if readable:
                    try:
                        data = client.recv(65536)
                    except OSError:
                        data = b""
                    if not data:  # the client gave up on us: what a stall should cause
                        with self._lock:
                            rule.client_hung_up += 1
                        break
        self._untrack(client)
        _abort(client)
        return False
