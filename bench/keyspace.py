"""A synthetic key space for listing benchmarks, served by the stand-in (bench/server.py) without a
single file: keys are computed from their index, so a LIST of 1,000,000 keys costs the server a
binary search and a page of string formatting, not a directory walk.

Three layouts of ``n`` keys each, side by side in one bucket (in byte order: flat, hex, tree):

* ``flat/00000000.jpg`` ... one "directory" of zero-padded numbers;
* ``hex/0a3d70a3d70a.bin`` ... one "directory" of names spread evenly over 12 hex digits, as
  content hashes are;
* ``tree/00000/00000000.jpg`` ... directories of 1,000 keys each.

Object ``g`` (0 <= g < 3n, in key order) has size ``1000 + (g * 7919) % 100000`` and the MD5 of
its key as ETag. The same formulas exist twice: here (to check a listing) and in Lua (``LUA``,
the ListObjectsV2 handler: prefix, delimiter, start-after, continuation-token, max-keys, V1 marker;
the server's time to first byte applies). Only listing is served: a GET of these keys finds no
object.
"""

from __future__ import annotations

import hashlib
from typing import Iterator, Tuple

LAYOUTS = ("flat", "hex", "tree")  # in key order
_HEX_SPACE = 2**48


def key(g: int, n: int) -> str:
    layout, i = divmod(g, n)
    if layout == 0:
        return f"flat/{i:08d}.jpg"
    if layout == 1:
        v = int(i * (_HEX_SPACE / n))  # the same double arithmetic as the Lua handler
        return f"hex/{v >> 24:06x}{v & 0xFFFFFF:06x}.bin"
    return f"tree/{i // 1000:05d}/{i:08d}.jpg"


def size(g: int) -> int:
    return 1000 + (g * 7919) % 100000


def objects(n: int, prefix: str = "") -> Iterator[Tuple[str, int, str]]:
    """(key, size, etag) of every key under ``prefix``, in key order."""
    for g in range(3 * n):
        k = key(g, n)
        if k.startswith(prefix):
            yield k, size(g), hashlib.md5(k.encode()).hexdigest()


# ListObjectsV2 / V1 over the key space above; SYNTH_N (keys per layout) is set by the server's
# init block. Items (keys, and common prefixes compared as strings) after the continuation token or
# start-after (V1: marker), at most max-keys of them; a token is the last item of the page before.
LUA = r"""
    location @synth {
      content_by_lua_block {
        if TTFB > 0 then ngx.sleep(TTFB) end
        ngx.shared.s3s_stats:incr("lists", 1, 0)
        local floor, fmt, N = math.floor, string.format, SYNTH_N
        local total = 3 * N
        local function key(g)
          local layout = floor(g / N)
          local i = g - layout * N
          if layout == 0 then return fmt("flat/%08d.jpg", i) end
          if layout == 1 then
            local v = floor(i * (281474976710656 / N))
            return fmt("hex/%06x%06x.bin", floor(v / 16777216), v % 16777216)
          end
          return fmt("tree/%05d/%08d.jpg", floor(i / 1000), i)
        end
        local function first_at_least(s)  -- the first g with key(g) >= s
          local lo, hi = 0, total
          while lo < hi do
            local mid = floor((lo + hi) / 2)
            if key(mid) < s then lo = mid + 1 else hi = mid end
          end
          return lo
        end
        local function first_after(s)  -- the first g with key(g) > s
          local lo, hi = 0, total
          while lo < hi do
            local mid = floor((lo + hi) / 2)
            if key(mid) <= s then lo = mid + 1 else hi = mid end
          end
          return lo
        end
        local function past(s)  -- the first g whose key does not start with s (s non-empty)
          return first_at_least(s:sub(1, -2) .. string.char(s:byte(-1) + 1))
        end
        local r = s3s_list_request()
        local prefix, delim, max_keys, after = r.prefix, r.delim, r.max_keys, r.after
        local i = first_at_least(prefix)
        local stop = prefix == "" and total or past(prefix)
        if after ~= "" then i = math.max(i, first_after(after)) end
        local out, n, truncated, last = {}, 0, false, nil
        while i < stop do
          local k = key(i)
          local cp = nil
          if delim ~= "" then
            local p = k:find(delim, #prefix + 1, true)
            if p then cp = k:sub(1, p + #delim - 1) end
          end
          if cp and cp <= after then
            i = past(cp)  -- rolled up into a common prefix that sorts before where the page starts
          elseif n >= max_keys then
            truncated = max_keys > 0
            break
          elseif cp then
            n = n + 1
            last = cp
            out[#out + 1] = "<CommonPrefixes><Prefix>" .. s3s_esc(cp) .. "</Prefix></CommonPrefixes>"
            i = past(cp)
          else
            n = n + 1
            last = k
            out[#out + 1] = "<Contents><Key>" .. k .. "</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;" ..
              ngx.md5(k) .. "&quot;</ETag><Size>" .. (1000 + (i * 7919) % 100000) ..
              "</Size><StorageClass>STANDARD</StorageClass></Contents>"
            i = i + 1
          end
        end
        s3s_list_response(r, SYNTH_BUCKET, out, n, truncated, last)
      }
    }
"""
