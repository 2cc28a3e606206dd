"""A local S3 stand-in with S3's latency model: nginx serving a directory, moto for the rest.

Real S3 answers each request after ~10-50 ms (time to first byte) and delivers ~100 MB/s per
connection; a server on loopback answers in microseconds and hides exactly the differences a data
loader is built for. This server puts the latency back, in the server (no root, no netem):

* ``GET`` and ``HEAD`` of ``/<bucket>/<key>`` (path style, ``Range`` and ``If-Match`` supported) are
  served by nginx from ``root/<bucket>/<key>``, each delayed by ``ttfb_s``
  (``access_by_lua_block { ngx.sleep(T) }``) and capped per connection at ``rate`` bytes/s
  (``limit_rate``);
* ``ListObjects`` (V2 and V1) of those buckets is answered by a small Lua handler from a listing of
  the directory taken at start (:meth:`LocalS3.refresh_listing` takes it again), with the same TTFB
  and the ETags nginx itself sends, so LIST, HEAD and GET agree;
* everything else (PUT, multipart uploads, DELETE, bucket operations, and GETs of keys that are not
  in the directory) is proxied to a moto server started alongside, so a client that writes (an
  index sidecar, a checkpoint) gets real S3 answers. Objects written that way live in moto, are
  readable back through this endpoint, but are not listed with the directory's objects;
* the object reads in flight are counted, with their peak (:meth:`LocalS3.inflight_peak`): the
  concurrency a client really used, for a ceiling at the same concurrency;
* with ``synthetic_keys=n``, the bucket ``synth`` lists a synthetic key space of 3 x n keys
  computed from their index (bench/keyspace.py: no files), with the same TTFB per LIST, for
  listing benchmarks at millions of keys; :meth:`LocalS3.lists` counts its LIST requests.

Authentication is not checked: nginx ignores ``Authorization``, moto runs without auth, so any
client configured with this endpoint and any credentials can read. ``ttfb_s=0`` and ``rate=0``
mean plain loopback.

    with LocalS3("/data", ttfb_s=0.02, rate=100_000_000) as endpoint:   # "http://127.0.0.1:PORT"
        ...

Needs the Debian packages ``nginx`` and ``libnginx-mod-http-lua`` (the Lua module is needed for a
TTFB and for LIST; without it, ``ttfb_s=0`` still works and LIST goes to moto).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Tuple

from . import keyspace

LUA_MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
SYNTHETIC_BUCKET = "synth"  # where LocalS3(synthetic_keys=n) lists bench/keyspace.py's keys
NDK_MODULE = "/usr/lib/nginx/modules/ndk_http_module.so"

_CONF = """
worker_processes {workers};
daemon off;
{user}
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
{modules}
events {{ worker_connections 16384; multi_accept on; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_max_body_size 0;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  types {{ }}
  default_type application/octet-stream;
  {lua_http}
  upstream s3s_moto {{
    server 127.0.0.1:{moto_port};
    keepalive 32;
  }}
  server {{
    listen 127.0.0.1:{port} reuseport backlog=4096;
    root {root};
    etag on;
    if_modified_since off;
    server_tokens off;
    location / {{
      {route}
      {rate}
      try_files $uri @moto;
    }}
    location @moto {{
      proxy_pass http://s3s_moto;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 300s;
    }}
    {list_location}
  }}
}}
"""

# Routing and TTFB with the Lua module: writes, sub-resources (?uploads, ?tagging, ...) and
# unknown buckets go to moto; LIST of a served bucket to the Lua lister; object reads are delayed
# by the TTFB and served from the directory (try_files), or by moto when the file does not exist.
_LUA_ROUTE = r"""
      set $s3s_counted "";
      access_by_lua_block {
        local method = ngx.req.get_method()
        if method ~= "GET" and method ~= "HEAD" then return ngx.exec("@moto") end
        local uri = ngx.var.uri
        local bucket_only = uri:match("^/[^/]+/?$")
        local args = ngx.var.args
        if bucket_only then
          if SYNTH_N > 0 and uri:match("^/([^/]+)/?$") == SYNTH_BUCKET then return ngx.exec("@synth") end
          if args == nil or args == "" or args:find("list%-type=") or args:find("prefix=") or
             args:find("delimiter=") or args:find("marker=") or args:find("max%-keys=") then
            return ngx.exec("@list")
          end
          return ngx.exec("@moto")
        end
        if args ~= nil and args ~= "" then
          for _, sub in ipairs({"uploadId", "uploads", "tagging", "acl", "versionId", "attributes",
                                "legal-hold", "retention", "torrent", "partNumber"}) do
            if args:find(sub, 1, true) then return ngx.exec("@moto") end
          end
        end
        local stats = ngx.shared.s3s_stats
        local n = stats:incr("inflight", 1, 0)
        if n > (stats:get("peak") or 0) then stats:set("peak", n) end
        ngx.var.s3s_counted = "1"
        if TTFB > 0 then ngx.sleep(TTFB) end
      }
"""

# Without the Lua module: no TTFB, no lister (LIST goes to moto, which does not know the files).
_PLAIN_ROUTE = r"""
      error_page 418 = @moto;
      if ($request_method !~ ^(GET|HEAD)$) { return 418; }
      if ($args ~ "(list-type|uploadId|uploads|tagging|acl|versionId|attributes|partNumber)") { return 418; }
      if ($uri ~ "^/[^/]+/?$") { return 418; }
"""

_LUA_HTTP = r"""
  lua_package_path ";;";
  init_by_lua_block {
    TTFB = __TTFB__
    LISTING_DIR = "__LISTING_DIR__"
    SYNTH_N = __SYNTH_N__
    SYNTH_BUCKET = "__SYNTH_BUCKET__"
    -- Shared by the LIST handlers (@list, @synth): the request's parameters, XML escaping, and the
    -- ListBucketResult document around the items (XML strings) a handler found.
    function s3s_esc(s)
      return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"):gsub("'", "&apos;"))
    end
    function s3s_list_request()
      local args = ngx.req.get_uri_args(0)
      local function arg(name)
        local v = args[name]
        if type(v) == "table" then v = v[1] end
        if v == true then v = "" end
        return v
      end
      local r = {arg = arg, v2 = arg("list-type") == "2", prefix = arg("prefix") or "", delim = arg("delimiter") or ""}
      r.max_keys = math.max(0, math.min(1000, tonumber(arg("max-keys") or "1000") or 1000))
      if r.v2 then r.after = arg("continuation-token") or arg("start-after") or "" else r.after = arg("marker") or "" end
      return r
    end
    function s3s_list_response(r, bucket, items, n, truncated, last)
      local esc, arg = s3s_esc, r.arg
      local head = {'<?xml version="1.0" encoding="UTF-8"?>\n',
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
        "<Name>", esc(bucket), "</Name><Prefix>", esc(r.prefix), "</Prefix>",
        "<MaxKeys>", tostring(r.max_keys), "</MaxKeys>",
        "<IsTruncated>", truncated and "true" or "false", "</IsTruncated>"}
      if r.delim ~= "" then head[#head + 1] = "<Delimiter>" .. esc(r.delim) .. "</Delimiter>" end
      if r.v2 then
        head[#head + 1] = "<KeyCount>" .. n .. "</KeyCount>"
        if arg("continuation-token") then
          head[#head + 1] = "<ContinuationToken>" .. esc(arg("continuation-token")) .. "</ContinuationToken>"
        end
        if arg("start-after") then head[#head + 1] = "<StartAfter>" .. esc(arg("start-after")) .. "</StartAfter>" end
        if truncated and last then head[#head + 1] = "<NextContinuationToken>" .. esc(last) .. "</NextContinuationToken>" end
      else
        head[#head + 1] = "<Marker>" .. esc(r.after) .. "</Marker>"
        if truncated and last then head[#head + 1] = "<NextMarker>" .. esc(last) .. "</NextMarker>" end
      end
      ngx.header["Content-Type"] = "application/xml"
      ngx.print(table.concat(head) .. table.concat(items) .. "</ListBucketResult>")
    end
  }
  # Object reads in flight (from the TTFB wait to the last byte handed to the kernel) and their
  # peak: how many requests a client really keeps going, for a ceiling at the same concurrency.
  lua_shared_dict s3s_stats 64k;
  log_by_lua_block {
    if ngx.var.s3s_counted == "1" then ngx.shared.s3s_stats:incr("inflight", -1, 0) end
  }
"""

# ListObjectsV2 / V1 over the listing files written by LocalS3.refresh_listing(): one file per
# bucket, "key\tsize\tetag\tlast_modified" per line, sorted by key (bytes).
_LIST_LOCATION = r"""
    location = /__s3stream_bench/inflight {
      content_by_lua_block {
        local stats = ngx.shared.s3s_stats
        local now = stats:get("inflight") or 0
        ngx.print('{"inflight": ' .. now .. ', "peak": ' .. (stats:get("peak") or 0) ..
                  ', "lists": ' .. (stats:get("lists") or 0) .. '}')
        if ngx.var.arg_reset then stats:set("peak", now); stats:set("lists", 0) end
      }
    }
    location @list {
      content_by_lua_block {
        if TTFB > 0 then ngx.sleep(TTFB) end
        local bucket = ngx.var.uri:match("^/([^/]+)/?$")
        local f = bucket and io.open(LISTING_DIR .. "/" .. bucket .. ".tsv", "r")
        if not f then return ngx.exec("@moto") end
        local r = s3s_list_request()
        local prefix, delim, max_keys, after, esc = r.prefix, r.delim, r.max_keys, r.after, s3s_esc
        local out, n, truncated, last, last_prefix = {}, 0, false, nil, nil
        local plen = #prefix
        for line in f:lines() do
          local key, size, etag, mtime = line:match("^(.-)\t(%d+)\t(.-)\t(.-)$")
          if key and key:sub(1, plen) == prefix and key > after and
             not (after ~= "" and delim ~= "" and after:sub(-#delim) == delim and key:sub(1, #after) == after) then
            local cp = nil
            if delim ~= "" then
              local p = key:find(delim, plen + 1, true)
              if p then cp = key:sub(1, p + #delim - 1) end
            end
            if not (cp and cp == last_prefix) then
              if n >= max_keys then truncated = true; break end
              n = n + 1
              if cp then
                last_prefix = cp
                last = cp
                out[#out + 1] = "<CommonPrefixes><Prefix>" .. esc(cp) .. "</Prefix></CommonPrefixes>"
              else
                last = key
                out[#out + 1] = "<Contents><Key>" .. esc(key) .. "</Key><LastModified>" .. mtime ..
                  "</LastModified><ETag>&quot;" .. etag .. "&quot;</ETag><Size>" .. size ..
                  "</Size><StorageClass>STANDARD</StorageClass></Contents>"
              end
            end
          end
        end
        f:close()
        s3s_list_response(r, bucket, out, n, truncated, last)
      }
    }
"""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when the process that started it goes away (killed included),
    so no nginx or moto outlives the bench or the test that started it."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_etag(st: os.stat_result) -> str:
    """The ETag nginx sends for a static file (without quotes): hex mtime, '-', hex size."""
    return f"{int(st.st_mtime):x}-{st.st_size:x}"


def have_lua() -> bool:
    return os.path.exists(LUA_MODULE) and os.path.exists(NDK_MODULE)


def make_world_readable(path: str) -> None:
    """nginx workers may run as another user: let them traverse and read `path`."""
    for dirpath, dirnames, filenames in os.walk(path):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o555)
        for name in filenames:
            p = os.path.join(dirpath, name)
            mode = os.stat(p).st_mode
            if mode & 0o444 != 0o444:
                os.chmod(p, mode | 0o444)


class LocalS3:
    """nginx (+ Lua) serving ``root`` in path style with a TTFB and a per-connection rate cap,
    and moto behind it for everything else.

    ``with LocalS3(root, ttfb_s=0.02, rate=100_000_000) as endpoint:`` -> "http://127.0.0.1:PORT".
    ``rate`` is bytes per second per connection (0: unlimited). ``moto=False`` starts no moto
    server (writes then fail with 502). ``workers`` is nginx's worker_processes.
    """

    def __init__(
        self,
        root: str,
        ttfb_s: float = 0.0,
        rate: int = 0,
        workers: int = 2,
        port: Optional[int] = None,
        moto: bool = True,
        buckets: Optional[List[str]] = None,
        synthetic_keys: int = 0,
    ) -> None:
        self.root = os.path.abspath(root)
        self.ttfb_s = float(ttfb_s)
        self.rate = int(rate)
        self.workers = workers
        self.port = port or free_port()
        self.use_moto = moto
        self.moto_port = 0
        self.buckets = buckets
        self.lua = have_lua()
        self.synthetic_keys = int(synthetic_keys)
        self._nginx: Optional[subprocess.Popen] = None
        self._moto: Optional[subprocess.Popen] = None
        self._tmp: Optional[str] = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> str:
        if shutil.which("nginx") is None:
            raise RuntimeError("nginx is not installed: apt-get install nginx libnginx-mod-http-lua")
        if (self.ttfb_s > 0 or self.synthetic_keys) and not self.lua:
            raise RuntimeError("a time to first byte and the synthetic key space need libnginx-mod-http-lua "
                               "(apt-get install libnginx-mod-http-lua)")
        self._tmp = tempfile.mkdtemp(prefix="s3stream-nginx-")
        os.chmod(self._tmp, 0o755)
        os.makedirs(os.path.join(self._tmp, "listing"))
        os.chmod(os.path.join(self._tmp, "listing"), 0o755)
        try:
            if self.use_moto:
                self._start_moto()
            else:
                self.moto_port = free_port()  # nothing listens: proxied requests answer 502
            self.refresh_listing()
            self._start_nginx()
            if self.use_moto:
                for bucket in self._buckets():
                    self._create_moto_bucket(bucket)
        except BaseException:
            self.stop()
            raise
        return self.endpoint

    def stop(self) -> None:
        for proc in (self._nginx, self._moto):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._nginx = self._moto = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the listing ---------------------------------------------------------------------------------
    def _buckets(self) -> List[str]:
        if self.buckets is not None:
            return list(self.buckets)
        return sorted(d for d in os.listdir(self.root) if os.path.isdir(os.path.join(self.root, d)))

    def _inflight(self, reset: bool) -> Dict[str, int]:
        url = f"{self.endpoint}/__s3stream_bench/inflight" + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def inflight_peak(self, reset: bool = True) -> Optional[int]:
        """The most object reads (GET/HEAD of a served file) in flight at once since the last
        reset, counted from the TTFB wait to the last byte sent; None without the Lua module."""
        return int(self._inflight(reset)["peak"]) if self.lua else None

    def lists(self, reset: bool = False) -> int:
        """LIST requests the synthetic bucket answered since the last reset (of this or of
        :meth:`inflight_peak`)."""
        return int(self._inflight(reset)["lists"])

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Waits until no object read is in flight (a client killed mid-transfer leaves its requests
        counted until nginx notices the closed connection); False if some still are after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.lua and self._inflight(False)["inflight"] > 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def refresh_listing(self) -> Dict[str, int]:
        """Takes the directory's listing again (after files were added); returns keys per bucket."""
        assert self._tmp is not None, "start() first"
        make_world_readable(self.root)
        counts = {}
        for bucket in self._buckets():
            base = os.path.join(self.root, bucket)
            rows: List[Tuple[bytes, str]] = []
            for dirpath, _, filenames in os.walk(base):
                for name in filenames:
                    path = os.path.join(dirpath, name)
                    key = os.path.relpath(path, base).replace(os.sep, "/")
                    st = os.stat(path)
                    modified = datetime.datetime.fromtimestamp(int(st.st_mtime), datetime.timezone.utc)
                    rows.append((key.encode("utf-8"),
                                 f"{key}\t{st.st_size}\t{nginx_etag(st)}\t{modified.strftime('%Y-%m-%dT%H:%M:%S.000Z')}"))
            rows.sort()
            path = os.path.join(self._tmp, "listing", f"{bucket}.tsv")
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for _, line in rows))
            os.chmod(path + ".tmp", 0o644)
            os.replace(path + ".tmp", path)
            counts[bucket] = len(rows)
        return counts

    # -- processes -----------------------------------------------------------------------------------
    def _start_moto(self) -> None:
        assert self._tmp is not None
        last = ""
        for _ in range(3):
            self.moto_port = free_port()
            log = open(os.path.join(self._tmp, "moto.log"), "ab")
            env = dict(os.environ)
            env.setdefault("AWS_ACCESS_KEY_ID", "bench")
            env.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
            self._moto = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.moto_port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, preexec_fn=_die_with_parent,
            )
            log.close()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self._moto.poll() is not None:
                    last = f"exited with status {self._moto.returncode}"
                    break
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.moto_port}/moto-api/", timeout=1) as r:
                        if r.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(0.05)
            else:
                last = "did not answer within 30 s"
        raise RuntimeError(f"moto server failed to start: {last}")

    def _create_moto_bucket(self, bucket: str) -> None:
        req = urllib.request.Request(f"http://127.0.0.1:{self.moto_port}/{bucket}", method="PUT", data=b"")
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except urllib.error.HTTPError as e:
            if e.code == 400:
                raise RuntimeError(f"the directory {bucket!r} under {self.root} cannot be a bucket (moto answered "
                                   "HTTP 400): bucket names are 3-63 lowercase letters, digits, '.' and '-'") from None
            if e.code != 409:  # already exists
                raise

    def _config(self) -> str:
        assert self._tmp is not None
        modules = route = lua_http = list_location = ""
        if self.lua:
            modules = f"load_module {NDK_MODULE};\nload_module {LUA_MODULE};"
            route = _LUA_ROUTE
            lua_http = _LUA_HTTP.replace("__TTFB__", repr(self.ttfb_s)).replace(
                "__LISTING_DIR__", os.path.join(self._tmp, "listing")).replace(
                "__SYNTH_N__", str(self.synthetic_keys)).replace("__SYNTH_BUCKET__", SYNTHETIC_BUCKET)
            list_location = _LIST_LOCATION + keyspace.LUA
        else:
            route = _PLAIN_ROUTE
        # As root, nginx would switch its workers to "nobody", who may not traverse the data
        # directory (under /root, say): keep them as the invoking user instead.
        user = "user root root;" if os.geteuid() == 0 else ""
        return _CONF.format(
            workers=self.workers, user=user, tmp=self._tmp, modules=modules, lua_http=lua_http,
            moto_port=self.moto_port, port=self.port, root=self.root, route=route,
            rate=f"limit_rate {self.rate};" if self.rate else "", list_location=list_location,
        )

    def _start_nginx(self) -> None:
        assert self._tmp is not None
        path = os.path.join(self._tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(self._config())
        errlog = os.path.join(self._tmp, "error.log")
        self._nginx = subprocess.Popen(
            ["nginx", "-p", self._tmp, "-c", path, "-e", errlog],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self._nginx.poll() is not None:
                    err = self._nginx.stderr.read().decode(errors="replace") if self._nginx.stderr else ""
                    raise RuntimeError(f"nginx failed to start: {err.strip()}")
                time.sleep(0.05)
        raise RuntimeError("nginx did not start within 10 s")

    def error_log(self) -> str:
        """nginx's error log (warnings and errors), for diagnosing a failed run."""
        if not self._tmp:
            return ""
        try:
            with open(os.path.join(self._tmp, "error.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m bench.server ROOT [--ttfb-ms 20] [--mbps 100]``: serve until Ctrl-C."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.server", description=main.__doc__)
    ap.add_argument("root")
    ap.add_argument("--ttfb-ms", type=float, default=20.0)
    ap.add_argument("--mbps", type=float, default=100.0, help="MB/s (10^6 bytes) per connection; 0: unlimited")
    ap.add_argument("--port", type=int, default=None)
    args = ap.parse_args(argv)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # leave the with block: nginx and moto stop with us

    signal.signal(signal.SIGTERM, stop)
    with LocalS3(args.root, ttfb_s=args.ttfb_ms / 1000, rate=int(args.mbps * 1e6), port=args.port) as endpoint:
        print(f"serving {args.root} at {endpoint} (ttfb {args.ttfb_ms} ms, {args.mbps} MB/s per connection)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
