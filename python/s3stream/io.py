"""File objects over objects: ``s3stream.open(uri, "rb" | "wb")``."""

from __future__ import annotations

import io
from typing import Any, Optional

from . import _core
from .client import Client, default_client

MiB = 1 << 20


class _RawReader(io.RawIOBase):
    """Unbuffered, seekable reads; the native reader keeps ranged GETs in flight ahead of us."""

    def __init__(self, native: Any, name: str) -> None:
        super().__init__()
        self._native = native
        self.name = name

    @property
    def size(self) -> int:
        return self._native.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._check_closed()
        return self._native.readinto(buffer)

    def readall(self) -> bytes:
        self._check_closed()
        return self._native.read(-1)

    def tell(self) -> int:
        self._check_closed()
        return self._native.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_closed()
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._native.tell() + offset
        elif whence == io.SEEK_END:
            position = self._native.size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if position < 0:
            raise ValueError(f"negative seek position {position} in {self.name}")
        self._native.seek(position)
        return position

    def close(self) -> None:
        self._native = _Closed() if not self.closed else self._native
        super().close()

    def _check_closed(self) -> None:
        if self.closed:
            raise ValueError(f"I/O operation on closed file {self.name}")


class _Closed:
    """Stands in for a released native reader or writer."""


class ObjectWriter(io.RawIOBase):
    """Writes a new object; nothing is visible until :meth:`close` commits it.

    Full parts upload in parallel while you keep writing. Leaving a ``with`` block by an exception,
    calling :meth:`abort`, or dropping the writer without closing it discards the upload.
    """

    def __init__(self, native: Any, name: str) -> None:
        super().__init__()
        self._native = native
        self.name = name

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"write to closed file {self.name}")
        return self._native.write(data)

    def flush(self) -> None:
        # Bytes are already with the uploader; an object only becomes visible at close().
        pass

    def tell(self) -> int:
        return self._native.bytes_written

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._native.close()
        finally:
            super().close()

    def abort(self) -> None:
        if self.closed:
            return
        try:
            self._native.abort()
        finally:
            super().close()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        # Unlike a local file, a half-written object must never be committed by garbage collection.
        if not getattr(self, "closed", True) and hasattr(self, "_native"):
            self.abort()


def open(
    uri: str,
    mode: str = "rb",
    *,
    client: Optional[Client] = None,
    chunk_size: Optional[int] = None,
    prefetch_chunks: Optional[int] = None,
    buffer_size: int = 128 << 10,
    part_size: Optional[int] = None,
    max_inflight_parts: Optional[int] = None,
):
    """Opens an object as a binary file.

    ``"rb"``: a seekable, buffered reader (``io.BufferedReader``). Sequential reading keeps up to
    ``prefetch_chunks`` (default 8) ranged GETs of ``chunk_size`` bytes (default 8 MiB) in flight
    ahead of the position, more of them the more the reader waits on the network.

    ``"wb"``: an :class:`ObjectWriter` uploading parts of ``part_size`` bytes (default 8 MiB), up to
    ``max_inflight_parts`` (default 4) at once, committing on ``close()``.

    Options left at None take the engine's defaults (the ones above).

    Memory: a reader holds at most ``(prefetch_chunks + 1) * chunk_size`` bytes (72 MiB by
    default; 16 MiB until sequential reading outruns the network) plus ``buffer_size`` (128 KiB,
    Python's buffer for small reads); closing or dropping it gives that back to the system, but
    for the engine's cache of free blocks (``S3STREAM_BUFFER_CACHE_BYTES``, 256 MiB at most, kept
    for the next reads).

    ``torch.save(obj, f)`` and ``torch.load(f)`` work with both.
    """
    client = client if client is not None else default_client()
    native_client = client._native_client()
    if mode == "rb":
        native = _core.open_reader(native_client, uri, chunk_size, prefetch_chunks)
        return io.BufferedReader(_RawReader(native, uri), buffer_size=buffer_size)
    if mode == "wb":
        return ObjectWriter(_core.open_writer(native_client, uri, part_size, max_inflight_parts), uri)
    from .errors import InvalidArgumentError

    hint = ""
    if mode in ("r", "w", "rt", "wt"):
        hint = "; objects are bytes: for text, wrap the file in io.TextIOWrapper(s3stream.open(uri, 'rb'))"
    raise InvalidArgumentError(f"mode must be 'rb' or 'wb', got {mode!r} (for {uri}){hint}")
