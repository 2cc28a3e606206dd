"""A scripted HTTP server on a raw socket, for what no real S3 server does: wrong lengths, absurd
sizes, missing headers, ignored preconditions. The test gives a function from the request to the
raw response bytes; the server sends exactly those (then keeps the connection for the next request,
or closes it when the response says ``Connection: close`` or the function returns None).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional


@dataclass
class Request:
    method: str
    target: str
    headers: Dict[str, str] = field(default_factory=dict)  # lower-case names

    @property
    def key(self) -> str:
        """The object key of a path-style request (/bucket/key)."""
        path = self.target.split("?", 1)[0]
        return path.split("/", 2)[2] if path.count("/") >= 2 else ""

    def byte_range(self) -> Optional[tuple]:
        """(first, last) of a "Range: bytes=first-last" header, last None when open."""
        value = self.headers.get("range")
        if not value or not value.startswith("bytes="):
            return None
        first, _, last = value[len("bytes="):].partition("-")
        return int(first), (int(last) if last else None)


def response(status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None, length: bool = True) -> bytes:
    """A raw HTTP/1.1 response; ``length=False`` leaves Content-Length out (the caller closes)."""
    reason = {200: "OK", 206: "Partial Content", 404: "Not Found", 412: "Precondition Failed"}.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}"]
    all_headers = dict(headers or {})
    if length and not any(k.lower() == "content-length" for k in all_headers):
        all_headers["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class HostileServer:
    """``with HostileServer(handler) as url:``; ``handler(Request)`` returns the response bytes,
    an iterable of pieces to send as they come (slowly, say; the connection closes after them),
    or None to close the connection without an answer."""

    def __init__(self, handler: Callable[[Request], Optional[bytes]], tls: Optional[object] = None) -> None:
        self.handler = handler
        self.tls = tls  # an ssl.SSLContext: serve HTTPS
        self.requests: List[Request] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._closed = False
        self._threads: List[threading.Thread] = []
        self._lock = threading.Lock()
        self._conns: set = set()  # accepted connections not yet finished

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> str:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self.url

    def __exit__(self, *exc: object) -> None:
        # shutdown() first: it wakes the thread blocked in accept(). Closing alone leaves it blocked,
        # and when a signal (a DataLoader worker's SIGCHLD, say) restarts that accept(), the kernel
        # looks the descriptor number up again: by then it may be another test's listening socket,
        # whose connections this server would answer.
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for t in self._threads:
            t.join(timeout=10)
        self._sock.close()
        with self._lock:  # (held, so that no handler closes its connection meanwhile)
            for conn in self._conns:  # end the handlers still waiting on a client or sending slowly
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            with self._lock:
                self._conns.add(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._serve_connection(conn)
        finally:
            with self._lock:
                self._conns.discard(conn)
                conn.close()

    def _serve_connection(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # the client refused the certificate: nothing to serve
                conn.close()
                return
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body_len = int(headers.get("content-length", "0"))
                while len(buf) < body_len:
                    buf += conn.recv(65536)
                buf = buf[body_len:]
                request = Request(method, target, headers)
                self.requests.append(request)
                raw = self.handler(request)
                if raw is None:
                    return
                try:
                    if not isinstance(raw, (bytes, bytearray)):  # pieces sent as they come, then close
                        for piece in raw:
                            conn.sendall(piece)
                        return
                    conn.sendall(raw)
                except OSError:
                    return
                if b"\r\nconnection: close" in raw.split(b"\r\n\r\n", 1)[0].lower():
                    return
