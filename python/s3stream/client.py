"""The Python face of the native client: configuration, fork safety, pickling."""

from __future__ import annotations

import atexit
import datetime
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Sequence

from . import _core

Buffer = _core.Buffer
ObjectInfo = _core.ObjectInfo



@dataclass(frozen=True)
class UploadInfo:
    """A multipart upload begun and neither completed nor aborted (a writer killed mid-upload
    leaves one): its parts are stored, and billed, until it is aborted."""

    uri: str  # the object the upload would have made, as abort_upload takes it
    key: str
    upload_id: str
    initiated: datetime.datetime  # timezone-aware, as the store reported it


_ADDRESSING = {
    "auto": _core.AddressingStyle.auto,
    "path": _core.AddressingStyle.path,
    "virtual": _core.AddressingStyle.virtual,
}

# Each keyword of Client and the native ClientConfig field it sets. The defaults live in one place,
# the native ClientConfig (include/s3stream/config.h): a keyword left at None keeps it
# (Client.defaults() lists them).
SETTINGS = {
    "endpoint_url": "endpoint_url",
    "region": "region",
    "access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key",
    "session_token": "session_token",
    "profile": "profile",
    "anonymous": "anonymous",
    "addressing_style": "addressing_style",
    "max_attempts": "max_attempts",
    "max_inflight": "max_inflight",
    "connect_timeout": "connect_timeout_s",
    "low_speed_time": "low_speed_time_s",
    "stall_timeout": "stall_timeout_s",
    "retry_base_delay": "retry_base_delay_s",
    "verify_tls": "verify_tls",
    "ca_bundle": "ca_bundle",
    "max_get_bytes": "max_get_bytes",
    "request_timeout": "request_timeout_s",
}
_WIDE = {"max_get_bytes"}  # 64-bit settings; the other integers are 32-bit


class CredentialsFunction:
    """The user's ``credentials=`` function, as the engine calls it (from any thread, with the GIL):
    what it returns is checked and handed over as ``(key, secret, token, expiration seconds or
    None)``, or None; anything else raises a TypeError naming the function and what it returned."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self.function = function
        name = getattr(function, "__qualname__", None) or type(function).__name__
        self.description = f"the credentials function {name}()"

    def __call__(self) -> Optional[tuple]:
        got = self.function()
        if got is None:
            return None
        if isinstance(got, dict):
            unknown = set(got) - {"access_key_id", "secret_access_key", "session_token", "expiration"}
            if unknown:
                raise TypeError(f"{self.description} returned a dict with {sorted(unknown)}: the names are "
                                "access_key_id, secret_access_key, session_token, expiration")
            got = (got.get("access_key_id"), got.get("secret_access_key"), got.get("session_token"),
                   got.get("expiration"))
        if not isinstance(got, (tuple, list)) or not 2 <= len(got) <= 4:
            raise TypeError(f"{self.description} returned {type(got).__name__}; expected (access_key_id, "
                            "secret_access_key, session_token, expiration), a dict of those, or None")
        key, secret, token, expiration = (list(got) + [None, None])[:4]
        for what, value in (("access_key_id", key), ("secret_access_key", secret)):
            if not isinstance(value, str) or not value:
                raise TypeError(f"{self.description} returned a {what} that is not a non-empty string")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"{self.description} returned a session_token that is not a string or None")
        return key, secret, token or "", _epoch_seconds(expiration, self.description)


def _epoch_seconds(expiration: Any, who: str) -> Optional[float]:
    if expiration is None:
        return None
    if isinstance(expiration, datetime.datetime):
        if expiration.tzinfo is None:
            raise TypeError(f"{who} returned a naive datetime as the expiration: give it a timezone "
                            "(datetime.timezone.utc)")
        return expiration.timestamp()
    if isinstance(expiration, (int, float)) and not isinstance(expiration, bool):
        return float(expiration)
    raise TypeError(f"{who} returned an expiration of type {type(expiration).__name__}: a timezone-aware "
                    "datetime, seconds since the epoch, or None")


class Client:
    """A connection to an S3-compatible store (or the local file system, for ``file://`` URIs).

    Unset options follow the AWS conventions: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``,
    ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` with ``~/.aws/credentials`` and
    ``~/.aws/config``, ``AWS_CA_BUNDLE`` (else the system's CA certificates, found on any Linux
    distribution). Credentials follow the SDKs' default chain: the arguments, ``AWS_ACCESS_KEY_ID``
    / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, the profile's keys or
    ``credential_process``, the container endpoint, EC2 instance metadata (docs/credentials.md);
    temporary ones are refreshed before they expire.

    Args:
        anonymous: send unsigned requests (public buckets).
        addressing_style: ``"auto"`` (virtual-hosted on AWS, path style elsewhere), ``"path"`` or
            ``"virtual"``.
        max_attempts: tries per request, the first included (transient failures are retried with
            jittered backoff; a broken download resumes from the byte it reached).
        max_inflight: requests in flight at once (= connections).
        connect_timeout, low_speed_time: seconds; a transfer slower than 1 KiB/s for
            ``low_speed_time`` is treated as stalled and retried.
        stall_timeout: seconds; a GET that receives nothing for this long (first byte included) is
            dropped and retried at once on a new connection. May be a fraction of a second (a
            few times the store's usual time to first byte), where ``low_speed_time`` counts whole
            seconds: then a stalled small object costs that, not 1-2 s. Default 0: off.
        retry_base_delay: seconds, the backoff's base.
        verify_tls, ca_bundle: TLS certificate checks and the CA bundle to check against.
        max_get_bytes: the largest object :meth:`get` / :meth:`get_many` hold in memory (default:
            half of this machine's memory); a larger one raises TooLargeError before anything is
            allocated: stream it with :func:`s3stream.open` or read a range.
        request_timeout: seconds one request may take in all, its retries included (default: no
            limit); past it the call raises UnavailableError. Catches a server that trickles bytes
            just fast enough for the stall detector.
        credentials: a function returning credentials, for any source of your own (a vault, a
            token broker): ``(access_key_id, secret_access_key, session_token or None,
            expiration)``, or a dict with those names, or None for unsigned requests. The
            expiration (a timezone-aware ``datetime`` or seconds since the epoch; None: never)
            makes the client call it again five minutes before, on a thread of its own, while
            requests keep signing with the old ones. It replaces the default chain
            (docs/credentials.md); under ``spawn`` it must be picklable (a module-level function).

    Options left at None take the engine's defaults (:meth:`defaults`).

    The native engine (an HTTP event loop and up to ``max_inflight`` connections) is built on first
    use in each process, so a client created before ``fork()`` (DataLoader workers) works in the
    children, and a pickled client (``spawn``) carries its configuration, not its connections.
    Every call that waits on the network releases the GIL.
    """

    def __init__(
        self,
        endpoint_url: Optional[str] = None,
        region: Optional[str] = None,
        *,
        access_key_id: Optional[str] = None,
        secret_access_key: Optional[str] = None,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
        anonymous: Optional[bool] = None,
        addressing_style: Optional[str] = None,
        max_attempts: Optional[int] = None,
        max_inflight: Optional[int] = None,
        connect_timeout: Optional[float] = None,
        low_speed_time: Optional[float] = None,
        stall_timeout: Optional[float] = None,
        retry_base_delay: Optional[float] = None,
        verify_tls: Optional[bool] = None,
        ca_bundle: Optional[str] = None,
        max_get_bytes: Optional[int] = None,
        request_timeout: Optional[float] = None,
        credentials: Optional[Callable[[], Any]] = None,
    ) -> None:
        given = dict(locals())
        self._options = {name: given[name] for name in SETTINGS}
        if credentials is not None:
            if not callable(credentials):
                raise _errors().InvalidArgumentError(
                    f"credentials must be a function returning them, got {type(credentials).__name__}")
            clash = [n for n in ("access_key_id", "secret_access_key", "session_token", "profile", "anonymous")
                     if given[n] is not None]
            if clash:
                raise _errors().InvalidArgumentError(f"credentials= replaces {', '.join(clash)}: pass one or the other")
        self._credentials = credentials
        self._lock = threading.Lock()
        self._native: Any = None
        self._pid: Optional[int] = None
        release_at_exit(self)
        self._native_client()  # resolve the configuration now, so mistakes surface here

    @staticmethod
    def defaults() -> dict:
        """What each option is when left at None (the native engine's defaults)."""
        native = _core.ClientConfig()
        out = {name: getattr(native, field) for name, field in SETTINGS.items()}
        out["addressing_style"] = next(k for k, v in _ADDRESSING.items() if v == out["addressing_style"])
        return out

    # -- native state, rebuilt per process ---------------------------------------------------------
    def _native_client(self) -> Any:
        pid = os.getpid()
        native = self._native
        if native is not None and self._pid == pid:
            return native
        with self._lock:
            if self._native is None or self._pid != pid:
                try:
                    self._native = _core.Client.create(self._config())
                except _errors().InvalidArgumentError as e:
                    # The engine names its fields (connect_timeout_s); say what the caller wrote.
                    message = str(e)
                    for name, field in SETTINGS.items():
                        if field != name:
                            message = message.replace(field, name)
                    raise _errors().InvalidArgumentError(message) from None
                self._pid = pid
            return self._native

    def _config(self) -> Any:
        config = _core.ClientConfig()
        for name, field in SETTINGS.items():
            value = self._options[name]
            if value is not None:
                setattr(config, field, _checked(name, value, getattr(config, field)))
        if self._credentials is not None:
            function = CredentialsFunction(self._credentials)
            config.set_credentials_function(function, function.description)
        return config

    def __getstate__(self) -> dict:
        return {"options": self._options, "credentials": self._credentials}

    def __setstate__(self, state: dict) -> None:
        self._options = state["options"]
        self._credentials = state.get("credentials")
        self._lock = threading.Lock()
        self._native = None
        self._pid = None
        release_at_exit(self)

    def close(self) -> None:
        """Lets go of the native engine (its connections and its event-loop thread) now; a later
        call builds a new one. What was opened through the client (readers, writers, datasets)
        holds its own reference and stays usable. ``with Client(...) as client:`` closes it at the
        end of the block."""
        with self._lock:
            self._native, self._pid = None, None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_native(self) -> None:
        self._native, self._pid = None, None

    def __repr__(self) -> str:
        native = self._native_client()
        return (
            f"s3stream.Client(endpoint={native.endpoint!r}, region={native.region!r}, "
            f"credentials={native.credentials_source!r})"
        )

    # -- object operations -------------------------------------------------------------------------
    def get(self, uri: str, start: Optional[int] = None, end: Optional[int] = None) -> Buffer:
        """The object's bytes, or bytes ``[start, end)``, as a zero-copy :class:`Buffer`. More than
        8 MiB arrive as parallel ranged GETs of 8 MiB, pinned to the first response's ETag (an
        object replaced meanwhile raises ObjectChangedError). A range past the object's end raises
        OutOfRangeError (nothing is cut short silently)."""
        for name, value in (("start", start), ("end", end)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise _errors().InvalidArgumentError(f"get({uri!r}): {name} must be a non-negative integer, got {value!r}")
        return self._native_client().get(uri, start, end)

    def get_many(self, uris: Sequence[str]) -> list:
        """Several whole objects, fetched concurrently (one GET each); a list of Buffers in the
        order given."""
        if isinstance(uris, (str, bytes)):
            raise TypeError("get_many takes a list of URIs, not one URI (for one object use get)")
        return self._native_client().get_many(list(uris))

    def head(self, uri: str) -> ObjectInfo:
        return self._native_client().head(uri)

    def list(self, uri: str, delimiter: str = "", page_size: int = 1000, parallelism: int = 1) -> Iterator[ObjectInfo]:
        """Objects whose key starts with the URI's key, in key order, one page at a time.

        With ``delimiter="/"`` only the level below the prefix is listed, and each common prefix is
        yielded too, as an ObjectInfo whose key ends with the delimiter and whose size is 0.

        ``parallelism > 1`` (recursive listings only) keeps that many LIST requests in flight over
        ranges of the key space (:func:`s3stream.listing.list_objects`): the same objects in the
        same order, many times faster for large listings, at the cost of running ahead of the
        consumer and of a few requests more than a sequential listing.
        """
        if parallelism != 1:
            if delimiter:
                raise _errors().InvalidArgumentError(
                    f"list({uri!r}): a parallel listing is recursive; pass delimiter='' or parallelism=1")
            from .listing import list_objects

            yield from list_objects(self, uri, parallelism=parallelism, page_size=page_size, progress=False)
            return
        pager = self._native_client().list(uri, delimiter, page_size)
        while (page := pager.next()) is not None:
            objects, prefixes = page
            yield from objects
            for prefix in prefixes:
                yield _core.ObjectInfo.prefix(prefix)

    def put(self, uri: str, data: Any) -> str:
        """Uploads ``data`` (bytes or any buffer) in one request; returns the ETag."""
        return self._native_client().put(uri, data)

    def delete(self, uri: str) -> None:
        self._native_client().delete(uri)

    def list_uploads(self, uri: str, page_size: int = 1000) -> List[UploadInfo]:
        """The incomplete multipart uploads whose key starts with the URI's key (a prefix), by key,
        every page of them (``page_size`` per request, at most 1000). A store that repeats its
        paging markers raises CorruptDataError instead of paging forever; so does an upload whose
        initiation time is not an ISO 8601 timestamp."""
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= 1000:
            raise _errors().InvalidArgumentError(f"list_uploads({uri!r}): page_size must be 1..1000, got {page_size!r}")
        return [
            UploadInfo(object_uri, key, upload_id, _timestamp(initiated, f"upload {upload_id} of {object_uri}"))
            for object_uri, key, upload_id, initiated in self._native_client().list_uploads(uri, page_size)
        ]

    def abort_upload(self, uri: str, upload_id: str) -> None:
        """Aborts the multipart upload ``upload_id`` of the object ``uri`` (an
        :class:`UploadInfo`'s ``uri`` and ``upload_id``): its parts are deleted. One already
        completed or aborted raises NotFoundError."""
        self._native_client().abort_upload(uri, upload_id)

    def open(self, uri: str, mode: str = "rb", **options: Any):
        """A file object over the object: see :func:`s3stream.open`."""
        from .io import open as open_

        return open_(uri, mode, client=self, **options)


def _timestamp(text: str, what: str) -> datetime.datetime:
    """A store's ISO 8601 time (``2026-01-02T03:04:05.000Z``) as an aware datetime; a time without
    a zone is UTC, as S3's always are."""
    try:
        # fromisoformat learned "Z" only in Python 3.11.
        value = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise _errors().CorruptDataError(f"{what}: the store gave its initiation time as {text[:40]!r}, not ISO 8601") from None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def _checked(name: str, value: Any, default: Any) -> Any:
    """``value`` as the native field of setting ``name`` takes it (its kind is its default's), or
    InvalidArgumentError naming the setting."""
    bad = _errors().InvalidArgumentError
    if name == "addressing_style":
        if value not in _ADDRESSING:
            raise bad(f"addressing_style must be one of {sorted(_ADDRESSING)}, got {value!r}")
        return _ADDRESSING[value]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad(f"{name} must be True or False, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(f"{name} must be an integer, got {value!r}")
        low, high = (0, 2**63) if name in _WIDE else (-(2**31), 2**31)
        if not low <= value < high:
            raise bad(f"{name} is out of range, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(f"{name} must be a number of seconds, got {value!r}")
        value = float(value)
    elif not isinstance(value, str):  # the optional strings (endpoint, region, keys, profile, CA bundle)
        raise bad(f"{name} must be a string, got {value!r}")
    return value


# Objects holding native state, let go of at interpreter exit (before the extension module is torn
# down: otherwise nanobind reports them as leaked, as spawned DataLoader workers showed).
_holders: "weakref.WeakSet[Any]" = weakref.WeakSet()


def release_at_exit(holder: Any) -> None:
    """Registers an object with a ``_drop_native()`` method to be called at interpreter exit."""
    _holders.add(holder)


@atexit.register
def _release_all() -> None:
    for holder in list(_holders):
        holder._drop_native()


_default_lock = threading.Lock()
_default: Optional[Client] = None


def default_client() -> Client:
    """A process-wide client configured from the environment, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def _errors():
    from . import errors

    return errors
