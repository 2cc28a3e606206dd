"""The s3stream exception hierarchy.

Every error s3stream raises is an :class:`S3StreamError`, and also the built-in exception that code
unaware of s3stream would catch: a missing object is a ``FileNotFoundError``, a refused request a
``PermissionError``, exhausted retries a ``ConnectionError``, malformed data a ``ValueError``.
Messages name the bucket, key and byte range involved and, where there is one, the fix.
The native core raises these through one translator (python/bindings/init_errors.cc).
"""

from __future__ import annotations


class S3StreamError(Exception):
    """Base of every s3stream error.

    ``http_status`` and ``error_code`` carry the server's answer when the error came from one:
    the HTTP status and the store's own error code (``"NoSuchKey"``, ``"SlowDown"``, ...).
    """

    http_status: int | None = None
    error_code: str | None = None

    @property
    def s3_code(self) -> str | None:
        """The former name of :attr:`error_code` (kept for code written against 0.1)."""
        return self.error_code


class InvalidArgumentError(S3StreamError, ValueError):
    """A malformed URI, a bad option, or a request the server rejected as invalid."""


class NotFoundError(S3StreamError, FileNotFoundError):
    """The bucket or object does not exist."""


class PermissionDeniedError(S3StreamError, PermissionError):
    """Access denied, a bad signature, or no credentials where the server needs them."""


class OutOfRangeError(S3StreamError, ValueError):
    """A byte range outside the object."""


class UnavailableError(S3StreamError, ConnectionError):
    """The store could not be reached, or kept failing transiently until retries ran out."""


class ObjectChangedError(S3StreamError, OSError):
    """The object was replaced while it was being read (its ETag changed)."""


class CorruptDataError(S3StreamError, ValueError):
    """Data that does not parse: a truncated or corrupt tar, an unexpected server reply."""


class ManifestError(CorruptDataError):
    """A manifest (``MapDataset.from_manifest``) that cannot be used as it is: bad JSON, a missing
    or malformed field, a negative size, a key listed twice. ``source`` names the manifest and
    ``line`` the line (JSON lines) or row (Parquet), counted from 1, where it went wrong (None when
    the problem is the manifest as a whole)."""

    def __init__(self, message: str, source: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.line = line


class MissingDependencyError(S3StreamError, ImportError):
    """An optional package a feature needs is not installed; the message says which to install."""


class CancelledError(S3StreamError, OSError):
    """The operation was aborted, for example because its client was closed."""


class TooLargeError(S3StreamError, MemoryError):
    """More than may be held in memory at once (an object larger than ``max_get_bytes`` asked for
    whole, or than the memory there is): stream it with ``s3stream.open(uri, "rb")`` or a range."""


class InternalError(S3StreamError, RuntimeError):
    """An unexpected condition inside s3stream; please report it."""


__all__ = [
    "S3StreamError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "OutOfRangeError",
    "UnavailableError",
    "ObjectChangedError",
    "CorruptDataError",
    "ManifestError",
    "MissingDependencyError",
    "CancelledError",
    "TooLargeError",
    "InternalError",
]
