"""s3stream: stream training data from S3-compatible object storage into PyTorch.

>>> import s3stream
>>> client = s3stream.Client(endpoint_url="http://127.0.0.1:9000")
>>> data = client.get("s3://bucket/key")          # zero-copy Buffer
>>> with s3stream.open("s3://bucket/ckpt.pt", "wb") as f:
...     torch.save(model.state_dict(), f)
"""

from ._core import Buffer, ObjectInfo
from .client import Client, default_client
from .errors import (
    CancelledError,
    CorruptDataError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ObjectChangedError,
    OutOfRangeError,
    PermissionDeniedError,
    S3StreamError,
    UnavailableError,
)
from .io import ObjectWriter, open

__version__ = "0.1.0"

__all__ = [
    "Buffer",
    "Client",
    "ObjectInfo",
    "ObjectWriter",
    "default_client",
    "open",
    "S3StreamError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "OutOfRangeError",
    "UnavailableError",
    "ObjectChangedError",
    "CorruptDataError",
    "CancelledError",
    "InternalError",
]
