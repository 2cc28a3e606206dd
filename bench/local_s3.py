"""A local S3 stand-in for benchmarks: nginx serving a directory in path style (/bucket/key).

GET and HEAD (with Range) are served from `root`; each request can be delayed by a time to first
byte (`access_by_lua_block { ngx.sleep(T) }`) and capped per connection (`limit_rate`), which is how
real S3 behaves and what loopback hides. Requests are unsigned-tolerant: nginx ignores the
Authorization header, so any client configured with this endpoint can read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Optional

_CONF = """
worker_processes {workers};
daemon off;
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
{lua_module}
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  types {{ }}
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port} reuseport backlog=4096;
    root {root};
    etag on;
    location / {{
      {delay}
      {rate}
      limit_except GET HEAD {{ deny all; }}
    }}
  }}
}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalS3:
    """``with LocalS3(root, ttfb_s=0.02, rate=100 << 20) as endpoint:`` -> "http://127.0.0.1:PORT"."""

    def __init__(self, root: str, ttfb_s: float = 0.0, rate: int = 0, workers: int = 2, port: Optional[int] = None):
        self.root = os.path.abspath(root)
        self.ttfb_s = ttfb_s
        self.rate = rate
        self.workers = workers
        self.port = port or _free_port()
        self._proc: Optional[subprocess.Popen] = None
        self._tmp: Optional[str] = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        if shutil.which("nginx") is None:
            raise RuntimeError("nginx is not installed: apt-get install nginx libnginx-mod-http-lua")
        self._tmp = tempfile.mkdtemp(prefix="s3stream-nginx-")
        lua = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
        lua_module = ""
        if self.ttfb_s > 0:
            if not os.path.exists(lua):
                raise RuntimeError("TTFB needs libnginx-mod-http-lua (apt-get install libnginx-mod-http-lua)")
            lua_module = f"load_module /usr/lib/nginx/modules/ndk_http_module.so;\nload_module {lua};"
        conf = _CONF.format(
            workers=self.workers,
            tmp=self._tmp,
            port=self.port,
            root=self.root,
            lua_module=lua_module,
            delay=f"access_by_lua_block {{ ngx.sleep({self.ttfb_s}) }}" if self.ttfb_s > 0 else "",
            rate=f"limit_rate {self.rate};" if self.rate else "",
        )
        path = os.path.join(self._tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        self._proc = subprocess.Popen(
            ["nginx", "-p", self._tmp, "-c", path, "-e", os.path.join(self._tmp, "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1)
            except urllib.error.HTTPError:
                return self.endpoint  # answering (403/404 on "/"): up
            except OSError:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"nginx failed to start: {self._proc.stderr.read().decode()}")
                time.sleep(0.05)
            else:
                return self.endpoint
        raise RuntimeError("nginx did not start within 10 s")

    def __exit__(self, *exc) -> None:
        if self._proc:
            self._proc.terminate()
            self._proc.wait(10)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
